package fs

import (
	"bytes"
	"context"
	"os/exec"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// waitingIn reports whether a goroutine in fn waits for a lock.
func waitingIn(fn string) bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "RWMutex).Lock") {
			return true
		}
	}
	return false
}

// TestRefRmRacingItsCreate: rm refs/new while the close that creates it
// is writing it, on the same mount. The removal waits for that write and
// removes what it wrote: it answered 0 at once (the bucket had no ref
// yet, and the open descriptor made that "created here, not written"),
// and the write landed after it (review 40).
func TestRefRmRacingItsCreate(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
	mnt := testMount(t, store, nil)
	gate := faultblob.NewGate()
	rule := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: "refs/"}, Stall: gate})
	wr := exec.Command("bash", "-c", "cd '"+mnt+"' && echo objects/target > refs/new")
	if err := wr.Start(); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, gate, 1) // the create's close is writing the ref
	rm := exec.Command("bash", "-c", "cd '"+mnt+"' && rm refs/new")
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	rmDone := make(chan error, 1)
	go func() { rmDone <- rm.Wait() }()
	// The rm waits for the write, or (the bug) answers before it.
	var rmErr error
	answered := false
	for deadline := time.Now().Add(20 * time.Second); !answered && !waitingIn("refsNode).Unlink"); time.Sleep(5 * time.Millisecond) {
		select {
		case rmErr = <-rmDone:
			answered = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("rm neither waits for the write nor answers")
		}
	}
	inj.Remove(rule)
	gate.Release()
	wrErr := wr.Wait()
	if !answered {
		rmErr = <-rmDone
	}
	if rmErr != nil {
		t.Fatalf("rm: %v", rmErr)
	}
	if r, err := store.ReadRef(context.Background(), "new"); err == nil {
		t.Fatalf("rm refs/new returned 0 (the create's close: %v), yet the bucket holds refs/new -> %q", wrErr, r.Target)
	}
}
