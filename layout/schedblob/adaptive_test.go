package schedblob

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	_ "github.com/pugmark/pugfs/layout/faultblob" // fault+mem://
	"github.com/pugmark/pugfs/layout/localblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// slowDown is what an S3 client returns for a 503 SlowDown: an error with
// an HTTP status and an S3 error code, which gocloud maps to Unknown.
type slowDown struct{}

func (slowDown) Error() string         { return "api error SlowDown: Please reduce your request rate." }
func (slowDown) HTTPStatusCode() int   { return http.StatusServiceUnavailable }
func (slowDown) ErrorCode() string     { return "SlowDown" }
func (slowDown) ErrorMessage() string  { return "Please reduce your request rate." }
func (slowDown) ErrorFault() fmt.State { return nil }

// throttler is an inner bucket's hooks that hold every HEAD on a gate
// and then answer keys starting with "t" with a SlowDown.
type throttler struct{ *gate }

func (t throttler) Request(ctx context.Context, op blobwrap.Op, key string, call func(context.Context) error) error {
	return t.gate.Request(ctx, op, key, func(ctx context.Context) error {
		if strings.HasPrefix(key, "t") {
			return slowDown{}
		}
		return call(ctx)
	})
}

func setupThrottled(t *testing.T, n int) (*blob.Bucket, *Scheduler, *gate) {
	t.Helper()
	mem := memblob.OpenBucket(nil)
	for i := range 64 {
		if err := mem.WriteAll(context.Background(), fmt.Sprintf("k%02d", i), []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	g := newGate()
	s := New(n)
	b := Wrap(blobwrap.Wrap(mem, throttler{g}), s)
	t.Cleanup(func() { b.Close() })
	return b, s, g
}

// pass lets n HEADs through the gate and waits for their answers.
func passAll(t *testing.T, g *gate, done []<-chan error) []error {
	t.Helper()
	var errs []error
	for range done {
		g.pass <- struct{}{}
	}
	for _, c := range done {
		errs = append(errs, <-c)
	}
	return errs
}

func TestThrottledAnswerIsRecognised(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want outcome
	}{
		{nil, outcomeOK},
		{slowDown{}, outcomeThrottled},
		{fmt.Errorf("wrapped: %w", slowDown{}), outcomeThrottled},
		{errors.New("connection reset"), outcomeOther},
		{context.Canceled, outcomeOther},
	} {
		if got := outcomeOf(tc.err); got != tc.want {
			t.Errorf("outcomeOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestLimitHalvesOncePerBurstOfThrottles: a burst of SlowDowns from
// requests admitted together halves the limit once, a later one again,
// never below the floor.
func TestLimitHalvesOncePerBurstOfThrottles(t *testing.T) {
	b, s, g := setupThrottled(t, 16)
	ctx := context.Background()
	var burst []<-chan error
	for i := range 4 {
		burst = append(burst, head(ctx, b, fmt.Sprintf("t%d", i)))
	}
	poll(t, "four requests inside", func() bool { _, in, _ := g.state(); return in == 4 })
	for _, err := range passAll(t, g, burst) {
		if err == nil {
			t.Fatal("a throttled request succeeded")
		}
	}
	if st := s.Stats(); st.Limit != 8 || st.Decreases != 1 || st.Throttled != 4 || st.SpeculativeLimit != 6 {
		t.Fatalf("after one burst of 4 SlowDowns at limit 16: %+v, want limit 8 (speculative 6) after 1 decrease", st)
	}
	for want := 4; want >= 2; want /= 2 {
		errs := passAll(t, g, []<-chan error{head(ctx, b, "t")})
		if errs[0] == nil {
			t.Fatal("a throttled request succeeded")
		}
		if st := s.Stats(); st.Limit != want {
			t.Fatalf("after another SlowDown: limit %d, want %d", st.Limit, want)
		}
	}
	passAll(t, g, []<-chan error{head(ctx, b, "t")})
	if st := s.Stats(); st.Limit != 2 || st.MinLimit != 2 {
		t.Errorf("limit went to %d (lowest %d), want it held at the floor 2", st.Limit, st.MinLimit)
	}
}

// TestLimitGrowsBackUnderDemand: after a decrease, successful requests
// with others waiting add slots back, one per limit successes, up to the
// bound and not past it; with nobody waiting it stays.
func TestLimitGrowsBackUnderDemand(t *testing.T) {
	b, s, g := setupThrottled(t, 4)
	ctx := context.Background()
	passAll(t, g, []<-chan error{head(ctx, b, "t")})
	if st := s.Stats(); st.Limit != 2 {
		t.Fatalf("limit %d after a SlowDown at 4, want 2", st.Limit)
	}
	// Nobody waiting: successes do not grow it.
	for i := range 5 {
		passAll(t, g, []<-chan error{head(ctx, b, fmt.Sprintf("k%02d", i))})
	}
	if st := s.Stats(); st.Limit != 2 || st.Increases != 0 {
		t.Fatalf("limit %d (%d increases) after successes without demand, want 2", st.Limit, st.Increases)
	}
	var done []<-chan error
	for i := range 40 {
		done = append(done, head(ctx, b, fmt.Sprintf("k%02d", i)))
	}
	poll(t, "two inside, the rest queued", func() bool { _, in, _ := g.state(); return in == 2 && s.Stats().Queued == 38 })
	for range done {
		g.pass <- struct{}{}
	}
	for _, c := range done {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Limit != 4 || st.Increases != 2 {
		t.Errorf("after 40 successes under demand: %+v, want limit back at 4 after 2 increases", st)
	}
	if _, _, most := g.state(); most > 4 || st.PeakInFlight > 4 {
		t.Errorf("%d requests at once (peak %d), past the bound 4", most, st.PeakInFlight)
	}
}

// TestPromotedRequestLeavesTheSpeculativeQueue: a program that comes to
// wait for speculative work promotes it; its queued request then goes
// before every other speculative request, and later ones of that work
// queue as blocking.
func TestPromotedRequestLeavesTheSpeculativeQueue(t *testing.T) {
	b, s, g := setup(t, 1)
	ctx := context.Background()
	first := head(ctx, b, "a")
	poll(t, "the first request inside", func() bool { _, in, _ := g.state(); return in == 1 })
	// One at a time: requests issued at once may reach the queue in any
	// order, and the order is what the test checks.
	s1 := head(Speculative(ctx), b, "s1")
	poll(t, "s1 queued", func() bool { return s.Stats().Queued == 1 })
	s2 := head(Speculative(ctx), b, "s2")
	poll(t, "s2 queued", func() bool { return s.Stats().Queued == 2 })
	mine := Speculative(ctx)
	s3 := head(mine, b, "s3")
	poll(t, "three speculative requests queued", func() bool { return s.Stats().Queued == 3 })
	if !IsSpeculative(mine) {
		t.Fatal("a fresh mark is not speculative")
	}
	Promote(mine)
	if IsSpeculative(mine) || IsSpeculative(Inherit(mine, context.Background())) {
		t.Fatal("a promoted mark is still speculative")
	}
	poll(t, "the promotion counted", func() bool { return s.Stats().Promoted == 1 })
	for _, c := range []<-chan error{first, s3, s1, s2} {
		g.pass <- struct{}{}
		if err := answer(t, c, g); err != nil {
			t.Fatal(err)
		}
	}
	if got, _, _ := g.state(); strings.Join(got, ",") != "a,s3,s1,s2" {
		t.Errorf("requests reached the bucket in the order %q, want the promoted s3 first after a", got)
	}
	if IsSpeculative(Inherit(context.Background(), ctx)) {
		t.Error("Inherit from a context without a mark made one")
	}
	if !IsSpeculative(Inherit(Speculative(ctx), context.Background())) {
		t.Error("Inherit lost the speculative mark")
	}
}

// TestSlotsForPrograms: at every bound, read-ahead leaves a slot to a
// program's request, and throttling never leaves a mount fewer than two
// slots (unless it was given one): at a floor of 1, or a bound of 2, the
// speculative share was the whole limit, and a program's read waited
// behind a read-ahead reader (review 5).
func TestSlotsForPrograms(t *testing.T) {
	for _, tc := range []struct{ max, spec, floor int }{
		{1, 1, 1}, {2, 1, 2}, {3, 2, 2}, {4, 3, 2}, {8, 6, 2}, {15, 12, 2}, {16, 12, 2}, {32, 24, 4}, {64, 48, 4}, {256, 192, 4},
	} {
		s := New(tc.max)
		if got := s.Stats().SpeculativeLimit; got != tc.spec {
			t.Errorf("--max-requests=%d: speculative share %d, want %d", tc.max, got, tc.spec)
		}
		if got := floorOf(tc.max); got != tc.floor {
			t.Errorf("--max-requests=%d: floor %d, want %d", tc.max, got, tc.floor)
		}
		s.mu.Lock()
		s.setLimitLocked(floorOf(tc.max))
		spec, limit := s.specLimit, s.limit
		s.mu.Unlock()
		if limit > 1 && spec >= limit {
			t.Errorf("--max-requests=%d throttled to %d: read-ahead may hold all %d slots", tc.max, limit, spec)
		}
	}
}

// TestThrottledWriteLowersTheLimit: an upload is answered at its close,
// where it commits; a throttled answer there halves the limit as one to a
// HEAD does. It counted as its opening had gone, a success, so a
// write-heavy load (cp -r into an S3 mount) kept every slot busy against
// a bucket asking it to slow down (review 5).
func TestThrottledWriteLowersTheLimit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		op   string
		call func(b *blob.Bucket) error
	}{
		{"head", func(b *blob.Bucket) error { _, err := b.Attributes(ctx, "k"); return err }},
		{"put", func(b *blob.Bucket) error {
			return b.WriteAll(ctx, "k", []byte("body"), &blob.WriterOptions{ContentType: "text/plain"})
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			inner, err := blob.OpenBucket(ctx, "fault+mem://?fault_ops="+tc.op+"&fault_error_rate=1&fault_error_code=ResourceExhausted")
			if err != nil {
				t.Fatal(err)
			}
			s := New(8)
			b := Wrap(inner, s)
			defer b.Close()
			for range 3 {
				if err := tc.call(b); gcerrors.Code(err) != gcerrors.ResourceExhausted {
					t.Fatalf("%s: %v, want the injected ResourceExhausted", tc.op, err)
				}
			}
			if st := s.Stats(); st.Throttled != 3 || st.Limit >= 8 {
				t.Errorf("after 3 throttled %s requests: throttled %d, limit %d; want 3, and 8 lowered", tc.op, st.Throttled, st.Limit)
			}
		})
	}
}

// TestIdleReaderIsNoSilence: a reader holding a slot whose consumer has
// not asked for more (no call to the bucket under way) is not the
// bucket's silence: a request queued behind it waits for the slot, and
// does not give up after the silence window.
func TestIdleReaderIsNoSilence(t *testing.T) {
	ctx := context.Background()
	s := New(1)
	s.SetSilence(50 * time.Millisecond)
	b := Wrap(memblob.OpenBucket(nil), s)
	defer b.Close()
	if err := b.WriteAll(ctx, "k", []byte("body"), nil); err != nil {
		t.Fatal(err)
	}
	r, err := b.NewReader(ctx, "k", nil) // holds the only slot, unread
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := b.Attributes(ctx, "k"); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a request queued behind an idle reader ended (%v) before the slot was free", err)
	case <-time.After(300 * time.Millisecond): // six silence windows
	}
	r.Close()
	if err := <-done; err != nil {
		t.Fatalf("the queued request, once the slot was free: %v", err)
	}
}

// TestFullDiskIsNoThrottle: the local driver's ENOSPC is gocloud's
// ResourceExhausted, the code of a 429: a full disk under a local bucket
// halved the limit as a throttling server would (audit 27). It is the
// disk's answer, not the bucket's load.
func TestFullDiskIsNoThrottle(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	inner, err := localblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(8)
	b := Wrap(inner, s)
	defer b.Close()
	big := make([]byte, 1<<20)
	for i := range 3 {
		err := b.WriteAll(context.Background(), fmt.Sprintf("k%d", i), big, &blob.WriterOptions{ContentType: "application/octet-stream"})
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write of 1 MiB into 64 KiB: %v, want ENOSPC", err)
		}
	}
	if st := s.Stats(); st.Throttled != 0 || st.Limit != 8 {
		t.Errorf("after 3 writes refused for a full disk: throttled %d, limit %d; want 0 and 8", st.Throttled, st.Limit)
	}
}
