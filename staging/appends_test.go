package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/internal/testrig"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// bodyOf is the whole content the committed slot name holds, inline or
// in its blob (decoded).
func (r *writerRig) bodyOf(t *testing.T, name string) string {
	t.Helper()
	e, ok := r.slot(t, name)
	if !ok {
		return "(none)"
	}
	return readEntry(t, r.w.blobs, &e)
}

// readEntry reads e's whole (decoded) content.
func readEntry(t *testing.T, blobs Blobs, e *layout.Entry) string {
	t.Helper()
	var b []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := blobs.ReadAt(context.Background(), &e.Descriptor, buf, int64(len(b)))
		b = append(b, buf[:n]...)
		if errors.Is(err, io.EOF) || err == nil && n == 0 {
			return string(b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriterAppendOntoOtherWriters: a file only appended to through
// O_APPEND descriptors since it was read is, when another writer
// committed the file meanwhile, committed as that writer's content
// followed by the appended bytes: its close succeeds, nothing goes to the
// failed directory, and the staged file (what the descriptors still open
// read) shows the merged content. Two mounts appending lines to one log
// got ESTALE for one close in each lost race, the line in failed/ (audit
// 8). Whatever else changed the file keeps it refused
// (TestWriterLostUpdate).
func TestWriterAppendOntoOtherWriters(t *testing.T) {
	ctx := context.Background()
	base, other := big("base line\n"), big("base line\n")+"other\n"
	for _, c := range []struct {
		name string
		ttl  time.Duration // the cache's: stale, the commit itself finds the change
		enc  string        // the other writer's blob's encoding
	}{
		{"fresh-state", 0, ""},
		{"stale-state", time.Hour, ""},
		{"gzip", time.Hour, layout.EncodingGzip},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, c.ttl, nil)
			r.commitBlob(t, "log", base, "")
			s := r.appendTo(t, "log", "mine\n")
			if c.ttl == 0 {
				r.commitBlob(t, "log", other, c.enc)
			} else {
				r.otherBlob(t, "log", other, c.enc) // the commit finds it
			}
			if err := r.w.Flush(ctx, r.id, s, false); err != nil {
				t.Fatalf("close: %v", err)
			}
			want := other + "mine\n"
			if got := r.bodyOf(t, "log"); got != want {
				t.Fatalf("log ends %q, want the other writer's content, then this line", got[max(0, len(got)-40):])
			}
			buf := make([]byte, len(want)+10)
			if n, err := s.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != want || s.Stat().Size != int64(len(want)) {
				t.Fatalf("the staged file after the close reads %d bytes (%v), size %d; want the merged %d", n, err, s.Stat().Size, len(want))
			}
			if s.Rebases() != 1 {
				t.Errorf("Rebases = %d, want 1 (the front end drops its pages by it)", s.Rebases())
			}
			// More appends build on what landed: once.
			if _, err := s.Append(ctx, []byte("more\n")); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "log"); got != want+"more\n" {
				t.Fatalf("after one more append, log ends %q", got[max(0, len(got)-40):])
			}
			if f := r.failedFiles(t); len(f) != 0 {
				t.Fatalf("failed directory %v, want nothing", f)
			}
		})
	}
	t.Run("attributes-changed", func(t *testing.T) {
		r := newWriterRig(t)
		r.write(t, "log", "base\n")
		s := r.appendTo(t, "log", "mine\n")
		s.changeAttrs(func(a *Attrs) { a.Meta = map[string]string{"k": "v"} })
		r.otherWriter(t, "log", "base\nother\n")
		if err := r.w.Release(ctx, r.id, s); !errors.Is(err, layout.ErrChangedUnder) {
			t.Fatalf("close: %v, want ErrChangedUnder: moved, the other's attributes would go", err)
		}
		if got := r.slotBody(t, "log"); got != "base\nother\n" {
			t.Fatalf("log = %q", got)
		}
	})
	for _, ttl := range []time.Duration{0, time.Hour} {
		// Removed (a log rotated: mv log old) by the other writer, seen
		// in the state or found by the commit: the appended bytes make
		// the file again alone. It came back with all it had read, every
		// line in both files.
		t.Run(fmt.Sprintf("removed/ttl=%v", ttl), func(t *testing.T) {
			r := newWriterRigTTL(t, ttl, nil)
			r.write(t, "log", "base\n")
			s := r.appendTo(t, "log", "mine\n")
			r.otherRemove(t, "log")
			if err := r.w.Flush(ctx, r.id, s, false); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got := r.slotBody(t, "log"); got != "mine\n" {
				t.Fatalf("log = %q, want the appended line alone", got)
			}
			// Made again by a third writer meanwhile: after its bytes.
			if _, err := s.Append(ctx, []byte("more\n")); err != nil {
				t.Fatal(err)
			}
			r.otherRemove(t, "log")
			r.otherWriter(t, "log", "third\n")
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := r.slotBody(t, "log"); got != "third\nmore\n" {
				t.Fatalf("log = %q", got)
			}
		})
	}
	t.Run("made-and-removed-elsewhere", func(t *testing.T) {
		// >> of a new log while another mount makes the name and
		// removes it again (a log rotated there): the commit built on
		// the name's absence is refused for the making, and made again
		// on the new absence. A check for moves that go nowhere took it
		// for one: ESTALE, the line in failed/ (review 7).
		r := newWriterRigTTL(t, time.Hour, nil)
		r.otherWriter(t, "other", "x")
		s, err := r.w.OpenFresh(ctx, r.id, "log", func() *layout.Entry { return nil }, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, []byte("mine\n")); err != nil {
			t.Fatal(err)
		}
		r.otherWriter(t, "log", "theirs\n")
		r.otherRemove(t, "log")
		if err := r.w.Flush(ctx, r.id, s, true); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		if got, f := r.slotBody(t, "log"), r.failedFiles(t); got != "mine\n" || len(f) != 0 {
			t.Fatalf("log = %q, failed directory %v", got, f)
		}
	})
	t.Run("session-directory-fsync", func(t *testing.T) {
		// fsync(2) of the session directory in close mode, by another
		// process, while the appender holds the file open: it moves
		// the bytes as the close would. It committed every staged file
		// as one snapshot, so the appended one was refused, and its
		// close was then ESTALE, the line in failed/ (review 6).
		r := newWriterRig(t)
		r.write(t, "log", "base\n")
		s := r.appendTo(t, "log", "mine\n")
		r.otherWriter(t, "log", "base\nother\n")
		if err := r.w.FsyncSession(ctx, r.id); err != nil {
			t.Fatalf("fsync of the session directory: %v", err)
		}
		if got := r.slotBody(t, "log"); got != "base\nother\nmine\n" {
			t.Fatalf("log = %q after the fsync", got)
		}
		if err := r.w.Flush(ctx, r.id, s, false); err != nil {
			t.Fatalf("the appender's close: %v", err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		if got, f := r.slotBody(t, "log"), r.failedFiles(t); got != "base\nother\nmine\n" || len(f) != 0 {
			t.Fatalf("log = %q, failed directory %v", got, f)
		}
	})
	t.Run("removed-then-committed", func(t *testing.T) {
		// Removed and made again by the other writer: O_APPEND writes
		// to the file the name has at the close.
		r := newWriterRig(t)
		r.write(t, "log", "base\n")
		s := r.appendTo(t, "log", "mine\n")
		r.otherRemove(t, "log")
		r.otherWriter(t, "log", "new\n")
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		if got := r.slotBody(t, "log"); got != "new\nmine\n" {
			t.Fatalf("log = %q", got)
		}
	})
}

// TestWriterFsyncAppendsOntoOtherWriters: with --commit=fsync, a file
// only appended to since it was read goes onto another writer's commit
// of it at the fsync, as at a close in close mode: the one snapshot lands
// with every staged change. The fsync was refused and the appended bytes
// went to the failed directory (audit 9 #8). A file edited in place
// stays refused; the appended ones then wait for the next fsync.
func TestWriterFsyncAppendsOntoOtherWriters(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		ttl   time.Duration // stale: the commit itself finds the change
		other func(r *writerRig)
		edit  bool   // y edited in place and changed by the other writer too
		want  string // f after the fsync
	}{
		{"committed/fresh-state", 0, func(r *writerRig) { r.otherWriter(t, "f", "other\n") }, false, "other\nmore\n"},
		{"committed/stale-state", time.Hour, func(r *writerRig) { r.otherWriter(t, "f", "other\n") }, false, "other\nmore\n"},
		{"removed", time.Hour, func(r *writerRig) { r.otherRemove(t, "f") }, false, "more\n"},
		{"with-an-edit", 0, func(r *writerRig) { r.otherWriter(t, "f", "other\n") }, true, "other\nmore\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, c.ttl, func(cfg *Config) { cfg.Commit = CommitOnFsync })
			for _, n := range []string{"f", "x", "y"} {
				r.write(t, n, n+"\n")
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			r.slot(t, "f")                    // the state is loaded (for the TTL)
			f := r.appendTo(t, "f", "more\n") // held open over the fsync
			if err := r.w.Release(ctx, r.id, r.appendTo(t, "x", "more\n")); err != nil {
				t.Fatal(err)
			}
			if c.edit {
				if err := r.w.Release(ctx, r.id, r.editAt(t, "y", "more\n")); err != nil {
					t.Fatal(err)
				}
				r.otherWriter(t, "y", "other y\n")
			}
			c.other(r)
			v := r.latest(t)
			err := r.w.Sync(ctx, r.id, f)
			if c.edit {
				if !errors.Is(err, layout.ErrChangedUnder) {
					t.Fatalf("fsync: %v, want ErrChangedUnder for the edited file", err)
				}
				if r.latest(t) != v {
					t.Fatal("a refused fsync committed something")
				}
				if err = r.w.Sync(ctx, r.id, f); err != nil {
					t.Fatalf("the next fsync: %v (the appended files were moved, and wait for it)", err)
				}
				if got := r.slotBody(t, "y"); got != "other y\n" {
					t.Fatalf("y = %q, want the other writer's", got)
				}
				if ff := r.failedFiles(t); len(ff) != 1 {
					t.Fatalf("failed directory %v, want y's refused edit alone", ff)
				}
			} else {
				if err != nil {
					t.Fatalf("fsync: %v", err)
				}
				if ff := r.failedFiles(t); len(ff) != 0 {
					t.Fatalf("failed directory %v, want nothing", ff)
				}
			}
			if got := r.latest(t); got != v+1 {
				t.Fatalf("session at version %d after the fsync, want %d: one snapshot", got, v+1)
			}
			if got, x := r.slotBody(t, "f"), r.slotBody(t, "x"); got != c.want || x != "x\nmore\n" {
				t.Fatalf("f = %q, x = %q; want %q, %q", got, x, c.want, "x\nmore\n")
			}
			buf := make([]byte, 64)
			if n, _ := f.ReadAt(ctx, buf, 0); string(buf[:n]) != c.want || f.Rebases() != 1 {
				t.Fatalf("the open file reads %q after the fsync (%d rebases), want %q", buf[:n], f.Rebases(), c.want)
			}
			if err := r.w.Release(ctx, r.id, f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriterReleaseMovesWithoutNamespaceLock: the last release of a file
// that must move its appended bytes (here stalled fetching the other
// writer's content) does not hold the session's namespace: an unlink of
// another file of the session goes on meanwhile. The release held it
// for its whole loop of moves, so one log losing races stalled every
// rm, mv and chmod in the session (review 6).
func TestWriterReleaseMovesWithoutNamespaceLock(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	r.write(t, "x", "x\n")
	r.commitBlob(t, "log", big("base\n"), "")
	s := r.appendTo(t, "log", "mine\n")
	other := big("base\n") + "other\n"
	r.otherBlob(t, "log", other, "")
	gate, release := r.inj.Stall(faultblob.OpGet, faultblob.Match{Prefix: layout.BlobKey(layout.DigestOf([]byte(other)))})
	defer release()
	done := make(chan error, 1)
	go func() { done <- r.w.Release(ctx, r.id, s) }()
	for deadline := time.Now().Add(10 * time.Second); gate.Waiting() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the release never fetched the other writer's content")
		}
	}
	unlinked := make(chan error, 1)
	go func() { unlinked <- r.w.Unlink(ctx, r.id, []string{"x"}) }()
	select {
	case err := <-unlinked:
		if err != nil {
			t.Fatalf("unlink: %v", err)
		}
	case <-time.After(10 * time.Second):
		release()
		<-unlinked
		t.Fatal("an unlink of another file waited for the release's move")
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := r.bodyOf(t, "log"); got != other+"mine\n" {
		t.Fatalf("log ends %q", got[len(got)-20:])
	}
	if _, ok := r.slot(t, "x"); ok {
		t.Fatal("x still there")
	}
}

// TestWriterAppendersRace: two writers on one bucket (two mounts), each
// appending lines to one log through O_APPEND descriptors, each line one
// open, write and close, at once: every close succeeds, and the log holds
// every line once, each writer's in its order.
func TestWriterAppendersRace(t *testing.T) {
	ctx := context.Background()
	r := testrig.New(t, time.Hour)
	const lines = 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*lines)
	for _, who := range []string{"a", "b"} {
		w, c := mountOn(t, r)
		baseOf := func() *layout.Entry {
			st, err := c.State(ctx, r.Session)
			if err != nil {
				return nil
			}
			if e, ok := st.Slots()["log"]; ok {
				return &e
			}
			return nil
		}
		wg.Go(func() {
			for i := range lines {
				s, err := w.OpenFresh(ctx, r.Session, "log", baseOf, false)
				if err != nil {
					errs <- fmt.Errorf("%s open %d: %w", who, i, err)
					continue
				}
				if _, err := s.Append(ctx, fmt.Appendf(nil, "%s%02d\n", who, i)); err != nil {
					errs <- err
				}
				if err := w.FlushSince(ctx, r.Session, s, s.Gen()); err != nil {
					errs <- fmt.Errorf("%s close %d: %w", who, i, err)
				}
				if err := w.Release(ctx, r.Session, s); err != nil {
					errs <- fmt.Errorf("%s release %d: %w", who, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c, err := cache.New(r.Store, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State(ctx, r.Session)
	if err != nil {
		t.Fatal(err)
	}
	e := st.Slots()["log"]
	got := strings.Fields(readEntry(t, r.Blobs, &e))
	next := map[byte]int{}
	for _, l := range got {
		if want := fmt.Sprintf("%c%02d", l[0], next[l[0]]); l != want {
			t.Fatalf("line %q where %q was next: log %q", l, want, got)
		}
		next[l[0]]++
	}
	if next['a'] != lines || next['b'] != lines {
		t.Fatalf("log holds %d lines of a, %d of b, want %d each: %q", next['a'], next['b'], lines, got)
	}
}

// TestWriterAppendOutlastsOtherWriters: a close whose appended bytes
// another writer's commit beats more than appendAttempts times in a row
// moves them on until one lands, and succeeds. It gave up after 100,
// ESTALE, and the bytes landed with the next append's commit all the
// same: a retrying writer wrote them twice (audit 9, a mount on a 20 ms
// bucket racing one whose commits cost less).
func TestWriterAppendOutlastsOtherWriters(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	r.write(t, "log", "base\n")
	tail := big("mine\n") // past the inline limit: each commit stores a blob first
	s := r.appendTo(t, "log", tail)
	stallBlobs := func() *faultblob.Gate {
		g := faultblob.NewGate()
		r.inj.Reset()
		r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g})
		return g
	}
	g := stallBlobs()
	done := make(chan error, 1)
	go func() { done <- r.w.Flush(ctx, r.id, s, false) }()
	const races = appendAttempts + 20
	for i := range races {
		// The other writer's line (inline, no blob) lands while this
		// close's blob is being stored.
		waitStalled(t, g, 1)
		r.otherWriter(t, "log", fmt.Sprintf("other %d\n", i))
		prev := g
		g = stallBlobs()
		prev.Release()
	}
	r.inj.Reset()
	g.Release()
	if err := <-done; err != nil {
		t.Fatalf("close after %d lost races: %v", races, err)
	}
	if got, want := r.bodyOf(t, "log"), fmt.Sprintf("other %d\n", races-1)+tail; got != want {
		t.Fatalf("log = %q..., want the other writer's last line, then this close's bytes", got[:min(len(got), 40)])
	}
	if err := r.w.Release(ctx, r.id, s); err != nil || len(r.failedFiles(t)) != 0 {
		t.Fatalf("release: %v, failed directory %v", err, r.failedFiles(t))
	}
}
