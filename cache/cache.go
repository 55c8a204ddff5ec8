// Package cache sits between the FUSE tree and the layout store. Almost
// everything in a pugmark bucket is immutable (blobs by digest, snapshots
// by version, manifests), so the cache keeps it without expiry and goes to
// the backend only for what can move: a session's latest version, the set
// of sessions, memories and refs, each re-checked at most once per
// metadata TTL. It holds descriptors, never blob bodies: those are
// package blobcache's.
//
// # Locks
//
// Lock order: Session.mu (one session's load, refresh and commit
// bookkeeping) before Cache.mu (the global state lock). Cache.mu guards the
// session map, the LRU order and the registry rows, and is held for memory
// operations only: never across backend or disk I/O (consistency.md §3).
// The persisted index has its own write lock (Registry.flushMu), taken
// before Cache.mu is briefly taken to capture rows.
//
// # Freshness
//
// A refresh captures the session's fingerprint (the latest version by LIST)
// before reading snapshots, and the rebuilt State records exactly that
// version (consistency.md §4). The check time is taken before the LIST, so a
// commit that lands during a rebuild is picked up by the first access after
// the TTL. The LIST is a listing's freshness pass within the TTL, else one
// of the session's hour partition, shared by every session of that hour
// (hourcheck.go), else one of the session's own snapshots.
package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/layout"
)

// DefaultMetadataTTL is how long a session's latest version, the session
// list, memories and refs are trusted before the bucket is asked again.
const DefaultMetadataTTL = time.Second

// Store is what the session cache needs from the layout package.
type Store interface {
	LatestVersion(ctx context.Context, id layout.SessionID) (uint32, error)
	ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(key string, err error), shown func([]layout.ListedSession)) ([]layout.ListedSession, error)
	LoadManifest(ctx context.Context, id layout.SessionID) (*layout.Manifest, error)
	ReadSnapshotRange(ctx context.Context, id layout.SessionID, from, to uint32, par int) ([][]layout.Descriptor, error)
	SnapshotVersions(ctx context.Context, id layout.SessionID) ([]uint32, error)
	ListSessionVersions(ctx context.Context, known []uint32, full func(hour uint32, partitions int) bool, bad func(key string, err error)) ([]layout.ListedSession, error)
	ListHours(ctx context.Context, par int, known []uint32, bad func(key string, err error)) ([]uint32, error)
	ListHour(ctx context.Context, hour uint32, bad func(key string, err error)) ([]layout.SessionID, error)
	KeptSession(id layout.SessionID) bool
	ListedStamp(id layout.SessionID, v uint32) (layout.Stamp, bool)
}

var _ Store = (*layout.Store)(nil)

// Options configure a Cache.
type Options struct {
	// MetadataTTL bounds how stale a session's latest version may be; 0
	// checks on every access.
	MetadataTTL time.Duration
	// MaxSessions bounds the number of session states kept (default 4096).
	MaxSessions int
	// Parallel bounds concurrent snapshot reads per load or refresh
	// (default 64: a first load of a long history is versions/Parallel
	// round trips; a mount's request scheduler bounds the total).
	Parallel int
	// IndexPath, if set, is the file the registry is persisted to.
	IndexPath string
	// SummaryPath, if set, is the file the summaries are kept in across
	// mounts (summaryFile).
	SummaryPath string
	// FlushDelay defers registry and summary publication (default 2s).
	FlushDelay time.Duration
	// SummaryWait bounds how long a listing of sessions waits for the
	// summaries it fetches (default DefaultSummaryWait).
	SummaryWait time.Duration
	Logger      *slog.Logger
	Now         func() time.Time
}

// Cache is the session-state cache and registry of one mount.
type Cache struct {
	store Store
	opts  Options
	log   *slog.Logger
	// warned logs each skipped bucket key once.
	warned keyWarnings

	mu       sync.Mutex // the global state lock; see the package comment
	sessions *simplelru.LRU[layout.SessionID, *Session]
	// floors are the newest versions this mount committed, by session
	// (Session.floor), kept when the LRU evicts the Session: a reload
	// took its version from a listing older than the commit and hid the
	// mount's own file until the TTL ran out (review 32). GUARDED_BY(mu).
	floors *simplelru.LRU[layout.SessionID, uint32]
	// ancestors caches the visible log of (session, version) for parent
	// chains, as the session forked from there sees it: immutable,
	// shared by every descendant through that session.
	ancestors *simplelru.LRU[ancestorLogKey, []layout.Entry]
	manifests *simplelru.LRU[layout.SessionID, *layout.Manifest]
	// manifestReads are the manifest reads in flight, so that a read a
	// lookup started ahead (Find) is joined, not repeated.
	manifestReads flights[layout.SessionID, *layout.Manifest]
	trees         *simplelru.LRU[ancestorKey, *Dir]
	// partial holds, per damaged session, the largest state of its
	// versions before the damage that StateUpTo built (damaged.go).
	partial *simplelru.LRU[layout.SessionID, *State]
	// readable holds, per damaged session, each snapshot read alone
	// (damaged.go).
	readable *simplelru.LRU[layout.SessionID, *readable]
	recent   recentSnaps // recent.go
	// early are the reads of first versions a first lookup started
	// before it knew the latest version (early.go), by session and
	// version; the lookup removes its own when it ends.
	early map[ancestorKey]*earlyRead
	list  sessionList
	// created are the sessions this mount made, and when, until a
	// listing pass begun after that shows them (withCreatedLocked).
	created   map[layout.SessionID]time.Time
	hourLists hourLists
	// hourReads shares one LIST of an hour partition among the
	// callers that want it at once (PrefetchHours and the listing).
	hourReads flights[uint32, hourList]
	hours     hourChecks // hourcheck.go
	// summaries are Summary's light rows, by session; sumFlights the
	// computations of them in flight.
	summaries  map[layout.SessionID]summary
	sumFlights map[layout.SessionID]*sumFlight
	// sumFile persists summaries; nil without Options.SummaryPath.
	sumFile *summaryFile

	// registry holds the session rows (consistency.md §1). Unexported:
	// the write engine updates it through SetName, nothing else reaches in.
	registry *Registry

	// frozen is the one session state every State and Peek of its
	// session gives until Thaw (Freeze); nil for none.
	frozen atomic.Pointer[State]

	stats counters
}

type ancestorKey struct {
	id layout.SessionID
	v  uint32
}

// ancestorLogKey names an ancestor's visible log: at version v of id, as
// session via, forked from there, sees it (the fork record of via kept,
// its siblings' dropped, §11.3).
type ancestorLogKey struct {
	ancestorKey
	via layout.SessionID
}

// sessionList is the last freshness pass over sessions/: every session,
// in ID order, with the latest version the pass saw. found is shared:
// it is replaced, never changed in place.
type sessionList struct {
	found   []layout.ListedSession
	checked time.Time
	valid   bool
}

type counters struct {
	loads, refreshes, hits, checks, hourChecks, evictions, snapshotsRead atomic.Int64
	earlyReads, earlyMisses                                              atomic.Int64
}

// Stats are the session cache's counters.
type Stats struct {
	Sessions                                         int
	Loads, Refreshes, Hits, Checks, Evictions, Snaps int64
	// HourChecks are the LISTs of whole hour partitions that confirmed
	// many sessions' latest versions at once (hourcheck.go); Checks are
	// the LISTs of one session's snapshots.
	HourChecks int64
	// EarlyReads are the snapshot reads a first lookup started before
	// it knew the session's latest version (early.go); EarlyMisses
	// those of them that found no such version or were not used.
	EarlyReads, EarlyMisses int64
}

// New returns a Cache over store.
func New(store Store, opts Options) (*Cache, error) {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 4096
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 64
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SummaryWait <= 0 {
		opts.SummaryWait = DefaultSummaryWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cache{store: store, opts: opts, log: opts.Logger, warned: keyWarnings{log: opts.Logger}}
	var err error
	c.sessions, err = simplelru.NewLRU[layout.SessionID, *Session](opts.MaxSessions, func(_ layout.SessionID, s *Session) {
		// Called under c.mu. A load in flight on s publishes to s only,
		// and s is no longer reachable from the map: it cannot come back.
		s.evicted = true
		c.stats.evictions.Add(1)
	})
	if err != nil {
		return nil, err
	}
	c.floors, _ = simplelru.NewLRU[layout.SessionID, uint32](maxFloors, nil)
	c.ancestors, _ = simplelru.NewLRU[ancestorLogKey, []layout.Entry](1024, nil)
	c.manifests, _ = simplelru.NewLRU[layout.SessionID, *layout.Manifest](16384, nil)
	c.trees, _ = simplelru.NewLRU[ancestorKey, *Dir](256, nil)
	c.partial, _ = simplelru.NewLRU[layout.SessionID, *State](partialMax, nil)
	c.readable, _ = simplelru.NewLRU[layout.SessionID, *readable](partialMax, nil)
	c.registry, err = newRegistry(opts.IndexPath, opts.FlushDelay, &c.mu, c.log)
	if err != nil {
		return nil, err
	}
	if opts.SummaryPath != "" {
		delay := opts.FlushDelay
		if delay <= 0 {
			delay = 2 * time.Second
		}
		c.sumFile = &summaryFile{path: opts.SummaryPath, delay: delay}
		c.loadSummaries()
	}
	return c, nil
}

// Close flushes the registry and the summaries.
func (c *Cache) Close() error {
	c.mu.Lock()
	if f := c.sumFile; f != nil && f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	c.mu.Unlock()
	return errors.Join(c.registry.Close(), c.flushSummaries())
}

// SetName keeps a session's name in the registry after a commit of this
// mount (the write engine's update, next to Committed).
func (c *Cache) SetName(id layout.SessionID, name string) { c.registry.SetName(id, name) }

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	n := c.sessions.Len()
	c.mu.Unlock()
	return Stats{Sessions: n, Loads: c.stats.loads.Load(), Refreshes: c.stats.refreshes.Load(),
		Hits: c.stats.hits.Load(), Checks: c.stats.checks.Load(), Evictions: c.stats.evictions.Load(),
		Snaps: c.stats.snapshotsRead.Load(), HourChecks: c.stats.hourChecks.Load(),
		EarlyReads: c.stats.earlyReads.Load(), EarlyMisses: c.stats.earlyMisses.Load()}
}

// TTL returns the metadata TTL.
func (c *Cache) TTL() time.Duration { return c.opts.MetadataTTL }

// entry returns the cache's Session for id, creating it.
func (c *Cache) entry(id layout.SessionID) *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions.Get(id); ok {
		return s
	}
	s := &Session{id: id, c: c}
	c.sessions.Add(id, s)
	return s
}

// maxFloors bounds Cache.floors: the sessions a mount committed to last
// (a few bytes each).
const maxFloors = 1 << 16

// raiseFloor records that version v of id exists, committed by this
// mount (Cache.floors). Called with the session's mu held (lock order:
// Session.mu, then Cache.mu).
func (c *Cache) raiseFloor(id layout.SessionID, v uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.floors.Peek(id); !ok || v > old {
		c.floors.Add(id, v)
	}
}

// floorOf returns the newest version of id this mount committed, as
// Cache.floors keeps it: read at each refresh, not copied into a new
// Session, since a commit that raced the Session's eviction raised it
// after a new Session had copied it (review 33).
func (c *Cache) floorOf(id layout.SessionID) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, _ := c.floors.Peek(id)
	return v
}

// dropFloor forgets the floor of id: the bucket no longer has it.
func (c *Cache) dropFloor(id layout.SessionID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.floors.Remove(id)
}

// Evict drops a session's cached state (tests and memory pressure), and
// with it what an hour check confirmed of it: the next access asks.
func (c *Cache) Evict(id layout.SessionID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.invalidateHourLocked(id, c.opts.Now())
	c.sessions.Remove(id)
}

// State returns a session's state, fresh within the metadata TTL, or
// the frozen one (Freeze). Errors wrap layout.ErrSessionNotFound for a
// session without a manifest.
func (c *Cache) State(ctx context.Context, id layout.SessionID) (*State, error) {
	if st, ok := c.frozenOf(id); ok {
		return st, nil
	}
	return c.entry(id).State(ctx)
}

// frozenOf returns id's frozen state, if it is the one frozen.
func (c *Cache) frozenOf(id layout.SessionID) (*State, bool) {
	st := c.frozen.Load()
	return st, st != nil && st.ID == id
}

// Freeze makes st what State and Peek give for its session until Thaw,
// and its version and last append what Summary and Find give (the session
// directory's mtime), however the bucket moves: a pugfs exec handler sees
// its session at the base version for the whole run (decisions.md "A
// handler invocation"),
// so what it reads is what PUGMARK_VERSION says, and an input that lands
// meanwhile is merged under its checkpoint unseen, as pugfs exec reports.
// Its mount refreshed like any other, and showed that input to the
// handler half-way through the run (review 38). One session at a time.
func (c *Cache) Freeze(st *State) { c.frozen.Store(st) }

// Thaw ends Freeze.
func (c *Cache) Thaw() { c.frozen.Store(nil) }

// Invalidate makes the next access to id re-check the bucket, also when a
// refresh is in flight: that refresh's LIST may predate the change.
func (c *Cache) Invalidate(id layout.SessionID) {
	c.mu.Lock()
	s, ok := c.sessions.Peek(id)
	if sum, known := c.summaries[id]; known {
		// Nor is what a listing found any longer the latest version.
		sum.checked = time.Time{}
		c.summaries[id] = sum
	}
	c.invalidateHourLocked(id, c.opts.Now())
	c.mu.Unlock()
	if ok {
		s.inval.Add(1)
		s.checked.Store(0)
	}
}

// observe records st in the registry unless s was evicted: a load that
// finished on an evicted Session may be older than what its successor
// already published.
func (c *Cache) observe(s *Session, st *State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.evicted {
		c.registry.observeLocked(st)
	}
}

// Manifest returns a session's manifest (cached without expiry: manifests
// are immutable). It does not need the session's snapshots, so it answers
// for a session whose state cannot be loaded.
func (c *Cache) Manifest(ctx context.Context, id layout.SessionID) (*layout.Manifest, error) {
	return c.manifest(ctx, id)
}

// manifest returns a session's manifest; manifests are immutable and
// cached without expiry.
func (c *Cache) manifest(ctx context.Context, id layout.SessionID) (*layout.Manifest, error) {
	cached := func() (*layout.Manifest, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.manifests.Get(id)
	}
	if m, ok := cached(); ok {
		return m, nil
	}
	return c.manifestReads.do(ctx, id, func(ctx context.Context) (*layout.Manifest, error) {
		// A read that ended between the look above and this one has
		// cached its manifest before it stopped being in flight.
		if m, ok := cached(); ok {
			return m, nil
		}
		m, err := c.store.LoadManifest(ctx, id)
		if err == nil {
			c.mu.Lock()
			c.manifests.Add(id, m)
			c.mu.Unlock()
		}
		return m, err
	})
}

// ancestorLog returns the entries a child sees of its parent chain
// (§6.5 step 1; the fork records of sessions outside the chain dropped,
// §11.3).
func (c *Cache) ancestorLog(ctx context.Context, id layout.SessionID, m *layout.Manifest) ([]layout.Entry, error) {
	if m.Parent == nil {
		return nil, nil
	}
	// Walk up, collecting the chain, with cycle and depth guards.
	var chain []ancestorLogKey
	seen := map[layout.SessionID]bool{id: true}
	cur, via := m, id
	for cur.Parent != nil {
		p := *cur.Parent
		if seen[p.Session] || len(chain) >= layout.MaxParentDepth {
			return nil, fmt.Errorf("parent chain of %s: %w: cycle or too deep at %s", id, layout.ErrCorrupt, p.Session)
		}
		seen[p.Session] = true
		k := ancestorLogKey{ancestorKey{p.Session, p.Version}, via}
		chain = append(chain, k)
		c.mu.Lock()
		cached, ok := c.ancestors.Get(k)
		c.mu.Unlock()
		if ok {
			return chainOf(id)(c.extendAncestors(ctx, cached, chain[:len(chain)-1]))
		}
		via = p.Session
		pm, err := c.manifest(ctx, p.Session)
		if err != nil {
			if errors.Is(err, layout.ErrNotFound) {
				// The child exists; its chain is broken (EIO, not ENOENT).
				return nil, fmt.Errorf("parent chain of %s: %w: ancestor %s: %v", id, layout.ErrCorrupt, p.Session, err)
			}
			return nil, fmt.Errorf("parent chain of %s: ancestor %s: %w", id, p.Session, err)
		}
		cur = pm
	}
	return chainOf(id)(c.extendAncestors(ctx, nil, chain))
}

// chainOf names the child in the error of its parent chain's load.
func chainOf(id layout.SessionID) func([]layout.Entry, error) ([]layout.Entry, error) {
	return func(log []layout.Entry, err error) ([]layout.Entry, error) {
		if err != nil {
			return nil, fmt.Errorf("parent chain of %s: %w", id, err)
		}
		return log, nil
	}
}

// extendAncestors builds, root-most first, the visible logs of chain
// (child-most first) on top of base, caching each level.
func (c *Cache) extendAncestors(ctx context.Context, base []layout.Entry, chain []ancestorLogKey) ([]layout.Entry, error) {
	log := base
	for i := len(chain) - 1; i >= 0; i-- {
		l := chain[i]
		snaps, err := c.snapshots(ctx, l.id, 1, l.v)
		if err != nil {
			if errors.Is(err, layout.ErrNotFound) {
				// A parent version past the parent's last: corrupt.
				return nil, fmt.Errorf("%w: ancestor %s has no version %d: %v", layout.ErrCorrupt, l.id, l.v, err)
			}
			return nil, fmt.Errorf("ancestor %s at version %d: %w", l.id, l.v, err)
		}
		next := make([]layout.Entry, len(log), len(log)+16)
		copy(next, log)
		log = layout.AppendAncestorEntries(next, l.id, snaps, l.via)
		c.mu.Lock()
		c.ancestors.Add(l, log)
		c.mu.Unlock()
	}
	return log, nil
}

// snapshots returns versions from..to of id, from a loaded state when it
// covers them (history is immutable), else from the store.
func (c *Cache) snapshots(ctx context.Context, id layout.SessionID, from, to uint32) ([][]layout.Descriptor, error) {
	if to < from {
		return nil, nil
	}
	c.mu.Lock()
	s, ok := c.sessions.Peek(id)
	c.mu.Unlock()
	if ok {
		if st := s.st.Load(); st != nil && st.Version >= to {
			return st.snaps[from-1 : to], nil
		}
	}
	snaps, err := c.readSnaps(ctx, id, from, to)
	c.stats.snapshotsRead.Add(int64(len(snaps)))
	return snaps, err
}

// Sessions lists every session ID in the bucket, re-listed at most once
// per TTL (listed). Sessions this mount created are merged in
// immediately.
func (c *Cache) Sessions(ctx context.Context) ([]layout.SessionID, error) {
	found, _, err := c.listed(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]layout.SessionID, len(found))
	for i, l := range found {
		ids[i] = l.ID
	}
	return ids, nil
}

// listed returns the last freshness pass over sessions/ and its time,
// running a new one (layout.Store.ListSessionVersions: the partition
// walk, one LIST per hour partition) when it is older than the TTL. The
// hours known from the last pass and from summaries (the cache
// directory's, on a fresh mount) are listed beside the walk, not after
// it: a pass that finds no new hour costs one round trip, not five. The
// slice is shared and must not be changed.
func (c *Cache) listed(ctx context.Context) ([]layout.ListedSession, time.Time, error) {
	now := c.opts.Now()
	c.mu.Lock()
	if c.list.valid && c.freshAt(now, c.list.checked) {
		found, at := c.list.found, c.list.checked
		c.mu.Unlock()
		return found, at, nil
	}
	known := c.knownHoursLocked()
	c.mu.Unlock()
	found, err := c.store.ListSessionVersions(ctx, known, c.fullPartitions(), c.skipKey)
	if err != nil {
		return nil, time.Time{}, err
	}
	c.mu.Lock()
	found = c.withCreatedLocked(found, now)
	c.list = sessionList{found: found, checked: now, valid: true}
	c.mu.Unlock()
	return found, now, nil
}

// createdKeep bounds how long a session this mount created is added to
// listings that do not show it yet.
const createdKeep = time.Minute

// withCreatedLocked returns found with the sessions this mount created
// that it lacks: a pass whose LIST began before a mkdir missed that
// session, and it replaced the listing SessionCreated had added it to,
// so the mount's own new session was missing from its ls sessions/ until
// the next pass (the remote audit). A session stays in c.created until a
// pass that began after its creation shows it. c.mu is held; found is
// not changed.
func (c *Cache) withCreatedLocked(found []layout.ListedSession, began time.Time) []layout.ListedSession {
	cmp := func(l layout.ListedSession, id layout.SessionID) int { return l.ID.Compare(id) }
	for id, at := range c.created {
		i, ok := slices.BinarySearchFunc(found, id, cmp)
		switch {
		case ok && at.Before(began):
			delete(c.created, id)
		case ok:
		case began.Sub(at) > createdKeep:
			delete(c.created, id)
		default:
			found = slices.Insert(slices.Clip(found), i, layout.ListedSession{ID: id})
		}
	}
	return found
}

// MaxFullPartitions is the most hour partitions a freshness pass lists in
// full (with every session's latest version) when it knows no summary in
// them: past it (100,000 sessions over 2,000 hours, say) the listing
// fetches no summary of a session it does not know anyway (more than
// MaxSummaryBatch), so the versions would serve nothing, and a server
// that walks a file system answers a delimiter listing many times faster
// (versitygw: about 4 ms against 35 ms for a partition of 50 sessions).
// A partition holding a session with a known summary is always listed in
// full, to confirm it without a request.
const MaxFullPartitions = 1000

// fullPartitions returns which hour partitions the next pass lists in
// full (layout.Store.ListSessionVersions).
func (c *Cache) fullPartitions() func(hour uint32, partitions int) bool {
	c.mu.Lock()
	known := make(map[uint32]bool)
	for id := range c.summaries {
		known[id.Hour()] = true
	}
	c.mu.Unlock()
	return func(hour uint32, partitions int) bool {
		return partitions <= MaxFullPartitions || known[hour]
	}
}

// SessionCreated records a session this mount created, so listings show it
// before the next re-list.
func (c *Cache) SessionCreated(id layout.SessionID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.created == nil {
		c.created = map[layout.SessionID]time.Time{}
	}
	c.created[id] = c.opts.Now()
	c.hourCreatedLocked(id)
	if !c.list.valid {
		return
	}
	i, found := slices.BinarySearchFunc(c.list.found, id, func(l layout.ListedSession, id layout.SessionID) int { return l.ID.Compare(id) })
	if !found {
		// Neither a version nor the manifest seen: its summary asks
		// the bucket (this mount may have committed to it since).
		c.list.found = slices.Insert(slices.Clip(c.list.found), i, layout.ListedSession{ID: id})
	}
}
