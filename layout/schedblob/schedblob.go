// Package schedblob is the request scheduler of a mount: a bucket
// decorator that lets at most a fixed number of requests be in flight at
// once (pugfs mount --max-requests) and, when they are all taken, hands
// the next free slot to a request someone is waiting for before any
// speculative one (read-ahead, prefetch). restic's backend limiter is the
// model: one semaphore in front of the backend, shared by everything that
// talks to it, instead of a bound per caller that adds up to no bound.
//
// A request is speculative when its context was made with Speculative.
// Besides queueing behind blocking requests, speculative requests may
// hold at most three quarters of the slots, so that a blocking request
// arriving while read-ahead fills the pipe finds a slot at once instead of
// waiting for a speculative request to finish.
//
// What holds a slot: a whole single request (HEAD, a page of a listing,
// COPY, DELETE); a reader from its opening until its body has been read
// to the end or it is closed; a writer from its opening until Close has
// committed the upload. Callers therefore must not hold a reader or
// writer open while they wait for another request of the same bucket:
// with every slot held that way, nothing could proceed. pugfs's callers
// read a body into memory and close it before doing anything else.
//
// Requests wait in arrival order within their class; a waiting request
// whose context ends leaves the queue with the context's error.
package schedblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// DefaultMaxRequests is the bound on requests in flight when the caller
// does not choose one (pugfs mount --max-requests).
const DefaultMaxRequests = 64

// Stats is a snapshot of a Scheduler's counters.
type Stats struct {
	// Limit is the bound on requests in flight now (it adapts, see
	// Scheduler); SpeculativeLimit the part of it speculative requests
	// may hold; MaxLimit the bound it starts at and never passes
	// (--max-requests), MinLimit the lowest it has been.
	Limit, SpeculativeLimit, MaxLimit, MinLimit int
	// InFlight and Queued are the requests holding a slot and those
	// waiting for one, now; Speculative counts the speculative ones of
	// InFlight.
	InFlight, Queued, Speculative int
	// PeakInFlight and PeakQueued are the most there have been at once.
	PeakInFlight, PeakQueued int
	// Requests counts every request admitted; Waited those of them that
	// had to queue first; Cancelled the ones whose context ended while
	// they waited; Promoted the queued speculative ones that became
	// blocking because a program came to wait for their work.
	Requests, Waited, Cancelled, Promoted int64
	// Throttled counts answers that said the backend is overloaded (503,
	// SlowDown, 429, ResourceExhausted); Decreases and Increases count
	// the changes of the limit they and demand caused.
	Throttled, Decreases, Increases int64
}

// String renders the counters on one line for .pugmark/stats.
func (s Stats) String() string {
	return fmt.Sprintf("request scheduler: limit %d (speculative %d), in flight %d (speculative %d, peak %d), queued %d (peak %d); requests %d, waited %d, cancelled while queued %d, promoted %d; adaptive: max %d, lowest %d, throttled %d, decreases %d, increases %d",
		s.Limit, s.SpeculativeLimit, s.InFlight, s.Speculative, s.PeakInFlight, s.Queued, s.PeakQueued, s.Requests, s.Waited, s.Cancelled, s.Promoted,
		s.MaxLimit, s.MinLimit, s.Throttled, s.Decreases, s.Increases)
}

// Scheduler holds the request slots of one mount. It is safe for
// concurrent use; Wrap puts it in front of a bucket.
//
// The number of slots adapts (adaptive.go): it starts at the bound given
// to New, halves when the backend answers that it is overloaded, and
// grows back by one slot per window of successful requests while requests
// are waiting for slots, never past the bound.
type Scheduler struct {
	max, floor int // bounds of limit; set by New

	// mu guards the fields below it; it is never held while a request
	// runs or while a waiter blocks, so it nests under nothing.
	mu           sync.Mutex
	limit        int       // slots now, in [floor, max]
	specLimit    int       // of limit, what speculative requests may hold
	inFlight     int       // slots held
	specInFlight int       // of inFlight, held by speculative requests
	blocking     []*waiter // waiting blocking requests, oldest first
	spec         []*waiter // waiting speculative requests, oldest first
	peakInFlight int
	peakQueued   int
	adapt        adaptState

	requests, waited, cancelled, promoted atomic.Int64

	// silence, when set (SetSilence), is how long queued requests wait
	// while no request in flight shows a sign of life; alive is when one
	// last did (UnixNano): an answer, or a chunk of a body. calling counts
	// the requests inside a call to the bucket: a reader whose consumer
	// has not asked for more holds its slot without waiting for the
	// bucket, which is no silence of the bucket's.
	silence, alive, calling atomic.Int64
}

// waiter is one queued request. granted is set, under Scheduler.mu, when
// a slot is handed to it; ready is closed then. spec is its class, which
// a promotion changes while it waits (under Scheduler.mu).
type waiter struct {
	spec    bool
	granted bool
	slot    *slot // set with granted
	ready   chan struct{}
}

// New returns a Scheduler allowing n requests in flight (n <= 0:
// DefaultMaxRequests).
func New(n int) *Scheduler {
	if n <= 0 {
		n = DefaultMaxRequests
	}
	s := &Scheduler{max: n, floor: floorOf(n)}
	s.setLimitLocked(n)
	s.adapt.lowest = n
	s.alive.Store(time.Now().UnixNano())
	return s
}

// SetSilence makes a request waiting for a slot give up (an error that is
// context.DeadlineExceeded) once no request in flight has shown a sign of
// life for d, the mount's --request-timeout: each of those is cut by its
// own deadline at d, and every retry of a request queued again behind the
// others, so with the bucket silent a program's request failed only after
// (queued / slots) x 5 x d, not the 5 x d the README promises (review 5).
func (s *Scheduler) SetSilence(d time.Duration) { s.silence.Store(int64(d)) }

// Alive notes a sign of life of the bucket that the scheduler cannot see
// itself: an upload's bytes leaving (deadlineblob.OverLive).
func (s *Scheduler) Alive() { s.alive.Store(time.Now().UnixNano()) }

// lived notes a sign of life of the bucket: any answer but a request cut
// by a deadline or a cancel, or a chunk of a body.
func (s *Scheduler) lived(err error) {
	if err == nil || err == io.EOF || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		gcerrors.Code(err) == gcerrors.DeadlineExceeded || gcerrors.Code(err) == gcerrors.Canceled) {
		s.alive.Store(time.Now().UnixNano())
	}
}

// silentFor reports how long the bucket has been silent with requests in
// flight, or 0. s.mu is held.
func (s *Scheduler) silentForLocked() time.Duration {
	if s.inFlight == 0 || s.calling.Load() == 0 {
		s.alive.Store(time.Now().UnixNano()) // nobody waits for the bucket
		return 0
	}
	return time.Since(time.Unix(0, s.alive.Load()))
}

// setLimitLocked sets the number of slots and the speculative share.
func (s *Scheduler) setLimitLocked(n int) {
	s.limit = n
	// Three quarters, leaving at least one slot to blocking requests: at
	// a limit of 1 or 2 (a throttled mount's floor was 1) read-ahead held
	// every slot while a program waited (review 5). A single slot, which
	// only --max-requests=1 gives now, read-ahead shares.
	s.specLimit = max(1, n-max(1, n/4))
}

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Limit: s.limit, SpeculativeLimit: s.specLimit, MaxLimit: s.max, MinLimit: s.adapt.lowest,
		InFlight: s.inFlight, Queued: len(s.blocking) + len(s.spec), Speculative: s.specInFlight,
		PeakInFlight: s.peakInFlight, PeakQueued: s.peakQueued,
		Requests: s.requests.Load(), Waited: s.waited.Load(), Cancelled: s.cancelled.Load(), Promoted: s.promoted.Load(),
		Throttled: s.adapt.throttled, Decreases: s.adapt.decreases, Increases: s.adapt.increases,
	}
}

// admitsLocked reports whether a request of the given class may take a
// free slot now, ignoring the queues.
func (s *Scheduler) admitsLocked(spec bool) bool {
	return s.inFlight < s.limit && (!spec || s.specInFlight < s.specLimit)
}

// takeLocked hands a slot to a request of the given class.
func (s *Scheduler) takeLocked(spec bool) *slot {
	if s.inFlight == 0 {
		s.alive.Store(time.Now().UnixNano()) // silence counts from here
	}
	s.inFlight++
	if spec {
		s.specInFlight++
	}
	s.peakInFlight = max(s.peakInFlight, s.inFlight)
	s.requests.Add(1)
	return &slot{s: s, spec: spec, epoch: s.adapt.epoch}
}

// slot is one held request slot; release gives it back once.
type slot struct {
	s     *Scheduler
	spec  bool
	epoch uint64 // the limit's epoch when the slot was taken
	once  sync.Once
}

// release gives the slot back, telling the adaptive limit how the
// request went; only its first call counts.
func (sl *slot) release(o outcome) {
	sl.once.Do(func() {
		s := sl.s
		s.mu.Lock()
		s.inFlight--
		if sl.spec {
			s.specInFlight--
		}
		s.adaptLocked(sl.epoch, o)
		s.grantLocked()
		s.mu.Unlock()
	})
}

// acquire waits for a slot.
func (s *Scheduler) acquire(ctx context.Context) (*slot, error) {
	mark := markOf(ctx)
	spec := mark != nil && !mark.isPromoted()
	s.mu.Lock()
	// A newcomer must not overtake the queue of its own class, nor a
	// speculative one a waiting blocking request.
	if s.admitsLocked(spec) && len(s.blocking) == 0 && (!spec || len(s.spec) == 0) {
		sl := s.takeLocked(spec)
		s.mu.Unlock()
		return sl, nil
	}
	w := &waiter{spec: spec, ready: make(chan struct{})}
	if spec {
		s.spec = append(s.spec, w)
	} else {
		s.blocking = append(s.blocking, w)
	}
	s.peakQueued = max(s.peakQueued, len(s.blocking)+len(s.spec))
	s.mu.Unlock()
	s.waited.Add(1)
	var promoted <-chan struct{}
	if spec {
		promoted = mark.promoted
	}
	var look <-chan time.Time // a look at the bucket's silence
	if d := time.Duration(s.silence.Load()); d > 0 {
		t := time.NewTicker(d / 4)
		defer t.Stop()
		look = t.C
	}
	var silent error
wait:
	for {
		select {
		case <-w.ready:
			return w.slot, nil
		case <-look:
			d := time.Duration(s.silence.Load())
			s.mu.Lock()
			quiet := s.silentForLocked()
			s.mu.Unlock()
			if quiet >= d {
				silent = fmt.Errorf("no bucket request answered for %v: not waiting for a slot: %w", quiet.Round(time.Millisecond), context.DeadlineExceeded)
				break wait
			}
		case <-promoted:
			promoted = nil
			s.mu.Lock()
			if !w.granted && w.spec {
				s.removeLocked(w)
				w.spec = false
				s.blocking = append(s.blocking, w)
				s.promoted.Add(1)
				s.grantLocked()
			}
			s.mu.Unlock()
		case <-ctx.Done():
			break wait
		}
	}
	s.mu.Lock()
	if w.granted {
		// The slot came as the context ended: use it rather than hand
		// it back, the request may still succeed.
		s.mu.Unlock()
		return w.slot, nil
	}
	s.removeLocked(w)
	s.mu.Unlock()
	s.cancelled.Add(1)
	if silent != nil {
		return nil, silent
	}
	return nil, ctx.Err()
}

// removeLocked takes a waiter that gave up (or changes class) out of
// its queue.
func (s *Scheduler) removeLocked(w *waiter) {
	q := &s.blocking
	if w.spec {
		q = &s.spec
	}
	for i, x := range *q {
		if x == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return
		}
	}
}

// grantLocked hands free slots to waiters: blocking ones first, then
// speculative ones while they are under their share.
func (s *Scheduler) grantLocked() {
	for {
		var w *waiter
		switch {
		case len(s.blocking) > 0 && s.admitsLocked(false):
			w, s.blocking = s.blocking[0], s.blocking[1:]
		case len(s.blocking) == 0 && len(s.spec) > 0 && s.admitsLocked(true):
			w, s.spec = s.spec[0], s.spec[1:]
		default:
			return
		}
		w.slot = s.takeLocked(w.spec)
		w.granted = true
		close(w.ready)
	}
}

// Wrap returns a bucket whose requests to inner go through s. Closing it
// closes inner; its As fills a **Scheduler with s and defers anything
// else to inner.
func Wrap(inner *blob.Bucket, s *Scheduler) *blob.Bucket {
	return blob.NewBucket(Over(blobwrap.Portable(inner), s))
}

// Over is Wrap as a driver over the driver next, for a stack of
// decorators under one portable bucket (blobwrap.Over).
func Over(next driver.Bucket, s *Scheduler) driver.Bucket {
	return &bucket{Bucket: blobwrap.Over(next, hooks{s}), s: s}
}

type bucket struct {
	*blobwrap.Bucket
	s *Scheduler
}

var _ driver.Bucket = (*bucket)(nil)

// As implements driver.Bucket: a **Scheduler receives the scheduler.
func (b *bucket) As(i any) bool {
	if p, ok := i.(**Scheduler); ok {
		*p = b.s
		return true
	}
	return b.Bucket.As(i)
}

type hooks struct{ s *Scheduler }

// Request implements blobwrap.Hooks: the request holds a slot while it
// runs.
func (h hooks) Request(ctx context.Context, _ blobwrap.Op, _ string, call func(context.Context) error) error {
	sl, err := h.s.acquire(ctx)
	if err != nil {
		return err
	}
	h.s.calling.Add(1)
	err = call(ctx)
	h.s.calling.Add(-1)
	h.s.lived(err)
	sl.release(outcomeOf(err))
	return err
}

// Stream implements blobwrap.Hooks: the stream holds a slot from its
// opening to its end.
func (h hooks) Stream(ctx context.Context, _ blobwrap.Op, _ string) (context.Context, blobwrap.Stream, error) {
	sl, err := h.s.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return ctx, &stream{sl: sl, o: outcomeOther}, nil
}

// stream is a reader's or writer's slot; o is how its opening went.
type stream struct {
	sl *slot
	o  outcome
}

// Step implements blobwrap.Stream: a body read to its end gives the slot
// back before the reader is closed.
func (s *stream) Step(step blobwrap.Step, call func() error) error {
	s.sl.s.calling.Add(1)
	err := call()
	s.sl.s.calling.Add(-1)
	s.sl.s.lived(err)
	switch {
	case step == blobwrap.StepOpen:
		s.o = outcomeOf(err)
	case err != nil && err != io.EOF:
		// A writer's request is answered at its close, where the upload
		// commits: a throttled PUT (503 SlowDown) counted as its opening
		// did, a success, and never lowered the limit (review 5). A body
		// that fails midway is that request's answer too.
		s.o = outcomeOf(err)
	}
	if err == io.EOF {
		s.sl.release(s.o)
	}
	return err
}

func (s *stream) End() { s.sl.release(s.o) }
