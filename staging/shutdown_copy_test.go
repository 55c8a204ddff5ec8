package staging

import (
	"context"
	"sync/atomic"
	"testing"

	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestShutdownCopyOutlivesAnOlderCommit: a close's commit of f
// (generation G1) is in flight; f is written again (G2) and a pugfs exec
// checkpoint uploads G2; the mount stops during that upload and keeps G2
// in failed/. The close's commit then lands G1: the copy of G2, which
// never landed, stays. A copy was removed when the generation the file's
// last upload described matched it (review 44); now only when a commit
// lands the copy's very bytes (its digest).
func TestShutdownCopyOutlivesAnOlderCommit(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	one, two := big("one "), big("two ")
	s := r.written(t, "f", one)

	commits := faultblob.NewGate()
	t.Cleanup(commits.Release)
	var armed atomic.Bool
	armed.Store(true)
	ruleA := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, Stall: commits,
		While: func() bool { return armed.CompareAndSwap(true, false) }})
	flushed := make(chan error, 1)
	go func() { flushed <- r.w.Flush(ctx, r.id, s, true) }()
	waitStalled(t, commits, 1) // G1 uploaded, its commit in flight

	if _, err := s.WriteAt(ctx, []byte(two), 0); err != nil { // G2
		t.Fatal(err)
	}
	uploads := faultblob.NewGate()
	t.Cleanup(uploads.Release)
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: uploads,
		FailProb: 1, Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
	checkpoint := make(chan error, 1)
	go func() {
		_, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput)
		checkpoint <- err
	}()
	waitStalled(t, uploads, 1) // G2's upload

	r.w.Shutdown() // keeps G2 (dirty): keptGen = G2
	if kept := r.failedFiles(t); len(kept) != 1 {
		t.Fatalf("the stop kept %v, want one copy of f", kept)
	}
	r.inj.Remove(ruleA)
	commits.Release() // the close's batch lands G1 (its end waits for f's lock: G2's upload)
	uploads.Release() // G2's upload fails: the checkpoint does not land
	<-checkpoint
	if err := <-flushed; err != nil {
		t.Fatalf("the close's commit: %v", err)
	}
	got := r.bodyOf(t, "f")
	if got == two {
		t.Skip("G2 landed after all")
	}
	if kept := r.failedFiles(t); len(kept) != 1 {
		t.Fatalf("f committed holding the first write (%d bytes, want-two %v); the copy of the second write, which never landed, is gone from failed/ (%v): removed by the commit of the older generation", len(got), got == two, kept)
	}
}
