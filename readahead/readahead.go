// Package readahead fetches ahead of programs that traverse a mount
// (issues #12 and #14). A program that reads many small files one after
// another (grep -r, cat */x, tar c) waits a round trip per file; pugfs knows every file of a session from its
// snapshots, and the order such programs visit them in (the listing
// order: names sorted, directories where they fall), so it fetches the
// next files' bodies while the program reads the current one.
//
// Two patterns are recognised, each as a stream of positions:
//
//   - a session stream: reads of the files of one session's tree (one
//     view: the live tree or .pugmark/at/<N>) at increasing positions of
//     its depth-first, name-sorted order, each at most raGap past the last;
//     or of its depth-first order by inode number, the order GNU cp -r
//     visits a directory's entries in (gnulib's savedir sorts them by
//     inode number to spare a disk's seeks), when the mount says which
//     numbers it shows (Inos);
//   - a version stream: reads of the same name in a session's history
//     views (.pugmark/at/<N>/name, for N one after another: cat
//     at/*/notes.md), in the order of the versions' numbers or of their
//     names (the shell's glob and at/'s listing: 1, 10, 11, ..., 2);
//   - a name stream: lookups or reads of the same name in sessions that
//     follow each other in the sessions/ listing (the shell's glob of
//     sessions/*/b.txt lstat()s every one of them, then cat reads them).
//     Ahead of lookups it loads the next sessions' states (manifest,
//     snapshots, the freshness check); once the name is read, it also
//     prefetches that file's body in each of them.
//
// From the second access in order on, a stream keeps a window of
// positions ahead of the last one fetched or being fetched, four per
// access in order so far, up to raMaxWindow. A view has up to
// raViewStreams session streams in each order: a program that reads
// with several threads (rg) walks several parts of a tree at once, each
// in order, and an access continues the stream it falls in order of.
// One that continues none starts a stream; when the thread (FUSE's
// caller) that last moved a stream makes it, that stream is the one
// started anew, with what it has in flight cancelled, since a reader
// that jumps leaves its old order. A stream that sees nothing for raIdle
// is dropped, and so is the least recently used one past raStreams,
// with what it has in flight. A reader that stops leaves at most a
// window of fetches behind it.
//
// Bounds: every request is speculative (schedblob), so a program's own
// requests go first; bodies are fetched through blobcache.Prefetch, so
// every byte is verified before anyone sees it, and at most the
// blobcache's PrefetchLimits are used: bytes fetched ahead that the
// reader has not reached yet, across streams, within a quarter of the
// memory budget, and a bounded number of body fetches at once. Only
// bodies that come in one request are fetched ahead; larger ones have the
// chunk read-ahead of their own reader.
//
// It knows nothing of FUSE: package fs tells it what programs look up,
// list and read (ReadAhead.Read, Lookup, Listed), and it asks the session
// cache (States) and the blob cache (Bodies) for the rest.
//
// A Sink, if given, is handed the bodies fetched ahead as they come, so
// that it can put them where the program's reads find them without
// asking (package fs: the kernel's page cache). A read served that way
// never tells the stream where its reader is, so one position in raGap is
// not handed over: the reader's read of it, still in order, moves the
// stream on, and a reader that stops still leaves at most a window
// behind.
//
// # Locks
//
// ReadAhead.mu is a leaf except that it is held while asking the blob
// cache whether a body is warm (blobcache.Cache.mu, a leaf) and the mount
// which inode numbers it shows (Inos, whose locks are leaves). No I/O
// happens under it.
package readahead

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

const (
	// raGap: an access at most this many positions past the last one
	// continues a stream (a program may skip a few: binary files, files
	// a find -name filter leaves out).
	raGap = 8
	// raMaxWindow bounds the positions a stream fetches ahead.
	raMaxWindow = 128
	// raStreams bounds the streams tracked at once, of each kind.
	raStreams = 64
	// raViewStreams bounds the session streams of one view in one order:
	// the threads of a program that reads in parallel (rg uses as many
	// as the machine has cores, up to 12), each walking its own part of
	// the tree. With one stream they broke each other's order at every
	// read, each break cancelling fetches already sent: rg -j8 sent
	// 4,110 GETs for 2,000 files.
	raViewStreams = 8
	// raIdle drops a stream nothing was read through for this long.
	raIdle = 5 * time.Second
	// raStateLoads bounds the session states a name stream loads at once:
	// as many as the mount's requests in flight by default, since a load
	// is one round trip once its hour is checked (32 left the shell's
	// glob of sessions/*/b.txt waiting, 20 ms a request).
	raStateLoads = 64
	// raMinStateWindow is the least a name stream loads ahead, however
	// slow its reader (see stateWindow).
	raMinStateWindow = 16
)

// Pos says where a file shows in the tree: in which session's view, under
// which slot name.
type Pos struct {
	ID   layout.SessionID
	At   uint32 // the version of a history view; 0 for the live tree
	Name string // the slot name
}

// States is what read-ahead asks of the session cache (a *cache.Cache).
type States interface {
	// Peek returns a session's state as cached, without a request.
	Peek(id layout.SessionID) (*cache.State, bool)
	// State loads (or refreshes) a session's state.
	State(ctx context.Context, id layout.SessionID) (*cache.State, error)
	// Sessions lists every session ID.
	Sessions(ctx context.Context) ([]layout.SessionID, error)
	// TreeAt is the tree of st's session at version ver.
	TreeAt(st *cache.State, ver uint32) *cache.Dir
}

// Bodies is what read-ahead asks of the blob cache (a *blobcache.Cache).
type Bodies interface {
	// PrefetchLimits are the bytes read-ahead may hold unread, and the
	// body fetches it may have in flight.
	PrefetchLimits() (bytes int64, inFlight int)
	// Prefetchable reports whether d's body is worth fetching ahead.
	Prefetchable(d *layout.Descriptor) bool
	// Prefetch fetches and verifies d's body; fetched is false when it
	// was there already.
	Prefetch(ctx context.Context, d *layout.Descriptor) (fetched bool, err error)
}

// Sink is told of each body fetched ahead at pos, verified and ready in
// the blob cache. It is called from read-ahead's own goroutines, never
// with a lock held.
type Sink func(pos Pos, d *layout.Descriptor)

// Warm readies what a program looking up name in session st's live tree
// needs besides the state: for a name that is no slot of the session (a
// file the mount makes, such as .pugmark/checkpoint), which read-ahead
// knows nothing of. A name stream calls it for each session it loads
// ahead; it does I/O, and its errors are the program's own lookup's to
// report.
type Warm func(ctx context.Context, st *cache.State, name string)

// Options are what a mount may add to its read-ahead; each may be nil.
type Options struct {
	Sink Sink // is handed the bodies fetched ahead
	Inos Inos // the inode numbers the mount shows
	Warm Warm // for names that are no slots
}

// Inos gives the inode numbers a mount shows for the entries of a
// session's view (at: a history view's version, 0 for the live tree), so
// that read-ahead can follow a program that visits them in that order.
type Inos interface {
	// File is the number of file e, whose slot name is name.
	File(id layout.SessionID, at uint32, name string, e *layout.Entry) uint64
	// Dir is the number of the directory whose slot names start with
	// path and a slash.
	Dir(id layout.SessionID, at uint32, path string) uint64
}

// ReadAhead is one mount's traversal read-ahead.
type ReadAhead struct {
	states   States
	bodies   Bodies
	inos     Inos          // nil: name order only
	sink     Sink          // nil: none
	warm     Warm          // nil: none
	ttl      time.Duration // the metadata TTL
	maxBytes int64         // bytes fetched ahead and not read yet, at most
	bodySem  chan struct{} // body prefetches in flight
	stateSem chan struct{} // state loads in flight

	// mu guards the fields below it; see the lock order above.
	mu     sync.Mutex
	orders *simplelru.LRU[orderKey, *treeOrder]
	// trees are the session streams, names the name streams: apart, so
	// that the reads of one session's many names, each a name stream of
	// its own until a second session reads it, never push out the
	// session stream they belong to.
	trees, names *simplelru.LRU[raKey, *raStream]
	// versions are the version streams, and verOrders the order of a
	// history's versions by name, for the few latest versions in use.
	versions  *simplelru.LRU[raKey, *raStream]
	verOrders *simplelru.LRU[uint32, *versionOrder]
	sessions  raSessions
	ahead     int64 // bytes fetched (or being fetched) ahead, all streams

	st raCounters
}

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

// versionOrder is versions 0..latest in the order of their names, and
// each one's position in it.
type versionOrder struct {
	vers []uint32
	idx  map[uint32]int
}

// orderKey names a tree's traversal order: by name, or by inode number.
type orderKey struct {
	tree  *cache.Dir
	byIno bool
}

// raCounters are read-ahead's numbers for .pugmark/stats; atomics.
type raCounters struct {
	streams, issued, fetched, failed, cancelled, states atomic.Int64
	inFlight, peakAhead                                 atomic.Int64
}

// raSessions is the sessions/ listing order name streams follow.
type raSessions struct {
	ids     []layout.SessionID
	idx     map[layout.SessionID]int
	at      time.Time
	loading bool
}

// treeOrder is a tree's files in traversal order.
type treeOrder struct {
	files []*layout.Entry
	idx   map[string]int // slot name -> position
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

// New returns the read-ahead of a mount whose session states have the
// metadata TTL ttl.
func New(states States, bodies Bodies, ttl time.Duration, o Options) *ReadAhead {
	bytes, inFlight := bodies.PrefetchLimits()
	r := &ReadAhead{states: states, bodies: bodies, inos: o.Inos, sink: o.Sink, warm: o.Warm, ttl: ttl, maxBytes: bytes,
		bodySem: make(chan struct{}, inFlight), stateSem: make(chan struct{}, raStateLoads)}
	r.orders, _ = simplelru.NewLRU[orderKey, *treeOrder](8, nil)
	r.trees, _ = simplelru.NewLRU(raStreams, func(_ raKey, s *raStream) { r.dropLocked(s) })
	r.names, _ = simplelru.NewLRU(raStreams, func(_ raKey, s *raStream) { r.dropLocked(s) })
	r.versions, _ = simplelru.NewLRU(raStreams, func(_ raKey, s *raStream) { r.dropLocked(s) })
	r.verOrders, _ = simplelru.NewLRU[uint32, *versionOrder](2, nil)
	return r
}

// window is how many positions ahead a stream fetches after run
// accesses in order: four per access so far, up to raMaxWindow, so that
// a reader that stops leaves at most four times what it read behind.
func window(run int) int {
	return min(raMaxWindow, 4*run)
}

// Read notes that a program's thread reader (FUSE's caller; any number
// that tells threads apart) reads the file d at pos from its start.
func (r *ReadAhead) Read(pos *Pos, d *layout.Descriptor, reader uint32) {
	if pos == nil {
		return
	}
	r.session(pos, reader)
	if pos.At == 0 {
		r.name(pos.ID, pos.Name, true)
	} else {
		r.version(pos)
	}
}

// version moves the version streams of pos's name in its session's
// history: one by the versions' numbers, one by their names; the one in
// order for longer fetches, as for a view's two orders (session).
func (r *ReadAhead) version(pos *Pos) {
	st, ok := r.states.Peek(pos.ID)
	if !ok || pos.At > st.Version {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	var (
		best *raStream
		at   int
		tie  bool
	)
	for _, byName := range []bool{false, true} {
		p := int(pos.At)
		if byName {
			p = r.versionOrderLocked(st.Version).idx[pos.At]
		}
		key := raKey{id: pos.ID, name: pos.Name, byName: byName}
		s, ok := r.versions.Get(key)
		if !ok {
			s = r.newStreamLocked(r.versions, key)
		}
		switch {
		case !r.stepLocked(s, p, now):
		case best == nil || s.run > best.run:
			best, at, tie = s, p, false
		case s.run == best.run:
			tie = true
		}
	}
	if best == nil || tie {
		return
	}
	s, n := best, int(st.Version)+1
	for ; s.ahead(s.next, at, window(s.run), n); s.next += s.dir {
		v := uint32(s.next)
		if s.key.byName {
			v = r.versionOrderLocked(st.Version).vers[s.next]
		}
		if v == 0 {
			continue // at/0 is empty
		}
		e, ok := st.SlotAt(pos.Name, v)
		if !ok || !r.bodies.Prefetchable(&e.Descriptor) {
			continue
		}
		if !r.reserveLocked(s, s.next, e.Descriptor.Size) {
			break
		}
		r.goBody(s.ctx, Pos{ID: pos.ID, At: v, Name: pos.Name}, handOver(s.next), &e.Descriptor)
	}
}

// versionOrderLocked returns versions 0..latest in the order of their
// names (at/'s listing, the shell's glob).
func (r *ReadAhead) versionOrderLocked(latest uint32) *versionOrder {
	if o, ok := r.verOrders.Get(latest); ok {
		return o
	}
	o := &versionOrder{vers: make([]uint32, 0, int(latest)+1), idx: make(map[uint32]int, int(latest)+1)}
	for v := range uint64(latest) + 1 {
		o.vers = append(o.vers, uint32(v))
	}
	slices.SortFunc(o.vers, func(a, b uint32) int {
		return strings.Compare(strconv.FormatUint(uint64(a), 10), strconv.FormatUint(uint64(b), 10))
	})
	for i, v := range o.vers {
		o.idx[v] = i
	}
	r.verOrders.Add(latest, o)
	return o
}

// Lookup notes that a program looks up name in session id's live tree,
// or lists it (name is then the directory's path and a slash).
func (r *ReadAhead) Lookup(id layout.SessionID, name string) { r.name(id, name, false) }

// session moves the session streams of pos's view.
func (r *ReadAhead) session(pos *Pos, reader uint32) {
	st, ok := r.states.Peek(pos.ID)
	if !ok || pos.At > st.Version {
		return
	}
	tree := st.Tree()
	if pos.At > 0 {
		tree = r.states.TreeAt(st, pos.At)
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	// Both orders follow the reader, and the one it has kept to longer
	// fetches: one file is not fetched twice over, and a few reads that
	// happen to fall in the other order do not take over. On a tie (two
	// reads that are in both orders) neither fetches until the next read
	// tells them apart: what the wrong one fetched would be cancelled
	// then, its requests sent for nothing.
	var (
		best  *raStream
		order *treeOrder
		at    int
		tie   bool
	)
	for _, byIno := range []bool{false, true} {
		if byIno && r.inos == nil {
			break
		}
		s, ord, p, ok := r.stepOrderLocked(pos, tree, byIno, now, reader)
		switch {
		case !ok:
		case best == nil || s.run > best.run:
			best, order, at, tie = s, ord, p, false
		case s.run == best.run:
			tie = true
		}
	}
	if best != nil && !tie {
		r.fetchLocked(best, order, at)
	}
}

// stepOrderLocked moves the session stream of pos's view in one order
// that reader's access continues (matchLocked): it returns the stream,
// the order, pos's position in it, and whether the stream is a pattern.
func (r *ReadAhead) stepOrderLocked(pos *Pos, tree *cache.Dir, byIno bool, now time.Time, reader uint32) (*raStream, *treeOrder, int, bool) {
	ord := r.orderLocked(orderKey{tree, byIno}, pos)
	p, ok := ord.idx[pos.Name]
	if !ok {
		return nil, nil, 0, false
	}
	s := r.matchLocked(pos, tree, byIno, p, reader)
	s.reader = reader
	return s, ord, p, r.stepLocked(s, p, now)
}

// matchLocked returns the session stream of pos's view, in one order,
// that an access by reader at position p goes to: of those it is in
// order of, the one in order for longest; else the one reader moved last
// (it jumped); else a new one, in a free slot or in place of the one
// used least recently.
func (r *ReadAhead) matchLocked(pos *Pos, tree *cache.Dir, byIno bool, p int, reader uint32) *raStream {
	var best, mine, oldest *raStream
	free := -1
	for slot := range raViewStreams {
		key := raKey{id: pos.ID, at: pos.At, byIno: byIno, slot: slot}
		s, ok := r.trees.Peek(key)
		if ok && s.tree != tree {
			r.trees.Remove(key) // a new version: its positions mean nothing now
			ok = false
		}
		switch {
		case !ok:
			if free < 0 {
				free = slot
			}
		case s.continues(p) && (best == nil || s.run > best.run):
			best = s
		case s.reader == reader && mine == nil:
			mine = s
		}
		if ok && (oldest == nil || s.used.Before(oldest.used)) {
			oldest = s
		}
	}
	switch {
	case best != nil:
		r.trees.Get(best.key)
		return best
	case mine != nil:
		r.trees.Get(mine.key)
		return mine
	case free < 0:
		free = oldest.key.slot
		r.trees.Remove(oldest.key)
	}
	s := r.newStreamLocked(r.trees, raKey{id: pos.ID, at: pos.At, byIno: byIno, slot: free})
	s.tree = tree
	return s
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

// fetchLocked fetches ahead of position p of session stream s, in order
// ord.
func (r *ReadAhead) fetchLocked(s *raStream, ord *treeOrder, p int) {
	key := s.key
	for ; s.ahead(s.next, p, window(s.run), len(ord.files)); s.next += s.dir {
		e := ord.files[s.next]
		if !r.bodies.Prefetchable(&e.Descriptor) {
			continue
		}
		if !r.reserveLocked(s, s.next, e.Descriptor.Size) {
			break
		}
		r.goBody(s.ctx, Pos{ID: key.id, At: key.at, Name: e.Name}, handOver(s.next), &e.Descriptor)
	}
}

// handOver reports whether the body at position p goes to the Sink: all
// but one position in raGap, whose read tells the stream where its
// reader is.
func handOver(p int) bool { return p%raGap != 0 }

// name moves the name stream of name across sessions.
func (r *ReadAhead) name(id layout.SessionID, name string, read bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	key := raKey{name: name}
	s, ok := r.names.Get(key)
	if !ok {
		s = r.newStreamLocked(r.names, key)
		s.lastID = id
	}
	if s.lastID == id && s.last < 0 {
		return // one session so far: no pattern, and no listing asked for
	}
	s.lastID = id
	p, ok := r.sessions.idx[id]
	if !ok {
		r.loadSessionsLocked(now)
		return
	}
	if !r.stepLocked(s, p, now) {
		return
	}
	if read && !s.reads {
		s.reads = true
		s.nextBody = p + s.dir
	}
	s.nextBody = s.past(s.nextBody, p)
	w, n := r.stateWindow(s, now), len(r.sessions.ids)
	if s.reads {
		// A body fetch loads (refreshes) the state first: the state
		// cursor follows the body cursor.
		for ; s.ahead(s.nextBody, p, w, n); s.nextBody += s.dir {
			r.goSession(s, s.nextBody, r.sessions.ids[s.nextBody], name, true)
		}
		s.next = s.past(s.next, s.nextBody-s.dir)
		return
	}
	for ; s.ahead(s.next, p, w, n); s.next += s.dir {
		r.goSession(s, s.next, r.sessions.ids[s.next], name, false)
	}
}

// stateWindow is how far ahead name stream s loads states. A state is
// fresh for the metadata TTL; one loaded further ahead than the reader
// gets in half of it would be checked again when the reader comes (two
// round trips, one after the other, on its path), so the window is at
// most what the reader's rate covers in TTL/2, and at least
// raMinStateWindow.
func (r *ReadAhead) stateWindow(s *raStream, now time.Time) int {
	w := window(s.run)
	el := now.Sub(s.t0)
	if r.ttl <= 0 || el <= 0 || s.last == s.p0 {
		return w
	}
	rate := float64(abs(s.last-s.p0)) / el.Seconds()
	return min(w, max(raMinStateWindow, int(rate*r.ttl.Seconds()/2)))
}

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

// goSession loads (or refreshes) the state of session id at position p
// of name stream s in the background and, with body, prefetches the
// body of name in it.
func (r *ReadAhead) goSession(s *raStream, p int, id layout.SessionID, name string, body bool) {
	ctx, gen := s.ctx, s.gen
	r.st.issued.Add(1)
	go func() {
		select {
		case r.stateSem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		r.st.inFlight.Add(1)
		st, err := r.states.State(schedblob.Speculative(ctx), id)
		r.st.inFlight.Add(-1)
		<-r.stateSem
		if err != nil {
			if ctx.Err() == nil {
				r.st.failed.Add(1)
			}
			return
		}
		r.st.states.Add(1)
		if r.warm != nil {
			r.warm(schedblob.Speculative(ctx), st, name)
		}
		if !body {
			return
		}
		e, ok := st.Slot(name)
		if !ok || !r.bodies.Prefetchable(&e.Descriptor) {
			return
		}
		r.mu.Lock()
		ok = s.gen == gen && r.reserveLocked(s, p, e.Descriptor.Size)
		r.mu.Unlock()
		if ok {
			r.body(ctx, Pos{ID: id, Name: name}, handOver(p), &e.Descriptor)
		}
	}()
}

// orderLocked returns the files of k's tree (the tree of pos's view) in
// k's traversal order, depth first, cached for the few trees being
// traversed.
func (r *ReadAhead) orderLocked(k orderKey, pos *Pos) *treeOrder {
	if o, ok := r.orders.Get(k); ok {
		return o
	}
	o := &treeOrder{idx: map[string]int{}}
	var walk func(d *cache.Dir, prefix string)
	walk = func(d *cache.Dir, prefix string) {
		names := d.Names()
		if k.byIno {
			names = r.byInoLocked(d, prefix, names, pos)
		}
		for _, n := range names {
			if e, ok := d.Files[n]; ok {
				o.idx[prefix+n] = len(o.files)
				o.files = append(o.files, e)
			} else if sub, ok := d.Dirs[n]; ok {
				walk(sub, prefix+n+"/")
			}
		}
	}
	walk(k.tree, "")
	r.orders.Add(k, o)
	return o
}

// byInoLocked returns names, the entries of directory d (whose slot
// names start with prefix) in pos's view, sorted by the inode numbers
// the mount shows for them.
func (r *ReadAhead) byInoLocked(d *cache.Dir, prefix string, names []string, pos *Pos) []string {
	inos := make(map[string]uint64, len(names))
	for _, n := range names {
		if e, ok := d.Files[n]; ok {
			inos[n] = r.inos.File(pos.ID, pos.At, prefix+n, e)
		} else {
			inos[n] = r.inos.Dir(pos.ID, pos.At, prefix+n)
		}
	}
	sorted := slices.Clone(names)
	slices.SortStableFunc(sorted, func(a, b string) int { return cmp.Compare(inos[a], inos[b]) })
	return sorted
}

// Listed records the order of a listing of sessions/ (readdir sorts it
// by name, as the shell's glob does).
func (r *ReadAhead) Listed(ids []layout.SessionID) {
	sorted := append([]layout.SessionID(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })
	idx := make(map[layout.SessionID]int, len(sorted))
	for i, id := range sorted {
		idx[id] = i
	}
	r.mu.Lock()
	r.sessions = raSessions{ids: sorted, idx: idx, at: time.Now()}
	r.mu.Unlock()
}

// loadSessionsLocked learns the sessions/ order in the background when
// a name stream meets a session it does not know, at most once per
// metadata TTL.
func (r *ReadAhead) loadSessionsLocked(now time.Time) {
	if r.sessions.loading || now.Sub(r.sessions.at) < max(r.ttl, time.Second) {
		return
	}
	r.sessions.loading = true
	go func() {
		ids, err := r.states.Sessions(schedblob.Speculative(context.Background()))
		if err == nil {
			r.Listed(ids)
		}
		r.mu.Lock()
		r.sessions.loading = false
		if err != nil {
			r.sessions.at = time.Now()
		}
		r.mu.Unlock()
	}()
}

// Close cancels what every stream has in flight (the mount is going).
func (r *ReadAhead) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trees.Purge()
	r.names.Purge()
	r.versions.Purge()
}

// Stats is read-ahead's line in .pugmark/stats.
func (r *ReadAhead) Stats() string {
	r.mu.Lock()
	ahead, streams := r.ahead, r.trees.Len()+r.names.Len()+r.versions.Len()
	r.mu.Unlock()
	return fmt.Sprintf("read-ahead: streams %d (started %d), in flight %d, issued %d, bodies fetched %d, states loaded %d, failed %d, cancelled %d, bytes ahead %d (peak %d, bound %d)",
		streams, r.st.streams.Load(), r.st.inFlight.Load(), r.st.issued.Load(), r.st.fetched.Load(), r.st.states.Load(),
		r.st.failed.Load(), r.st.cancelled.Load(), ahead, r.st.peakAhead.Load(), r.maxBytes)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
