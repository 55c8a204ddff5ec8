package staging

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestWriterDirRenameReaderAtOutcome: a directory's rename, once its
// snapshot has answered, takes the moved files again to end their busy
// spell. A moved file whose mu was held at that instant (a read, a
// stat, a write: all brief) was waited for as busy, with its commit in
// flight: the rename's own mark, which only the rename clears. It never
// returned, and held the session's nsMu for good (review 16).
func TestWriterDirRenameReaderAtOutcome(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(map[bool]string{false: "lands", true: "refused"}[refused], func(t *testing.T) {
			ctx := context.Background()
			r := newWriterRigCfg(t, nil)
			r.commitBlob(t, "d/x", "x\n", "")
			base, _ := r.slot(t, "d/x")
			s, err := r.w.Open(ctx, r.id, "d/x", &base, false) // open(O_RDONLY|O_RDWR), nothing written
			if err != nil {
				t.Fatal(err)
			}
			var g *faultblob.Gate
			if refused {
				g = faultblob.NewGate()
				defer r.refuseSnapshots(g)()
			} else {
				g = r.stallSnapshots()
			}
			renamed := make(chan error, 1)
			go func() { renamed <- r.w.Rename(ctx, r.id, "d", "e", false) }()
			waitStalled(t, g, 1)
			// A read of the file is under way (ReadAt of a staged
			// file holds s.mu shared while it preads its spill file)
			// at the moment the rename's snapshot answers.
			s.mu.RLock()
			g.Release()
			waitsForRename(t, renamed, "rename of d while a file it moved is read")
			s.mu.RUnlock() // the read ends
			select {
			case err := <-renamed:
				if (err != nil) != refused {
					t.Errorf("rename: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("rename of d hangs after its snapshot answered: lockStaged waits on the rename's own busy mark (deadlock; nsMu held for good)")
			}
			r.closeFile(t, s, false)
		})
	}
}

// TestWriterDirRenameReadLoop is the same with no test reaching into
// the lock: a reader of an open 1 MiB file (cat, tail -f: a pread every
// 100µs holds the file's lock shared while it copies) while its
// directory is renamed over and over; it hung within a few dozen
// renames (review 16).
func TestWriterDirRenameReadLoop(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, nil)
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	s := r.written(t, "d/x", big)
	if err := r.w.Flush(ctx, r.id, s, true); err != nil { // close of one descriptor; another stays open
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1<<20)
		for !stop.Load() {
			_, _ = s.ReadAt(ctx, buf, 0) // a reader of the open file (cat, tail -f)
			time.Sleep(100 * time.Microsecond)
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	names := []string{"d", "e"}
	for i := range 200 {
		from, to := names[i%2], names[(i+1)%2]
		renamed := make(chan error, 1)
		go func() { renamed <- r.w.Rename(ctx, r.id, from, to, false) }()
		select {
		case err := <-renamed:
			if err != nil {
				t.Fatalf("rename %d %s -> %s: %v", i, from, to, err)
			}
		case <-time.After(10 * time.Second):
			stop.Store(true)
			t.Fatalf("rename %d %s -> %s hangs while the moved file is being read (deadlock in lockStaged(..., done))", i, from, to)
		}
	}
}

// pausedStates is the rig's session cache, with the State calls made
// under a context marked pauseKey held, after they return, until resume
// is closed: an open that has checked the bucket and not yet staged its
// file (a slow LIST, a descheduled thread, a slow create of its spill
// file).
type pausedStates struct {
	States
	paused chan struct{} // closed when a marked call is held
	resume chan struct{}
	once   sync.Once
}

type pauseKey struct{}

func (p *pausedStates) State(ctx context.Context, id layout.SessionID) (*cache.State, error) {
	st, err := p.States.State(ctx, id)
	if ctx.Value(pauseKey{}) != nil {
		p.once.Do(func() { close(p.paused) })
		<-p.resume
	}
	return st, err
}

// TestWriterDirRenameOpenAcrossHold: an open below a directory that
// began before the directory's rename took its holds, and staged its
// file after (waitHeld was its only look at them): the file was staged
// under the old name while the rename landed, and its close committed
// it there, bringing the old directory back (review 16). install looks
// again: the open waits for the rename, and is ErrChanged once it
// landed.
func TestWriterDirRenameOpenAcrossHold(t *testing.T) {
	for _, kind := range []string{"O_CREAT|O_APPEND", "O_EXCL"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			r := newWriterRigCfg(t, nil)
			r.commitBlob(t, "d/y", "y\n", "")
			ps := &pausedStates{States: r.w.cache, paused: make(chan struct{}), resume: make(chan struct{})}
			r.w.cache = ps
			open := make(chan opened, 1)
			go func() {
				octx := context.WithValue(ctx, pauseKey{}, true)
				var s *File
				var err error
				if kind == "O_EXCL" {
					s, err = r.w.OpenExclusive(octx, r.id, "d/z")
				} else {
					s, err = r.w.OpenFresh(octx, r.id, "d/z", func() *layout.Entry { return nil }, false)
				}
				open <- opened{s, err}
			}()
			<-ps.paused
			// mv d e, its snapshot held until the open has staged.
			g := r.stallSnapshots()
			renamed := make(chan error, 1)
			go func() { renamed <- r.w.Rename(ctx, r.id, "d", "e", false) }()
			waitStalled(t, g, 1)
			close(ps.resume)
			var o opened
			select {
			case o = <-open:
			case <-time.After(3 * time.Second):
				// Waiting for the rename is a correct answer too.
				g.Release()
				o = <-open
			}
			g.Release()
			if err := <-renamed; err != nil {
				t.Fatalf("rename: %v", err)
			}
			if o.err != nil {
				if errors.Is(o.err, ErrChanged) {
					return // looked up again: fine
				}
				t.Fatalf("open: %v", o.err)
			}
			if _, err := o.s.Append(ctx, []byte("z\n")); err != nil {
				t.Fatal(err)
			}
			r.closeFile(t, o.s, true)
			if got := r.bodyOf(t, "d/z"); got != "(none)" {
				t.Errorf("after mv d e, d/z holds %q: the file created during the rename landed under the old directory (d came back); e/z holds %q", got, r.bodyOf(t, "e/z"))
			}
		})
	}
}

// TestWriterDirRenameFileRemovedElsewhere: a file this mount wrote and
// still holds open (a daemon's log, committed by an fsync), removed by
// another mount; then mv of its directory here. The rename took the open
// file's committed entry into what it moved although its listing, newer
// than that entry, no longer had it: the removed file came back under
// the new name (review 16). Only what was committed after the listing
// joins it.
func TestWriterDirRenameFileRemovedElsewhere(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, nil)
	r.commitBlob(t, "d/y", "y\n", "")
	s := r.written(t, "d/log", "line 1\n")
	if err := r.w.Sync(ctx, r.id, s); err != nil { // fsync: committed, still open
		t.Fatal(err)
	}
	r.otherRemove(t, "d/log")
	err := r.w.Rename(ctx, r.id, "d", "e", false)
	if err != nil {
		t.Errorf("mv d e, after another mount removed d/log that this mount holds open: %v", err)
	}
	r.closeFile(t, s, false)
	if got := r.bodyOf(t, "e/log"); got != "(none)" {
		t.Errorf("mv d e brought back d/log, which another mount had removed and nobody wrote since, as e/log (%q): the rename merged the open file's old committed entry into a listing that no longer had it", got)
	}
}

// TestWriterDirRenameMeanwhile: an open or a mkdir below a directory
// whose rename is in flight (its path taken before the rename; the
// kernel does not lock the directory renamed in its parent) staged a
// file or made a directory under the old name, which then came back
// beside the new one (audit 17, review 16). Each now waits for the
// rename and, the rename landed, is ErrChanged: the kernel looks the
// name up again, and finds the old directory gone.
func TestWriterDirRenameMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(r *writerRig) (*File, error)
	}{
		{"open O_TRUNC", func(r *writerRig) (*File, error) { return r.w.Open(context.Background(), r.id, "d/z", nil, true) }},
		{"open O_EXCL", func(r *writerRig) (*File, error) { return r.w.OpenExclusive(context.Background(), r.id, "d/z") }},
		{"mkdir", func(r *writerRig) (*File, error) { return nil, r.w.Mkdir(r.id, "d/z") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newWriterRigCfg(t, nil)
			r.commitBlob(t, "d/y", "y\n", "")
			g := r.stallSnapshots()
			renamed := make(chan error, 1)
			go func() { renamed <- r.w.Rename(ctx, r.id, "d", "e", false) }()
			waitStalled(t, g, 1)
			done := make(chan opened, 1)
			go func() {
				s, err := tc.op(r)
				done <- opened{s, err}
			}()
			waitsForRename(t, done, tc.name+" of d/z")
			g.Release()
			if err := <-renamed; err != nil {
				t.Fatalf("rename: %v", err)
			}
			o := <-done
			if o.s != nil {
				r.closeFile(t, o.s, true)
			}
			if !errors.Is(o.err, ErrChanged) {
				t.Errorf("%s of d/z during the rename of d: %v, want ErrChanged", tc.name, o.err)
			}
			ws := r.w.session(r.id)
			r.w.mu.Lock()
			d, dz := ws.dirs["d"], ws.dirs["d/z"]
			r.w.mu.Unlock()
			if body := r.bodyOf(t, "d/z"); d || dz || body != "(none)" {
				t.Errorf("after %s of d/z during mv d e: d %v, d/z a directory %v, d/z holds %q (d came back)", tc.name, d, dz, body)
			}
		})
	}
}
