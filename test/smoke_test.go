package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestMountReadWriteSmoke: a session made with the layout package is
// readable with cat, and a file written with echo lands in the bucket.
func TestMountReadWriteSmoke(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		m0, _, err := bk.Store.CreateSession(ctx, bk.Store.NewRootManifest())
		if err != nil {
			t.Fatal(err)
		}
		id := m0.Session.String()
		mnt := mount(t, bk)
		sh(t, mnt.Dir, "echo hello > sessions/"+id+"/a.txt")
		if got := sh(t, mnt.Dir, "cat sessions/"+id+"/a.txt"); got != "hello\n" {
			t.Fatalf("cat = %q", got)
		}
		log, err := bk.Store.FullLog(ctx, m0.Session, 1)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := layout.Lookup(log, "a.txt")
		if !ok || string(e.Data) != "hello\n" {
			t.Fatalf("bucket has %+v", log)
		}
		if got := sh(t, mnt.Dir, "ls sessions"); !strings.Contains(got, id) {
			t.Fatalf("ls sessions = %q", got)
		}
	})
}

// TestHistoryIsReadOnly: writes into history fail, as tree.md says.
func TestHistoryIsReadOnly(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		m0, _, err := bk.Store.CreateSession(context.Background(), bk.Store.NewRootManifest())
		if err != nil {
			t.Fatal(err)
		}
		mnt := mount(t, bk)
		out := shErr(t, mnt.Dir, "echo x > sessions/"+m0.Session.String()+"/.pugmark/at/0/x")
		if !strings.Contains(out, "Read-only file system") {
			t.Fatalf("stderr = %q, want EROFS", out)
		}
	})
}
