package fs

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// TestMountMkdirSessionRefused: mkdir in sessions/ of a name that is no
// session ID this bucket can hold is EINVAL with a log line saying why:
// not 32 hex digits, the all-zero ID, or (a random 32-hex name, from
// openssl rand -hex 16) an hour past year 9999. An ID of this hour makes
// the session.
func TestMountMkdirSessionRefused(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	var log syncbuf.Buffer
	mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.Logger = log.Logger(slog.LevelInfo) })
	for _, name := range []string{"notanid", strings.Repeat("0", 32), "f3a9c0de" + strings.Repeat("1", 24)} {
		err := os.Mkdir(filepath.Join(mnt, "sessions", name), 0o755)
		if !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("mkdir sessions/%s: %v, want EINVAL", name, err)
		}
		if !strings.Contains(log.String(), "name="+name) {
			t.Fatalf("no log line names %s:\n%s", name, log.String())
		}
	}
	if !strings.Contains(log.String(), "past year 9999") {
		t.Fatalf("the log does not say why the random ID was refused:\n%s", log.String())
	}
	id := store.NewRootManifest().Session.String()
	if err := os.Mkdir(filepath.Join(mnt, "sessions", id), 0o755); err != nil {
		t.Fatalf("mkdir sessions/%s: %v", id, err)
	}
}
