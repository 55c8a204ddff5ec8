package staging

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestWriterSeriesSendsNoList: a writer that commits one change after
// another, as rsync does for each file (the temporary file's close, its
// chmod and utimes, the rename over the final name), sends no LIST
// between them, also when the series lasts longer than the metadata
// TTL: a commit that lands at the next version is a check of the
// session (cache.Committed), and a chmod or a file's rename trusts the
// state for the TTL. On a bucket 20 ms away each LIST was 20 ms more for
// every change (rsync -a of 200 files: 800 changes, 600 LISTs).
func TestWriterSeriesSendsNoList(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	r := newWriterRigTTL(t, ttl, nil, func(o *cache.Options) { o.Now = clock })
	// Each change comes 0.6 TTL after the one before: two of them
	// outlast the TTL of the state they started from.
	step := func() { now.Add(int64(ttl) * 6 / 10) }
	r.write(t, "first", "loads the state")
	lists := func() int64 { return r.inj.Stats().Ops[faultblob.OpList].Requests }
	before := lists()
	mode := uint32(0o640)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const files = 4
	for i := range files {
		tmp, final := fmt.Sprintf(".f%d.XXXXXX", i), fmt.Sprintf("f%d", i)
		step()
		r.write(t, tmp, "body "+final)
		step()
		if _, err := r.w.SetAttrs(ctx, r.id, tmp, AttrChange{Mtime: &mtime}, func() *layout.Entry { return nil }, nil); err != nil {
			t.Fatalf("utimes %s: %v", tmp, err)
		}
		step()
		if _, err := r.w.SetAttrs(ctx, r.id, tmp, AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil); err != nil {
			t.Fatalf("chmod %s: %v", tmp, err)
		}
		step()
		// GNU mv asks not to replace first (RENAME_NOREPLACE); rsync
		// does not.
		if err := r.w.Rename(ctx, r.id, tmp, final, i%2 == 0); err != nil {
			t.Fatalf("rename %s: %v", tmp, err)
		}
	}
	if n := lists() - before; n != 0 {
		t.Fatalf("%d LISTs for %d files written, changed and renamed one after another, want none", n, files)
	}
	for i := range files {
		final := fmt.Sprintf("f%d", i)
		e, ok := r.slot(t, final)
		if !ok || string(e.Data) != "body "+final {
			t.Fatalf("%s = %q (%v), want its body", final, e.Data, ok)
		}
		if got := layout.PosixMode(e.Metadata, 0); got != mode {
			t.Fatalf("%s has mode %o, want %o", final, got, mode)
		}
		if got := layout.ShownMtime(e.Metadata, e.CreatedAt, r.id.Time()); !got.Equal(mtime) {
			t.Fatalf("%s has mtime %v, want %v", final, got, mtime)
		}
		if _, ok := r.slot(t, fmt.Sprintf(".f%d.XXXXXX", i)); ok {
			t.Fatalf("the temporary name of %s is still there", final)
		}
	}
	// A commit that did not land at the next version is no check: the
	// next change lists.
	r.otherWriter(t, "other", "x")
	step()
	r.write(t, "late", "lands above the other writer's")
	step()
	step()
	if _, err := r.w.SetAttrs(ctx, r.id, "late", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if lists() == before {
		t.Fatal("no LIST after a commit that found another writer's version in its way")
	}
}

// TestWriterStaleStateGuarded: a chmod, utimes or a file's rename made
// from a state that does not show another mount's change yet (within
// the metadata TTL) never undoes it. A rewrite or a chmod refuses the
// commit, and the change is made again on what the other mount made
// (its bytes, its mode); a removal refuses it, and the change is ENOENT:
// a chmod or rename of the removed file brought it back, with the bytes
// it had before, and one over another mount's chmod put its old mode
// back.
func TestWriterStaleStateGuarded(t *testing.T) {
	ctx := context.Background()
	mode := uint32(0o600)
	chmod := func(r *writerRig) error {
		_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil)
		return err
	}
	rename := func(r *writerRig) error { return r.w.Rename(ctx, r.id, "f", "g", false) }
	noReplace := func(r *writerRig) error { return r.w.Rename(ctx, r.id, "f", "g", true) }
	utimes := func(r *writerRig) error {
		mtime := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mtime: &mtime}, func() *layout.Entry { return nil }, nil)
		return err
	}
	const (
		rewrites = iota
		removes
		chmods // the same bytes, another mode: 0640
	)
	for _, c := range []struct {
		name   string
		change func(*writerRig) error
		other  int    // what the other mount does to f
		at     string // where f's bytes are after the change
	}{
		{"chmod-rewritten", chmod, rewrites, "f"},
		{"rename-rewritten", rename, rewrites, "g"},
		{"rename-noreplace-rewritten", noReplace, rewrites, "g"},
		{"chmod-removed", chmod, removes, ""},
		{"rename-removed", rename, removes, ""},
		{"utimes-chmodded", utimes, chmods, "f"},
		{"rename-chmodded", rename, chmods, "g"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, nil)
			r.write(t, "f", "base\n")
			f, _ := r.slot(t, "f")
			removed := c.other == removes
			switch c.other {
			case removes:
				r.otherRemove(t, "f")
			case rewrites:
				r.otherWriter(t, "f", "rewritten\n")
			case chmods:
				r.otherChmod(t, f, 0o640)
			}
			st, err := r.cache.State(ctx, r.id)
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := st.Slot("f"); !ok || string(e.Data) != "base\n" || e.Metadata[layout.MetaPosixMode] != "" {
				t.Fatal("the state shows the other mount's change: the test tests nothing")
			}
			err = c.change(r)
			if removed {
				if !errors.Is(err, ErrNotExist) {
					t.Fatalf("%s of a file removed by another mount: %v, want ErrNotExist", c.name, err)
				}
				for _, name := range []string{"f", "g"} {
					if e, ok := r.slot(t, name); ok {
						t.Fatalf("%s = %q after the %s: the removed file came back", name, e.Data, c.name)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.at != "f" {
				if _, ok := r.slot(t, "f"); ok {
					t.Fatal("f still there after the rename")
				}
			}
			e, _ := r.slot(t, c.at)
			if c.other == chmods {
				// The other mount's mode stays, with this one's change.
				if got := layout.PosixMode(e.Metadata, 0); string(e.Data) != "base\n" || got != 0o640 {
					t.Fatalf("%s = %q with mode %o after the %s, want the other mount's mode 640", c.at, e.Data, got, c.name)
				}
				return
			}
			if got := string(e.Data); got != "rewritten\n" {
				t.Fatalf("%s = %q after the %s, want the other mount's rewrite", c.at, got, c.name)
			}
			if c.at == "f" && layout.PosixMode(e.Metadata, 0) != mode {
				t.Fatalf("f has mode %o, want %o", layout.PosixMode(e.Metadata, 0), mode)
			}
		})
	}
}

// TestWriterNoReplaceStaleTarget: a rename that must not replace (GNU
// mv's first try) of a file to a name another mount made after this
// mount's state is EEXIST, and moves nothing, with either commit mode:
// the new name is guarded by its absence (or, with --commit=fsync, the
// rename looks first). Committed, it replaced the other mount's file.
func TestWriterNoReplaceStaleTarget(t *testing.T) {
	ctx := context.Background()
	for name, mode := range map[string]CommitMode{"close": CommitOnClose, "fsync": CommitOnFsync} {
		t.Run(name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.Commit = mode })
			r.write(t, "f", "mine\n")
			if mode == CommitOnFsync {
				if err := r.w.FsyncSession(ctx, r.id); err != nil {
					t.Fatal(err)
				}
			}
			r.otherWriter(t, "g", "theirs\n")
			if st, _ := r.cache.State(ctx, r.id); st != nil {
				if _, ok := st.Slot("g"); ok {
					t.Fatal("the state shows the other mount's file: the test tests nothing")
				}
			}
			if err := r.w.Rename(ctx, r.id, "f", "g", true); !errors.Is(err, ErrExist) {
				t.Fatalf("rename without replacing onto another mount's new file: %v, want ErrExist", err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.slotBody(t, "g"); got != "theirs\n" {
				t.Fatalf("g = %q, want the other mount's file", got)
			}
			if got := r.slotBody(t, "f"); got != "mine\n" {
				t.Fatalf("f = %q, want it where it was", got)
			}
		})
	}
}

// otherChmod commits e's file again with its bytes and mode, as another
// mount's chmod would: straight to the bucket, unseen by the rig's cache
// until it looks again.
func (r *writerRig) otherChmod(t *testing.T, e layout.Entry, mode uint32) {
	t.Helper()
	d := e.Descriptor.Clone()
	d.Metadata = map[string]string{layout.MetaPosixMode: layout.FormatPosixMode(mode)}
	d.CreatedAt = time.Now().UTC()
	if _, err := r.store.Commit(context.Background(), r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
}

// otherRemove removes name as another mount would: straight to the
// bucket, unseen by the rig's cache until it looks again.
func (r *writerRig) otherRemove(t *testing.T, name string) {
	t.Helper()
	d := layout.Descriptor{Name: name, Deleted: true, CreatedAt: time.Now().UTC()}
	if _, err := r.store.Commit(context.Background(), r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
}
