package staging

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/gcerrors"
)

// refuseSnapshots makes every snapshot PUT fail (permission denied),
// after waiting for g if it is not nil; the returned func ends it.
func (r *writerRig) refuseSnapshots(g *faultblob.Gate) func() {
	id := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)}, FailProb: 1,
		Err: faultblob.PermanentError(gcerrors.PermissionDenied), Stall: g})
	return func() { r.inj.Remove(id) }
}

// newRenameRig is a writer rig with a and b committed.
func newRenameRig(t *testing.T) *writerRig {
	r := newWriterRigCfg(t, nil)
	r.commitBlob(t, "a", "a\n", "")
	r.commitBlob(t, "b", "b\n", "")
	return r
}

// stalledRename starts mv a b with its snapshot PUT held, and refused
// with refuse. finish lets it go on and returns its error; unrefuse ends
// the refusal (a no-op without one).
func (r *writerRig) stalledRename(t *testing.T, refuse bool) (finish func() error, unrefuse func()) {
	t.Helper()
	var g *faultblob.Gate
	unrefuse = func() {}
	if refuse {
		g = faultblob.NewGate()
		unrefuse = r.refuseSnapshots(g)
	} else {
		g = r.stallSnapshots()
	}
	renamed := make(chan error, 1)
	go func() { renamed <- r.w.Rename(context.Background(), r.id, "a", "b", false) }()
	waitStalled(t, g, 1)
	return func() error {
		g.Release()
		return <-renamed
	}, unrefuse
}

// waitsForRename fails t if ch yields within a moment: what sends on it
// must wait for the rename in flight. There is nothing to poll for
// that; a moment under load can only be too short to show the bug, never
// fail a correct writer.
func waitsForRename[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s came back (%v) while the rename was in flight", what, v)
	case <-time.After(100 * time.Millisecond):
	}
}

// closeFile is the last close(2) of s: its flush, then its release.
func (r *writerRig) closeFile(t *testing.T, s *File, untouchedToo bool) {
	t.Helper()
	if err := r.w.Flush(context.Background(), r.id, s, untouchedToo); err != nil {
		t.Fatalf("close of %s: %v", s.Name(), err)
	}
	if err := r.w.Release(context.Background(), r.id, s); err != nil {
		t.Fatal(err)
	}
}

// opened is what an open in a goroutine returned.
type opened struct {
	s   *File
	err error
}

// openLater opens name from base in a goroutine, as open(2) does.
func (r *writerRig) openLater(name string, base *layout.Entry) <-chan opened {
	ch := make(chan opened, 1)
	go func() {
		s, err := r.w.Open(context.Background(), r.id, name, base, false)
		ch <- opened{s, err}
	}()
	return ch
}

// Renames over a file open for writing whose commit fails (review 10):
// the target must come back as a failed rename(2) leaves it on a disk,
// with everything written to it meanwhile.

// TestWriterRenameFailsWriteMeanwhile: the target is open for writing
// (staged, clean) when a rename over it starts; its writer writes while
// the rename's commit is in flight; the commit fails. The dirty flag was
// put back as it was before the write (false): the write was forgotten,
// and its close returned 0 with the bytes nowhere.
func TestWriterRenameFailsWriteMeanwhile(t *testing.T) {
	ctx := context.Background()
	r := newRenameRig(t)
	base, _ := r.slot(t, "b")
	b, err := r.w.Open(ctx, r.id, "b", &base, false) // open(O_WRONLY), nothing written yet
	if err != nil {
		t.Fatal(err)
	}
	finish, unrefuse := r.stalledRename(t, true)
	if _, err := b.WriteAt(ctx, []byte("more b\n"), base.Size); err != nil {
		t.Fatal(err)
	}
	if err := finish(); err == nil {
		t.Fatal("rename with its commit refused: no error")
	}
	unrefuse()
	r.closeFile(t, b, false)
	if got := r.bodyOf(t, "b"); got != "b\nmore b\n" {
		t.Errorf("b holds %q after its close returned 0, want %q (the write during the failed rename is lost)", got, "b\nmore b\n")
	}
}

// TestWriterRenameFailsStagedSource: the rename's source is staged but
// not moveWrittenFile's (open with nothing written, or opened with
// O_TRUNC and written), so the rename moves it to the target's name
// before its commit. On a failure it neither moved it back nor (the
// target's name then taken) put the target back: the target's close
// returned 0 with its bytes gone, and the source's staged file sat under
// the target's name though rename(2) failed (review 10). With an open of
// the source's name while the commit was in flight, that open staged the
// name anew and blocked the same way (review 11): it now waits for the
// outcome and shares the source moved back.
func TestWriterRenameFailsStagedSource(t *testing.T) {
	for _, tc := range []struct {
		name          string
		whole, reopen bool
	}{
		{"source-open-clean", false, false}, {"source-otrunc-written", true, false},
		{"source-open-clean-reopened", false, true}, {"source-otrunc-written-reopened", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRenameRig(t)
			abase, _ := r.slot(t, "a")
			a, err := r.w.Open(ctx, r.id, "a", &abase, tc.whole)
			if err != nil {
				t.Fatal(err)
			}
			if tc.whole {
				a.OpenedWhole()
				if _, err := a.WriteAt(ctx, []byte("new a\n"), 0); err != nil {
					t.Fatal(err)
				}
			}
			b := r.openWriting(t, "b", "more b\n", true)
			finish, unrefuse := r.stalledRename(t, true)
			var open <-chan opened
			if tc.reopen {
				open = r.openLater("a", &abase) // open(2) of a, O_RDWR
				waitsForRename(t, open, "open of a")
			}
			if err := finish(); err == nil {
				t.Fatal("rename with its commit refused: no error")
			}
			unrefuse()
			handles := []*File{a}
			if tc.reopen {
				o := <-open
				if o.err != nil {
					t.Fatal(o.err)
				}
				if o.s != a {
					t.Error("the open of a during the failed rename got another file than the source moved back")
				}
				handles = append(handles, o.s)
			}
			if n := a.Name(); n != "a" {
				t.Errorf("after the failed rename the source is staged as %q, want a", n)
			}
			r.closeFile(t, b, false)
			if tc.whole {
				a.ClosedWhole()
			}
			for _, s := range handles {
				r.closeFile(t, s, true)
			}
			if got := r.bodyOf(t, "b"); got != "b\nmore b\n" {
				t.Errorf("b holds %q after its close returned 0, want %q", got, "b\nmore b\n")
			}
		})
	}
}

// TestWriterRenameFailsCloseMeanwhile: the target's close(2) comes while
// the rename over it is in flight. It returned 0 at once (the target was
// unlinked then), committing nothing; the rename then failed and the
// target was put back, its bytes left to the release's commit, whose
// error reaches nobody. The close now waits for the rename's outcome and
// commits the target itself: with the bucket still refusing, it fails.
func TestWriterRenameFailsCloseMeanwhile(t *testing.T) {
	ctx := context.Background()
	r := newRenameRig(t)
	b := r.openWriting(t, "b", "more b\n", true)
	finish, unrefuse := r.stalledRename(t, true)
	closed := make(chan error, 1)
	go func() { closed <- r.w.Flush(ctx, r.id, b, false) }() // close(2) of b's descriptor
	waitsForRename(t, closed, "close of b")
	if err := finish(); err == nil {
		t.Fatal("rename with its commit refused: no error")
	}
	closeErr := <-closed
	_ = r.w.Release(ctx, r.id, b) // the bucket still refuses: logged only
	unrefuse()
	if got := r.bodyOf(t, "b"); closeErr == nil && got != "b\nmore b\n" {
		t.Errorf("close of b returned 0 during the failed rename, but b holds %q, want %q", got, "b\nmore b\n")
	}
	if closeErr == nil {
		t.Error("close of b returned 0 with the bucket refusing its commit")
	}
}

// TestWriterRenameFailsOpenMeanwhile: an open of the target's name while
// the rename over it is in flight (the kernel can send one for a cached
// entry) staged the name anew, from the bucket; the rename then failed,
// found the name taken, and did not put the target back: its writer's
// bytes were lost as its close returned 0. The open now waits for the
// outcome and shares the target put back.
func TestWriterRenameFailsOpenMeanwhile(t *testing.T) {
	r := newRenameRig(t)
	base, _ := r.slot(t, "b")
	b := r.openWriting(t, "b", "more b\n", true)
	finish, unrefuse := r.stalledRename(t, true)
	open := r.openLater("b", &base)
	waitsForRename(t, open, "open of b")
	if err := finish(); err == nil {
		t.Fatal("rename with its commit refused: no error")
	}
	unrefuse()
	o := <-open
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.s != b {
		t.Error("the open during the failed rename staged b anew instead of sharing the target put back")
	}
	r.closeFile(t, o.s, false)
	r.closeFile(t, b, false)
	if got := r.bodyOf(t, "b"); got != "b\nmore b\n" {
		t.Errorf("b holds %q, want %q", got, "b\nmore b\n")
	}
}

// TestWriterRenameLandsOpenMeanwhile: an open of the target's name that
// waited for a rename over it that then landed is ErrChanged (ESTALE: the
// kernel looks the name up again), not an open of the old target under
// the name the moved file holds now (review 11).
func TestWriterRenameLandsOpenMeanwhile(t *testing.T) {
	r := newRenameRig(t)
	base, _ := r.slot(t, "b")
	b := r.openWriting(t, "b", "more b\n", true)
	finish, _ := r.stalledRename(t, false)
	open := r.openLater("b", &base)
	waitsForRename(t, open, "open of b")
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	if o := <-open; !errors.Is(o.err, ErrChanged) {
		if o.err == nil {
			r.closeFile(t, o.s, false)
		}
		t.Errorf("open of b after the rename over it landed: %v, want ErrChanged", o.err)
	}
	r.closeFile(t, b, false)
	if got := r.bodyOf(t, "b"); got != "a\n" {
		t.Errorf("b holds %q, want a's %q", got, "a\n")
	}
}

// TestWriterRenameSourceWrittenMeanwhile: the source of a rename (a
// file open and clean, or a file under a renamed directory) is moved to
// its new name before the rename's snapshot lands; a write to it and
// its close while that snapshot is in flight committed the bytes under
// the new name at once, and when the rename then failed they stayed
// there: mv failed, the close returned 0, the target held the source's
// new bytes and the source its old ones (review 15). The close now
// waits for the outcome and commits under the name the file ends with.
func TestWriterRenameSourceWrittenMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name           string
		from, to, file string
		refused        bool
		want           map[string]string // name: content ("(none)": absent)
	}{
		{"file, refused", "a", "b", "a", true, map[string]string{"a": "NEW\n", "b": "b\n"}},
		{"file, lands", "a", "b", "a", false, map[string]string{"a": "(none)", "b": "NEW\n"}},
		{"directory, refused", "d", "e", "d/x", true, map[string]string{"d/x": "NEW\n", "e/x": "(none)"}},
		{"directory, lands", "d", "e", "d/x", false, map[string]string{"d/x": "(none)", "e/x": "NEW\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRenameRig(t)
			r.commitBlob(t, "d/x", "x\n", "")
			base, _ := r.slot(t, tc.file)
			s, err := r.w.Open(ctx, r.id, tc.file, &base, false) // open(O_RDWR), nothing written
			if err != nil {
				t.Fatal(err)
			}
			// The rename's snapshot PUT is held, then refused once (or
			// let through); later PUTs pass.
			g := faultblob.NewGate()
			rule := faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)}, Stall: g}
			if tc.refused {
				rule.FailFirst, rule.Err = 1, faultblob.PermanentError(gcerrors.PermissionDenied)
			}
			rid := r.inj.Add(rule)
			renamed := make(chan error, 1)
			go func() { renamed <- r.w.Rename(ctx, r.id, tc.from, tc.to, false) }()
			waitStalled(t, g, 1)
			if _, err := s.WriteAt(ctx, []byte("NEW\n"), 0); err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			go func() { closed <- r.w.Flush(ctx, r.id, s, false) }() // close(2)
			waitsForRename(t, closed, "close of the moved file")
			g.Release()
			rerr := <-renamed
			r.inj.Remove(rid)
			if (rerr != nil) != tc.refused {
				t.Fatalf("rename: %v, want refused %v", rerr, tc.refused)
			}
			if err := <-closed; err != nil {
				t.Fatalf("close of the moved file: %v", err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				if got := r.bodyOf(t, name); got != want {
					t.Errorf("%s holds %q, want %q", name, got, want)
				}
			}
		})
	}
}
