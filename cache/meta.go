package cache

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/layout"
)

// MetaStore is what the bucket-wide views (refs, memories, snapshot
// metadata) need from the layout package.
type MetaStore interface {
	ReadSnapshotMeta(ctx context.Context, id layout.SessionID, v uint32) (layout.SnapshotMeta, error)
	ListRefs(ctx context.Context, bad func(key string, err error)) ([]string, error)
	ReadRef(ctx context.Context, name string) (layout.Ref, error)
	ListNamespaces(ctx context.Context, bad func(key string, err error)) ([]layout.Namespace, error)
	ReadMemory(ctx context.Context, ns string, v uint32) ([]layout.Descriptor, error)
}

var _ MetaStore = (*layout.Store)(nil)

// Views caches the bucket-wide, mutable listings (refs and memory
// namespaces) for the metadata TTL, and immutable per-version facts
// (snapshot metadata, trees at old versions, memory files) without
// expiry.
type Views struct {
	store MetaStore
	ttl   time.Duration
	now   func() time.Time
	log   func(msg string, args ...any)
	// skip logs, once, a key a listing skips.
	skip func(msg, key string, err error)

	mu      sync.Mutex // guards the maps below; no I/O while held
	refs    memo[[]string]
	ns      memo[[]layout.Namespace]
	refVals map[string]memo[layout.Ref]
	// refGen counts InvalidateRefs: a read started before one neither
	// answers a caller after it nor is kept.
	refGen uint64
	metas  *simplelru.LRU[metaKey, layout.SnapshotMeta]
	// mems holds namespaces' records by version, at most memViewBytes
	// of them (memBytes, by recordsBytes): a namespace's every version
	// holds all its records, and 1,024 versions kept by count alone
	// grew a mount writing 800 records one after another to 795 MB,
	// never given back (audit 31).
	mems     *simplelru.LRU[memKey, []layout.Descriptor]
	memBytes int64

	// refReads shares one read of a ref among its callers (a listing's
	// prefetch and the kernel's questions about the same entry), and
	// memReads one read of a namespace's version.
	refReads  flights[refReadKey, memo[layout.Ref]]
	memReads  flights[memKey, []layout.Descriptor]
	metaReads flights[metaKey, layout.SnapshotMeta]
	// walk is how far a program has gone through the namespaces of the
	// last listing, read one after another: guarded by mu.
	walk nsWalk
}

// nsWalk counts the namespaces of one listing (the Namespaces memo
// timed at) whose records were read from the bucket, and whether the
// others were read ahead.
type nsWalk struct {
	at     time.Time
	misses int
	ahead  bool
}

// refReadKey names a read of a ref: the ref, and refGen when it began.
type refReadKey struct {
	name string
	gen  uint64
}

type metaKey struct {
	id layout.SessionID
	v  uint32
}

type memKey struct {
	ns string
	v  uint32
}

// NewViews returns the bucket-wide views over store.
func (c *Cache) NewViews(store MetaStore) *Views {
	v := &Views{store: store, ttl: c.opts.MetadataTTL, now: c.opts.Now, refVals: map[string]memo[layout.Ref]{},
		log: func(msg string, args ...any) { c.log.Warn(msg, args...) }, skip: c.warned.warn}
	v.metas, _ = simplelru.NewLRU[metaKey, layout.SnapshotMeta](65536, nil)
	v.mems, _ = simplelru.NewLRU[memKey, []layout.Descriptor](1024, func(_ memKey, recs []layout.Descriptor) {
		v.memBytes -= recordsBytes(recs) // called under v.mu
	})
	return v
}

// memViewBytes bounds the records Views keeps in memory.
const memViewBytes = 32 << 20

// recordsBytes estimates the memory recs hold: their strings, inline
// bodies and metadata, and a descriptor's fixed part.
func recordsBytes(recs []layout.Descriptor) int64 {
	n := int64(0)
	for i := range recs {
		d := &recs[i]
		n += 256 + int64(len(d.Name)+len(d.Data)+len(d.ContentType)+len(d.SchemaURL)+len(d.CacheControl))
		for k, val := range d.Metadata {
			n += 32 + int64(len(k)+len(val))
		}
	}
	return n
}

// keepMemoryLocked adds recs, the records of k, and evicts the least
// recently used versions past memViewBytes (the newest stays, whatever
// its size). Caller holds v.mu.
func (v *Views) keepMemoryLocked(k memKey, recs []layout.Descriptor) {
	if old, ok := v.mems.Peek(k); ok {
		v.memBytes -= recordsBytes(old)
	}
	v.mems.Add(k, recs)
	v.memBytes += recordsBytes(recs)
	for v.memBytes > memViewBytes && v.mems.Len() > 1 {
		v.mems.RemoveOldest()
	}
}

func (v *Views) fresh(at time.Time) bool {
	return v.ttl > 0 && v.now().Sub(at) < v.ttl
}

// SnapshotMeta returns snapshot metadata; immutable, cached forever, and
// callers at once share one read.
func (v *Views) SnapshotMeta(ctx context.Context, id layout.SessionID, ver uint32) (layout.SnapshotMeta, error) {
	k := metaKey{id, ver}
	v.mu.Lock()
	m, ok := v.metas.Get(k)
	v.mu.Unlock()
	if ok {
		return m, nil
	}
	return v.metaReads.do(ctx, k, func(ctx context.Context) (layout.SnapshotMeta, error) {
		v.mu.Lock()
		m, ok := v.metas.Get(k) // read by a flight that ended since the look above
		v.mu.Unlock()
		if ok {
			return m, nil
		}
		m, err := v.store.ReadSnapshotMeta(ctx, id, ver)
		if err != nil {
			return m, err
		}
		if m.TypeInvalid != "" {
			v.log("snapshot type is none of checkpoint, provisional and queueing; counted as a checkpoint, as a missing one is",
				"session", id.String(), "version", ver, "type", m.TypeInvalid)
		}
		v.mu.Lock()
		v.metas.Add(k, m)
		v.mu.Unlock()
		return m, nil
	})
}

// PrefetchSnapshotMeta reads the metadata of the versions of session id
// (the first prefetchRefsMax) not read yet, wide in parallel: listing
// .pugmark/snapshots/ shows every <N>.json's size, which its metadata
// is part of, and the kernel asks for them one after another (40
// versions 20 ms away: 1 s). Errors are left to each version's own read.
func (v *Views) PrefetchSnapshotMeta(ctx context.Context, id layout.SessionID, versions []uint32) {
	var missing []uint32
	v.mu.Lock()
	for _, ver := range versions[:min(len(versions), prefetchRefsMax)] {
		if _, ok := v.metas.Peek(metaKey{id, ver}); !ok {
			missing = append(missing, ver)
		}
	}
	v.mu.Unlock()
	wide(ctx, missing, func(ver uint32) { _, _ = v.SnapshotMeta(ctx, id, ver) })
}

// wide calls load for each of items, prefetchRefs at once, and returns
// when they are done; those not started when ctx ends are not.
func wide[T any](ctx context.Context, items []T, load func(T)) {
	sem := make(chan struct{}, prefetchRefs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			load(it)
		})
	}
}

// LatestCheckpoint returns the newest checkpoint of id at or below
// version. It reads snapshot metadata alone, so it answers for a session
// whose snapshot bodies are damaged.
//
// The metadata is read newest first in windows that double (1, 2, 4, ...
// checkpointWindow versions at once): the latest snapshot is a checkpoint
// for one request, and a handler's inputs (the provisional snapshots
// above its last checkpoint) cost a round trip per doubling, not one per
// snapshot.
func (v *Views) LatestCheckpoint(ctx context.Context, id layout.SessionID, version uint32) (uint32, bool, error) {
	type read struct {
		m   layout.SnapshotMeta
		err error
	}
	window := uint32(1)
	for top := version; top > 0; {
		n := min(window, top)
		got := make([]read, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got[i].m, got[i].err = v.SnapshotMeta(ctx, id, top-i)
			})
		}
		wg.Wait()
		// In order, newest first: an error above the checkpoint is the
		// answer, as it was when they were read one by one.
		for i, r := range got {
			if r.err != nil {
				return 0, false, r.err
			}
			if r.m.Type == layout.Checkpoint {
				return top - uint32(i), true, nil
			}
		}
		top -= n
		window = min(2*window, checkpointWindow)
	}
	return 0, false, nil
}

// checkpointWindow is the most snapshot metadata LatestCheckpoint reads
// at once.
const checkpointWindow = 32

// Refs lists ref names, re-listed at most once per TTL.
func (v *Views) Refs(ctx context.Context) ([]string, error) {
	return readFresh(v, func() memo[[]string] { return v.refs }, func(m memo[[]string]) { v.refs = m }, func() ([]string, error) {
		return v.store.ListRefs(ctx, func(key string, err error) { v.skip("skipping malformed ref key", key, err) })
	})
}

// Ref reads one ref, re-read at most once per TTL; callers at once share
// one read.
func (v *Views) Ref(ctx context.Context, name string) (layout.Ref, error) {
	v.mu.Lock()
	m, gen := v.refVals[name], v.refGen
	v.mu.Unlock()
	if m.ok && v.fresh(m.at) {
		return m.v, nil
	}
	m, err := v.refReads.do(ctx, refReadKey{name, gen}, func(ctx context.Context) (memo[layout.Ref], error) {
		// A read that ended between the look above and this flight
		// (each flight ends when its read does) left what it read.
		v.mu.Lock()
		m := v.refVals[name]
		kept := m.ok && v.fresh(m.at) && v.refGen == gen
		v.mu.Unlock()
		if kept {
			return m, nil
		}
		// Timed from before the read: a change made while it ran is
		// not taken for seen.
		at := v.now()
		r, err := v.store.ReadRef(ctx, name)
		if err != nil {
			return memo[layout.Ref]{}, err
		}
		m = memo[layout.Ref]{r, at, true}
		v.mu.Lock()
		if v.refGen == gen {
			v.refVals[name] = m
		}
		v.mu.Unlock()
		return m, nil
	})
	return m.v, err
}

// prefetchRefs bounds the refs PrefetchRefs (and the metadata
// PrefetchSnapshotMeta) reads at once, and prefetchRefsMax how many it
// reads for one listing.
const (
	prefetchRefs    = 64
	prefetchRefsMax = 5000
)

// PrefetchRefs reads the refs of names (the first prefetchRefsMax) that
// are not fresh, wide in parallel, so that a listing's entries (a ref
// file's size, a names/ link's target) are answered from memory rather
// than one round trip after another as the kernel asks for each: `ls -l
// names/` of 500 names 20 ms away took 42 s. Errors are left to each
// name's own read. With a TTL of 0 every question reads the bucket
// anyway, so it reads nothing.
func (v *Views) PrefetchRefs(ctx context.Context, names []string) {
	if v.ttl <= 0 {
		return
	}
	var stale []string
	v.mu.Lock()
	for _, name := range names[:min(len(names), prefetchRefsMax)] {
		if m := v.refVals[name]; !m.ok || !v.fresh(m.at) {
			stale = append(stale, name)
		}
	}
	v.mu.Unlock()
	wide(ctx, stale, func(name string) { _, _ = v.Ref(ctx, name) }) // each entry's own read reports errors
}

// InvalidateRefs drops cached refs after this mount changed one.
func (v *Views) InvalidateRefs() {
	v.mu.Lock()
	v.refs = memo[[]string]{}
	v.refVals = map[string]memo[layout.Ref]{}
	v.refGen++
	v.mu.Unlock()
}

// Namespaces lists memory namespaces with their latest versions, at most
// once per TTL.
func (v *Views) Namespaces(ctx context.Context) ([]layout.Namespace, error) {
	return readFresh(v, func() memo[[]layout.Namespace] { return v.ns }, func(m memo[[]layout.Namespace]) { v.ns = m }, func() ([]layout.Namespace, error) {
		return v.store.ListNamespaces(ctx, func(key string, err error) { v.skip("skipping malformed memory key", key, err) })
	})
}

// InvalidateMemories drops the cached namespace list.
func (v *Views) InvalidateMemories() {
	v.mu.Lock()
	v.ns = memo[[]layout.Namespace]{}
	v.mu.Unlock()
}

// Memory returns the records of namespace ns at version ver; immutable,
// and callers at once share one read. The second namespace of a
// listing read from the bucket starts reading the latest versions of
// the listing's others, wide in parallel (readNamespacesAhead).
func (v *Views) Memory(ctx context.Context, ns string, ver uint32) ([]layout.Descriptor, error) {
	k := memKey{ns, ver}
	v.mu.Lock()
	recs, ok := v.mems.Get(k)
	var ahead []layout.Namespace
	if !ok {
		ahead = v.walkLocked(ns, ver)
	}
	v.mu.Unlock()
	if ok {
		return recs, nil
	}
	if ahead != nil {
		go v.readNamespacesAhead(ahead)
	}
	return v.memReads.do(ctx, k, func(ctx context.Context) ([]layout.Descriptor, error) {
		v.mu.Lock()
		recs, ok := v.mems.Get(k) // read by a flight that ended since the look above
		v.mu.Unlock()
		if ok {
			return recs, nil
		}
		recs, err := v.store.ReadMemory(ctx, ns, ver)
		if err == nil {
			v.mu.Lock()
			v.keepMemoryLocked(k, recs)
			v.mu.Unlock()
		}
		return recs, err
	})
}

// memAhead bounds the namespaces read ahead for one listing: half of
// what the views keep, so that what is read ahead is still there when
// the program comes to it.
const memAhead = 512

// walkLocked notes that namespace ns's records at version ver are not
// in memory, and returns the namespaces to read ahead when this is the
// second latest version of the current listing read so: a program (the
// shell's glob of memories/*/*, ls -lR) walks them one after another,
// and was a round trip each (203 namespaces 20 ms away: 4.6 s).
func (v *Views) walkLocked(ns string, ver uint32) []layout.Namespace {
	if !v.ns.ok {
		return nil
	}
	if v.walk.at != v.ns.at {
		v.walk = nsWalk{at: v.ns.at}
	}
	if v.walk.ahead || !slices.Contains(v.ns.v, layout.Namespace{Name: ns, Version: ver}) {
		return nil
	}
	if v.walk.misses++; v.walk.misses < 2 {
		return nil
	}
	v.walk.ahead = true
	var out []layout.Namespace
	for _, n := range v.ns.v {
		if len(out) == memAhead {
			break
		}
		if _, ok := v.mems.Peek(memKey{n.Name, n.Version}); !ok && n.Version > 0 && n.Name != ns {
			out = append(out, n)
		}
	}
	return out
}

// readNamespacesAhead reads the records of nss, prefetchRefs at once.
func (v *Views) readNamespacesAhead(nss []layout.Namespace) {
	ctx := context.Background()
	wide(ctx, nss, func(n layout.Namespace) { _, _ = v.Memory(ctx, n.Name, n.Version) }) // the reader's own read reports errors
}

// TreeAt returns the tree of st's session at version ver (history is
// immutable; trees are cached by session and version).
func (c *Cache) TreeAt(st *State, ver uint32) *Dir {
	if ver >= st.Version {
		return st.Tree()
	}
	t, _ := readThrough(&c.mu, c.trees, ancestorKey{st.ID, ver}, func() (*Dir, error) {
		return BuildTree(st.SlotsAt(ver)), nil
	})
	return t
}
