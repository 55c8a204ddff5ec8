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
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
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
	// raOrders bounds the traversal orders kept: two a view read (by
	// name and by inode number). With 8, five sessions read at once (rg
	// -j over sessions/) rebuilt a whole tree's order at every file read,
	// under mu, on the reader's path (review 29). An order costs about
	// 60 bytes a file of its tree.
	raOrders = 32
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

// raCounters are read-ahead's numbers for .pugmark/stats; atomics.
type raCounters struct {
	streams, issued, fetched, failed, cancelled, states atomic.Int64
	inFlight, peakAhead                                 atomic.Int64
}

// New returns the read-ahead of a mount whose session states have the
// metadata TTL ttl.
func New(states States, bodies Bodies, ttl time.Duration, o Options) *ReadAhead {
	bytes, inFlight := bodies.PrefetchLimits()
	r := &ReadAhead{states: states, bodies: bodies, inos: o.Inos, sink: o.Sink, warm: o.Warm, ttl: ttl, maxBytes: bytes,
		bodySem: make(chan struct{}, inFlight), stateSem: make(chan struct{}, raStateLoads)}
	r.orders, _ = simplelru.NewLRU[orderKey, *treeOrder](raOrders, nil)
	r.trees, _ = simplelru.NewLRU(raStreams, func(_ raKey, s *raStream) { r.dropLocked(s) })
	r.names, _ = simplelru.NewLRU(raStreams, func(_ raKey, s *raStream) { r.dropLocked(s) })
	r.versions, _ = simplelru.NewLRU(raStreams, func(_ raKey, s *raStream) { r.dropLocked(s) })
	r.verOrders, _ = simplelru.NewLRU[uint32, *versionOrder](2, nil)
	return r
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

// Lookup notes that a program looks up name in session id's live tree,
// or lists it (name is then the directory's path and a slash).
func (r *ReadAhead) Lookup(id layout.SessionID, name string) { r.name(id, name, false) }

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
