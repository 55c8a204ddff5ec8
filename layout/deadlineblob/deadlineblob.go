// Package deadlineblob wraps a gocloud *blob.Bucket so that no request to
// it can hang: every request gets a deadline of its own, per attempt, and
// one that passes it fails with a *TimeoutError naming the operation and
// the key (tree.md "Reading": a backend that stops answering gives EIO,
// never a hang).
//
// What is bounded, each by the same timeout:
//
//   - Attributes, a page of a listing, Copy, Delete, SignedURL: the whole
//     request.
//   - Opening a reader, and then every Read of its body on its own: a body
//     that stops arriving half-way fails after the timeout, while a large
//     body that keeps arriving may take as long as it needs.
//   - Opening a writer, every Write (which blocks while the upload of a
//     part is in flight) and the Close that commits the upload (which
//     sends the whole body of a small upload). While one of these waits,
//     the upload's bytes leaving for the backend start the countdown
//     again, when the driver's HTTP client was given Transport (or sends
//     through WatchBody): a body that stops moving fails after the
//     timeout, while a large body that keeps moving over a slow link may
//     take as long as it needs, and once it has left, the response is
//     due within the timeout. A driver whose client was not given
//     Transport has each step bounded as a whole.
//
// A deadline is enforced by cancelling the context the inner request was
// given, which is how every gocloud driver stops an HTTP request and its
// body; a driver that ignored its context could still block.
//
// The wrapper does not retry. Retries live one layer up, in
// layout.Store.retry, which knows which requests are safe to repeat and how
// to settle a conditional create whose response was lost (commit.go's
// transaction IDs): retrying here as well would multiply the attempts of
// every request, and a repeated If-None-Match PUT whose first attempt had
// landed would turn a success into a spurious conflict below the layer
// that can tell them apart. The deadline is therefore per attempt, and
// the bound on a whole call is the store's attempts times the timeout
// plus its backoff.
//
// Errors of the inner bucket that are not timeouts are returned unchanged,
// so their gcerrors codes, ErrorAs and the inner driver's As types still
// work through the wrapper.
package deadlineblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// DefaultTimeout is the per-attempt deadline of a request when the caller
// does not choose one (pugfs mount --request-timeout).
const DefaultTimeout = 30 * time.Second

// Operation names in a TimeoutError: blobwrap's request kinds, and a Read
// of a reader's body told apart from its opening.
const (
	OpHead   = string(blobwrap.OpHead)
	OpGet    = string(blobwrap.OpGet)  // opening a reader
	OpRead   = "read"                  // a Read of a reader's body
	OpList   = string(blobwrap.OpList) // Key is the listing's prefix
	OpPut    = string(blobwrap.OpPut)  // opening a writer, a Write or its Close
	OpCopy   = string(blobwrap.OpCopy) // Key is the destination
	OpDelete = string(blobwrap.OpDelete)
	OpSign   = string(blobwrap.OpSign)
)

// TimeoutError is the error of a request that did not finish within its
// deadline. It matches context.DeadlineExceeded under errors.Is (and so
// gcerrors.Code reports DeadlineExceeded); it deliberately does not
// unwrap to the inner error, which after a cancellation is usually
// context.Canceled and must not read as an interrupted call.
type TimeoutError struct {
	// Op is the request kind, one of the Op constants.
	Op string
	// Key is the object's key (a listing's prefix, a copy's destination).
	Key string
	// Timeout is the deadline that passed; 0 when the caller's own
	// context ran out first.
	Timeout time.Duration
	// Err is what the inner bucket returned when the request was cut
	// off, kept for the message.
	Err error
}

// Error says how long the request waited, or that the caller's deadline
// came first, and for which key.
func (e *TimeoutError) Error() string {
	who := fmt.Sprintf("no answer within the request timeout of %v", e.Timeout)
	if e.Timeout == 0 {
		who = "no answer before the caller's deadline"
	}
	msg := fmt.Sprintf("%s %q: %s", e.Op, e.Key, who)
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// Wrap returns a bucket that forwards every request to inner with a
// deadline of timeout per request (see the package documentation); a
// timeout <= 0 means DefaultTimeout. Closing the returned bucket closes
// inner; its As defers to inner, so a fault injector or driver type below
// is still found.
func Wrap(inner *blob.Bucket, timeout time.Duration) *blob.Bucket {
	return blob.NewBucket(Over(blobwrap.Portable(inner), timeout))
}

// Over is Wrap as a driver over the driver next, for a stack of
// decorators under one portable bucket (blobwrap.Over).
func Over(next driver.Bucket, timeout time.Duration) driver.Bucket {
	return OverLive(next, timeout, nil)
}

// OverLive is Over that calls alive (when not nil) whenever a request
// moves without a step ending: an upload's bytes leaving (WatchBody),
// which a decorator above sees nothing of. The mount's scheduler counts
// it as a sign of life of the bucket (schedblob.Scheduler.SetSilence):
// uploads of large files over a slow link, their bytes leaving, are no
// silence.
func OverLive(next driver.Bucket, timeout time.Duration, alive func()) driver.Bucket {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &bucket{Bucket: blobwrap.Over(next, &hooks{timeout: timeout, alive: alive})}
}

// bucket is blobwrap's driver with the deadline hooks and the error code
// of a TimeoutError.
type bucket struct {
	*blobwrap.Bucket
}

var _ driver.Bucket = (*bucket)(nil)

// ErrorCode implements driver.Bucket. The portable bucket asks only about
// errors that carry no code of their own; a TimeoutError never reaches it
// (gocloud passes deadline errors through unwrapped).
func (b *bucket) ErrorCode(err error) gcerrors.ErrorCode {
	var te *TimeoutError
	if errors.As(err, &te) {
		return gcerrors.DeadlineExceeded
	}
	return b.Bucket.ErrorCode(err)
}

// hooks bounds every request and every step of a stream by timeout.
type hooks struct {
	timeout time.Duration
	alive   func() // OverLive; nil for none
}

// watch cancels a request's context when the timeout passes while it is
// armed. A stream arms it around every step; a single request, once.
// While armed, progress of an upload's body (see WatchBody) counts as
// an answer: the context is cancelled only after the timeout has passed
// with no step finishing and no byte moving.
type watch struct {
	cancel context.CancelFunc
	d      time.Duration
	alive  func() // hooks.alive, called on progress; nil for none

	// mu orders the timer's expiry against arm, disarm and progress, so
	// that an expiry racing the end of a step either cut the step off
	// (fired) or did nothing; it never fires later, between steps.
	mu    sync.Mutex
	t     *time.Timer
	armed bool
	fired bool
	last  time.Time // the arming or the latest progress
	// queues are the send queues of an upload's requests in flight
	// (WatchBody): bytes leaving one of them is progress too.
	queues map[*sendQueue]struct{}
}

// start returns an armed watch over a new context derived from ctx.
func start(ctx context.Context, d time.Duration, alive func()) (context.Context, *watch) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{cancel: cancel, d: d, alive: alive, armed: true, last: time.Now()}
	w.mu.Lock()
	w.t = time.AfterFunc(d, w.expire)
	w.mu.Unlock()
	return ctx, w
}

// expire runs when the timer goes off: it cancels the context, unless the
// step ended meanwhile or bytes moved within the timeout, in which case
// the countdown goes on from the latest progress.
func (w *watch) expire() {
	w.mu.Lock()
	if !w.armed || w.fired {
		w.mu.Unlock()
		return
	}
	// Every queue is asked, so that each remembers its length from now.
	for q := range w.queues {
		if q.moved() {
			w.last = time.Now()
			w.lived()
		}
	}
	if rest := w.d - time.Since(w.last); rest > 0 {
		w.t.Reset(rest)
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.mu.Unlock()
	w.cancel()
}

// arm restarts the countdown; it reports false when the watch has already
// fired (the context is cancelled for good).
func (w *watch) arm() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return false
	}
	w.armed, w.last = true, time.Now()
	w.t.Reset(w.d)
	return true
}

// progress notes that a request of the stream is moving: the HTTP client
// read bytes of its body, to be queued on q. It takes effect only while
// the watch is armed: between steps nobody waits, and the next step
// restarts the countdown anyway.
func (w *watch) progress(q *sendQueue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = time.Now()
	q.moved()
	w.lived()
}

// lived passes a sign of progress on (OverLive).
func (w *watch) lived() {
	if w.alive != nil {
		w.alive()
	}
}

// follow adds q, the send queue of a request of the stream, on the
// connection conn (nil if it has no descriptor), or moves it there when
// the request is sent again on another connection.
func (w *watch) follow(q *sendQueue, conn syscall.RawConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q.conn, q.left = conn, 0
	q.moved()
	if w.queues == nil {
		w.queues = make(map[*sendQueue]struct{})
	}
	w.queues[q] = struct{}{}
}

// unfollow drops q: its request is answered, and its connection may carry
// another's bytes.
func (w *watch) unfollow(q *sendQueue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.queues, q)
}

// disarm stops the countdown and reports whether it fired.
func (w *watch) disarm() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	w.t.Stop()
	return w.fired
}

// end disarms the watch and releases its context.
func (w *watch) end() {
	w.disarm()
	w.cancel()
}

// fail turns the error of a request into what the caller sees: a
// TimeoutError when our deadline (or the caller's) cut it off, the inner
// error unchanged otherwise.
func (h *hooks) fail(parent context.Context, fired bool, op blobwrap.Op, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case fired:
		return &TimeoutError{Op: string(op), Key: key, Timeout: h.timeout, Err: err}
	case errors.Is(parent.Err(), context.DeadlineExceeded):
		return &TimeoutError{Op: string(op), Key: key, Err: err}
	}
	return err
}

// Request implements blobwrap.Hooks: one request under a deadline.
func (h *hooks) Request(ctx context.Context, op blobwrap.Op, key string, call func(context.Context) error) error {
	rctx, w := start(ctx, h.timeout, h.alive)
	err := call(rctx)
	fired := w.disarm()
	w.end()
	return h.fail(ctx, fired, op, key, err)
}

// Stream implements blobwrap.Hooks. The stream's context stays alive
// between steps (drivers tie a body to it) and is cancelled when one step
// waits longer than the timeout.
func (h *hooks) Stream(ctx context.Context, op blobwrap.Op, key string) (context.Context, blobwrap.Stream, error) {
	sctx, w := start(ctx, h.timeout, h.alive)
	if op == blobwrap.OpPut {
		// The driver sends the body under this context: the HTTP
		// transport finds the watch there (Transport, WatchBody).
		sctx = context.WithValue(sctx, uploadKey{}, w)
	}
	return sctx, &stream{h: h, ctx: ctx, op: op, key: key, w: w}, nil
}

type stream struct {
	h   *hooks
	ctx context.Context // the caller's, to tell its deadline from ours
	op  blobwrap.Op
	key string
	w   *watch
}

// Step implements blobwrap.Stream. The opening runs under the countdown
// Stream started; every later step re-arms it.
func (s *stream) Step(step blobwrap.Step, call func() error) error {
	op := s.op
	switch step {
	case blobwrap.StepOpen:
		err := call()
		fired := s.w.disarm()
		if err == nil && fired {
			// It answered, but only after the deadline had cancelled
			// the body it would be read from or written to.
			err = context.DeadlineExceeded
		}
		return s.h.fail(s.ctx, fired, op, s.key, err)
	case blobwrap.StepClose:
		if s.op == blobwrap.OpGet {
			return call() // closing a reader asks the backend nothing
		}
	case blobwrap.StepBody:
		if s.op == blobwrap.OpGet {
			op = OpRead
		}
	}
	if !s.w.arm() {
		if step == blobwrap.StepClose {
			_ = call() // the context is gone: this aborts the upload
		}
		return s.h.fail(s.ctx, true, op, s.key, context.DeadlineExceeded)
	}
	err := call()
	fired := s.w.disarm()
	switch {
	case s.op == blobwrap.OpGet && (err == nil || err == io.EOF):
		// Bytes that arrived are good even if the deadline passed as
		// they did; the next Read reports it.
		return err
	case s.op == blobwrap.OpPut && step == blobwrap.StepBody && err == nil && fired:
		// The upload's context is gone; what was accepted cannot land.
		err = context.DeadlineExceeded
	}
	// A Close cut off by the deadline may still have landed (the
	// response is what was lost): callers of conditional creates settle
	// that, as for any lost response.
	return s.h.fail(s.ctx, fired, op, s.key, err)
}

// End implements blobwrap.Stream: the countdown stops and the stream's
// context is released.
func (s *stream) End() { s.w.end() }
