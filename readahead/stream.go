package readahead

import (
	"context"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// raKey names a stream: a session's view in one order, or a name
// across sessions.
type raKey struct {
	id    layout.SessionID // zero for a name stream
	at    uint32
	byIno bool   // a session stream in inode-number order
	slot  int    // which of the view's raViewStreams in that order
	name  string // the name of a name or version stream
	// byName marks a version stream in the order of the versions'
	// names rather than their numbers.
	byName bool
}

// raStream is one stream's state, under ReadAhead.mu.
type raStream struct {
	key    raKey
	tree   *cache.Dir // session streams: the tree positions are in
	ctx    context.Context
	cancel context.CancelFunc
	gen    int // bumped by every reset: late results of older fetches are dropped
	last   int // position of the last access
	run    int // accesses in order so far
	next   int // first position not fetched yet
	// t0 and p0 are when and where the stream last started: its rate,
	// positions a second, bounds how far ahead states are worth loading.
	t0 time.Time
	p0 int
	// dir is the direction of the stream: +1, or -1 for a program that
	// goes backwards (bash's glob looks sessions/*/b.txt up in reverse
	// listing order, then sorts); 0 until the second access.
	dir int
	// nextBody is the first position of a name stream whose body is
	// not fetched yet; reads says the name is read, not only looked up.
	nextBody int
	reads    bool
	// lastID is the session a name stream last saw; a stream is a
	// pattern only once a second session shows the name.
	lastID layout.SessionID
	pend   map[int]int64 // positions fetched ahead, with their bytes
	used   time.Time
	// reader is the thread whose access moved a session stream last.
	reader uint32
}

// window is how many positions ahead a stream fetches after run
// accesses in order: four per access so far, up to raMaxWindow, so that
// a reader that stops leaves at most four times what it read behind.
func window(run int) int {
	return min(raMaxWindow, 4*run)
}

// continues reports whether an access at position p is in order for
// the stream (stepLocked's test).
func (s *raStream) continues(p int) bool {
	if s.last < 0 {
		return false
	}
	d := p - s.last
	switch {
	case d == 0:
		return true
	case s.dir == 0:
		return d >= -raGap && d <= raGap
	default:
		return d*s.dir > 0 && d*s.dir <= raGap
	}
}

// handOver reports whether the body at position p goes to the Sink: all
// but one position in raGap, whose read tells the stream where its
// reader is.
func handOver(p int) bool { return p%raGap != 0 }

// newStreamLocked makes a stream and starts tracking it in l.
func (r *ReadAhead) newStreamLocked(l *simplelru.LRU[raKey, *raStream], key raKey) *raStream {
	s := &raStream{key: key, last: -1, pend: map[int]int64{}, used: time.Now()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	l.Add(key, s)
	r.st.streams.Add(1)
	return s
}

// stepLocked records an access at position p and reports whether the
// stream is a pattern worth fetching ahead for.
func (r *ReadAhead) stepLocked(s *raStream, p int, now time.Time) bool {
	s.used = now
	d := p - s.last
	switch {
	case s.last >= 0 && d == 0:
		// The same file again: its lookup, then its read.
	case s.last >= 0 && s.dir == 0 && d >= -raGap && d <= raGap:
		// The second access sets the direction.
		s.dir = 1
		if d < 0 {
			s.dir = -1
		}
		s.run++
		s.next, s.nextBody = p+s.dir, p+s.dir
	case s.last >= 0 && d*s.dir > 0 && d*s.dir <= raGap:
		s.run++
	default:
		r.resetLocked(s)
		s.run, s.dir = 1, 0
		s.next, s.nextBody = p+1, p+1
		s.t0, s.p0 = now, p
	}
	s.last = p
	for q, n := range s.pend {
		if s.dir >= 0 && q <= p || s.dir < 0 && q >= p {
			delete(s.pend, q)
			r.ahead -= n
		}
	}
	s.next = s.past(s.next, p)
	return s.run >= 2
}

// past returns cursor c moved past position p in the stream's
// direction.
func (s *raStream) past(c, p int) int {
	if s.dir < 0 {
		return min(c, p-1)
	}
	return max(c, p+1)
}

// ahead reports whether position c is within w of p in the stream's
// direction and one of n positions.
func (s *raStream) ahead(c, p, w, n int) bool {
	if c < 0 || c >= n {
		return false
	}
	if s.dir < 0 {
		return c >= p-w
	}
	return c <= p+w
}

// resetLocked cancels what s has in flight and forgets what it fetched
// ahead.
func (r *ReadAhead) resetLocked(s *raStream) {
	if len(s.pend) > 0 || s.run >= 2 {
		s.cancel()
		r.st.cancelled.Add(1)
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	for q, n := range s.pend {
		delete(s.pend, q)
		r.ahead -= n
	}
	s.gen++
	s.reads = false
}

// dropLocked ends a stream that is no longer tracked.
func (r *ReadAhead) dropLocked(s *raStream) {
	r.resetLocked(s)
	s.cancel()
}

// sweepLocked drops streams idle for raIdle.
func (r *ReadAhead) sweepLocked(now time.Time) {
	for _, l := range []*simplelru.LRU[raKey, *raStream]{r.trees, r.names, r.versions} {
		for {
			_, s, ok := l.GetOldest()
			if !ok || now.Sub(s.used) < raIdle {
				break
			}
			l.RemoveOldest()
		}
	}
}

// reserveLocked counts n bytes fetched ahead at position p of s, unless
// that would pass the bound.
func (r *ReadAhead) reserveLocked(s *raStream, p int, n int64) bool {
	if r.ahead+n > r.maxBytes {
		return false
	}
	r.ahead += n
	s.pend[p] = n
	if r.ahead > r.st.peakAhead.Load() {
		r.st.peakAhead.Store(r.ahead)
	}
	return true
}

// goBody prefetches d, at pos, in the background, within the bound on
// body fetches in flight; with hand, the Sink gets it then.
func (r *ReadAhead) goBody(ctx context.Context, pos Pos, hand bool, d *layout.Descriptor) {
	r.st.issued.Add(1)
	go r.body(ctx, pos, hand, d)
}

func (r *ReadAhead) body(ctx context.Context, pos Pos, hand bool, d *layout.Descriptor) {
	select {
	case r.bodySem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-r.bodySem }()
	r.st.inFlight.Add(1)
	defer r.st.inFlight.Add(-1)
	// Once under way, a fetch outlives the stream's end: its request
	// is sent (or about to be), and cancelling it wastes that round trip
	// on a body that is often read next all the same (by another of the
	// program's threads, or by the reader that jumped away and came
	// back), when it would be fetched again. What waits for bodySem is
	// still cancelled; the request deadline bounds the rest.
	fetched, err := r.bodies.Prefetch(schedblob.Speculative(context.WithoutCancel(ctx)), d)
	switch {
	case err != nil:
		r.st.failed.Add(1) // the reader's own read reports it
	case fetched:
		r.st.fetched.Add(1)
	}
	if err == nil && hand && r.sink != nil {
		r.sink(pos, d)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// pick chooses, among the streams of one read's orders that are a
// pattern, the one the reader has kept to longest; a tie between the
// longest leaves none, until the next read tells them apart (what the
// wrong one fetched would be cancelled then, its requests sent for
// nothing). T is what the caller needs of the winner's order.
type pick[T any] struct {
	best *raStream
	at   int
	of   T
	tie  bool
}

// offer considers stream s, a pattern at position p of order of.
func (k *pick[T]) offer(s *raStream, p int, of T) {
	switch {
	case k.best == nil || s.run > k.best.run:
		k.best, k.at, k.of, k.tie = s, p, of, false
	case s.run == k.best.run:
		k.tie = true
	}
}

// winner returns the chosen stream, its position and order, and whether
// there is one.
func (k *pick[T]) winner() (*raStream, int, T, bool) {
	return k.best, k.at, k.of, k.best != nil && !k.tie
}
