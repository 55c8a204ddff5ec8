package schedblob

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"github.com/pugmark/pugfs/layout/blobwrap/blobwraptest"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"
)

// gate is an inner bucket's hooks that hold every HEAD until the test lets
// it through, and record the order in which they arrived.
type gate struct {
	mu      sync.Mutex
	arrived []string // keys, in arrival order
	inside  int      // HEADs past the scheduler now
	most    int      // the most there were at once
	pass    chan struct{}
}

func newGate() *gate { return &gate{pass: make(chan struct{})} }

func (g *gate) Request(ctx context.Context, op blobwrap.Op, key string, call func(context.Context) error) error {
	if op != blobwrap.OpHead {
		return call(ctx)
	}
	g.mu.Lock()
	g.arrived = append(g.arrived, key)
	g.inside++
	g.most = max(g.most, g.inside)
	g.mu.Unlock()
	<-g.pass
	g.mu.Lock()
	g.inside--
	g.mu.Unlock()
	return call(ctx)
}

func (g *gate) Stream(ctx context.Context, op blobwrap.Op, key string) (context.Context, blobwrap.Stream, error) {
	return blobwrap.PassThrough{}.Stream(ctx, op, key)
}

func (g *gate) state() (arrived []string, inside, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.arrived...), g.inside, g.most
}

// poll waits until cond holds; the test's own deadline bounds it.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 20000 {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// setup returns a scheduled bucket of limit n over a gated memblob
// holding the keys a, b, c... that tests HEAD.
func setup(t *testing.T, n int) (*blob.Bucket, *Scheduler, *gate) {
	t.Helper()
	mem := memblob.OpenBucket(nil)
	for _, k := range []string{"a", "b", "c", "d", "e", "s1", "s2", "s3", "s4"} {
		if err := mem.WriteAll(context.Background(), k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	g := newGate()
	s := New(n)
	b := Wrap(blobwrap.Wrap(mem, g), s)
	t.Cleanup(func() { b.Close() })
	return b, s, g
}

// answer waits for the answer of the request that was just let through
// the gate. If another request took the pass instead (the order under
// test was wrong), it never comes: the test fails with the order the
// gate saw rather than hanging until the binary's timeout.
func answer(t *testing.T, c <-chan error, g *gate) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		got, _, _ := g.state()
		t.Fatalf("no answer 10 s after its pass: another request took it; the gate saw %q", got)
		return nil
	}
}

// head issues a HEAD of key in the background; the returned channel gets
// its error.
func head(ctx context.Context, b *blob.Bucket, key string) <-chan error {
	c := make(chan error, 1)
	go func() {
		_, err := b.Attributes(ctx, key)
		c <- err
	}()
	return c
}

func TestBoundsRequestsInFlight(t *testing.T) {
	b, s, g := setup(t, 2)
	ctx := context.Background()
	var done []<-chan error
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		done = append(done, head(ctx, b, k))
	}
	poll(t, "2 in flight and 3 queued", func() bool {
		st := s.Stats()
		_, inside, _ := g.state()
		return inside == 2 && st.InFlight == 2 && st.Queued == 3
	})
	for range 5 {
		g.pass <- struct{}{}
	}
	for _, c := range done {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if _, _, most := g.state(); most != 2 || st.PeakInFlight != 2 {
		t.Errorf("at most %d requests reached the bucket at once (peak counted %d), want 2", most, st.PeakInFlight)
	}
	if st.InFlight != 0 || st.Queued != 0 || st.Requests != 5 || st.Waited != 3 || st.PeakQueued != 3 {
		t.Errorf("stats after the burst: %+v", st)
	}
}

func TestBlockingRequestOvertakesSpeculative(t *testing.T) {
	b, s, g := setup(t, 1)
	ctx := context.Background()
	first := head(ctx, b, "a")
	poll(t, "the first request inside", func() bool { _, in, _ := g.state(); return in == 1 })
	spec := head(Speculative(ctx), b, "s1")
	poll(t, "the speculative request queued", func() bool { return s.Stats().Queued == 1 })
	user := head(ctx, b, "b")
	poll(t, "the blocking request queued", func() bool { return s.Stats().Queued == 2 })
	for _, c := range []<-chan error{first, user, spec} {
		g.pass <- struct{}{}
		if err := answer(t, c, g); err != nil {
			t.Fatal(err)
		}
	}
	if got, _, _ := g.state(); len(got) != 3 || got[1] != "b" || got[2] != "s1" {
		t.Errorf("requests reached the bucket in the order %q, want the blocking b before the speculative s1", got)
	}
}

func TestSpeculativeWorkLeavesSlotsForUsers(t *testing.T) {
	b, s, g := setup(t, 4)
	ctx := context.Background()
	var done []<-chan error
	for _, k := range []string{"s1", "s2", "s3", "s4"} {
		done = append(done, head(Speculative(ctx), b, k))
	}
	poll(t, "three speculative requests inside, one queued", func() bool {
		_, in, _ := g.state()
		return in == 3 && s.Stats().Queued == 1
	})
	done = append(done, head(ctx, b, "a"))
	// The user's request must get the slot speculative work may not
	// take, not wait behind it.
	poll(t, "the blocking request inside", func() bool {
		got, _, _ := g.state()
		return len(got) == 4 && got[3] == "a"
	})
	if st := s.Stats(); st.Speculative != 3 || st.InFlight != 4 {
		t.Errorf("stats with the pipe full: %+v", st)
	}
	for range done {
		g.pass <- struct{}{}
	}
	for _, c := range done {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCancelledWhileQueued(t *testing.T) {
	b, s, g := setup(t, 1)
	first := head(context.Background(), b, "a")
	poll(t, "the first request inside", func() bool { _, in, _ := g.state(); return in == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	queued := head(ctx, b, "b")
	poll(t, "the second request queued", func() bool { return s.Stats().Queued == 1 })
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("a request cancelled in the queue returned %v, want context.Canceled", err)
	}
	if st := s.Stats(); st.Queued != 0 || st.Cancelled != 1 || st.InFlight != 1 {
		t.Errorf("stats after the cancel: %+v", st)
	}
	g.pass <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// No slot was lost: the next request goes through.
	next := head(context.Background(), b, "c")
	g.pass <- struct{}{}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Errorf("%d slots still held after every request ended", st.InFlight)
	}
}

func TestReaderHoldsItsSlotUntilItsBodyEnds(t *testing.T) {
	b, s, g := setup(t, 1)
	ctx := context.Background()
	r, err := b.NewReader(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	other := head(ctx, b, "b")
	poll(t, "the HEAD queued behind the open reader", func() bool { return s.Stats().Queued == 1 })
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	// The body is read to its end: the slot is free before Close.
	poll(t, "the HEAD inside", func() bool { _, in, _ := g.state(); return in == 1 })
	g.pass <- struct{}{}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	r.Close()
	w, err := b.NewWriter(ctx, "new", &blob.WriterOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.InFlight != 1 {
		t.Errorf("an open writer holds %d slots, want 1", st.InFlight)
	}
	w.Write([]byte("x"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Errorf("%d slots held after the writer closed", st.InFlight)
	}
}

func TestAsFindsTheScheduler(t *testing.T) {
	b, s, _ := setup(t, 3)
	var got *Scheduler
	if !b.As(&got) || got != s {
		t.Fatalf("As(**Scheduler) = %p, want %p", got, s)
	}
}

// TestConformance: with slots free, the scheduler is invisible to
// gocloud's driver suite.
func TestConformance(t *testing.T) {
	blobwraptest.Conformance(t, func(inner *blob.Bucket) driver.Bucket {
		return Over(blobwrap.Portable(inner), New(4))
	}, nil)
}
