package cache

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestSkippedKeysLoggedOnce: a key a listing skips (not a ref, memory
// or session key) is logged once per mount, however often the listing
// is repeated: each listing logged it again, every metadata TTL (audit
// 7: one ls -lR logged a malformed memory key six times).
func TestSkippedKeysLoggedOnce(t *testing.T) {
	b := testbucket.Open(t, testbucket.Mem)
	w := newWorld(t, b)
	w.session()
	for _, key := range []string{"refs/a/b/c", "memories/../FFFFFFFF.json", "sessions/year=2026/month=13/day=01/hour=00/0123456789ABCDEF01234567/manifest.json"} {
		if err := b.WriteAll(bg, key, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	var log syncbuf.Buffer
	c := newCache(t, w.store, Options{MetadataTTL: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	v := c.NewViews(w.store)
	for range 3 {
		if _, err := v.Refs(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Namespaces(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ListSessions(bg); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ msg, key string }{
		{"skipping malformed ref key", "refs/a/b/c"},
		{"skipping malformed memory key", "memories/../FFFFFFFF.json"},
		{"not a session path", "month=13"},
	} {
		n := 0
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, c.msg) && strings.Contains(line, c.key) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q logged %d times over three listings, want once; log:\n%s", c.key, n, log.String())
		}
	}
}
