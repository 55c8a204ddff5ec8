package staging

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/internal/testrig"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// otherWriter commits name with body as another mount would: straight to
// the bucket, unseen by the rig's cache until it looks again.
func (r *writerRig) otherWriter(t *testing.T, name, body string) {
	t.Helper()
	d := layout.Descriptor{Name: name, Data: []byte(body), Digest: layout.DigestOf([]byte(body)), Size: int64(len(body)), CreatedAt: time.Now().UTC()}
	if _, err := r.store.Commit(context.Background(), r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
}

// slotBody is the content the committed slot name holds.
func (r *writerRig) slotBody(t *testing.T, name string) string {
	t.Helper()
	e, ok := r.slot(t, name)
	if !ok {
		return "(none)"
	}
	return string(e.Data)
}

// appendTo opens name for writing without truncating and appends line
// through O_APPEND (>>), not released.
func (r *writerRig) appendTo(t *testing.T, name, line string) *File {
	t.Helper()
	return r.openWriting(t, name, line, true)
}

// editAt opens name for writing without truncating and writes line at
// its end through an offset (pwrite, dd conv=notrunc: an edit in place,
// not O_APPEND), not released.
func (r *writerRig) editAt(t *testing.T, name, line string) *File {
	t.Helper()
	return r.openWriting(t, name, line, false)
}

// openWriting is appendTo (appending) or editAt.
func (r *writerRig) openWriting(t *testing.T, name, line string, appending bool) *File {
	t.Helper()
	base, ok := r.slot(t, name)
	if !ok {
		t.Fatalf("%s is not committed", name)
	}
	s, err := r.w.Open(context.Background(), r.id, name, &base, false)
	if err != nil {
		t.Fatal(err)
	}
	if appending {
		_, err = s.Append(context.Background(), []byte(line))
	} else {
		_, err = s.WriteAt(context.Background(), []byte(line), base.Size)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWriterLostUpdate: a file written on what it held (an edit in place)
// is not committed over bytes another writer committed since: the close
// (or fsync) fails with ESTALE (layout.ErrChangedUnder), the data is kept
// in the failed directory, and the other writer's bytes stay. Two mounts
// writing a line each to one file kept only the last line to close, with
// both closes succeeding. A write that replaces the file (O_TRUNC) is not
// guarded: the last one wins, as on any file system. (An O_APPEND write
// goes onto the other's: TestWriterAppendOntoOtherWriters.)
func TestWriterLostUpdate(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		ttl  time.Duration // the cache's: stale, the commit itself finds the change
	}{{"fresh-state", 0}, {"stale-state", time.Hour}} {
		t.Run(c.name+"/edit", func(t *testing.T) {
			r := newWriterRigTTL(t, c.ttl, nil)
			r.write(t, "f", "base\n")
			s := r.editAt(t, "f", "mine\n")
			r.otherWriter(t, "f", "base\nother\n")
			err := r.w.Release(ctx, r.id, s)
			var se *layout.StaleError
			if !errors.As(err, &se) || !errors.Is(err, layout.ErrConflict) || se.Names[0] != "f" {
				t.Fatalf("close: %v, want a StaleError of f", err)
			}
			if got := r.slotBody(t, "f"); got != "base\nother\n" {
				t.Fatalf("f = %q, want the other writer's", got)
			}
			if len(r.failedFiles(t)) != 1 {
				t.Fatalf("failed directory %v, want the refused content", r.failedFiles(t))
			}
		})
	}
	t.Run("truncate-replaces", func(t *testing.T) {
		r := newWriterRig(t)
		r.write(t, "f", "base\n")
		r.otherWriter(t, "f", "other\n")
		r.write(t, "f", "mine\n")
		if got := r.slotBody(t, "f"); got != "mine\n" {
			t.Fatalf("f = %q", got)
		}
	})
	t.Run("removed-elsewhere", func(t *testing.T) {
		// An edit of a file another writer removed brings it back with
		// what it holds. (Appended to: TestWriterAppendOntoOtherWriters.)
		r := newWriterRig(t)
		r.write(t, "f", "base\n")
		s := r.editAt(t, "f", "mine\n")
		if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{{Name: "f", Deleted: true, CreatedAt: time.Now().UTC()}}}); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		if got := r.slotBody(t, "f"); got != "base\nmine\n" {
			t.Fatalf("f = %q", got)
		}
	})
	// A group commit refuses the close that would lose an update, and
	// lands the others it gathered.
	t.Run("batch", func(t *testing.T) {
		r := newWriterRig(t)
		r.write(t, "f", "base\n")
		r.write(t, "x", "x\n")
		g := r.stallSnapshots()
		hold := r.written(t, "held", "held\n") // its commit holds the session's commit turn
		done := make(chan error, 3)
		go func() { done <- r.w.Release(ctx, r.id, hold) }()
		waitStalled(t, g, 1)
		stale := r.editAt(t, "f", "mine\n")
		fine := r.appendTo(t, "x", "more\n")
		r.inj.Reset() // the other writer's commit goes through
		r.otherWriter(t, "f", "base\nother\n")
		g2 := r.stallSnapshots()
		var wg sync.WaitGroup
		var staleErr, fineErr error
		// close(2) is FLUSH, then RELEASE: closes share a snapshot at
		// the flush.
		wg.Go(func() { staleErr = r.w.Flush(ctx, r.id, stale, true) })
		wg.Go(func() { fineErr = r.w.Flush(ctx, r.id, fine, true) })
		waitBatch(t, r, 2)
		g.Release()
		g2.Release()
		wg.Wait()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !errors.Is(staleErr, layout.ErrChangedUnder) || fineErr != nil {
			t.Fatalf("stale close %v, other close %v", staleErr, fineErr)
		}
		if err := r.w.Release(ctx, r.id, fine); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Release(ctx, r.id, stale); err != nil || len(r.failedFiles(t)) != 1 {
			t.Fatalf("release of the refused file: %v, failed directory %v", err, r.failedFiles(t))
		}
		if f, x := r.slotBody(t, "f"), r.slotBody(t, "x"); f != "base\nother\n" || x != "x\nmore\n" {
			t.Fatalf("f = %q, x = %q", f, x)
		}
	})
	// --commit=fsync: one snapshot or none.
	t.Run("fsync", func(t *testing.T) {
		r := newWriterRig(t, CommitOnFsync)
		for _, n := range []string{"f", "x"} {
			r.write(t, n, n+"\n")
		}
		if err := r.w.FsyncSession(ctx, r.id); err != nil {
			t.Fatal(err)
		}
		// f edited in place (appended to, it would be moved:
		// TestWriterFsyncAppendsOntoOtherWriters).
		if err := r.w.Release(ctx, r.id, r.editAt(t, "f", "more\n")); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Release(ctx, r.id, r.appendTo(t, "x", "more\n")); err != nil {
			t.Fatal(err)
		}
		r.otherWriter(t, "f", "other\n")
		v := r.latest(t)
		if err := r.w.FsyncSession(ctx, r.id); !errors.Is(err, layout.ErrChangedUnder) {
			t.Fatalf("fsync: %v, want ErrChangedUnder", err)
		}
		if r.latest(t) != v || r.slotBody(t, "x") != "x\n" || r.slotBody(t, "f") != "other\n" {
			t.Fatalf("a refused fsync committed something")
		}
		// The refused file is settled as a failed commit (kept in the
		// failed directory): the next fsync commits the rest. It was
		// refused again at every fsync, and nothing of the session
		// committed any more.
		if err := r.w.FsyncSession(ctx, r.id); err != nil {
			t.Fatalf("the fsync after a refused one: %v", err)
		}
		if r.slotBody(t, "x") != "x\nmore\n" || r.slotBody(t, "f") != "other\n" {
			t.Fatalf("after the next fsync: x = %q, f = %q", r.slotBody(t, "x"), r.slotBody(t, "f"))
		}
		if len(r.failedFiles(t)) != 1 {
			t.Fatalf("failed directory %v, want f's refused content", r.failedFiles(t))
		}
	})
}

// waitBatch polls until the gathering batch of r's session has n members.
func waitBatch(t *testing.T, r *writerRig, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	ws := r.w.session(r.id)
	for {
		r.w.mu.Lock()
		b := ws.batch
		got := 0
		if b != nil {
			got = b.members
		}
		r.w.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch has %d members, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriterMoveLooksAgain: a rename or a chmod copies the digest of the
// file it read from the bucket into its new descriptor; when another
// mount rewrites the file between that read and the commit, the commit is
// refused and the change made again from the rewrite. The rename moved
// the old bytes and removed the rewrite with the old name; the chmod
// committed the old bytes over it.
func TestWriterMoveLooksAgain(t *testing.T) {
	ctx := context.Background()
	mode := uint32(0o600)
	for _, c := range []struct {
		name   string
		file   string // what the other writer rewrites
		change func(r *writerRig) error
		at     string // where the file is after the change
	}{
		{"rename", "f", func(r *writerRig) error { return r.w.Rename(ctx, r.id, "f", "g", false) }, "g"},
		{"rename-dir", "d/f", func(r *writerRig) error { return r.w.Rename(ctx, r.id, "d", "e", false) }, "e/f"},
		{"chmod", "f", func(r *writerRig) error {
			_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil)
			return err
		}, "f"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRig(t)
			r.write(t, c.file, "base\n")
			// The change's snapshot waits; the other writer's lands
			// meanwhile, at the version the change was going to take.
			var armed atomic.Bool
			armed.Store(true)
			g := faultblob.NewGate()
			r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)}, Stall: g, While: armed.Load})
			done := make(chan error, 1)
			go func() { done <- c.change(r) }()
			waitStalled(t, g, 1)
			armed.Store(false)
			r.otherWriter(t, c.file, "rewritten\n")
			g.Release()
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := r.slotBody(t, c.at); got != "rewritten\n" {
				t.Fatalf("%s = %q after the %s, want the other writer's rewrite", c.at, got, c.name)
			}
			if c.at != c.file {
				if _, ok := r.slot(t, c.file); ok {
					t.Fatalf("%s still there after the rename", c.file)
				}
			}
			if c.name == "chmod" {
				e, _ := r.slot(t, "f")
				if m := layout.PosixMode(e.Metadata, 0); m != mode {
					t.Fatalf("f's mode %o, want %o", m, mode)
				}
			}
		})
	}
}

// TestWriterMoveFsyncKeepsRewrite: with --commit=fsync a rename or a
// chmod waits for the fsync; another writer's rewrite of the file landing
// before that fsync is kept. The rename moves the bytes it saw (the
// rewrite stays under the old name: it was removed with it, the rename's
// snapshot stepping over it), the chmod is made on the rewrite (it wrote
// the old bytes back over the rewrite, and then was dropped), and the
// fsync succeeds: a refusal would come back at every fsync.
func TestWriterMoveFsyncKeepsRewrite(t *testing.T) {
	ctx := context.Background()
	mode := uint32(0o600)
	for _, c := range []struct {
		name   string
		change func(r *writerRig) error
		want   map[string]string // bodies after the fsync; "" absent
		// modeOf names the file that must have mode after the fsync.
		modeOf string
		// seen loads the rewrite into the state before the fsync.
		seen bool
	}{
		{"rename", func(r *writerRig) error { return r.w.Rename(ctx, r.id, "f", "g", false) },
			map[string]string{"f": "rewritten\n", "g": "base\n"}, "", false},
		{"chmod", func(r *writerRig) error {
			_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil)
			return err
		}, map[string]string{"f": "rewritten\n", "g": ""}, "f", false},
		// The same with the rewrite in this mount's state at the fsync
		// (a lookup after the TTL), not only in the bucket.
		{"chmod, rewrite seen", func(r *writerRig) error {
			_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil)
			return err
		}, map[string]string{"f": "rewritten\n", "g": ""}, "f", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.Commit = CommitOnFsync })
			r.write(t, "f", "base\n")
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if err := c.change(r); err != nil {
				t.Fatal(err)
			}
			r.otherWriter(t, "f", "rewritten\n")
			if c.seen {
				r.slot(t, "f")
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatalf("fsync: %v", err)
			}
			for name, want := range c.want {
				if _, ok := r.slot(t, name); !ok {
					if want != "" {
						t.Fatalf("%s gone, want %q", name, want)
					}
					continue
				}
				if got := r.slotBody(t, name); got != want {
					t.Fatalf("%s = %q after the %s and the fsync, want %q", name, got, c.name, want)
				}
			}
			if c.modeOf != "" {
				e, _ := r.slot(t, c.modeOf)
				if got := layout.PosixMode(e.Metadata, layout.DefaultFileMode); got != mode {
					t.Fatalf("%s has mode %o after the chmod and the fsync, want %o", c.modeOf, got, mode)
				}
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatalf("next fsync: %v", err)
			}
		})
	}
}

// TestWriterExclusiveCreate: a file created with O_EXCL is not committed
// over a file another writer committed under its name since the name was
// found absent: the create is EEXIST when this mount's state has the name
// already, and the close is ESTALE (content kept in the failed directory)
// when only the commit finds it. The later commit replaced the other
// mount's file, within the metadata TTL. Once the file has committed, the
// guard is its committed entry, as for any file.
func TestWriterExclusiveCreate(t *testing.T) {
	ctx := context.Background()
	excl := func(t *testing.T, r *writerRig, body string) (*File, error) {
		t.Helper()
		s, err := r.w.OpenExclusive(ctx, r.id, "n")
		if err != nil {
			return nil, err
		}
		if _, err := s.WriteAt(context.Background(), []byte(body), 0); err != nil {
			t.Fatal(err)
		}
		return s, nil
	}
	t.Run("known-exists", func(t *testing.T) {
		r := newWriterRig(t)
		r.otherWriter(t, "n", "other\n")
		if _, err := excl(t, r, "mine\n"); !errors.Is(err, ErrExist) {
			t.Fatalf("create: %v, want ErrExist", err)
		}
		s := r.written(t, "m", "m\n") // staged on this mount
		if _, err := r.w.OpenExclusive(ctx, r.id, "m"); !errors.Is(err, ErrExist) {
			t.Fatalf("create of a staged name: %v, want ErrExist", err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
	})
	for _, mode := range []CommitMode{CommitOnClose, CommitOnFsync} {
		t.Run(map[CommitMode]string{CommitOnClose: "committed-meanwhile/close", CommitOnFsync: "committed-meanwhile/fsync"}[mode], func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.Commit = mode })
			r.write(t, "x", "x\n") // the state is loaded, for an hour
			if mode == CommitOnFsync {
				if err := r.w.FsyncSession(ctx, r.id); err != nil {
					t.Fatal(err)
				}
			}
			r.otherWriter(t, "n", "other\n")
			s, err := excl(t, r, "mine\n")
			if err != nil {
				t.Fatalf("create: %v (the state is an hour old: it cannot know)", err)
			}
			err = r.w.Sync(ctx, r.id, s)
			if !errors.Is(err, layout.ErrChangedUnder) {
				t.Fatalf("commit: %v, want ErrChangedUnder", err)
			}
			if got := r.slotBody(t, "n"); got != "other\n" {
				t.Fatalf("n = %q, want the other writer's", got)
			}
		})
	}
	t.Run("then-appended", func(t *testing.T) {
		r := newWriterRig(t)
		s, err := excl(t, r, "one\n")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.w.Sync(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(context.Background(), []byte("two\n"), 4); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatalf("second commit refused by the create's guard: %v", err)
		}
		if got := r.slotBody(t, "n"); got != "one\ntwo\n" {
			t.Fatalf("n = %q", got)
		}
	})
}

// TestWriterCreateKeepingContent: a create that keeps content (O_CREAT
// without O_TRUNC or O_EXCL: the first `>>` of a log) of a name absent
// when it was checked is built on nothing, as an append to an empty file:
// a file another writer committed under the name after the check is not
// replaced (ESTALE at close, the data kept; with O_APPEND
// the bytes go after the other's), and without one the file commits.
// Two mounts' first `>>` of one new log both closed with 0, and the
// later line replaced the earlier one (audit 8 #1).
func TestWriterCreateKeepingContent(t *testing.T) {
	ctx := context.Background()
	create := func(t *testing.T, r *writerRig, body string, appending bool) *File {
		t.Helper()
		s, err := r.w.OpenFresh(ctx, r.id, "log", func() *layout.Entry { return nil }, false)
		if err != nil {
			t.Fatal(err)
		}
		if appending {
			_, err = s.Append(ctx, []byte(body))
		} else {
			_, err = s.WriteAt(ctx, []byte(body), 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, mode := range []CommitMode{CommitOnClose, CommitOnFsync} {
		name := map[CommitMode]string{CommitOnClose: "close", CommitOnFsync: "fsync"}[mode]
		t.Run("appended-meanwhile/"+name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.Commit = mode })
			s := create(t, r, "mine\n", true)
			r.otherWriter(t, "log", "other\n")
			if err := r.w.Sync(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := r.slotBody(t, "log"); got != "other\nmine\n" {
				t.Fatalf("log = %q, want the other writer's line, then this one", got)
			}
		})
		t.Run("committed-meanwhile/"+name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.Commit = mode })
			s := create(t, r, "mine\n", false)
			r.otherWriter(t, "log", "other\n")
			if err := r.w.Sync(ctx, r.id, s); !errors.Is(err, layout.ErrChangedUnder) {
				t.Fatalf("commit: %v, want ErrChangedUnder", err)
			}
			if got := r.slotBody(t, "log"); got != "other\n" {
				t.Fatalf("log = %q, want the other writer's", got)
			}
		})
		t.Run("alone/"+name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.Commit = mode })
			s := create(t, r, "mine\n", true)
			if err := r.w.Sync(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := r.slotBody(t, "log"); got != "mine\n" {
				t.Fatalf("log = %q", got)
			}
		})
	}
}

// TestWriterPathClash: a file committed where another writer has just
// made a directory (x where it wrote x/y), or a file under what another
// writer has just made a file, is refused (ESTALE at close, the data
// kept), whether this writer's state already shows the other's commit or
// only the commit finds it, landing above. Both were committed, and the
// tree, which shows a name that is both as the file, hid the directory's
// files on every mount. Removing the file in the same batch is no clash
// (rm x, then x/y).
func TestWriterPathClash(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name         string
		ttl          time.Duration
		other, mine  string
		survives     string // the other writer's name, still there
		refusedSlots string // this writer's, not committed
	}{
		{"file-over-dir/fresh-state", 0, "out/sub/f1", "out", "out/sub/f1", "out"},
		{"file-over-dir/stale-state", time.Hour, "out/sub/f1", "out", "out/sub/f1", "out"},
		{"dir-under-file/fresh-state", 0, "out", "out/f", "out", "out/f"},
		{"dir-under-file/stale-state", time.Hour, "out", "out/f", "out", "out/f"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, c.ttl, nil)
			r.write(t, "first", "1")
			r.otherWriter(t, c.other, "other's")
			s := r.written(t, c.mine, "mine")
			err := r.w.Release(ctx, r.id, s)
			var se *layout.StaleError
			if !errors.As(err, &se) || !errors.Is(err, layout.ErrChangedUnder) || !slices.Contains(se.Clashes, c.mine) {
				t.Fatalf("close: %v, want a StaleError naming %s as a clash", err, c.mine)
			}
			if got := r.slotBody(t, c.survives); got != "other's" {
				t.Fatalf("%s = %q, want the other writer's", c.survives, got)
			}
			if _, ok := r.slot(t, c.refusedSlots); ok {
				t.Fatalf("%s was committed over the other writer's", c.refusedSlots)
			}
			if len(r.failedFiles(t)) != 1 {
				t.Fatalf("failed directory %v, want the refused content", r.failedFiles(t))
			}
		})
	}
	t.Run("removed-in-the-batch", func(t *testing.T) {
		r := newWriterRigCfg(t, func(c *Config) { c.Commit = CommitOnFsync })
		r.otherWriter(t, "out", "a file")
		if err := r.w.Unlink(ctx, r.id, []string{"out"}); err != nil {
			t.Fatal(err)
		}
		s := r.written(t, "out/f", "mine")
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		if err := r.w.FsyncSession(ctx, r.id); err != nil {
			t.Fatalf("fsync: %v", err)
		}
		if got := r.slotBody(t, "out/f"); got != "mine" {
			t.Fatalf("out/f = %q", got)
		}
	})
}

// TestWriterCloseOfLandedWrites: descriptors of one mount share a staged
// file. One close commits every write so far; a later write in place
// through a third descriptor is refused as a lost update (another writer
// changed the file since). The first descriptor's close succeeds: its
// bytes landed with the commit. It got the third's ESTALE, and a writer that
// retried on it appended its line twice (audit 8 #4).
func TestWriterCloseOfLandedWrites(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	r.write(t, "f", "base\n")
	base, _ := r.slot(t, "f")
	var s *File
	for range 3 { // three descriptors, one staged file
		var err error
		if s, err = r.w.Open(ctx, r.id, "f", &base, false); err != nil {
			t.Fatal(err)
		}
	}
	appendLine := func(line string) uint64 {
		t.Helper()
		if _, err := s.Append(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
		return s.Gen()
	}
	wrote1 := appendLine("L1\n")
	wrote2 := appendLine("L2\n")
	if err := r.w.FlushSince(ctx, r.id, s, wrote2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("L3\n"), int64(len("base\nL1\nL2\n"))); err != nil {
		t.Fatal(err)
	}
	wrote3 := s.Gen()
	r.otherWriter(t, "f", "base\nL1\nL2\nB1\n")
	if err := r.w.FlushSince(ctx, r.id, s, wrote3); !errors.Is(err, layout.ErrChangedUnder) {
		t.Fatalf("close of the descriptor whose line the other writer's commit went over: %v, want ErrChangedUnder", err)
	}
	if err := r.w.FlushSince(ctx, r.id, s, wrote1); err != nil {
		t.Fatalf("close of a descriptor whose line landed: %v, want success", err)
	}
	if got := r.slotBody(t, "f"); got != "base\nL1\nL2\nB1\n" {
		t.Fatalf("f = %q", got)
	}
	for range 3 {
		r.w.Release(ctx, r.id, s)
	}
}

// TestWriterForkInheritedFiles: in a fork, a file inherited from the
// parent and not written in the fork yet (§11.3: its entry has the
// parent's session and version) can be appended to, edited in place,
// renamed and chmod'ed: the guard built on that entry is not refused by
// the entry itself. An append's close moved its bytes onto that same
// entry again and again until appendPatience (a FUSE close cannot be
// interrupted: `echo x >> f` in a fork hung for 10 minutes), and mv and
// chmod were ESTALE (review 6).
func TestWriterForkInheritedFiles(t *testing.T) {
	ctx := context.Background()
	r := testrig.New(t, time.Hour)
	w, c := mountOn(t, r)
	parentBody := "parent line\n"
	for _, n := range []string{"log", "doc", "old", "perm"} {
		d := layout.Descriptor{Name: n, Data: []byte(parentBody), Digest: layout.DigestOf([]byte(parentBody)), Size: int64(len(parentBody)), ContentType: "text/plain", CreatedAt: time.Now().UTC()}
		if _, err := r.Store.Commit(ctx, r.Session, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	fb := []byte("f")
	child, err := r.Store.Fork(ctx, r.Session, layout.ForkRequest{Descriptor: layout.Descriptor{Name: "fork", Data: fb, Digest: layout.DigestOf(fb), Size: 1, ContentType: "text/plain", CreatedAt: time.Now().UTC()}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	for name, at := range map[string]int64{"log": -1, "doc": 0} { // appended, edited in place
		e, ok := st.Slots()[name]
		if !ok || e.Session == child {
			t.Fatalf("%s: not inherited (%v, session %s)", name, ok, e.Session)
		}
		s, err := w.Open(ctx, child, name, &e, false)
		if err != nil {
			t.Fatal(err)
		}
		if at < 0 {
			_, err = s.Append(ctx, []byte("fork line\n"))
		} else {
			_, err = s.WriteAt(ctx, []byte("FORK"), at)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Bounded: the close moved for as long as it tried.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = w.Flush(cctx, child, s, false)
		cancel()
		if err != nil || s.Rebases() != 0 {
			t.Fatalf("close of inherited %s: %v after %d moves", name, err, s.Rebases())
		}
		if err := w.Release(ctx, child, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Rename(ctx, child, "old", "new", false); err != nil {
		t.Errorf("mv of an inherited file: %v", err)
	}
	mode := uint32(0o600)
	if _, err := w.SetAttrs(ctx, child, "perm", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil); err != nil {
		t.Errorf("chmod of an inherited file: %v", err)
	}
	check := func(id layout.SessionID, want map[string]string) {
		t.Helper()
		fresh, err := cache.New(r.Store, cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := fresh.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for name, e := range st.Slots() {
			got[name] = readEntry(t, r.Blobs, &e)
		}
		for name, body := range want {
			if got[name] != body {
				t.Errorf("%s of %s = %q, want %q", name, id, got[name], body)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s holds %v, want %v", id, got, want)
		}
	}
	check(child, map[string]string{"log": parentBody + "fork line\n", "doc": "FORKnt line\n", "new": parentBody, "perm": parentBody, "fork": "f"})
	check(r.Session, map[string]string{"log": parentBody, "doc": parentBody, "old": parentBody, "perm": parentBody})
}

// TestWriterRenameWrittenFileShowsAtOnce: mv of a file this mount is
// writing (open, not closed) gives the new name what the file was last
// committed as in the rename's own snapshot; the close then lands the
// changes there. The rename committed only the old name's removal: other
// mounts saw neither name until the close, and a mount that died before
// it lost the file, bytes an earlier close had acknowledged included
// (audit 11).
func TestWriterRenameWrittenFileShowsAtOnce(t *testing.T) {
	ctx := context.Background()
	for _, appending := range []bool{true, false} {
		t.Run(map[bool]string{true: "append", false: "edit"}[appending], func(t *testing.T) {
			r := newWriterRig(t)
			r.write(t, "log", "base\n")
			s := r.openWriting(t, "log", "mine\n", appending)
			if err := r.w.Rename(ctx, r.id, "log", "log.1", false); err != nil {
				t.Fatal(err)
			}
			if l, l1 := r.slotBody(t, "log"), r.slotBody(t, "log.1"); l != "(none)" || l1 != "base\n" {
				t.Fatalf("before the close: log = %q, log.1 = %q; want log.1 = what log held", l, l1)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if l1 := r.slotBody(t, "log.1"); l1 != "base\nmine\n" {
				t.Fatalf("after the close: log.1 = %q", l1)
			}
		})
	}
}

// TestWriterRenameWrittenFileClosedMeanwhile: mv log log.1 of a log
// being appended to, over a file of this mount still open under log.1
// (echo other > log.1), while the rename's snapshot is being committed:
// a close of either file then ends with log.1 holding the log with its
// line, and every call 0.
//   - The log's own close waits until the file is log.1 and commits it
//     there. It committed under log in between, refused by the rename's
//     removal, so its line made log again alone and the rename's next
//     look moved that onto log.1: the log's content was in neither name
//     (review 7).
//   - The target is replaced before the commit: its close commits
//     nothing. It was dropped only after, so its close landed "other"
//     over the new log.1 and the log's close put its line after that
//     (review 8).
func TestWriterRenameWrittenFileClosedMeanwhile(t *testing.T) {
	ctx := context.Background()
	for _, closing := range []string{"log", "target"} {
		t.Run(closing, func(t *testing.T) {
			r := newWriterRig(t)
			r.write(t, "log", "base\n")
			s := r.appendTo(t, "log", "mine\n")
			target := r.written(t, "log.1", "other\n")
			gate := r.stallSnapshots()
			renamed := make(chan error, 1)
			go func() { renamed <- r.w.Rename(ctx, r.id, "log", "log.1", false) }()
			waitStalled(t, gate, 1) // the rename's snapshot is being committed
			closed := make(chan error, 1)
			go func() {
				if closing == "log" {
					closed <- r.w.Flush(ctx, r.id, s, false)
				} else {
					closed <- r.w.Flush(ctx, r.id, target, false)
				}
			}()
			// The close has its chance before the rename lands: it
			// returns at once or waits; a bounded wait for the
			// failure, not a synchronisation (a late close passes).
			var cerr error
			early := false
			select {
			case cerr = <-closed:
				early = true
			case <-time.After(2 * time.Second):
			}
			gate.Release()
			if !early {
				cerr = <-closed
			}
			if rerr := <-renamed; rerr != nil || cerr != nil {
				t.Fatalf("rename %v, close %v", rerr, cerr)
			}
			r.w.Release(ctx, r.id, target)
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatalf("the log's close: %v", err)
			}
			if l, l1 := r.slotBody(t, "log"), r.slotBody(t, "log.1"); l != "(none)" || l1 != "base\nmine\n" {
				t.Fatalf("log = %q, log.1 = %q; want log.1 = the log with its line", l, l1)
			}
		})
	}
}

// TestWriterRenameWrittenFile: mv of a file this mount is writing (staged,
// not closed yet) removes the old name only if that is still what the
// file was built on. Another mount's rewrite of it since refuses the
// rename (nothing moves), and the close then settles the file as it
// would without the rename: an edit refused, appended bytes moved after
// the other mount's. The removal was not guarded and the close under the
// new name was not either: the other mount's rewrite was in neither name
// while every call returned 0 (review 6). Without another writer the
// rename goes through.
func TestWriterRenameWrittenFile(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		appending bool
		other     bool
		wantClose error
		want      map[string]string
	}{
		{"edit/alone", false, false, nil, map[string]string{"f": "(none)", "g": "base\nmine\n"}},
		{"append/alone", true, false, nil, map[string]string{"f": "(none)", "g": "base\nmine\n"}},
		{"edit/rewritten-elsewhere", false, true, layout.ErrChangedUnder, map[string]string{"f": "base\nother\n", "g": "(none)"}},
		{"append/rewritten-elsewhere", true, true, nil, map[string]string{"f": "base\nother\nmine\n", "g": "(none)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRig(t)
			r.write(t, "f", "base\n")
			s := r.openWriting(t, "f", "mine\n", c.appending)
			if c.other {
				r.otherWriter(t, "f", "base\nother\n")
			}
			err := r.w.Rename(ctx, r.id, "f", "g", false)
			if c.other != errors.Is(err, layout.ErrChangedUnder) {
				t.Fatalf("rename: %v (another writer: %v)", err, c.other)
			}
			if err := r.w.Flush(ctx, r.id, s, false); !errors.Is(err, c.wantClose) || (err == nil) != (c.wantClose == nil) {
				t.Fatalf("close: %v, want %v", err, c.wantClose)
			}
			r.w.Release(ctx, r.id, s)
			for name, want := range c.want {
				if got := r.slotBody(t, name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}
