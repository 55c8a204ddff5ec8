package fs

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob/memblob"
	"golang.org/x/sys/unix"
)

// TestMountWalkChecks: with a metadata TTL of 0 ("ask the bucket on
// every lookup"), a path walk checks the bucket once for each name whose
// answer can change, and never for one that cannot: a session, once it
// is there, and the directories of .pugmark/ stay; a lookup's attributes
// are those of the check it made. diff -r of a session against its own
// history sent about 16 LISTs a file, 14 of them for nothing (audit 2).
func TestMountWalkChecks(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), &layout.Options{Now: time.Now})
	ctx := context.Background()
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	bi, err := store.PutBlobBytes(ctx, []byte("x\n"), layout.BlobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// "a" is a file and a directory (another writer's bucket): the tree
	// shows the file, with its size.
	var ds []layout.Descriptor
	for _, name := range []string{"d/f", "a", "a/b"} {
		ds = append(ds, layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: name, CreatedAt: time.Now()})
	}
	for _, ds := range [][]layout.Descriptor{ds[:2], ds[2:]} {
		if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Provisional, Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
	}
	id := m.Session.String()
	for _, readOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "read-write", true: "read-only"}[readOnly], func(t *testing.T) {
			mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.ReadOnly = readOnly }) // TTL 0
			walks(t, mnt, id, inj)
			// The kernel keeps what a lookup answered for the TTL.
			var st unix.Stat_t
			cached := testMount(t, store, func(c *Config, co *cache.Options) { c.ReadOnly, co.MetadataTTL = readOnly, time.Hour })
			for _, mnt := range []string{mnt, cached} {
				if err := unix.Stat(filepath.Join(mnt, "sessions", id, "a"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 2 {
					t.Errorf("a, a file and a directory: mode %o, size %d, %v; want a file of 2 bytes", st.Mode, st.Size, err)
				}
			}
		})
	}
}

// walks stats paths of session id twice on mnt (TTL 0) and checks the
// LISTs of the second walk, the kernel's inodes made by the first.
func walks(t *testing.T, mnt, id string, inj *faultblob.Injector) {
	var st unix.Stat_t
	lists := func() int64 { return inj.Stats().Ops[faultblob.OpList].Requests }
	for _, tc := range []struct {
		path string
		want int64 // LISTs of one walk, at most
	}{
		{"sessions/" + id, 1},        // its attributes (getattr)
		{"sessions/" + id + "/d", 2}, // d's lookup; its attributes
		{"sessions/" + id + "/d/f", 2},
		{"sessions/" + id + "/.pugmark/at/1/d/f", 1}, // whether version 1 is there
	} {
		p := filepath.Join(mnt, tc.path)
		if err := unix.Stat(p, &st); err != nil { // the first walk makes the inodes
			t.Fatal(err)
		}
		for range 3 {
			before := lists()
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if got := lists() - before; got > tc.want {
				t.Errorf("stat %s: %d LISTs, want at most %d", tc.path, got, tc.want)
			}
		}
	}
}
