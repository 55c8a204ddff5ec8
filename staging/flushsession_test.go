package staging

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// goroutinesWith counts the goroutines whose stack names every one of
// fns.
func goroutinesWith(fns ...string) int {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
next:
	for _, g := range strings.Split(buf.String(), "\n\n") {
		for _, fn := range fns {
			if !strings.Contains(g, fn) {
				continue next
			}
		}
		n++
	}
	return n
}

// TestFlushSessionHoldsNoWriterLockForAnUpload: fsync(2) of a session
// directory in close mode, while a close's upload holds a file's lock
// shared and a write through another descriptor of it queues for the
// lock, leaves the rest of the mount alone. It waited for the file's lock
// with Writer.mu held, so every lookup of every session hung until the
// PUT ended (review 36).
func TestFlushSessionHoldsNoWriterLockForAnUpload(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	g := faultblob.NewGate()
	rule := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g})
	body := strings.Repeat("x", 8<<10) // above the inline limit: a blob PUT
	s := r.written(t, "big", body)
	s2, err := r.w.Open(ctx, r.id, "big", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- r.w.Flush(ctx, r.id, s, true) }()
	waitStalled(t, g, 1)
	wrote := make(chan error, 1)
	go func() {
		_, err := s2.WriteAt(ctx, []byte("y"), 0)
		wrote <- err
	}()
	// The write queues for the file's lock: from then on a shared lock
	// waits too.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if !s.mu.TryRLock() {
			break
		}
		s.mu.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("the write does not wait for the upload")
		}
	}
	synced := make(chan error, 1)
	go func() { synced <- r.w.FsyncSession(ctx, r.id) }()
	for deadline := time.Now().Add(10 * time.Second); goroutinesWith("flushSession", "RWMutex).RLock") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fsync of the directory does not wait for the file")
		}
	}
	looked := make(chan struct{})
	go func() {
		r.w.Staged(layout.NewSessionID(time.Now()), "x") // takes Writer.mu, as every lookup does
		close(looked)
	}()
	select {
	case <-looked:
	case <-time.After(10 * time.Second):
		t.Error("a lookup of another session waits for Writer.mu, held by the fsync of a directory waiting for an upload")
	}
	g.Release()
	r.inj.Remove(rule)
	<-looked
	for _, ch := range []chan error{flushed, wrote, synced} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []*File{s, s2} {
		if err := r.w.Release(ctx, r.id, f); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.bodyOf(t, "big"); got != "y"+body[1:] {
		t.Errorf("big holds %.10q..., want the write through the second descriptor", got)
	}
}
