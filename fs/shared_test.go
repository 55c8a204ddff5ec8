package fs

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
	"golang.org/x/sys/unix"
)

// TestMountSharedViewsPrivate: on a shared mount (--allow-other, where
// the kernel checks modes for other users), a file of mode 0600 was
// refused to them by path, in history and in seq/, and handed to them
// by objects/ (listable), by its snapshot's JSON and by log.jsonl (their
// inline data) (audit 3). Those views are the owner's alone on a shared
// mount, and stay readable by all on one nobody else can enter.
func TestMountSharedViewsPrivate(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	const id = "0123456789abcdef0123456789abcdef"
	rw := testMount(t, store, nil)
	sh(t, rw, "mkdir sessions/"+id+" && printf secret > sessions/"+id+"/s && chmod 600 sessions/"+id+"/s")
	digest := strings.TrimSpace(sh(t, rw, "getfattr --only-values -n user.pugmark.digest sessions/"+id+"/s"))
	views := []string{
		"objects/" + digest,
		"sessions/" + id + "/.pugmark/snapshots/1.json",
		"sessions/" + id + "/.pugmark/log.jsonl",
	}
	for _, shared := range []bool{false, true} {
		mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.Shared, c.ReadOnly = shared, true })
		for _, v := range views {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(mnt, v), &st); err != nil {
				t.Fatalf("stat %s: %v", v, err)
			}
			want := uint32(0o444)
			if shared {
				want = 0o400
			}
			if got := st.Mode & 0o777; got != want {
				t.Errorf("shared %v: %s has mode %o, want %o", shared, v, got, want)
			}
		}
		if got := sh(t, mnt, "cat "+views[0]); got != "secret" {
			t.Errorf("shared %v: the owner reads %q from objects/", shared, got)
		}
	}
}
