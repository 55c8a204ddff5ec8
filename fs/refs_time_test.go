package fs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/localblob"
)

// TestRefFileTimes: a ref file's mtime is when the ref was last written
// (its object's time), on every kind of mount, and follows a change made
// by another writer. It was the mount's start, so `ls -lt refs/` could
// not tell which ref moved last.
func TestRefFileTimes(t *testing.T) {
	const idA, idB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	for _, tc := range []struct {
		name             string
		readOnly, noOpen bool
	}{
		{"read-write", false, false},
		{"read-only", true, false},
		{"read-only without OPEN", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			bk, err := localblob.OpenBucket(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bk.Close() })
			store := layout.New(bk, nil)
			// setRef points ref tags/x at target, written at time at.
			setRef := func(target string, at time.Time) {
				t.Helper()
				if err := store.Link(ctx, "tags/x", target); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(filepath.Join(dir, "refs", "tags", "x"), at, at); err != nil {
					t.Fatal(err)
				}
			}
			first := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			setRef(idA, first)
			mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.ReadOnly, c.NoOpen = tc.readOnly, tc.noOpen })
			path := filepath.Join(mnt, "refs", "tags", "x")
			check := func(target string, at time.Time) {
				t.Helper()
				b, err := os.ReadFile(path)
				if err != nil || string(b) != target+"\n" {
					t.Fatalf("refs/tags/x = %q, %v, want %s", b, err, target)
				}
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if !fi.ModTime().Equal(at) {
					t.Errorf("refs/tags/x: mtime %v, want the ref's %v", fi.ModTime().UTC(), at)
				}
			}
			check(idA, first)
			// Another writer moves it (the test mount's TTL is 0).
			second := first.Add(time.Hour)
			setRef(idB, second)
			check(idB, second)
		})
	}
}
