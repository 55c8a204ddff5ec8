package fs

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// A read-only mount reuses a directory's listing while the session's
// tree shows the same directory (sessionDir.children), and never past a
// commit that changes it: another writer's new file, new content and
// removal show within the TTL, in the changed directory, while a
// directory the commit left alone keeps listing right, as does history.
func TestReadOnlyListingFollowsCommits(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	commit := func(ds ...layout.Descriptor) {
		t.Helper()
		if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name, body string) layout.Descriptor {
		t.Helper()
		bi, err := store.PutBlobBytes(ctx, []byte(body), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: name, CreatedAt: time.Now()}
	}
	commit(file("d/a", "one\n"), file("d/b", "two\n"), file("e/x", "ex\n"))
	mnt := testMount(t, store, func(c *Config, co *cache.Options) {
		c.ReadOnly, c.Logger = true, slog.New(slog.DiscardHandler)
		co.MetadataTTL = mountTTL
	})
	s := "sessions/" + m.Session.String() + "/"
	for range 2 { // the second listing of each is the reused one
		if got := sh(t, mnt, "ls "+s+"d "+s+"e"); got != s+"d:\na\nb\n\n"+s+"e:\nx\n" {
			t.Fatalf("ls = %q", got)
		}
	}

	gone := file("d/b", "")
	gone.Deleted = true
	commit(file("d/a", "one, longer\n"), gone, file("d/c", "three\n"))
	eventually(t, mnt, "ls "+s+"d", "a\nc\n")
	if got := sh(t, mnt, "cat "+s+"d/a "+s+"d/c; stat -c %s "+s+"d/a"); got != "one, longer\nthree\n12\n" {
		t.Fatalf("after the commit: %q", got)
	}
	if got := sh(t, mnt, "ls "+s+"e; ls "+s+".pugmark/at/1/d; ls "+s+".pugmark/at/1/d"); got != "x\na\nb\na\nb\n" {
		t.Fatalf("unchanged directory and history: %q", got)
	}
}
