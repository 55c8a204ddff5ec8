package cache

import (
	"context"
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

	mu      sync.Mutex // guards the maps below; no I/O while held
	refs    memo[[]string]
	ns      memo[[]layout.Namespace]
	refVals map[string]memo[layout.Ref]
	metas   *simplelru.LRU[metaKey, layout.SnapshotMeta]
	mems    *simplelru.LRU[memKey, []layout.Descriptor]
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
		log: func(msg string, args ...any) { c.log.Warn(msg, args...) }}
	v.metas, _ = simplelru.NewLRU[metaKey, layout.SnapshotMeta](65536, nil)
	v.mems, _ = simplelru.NewLRU[memKey, []layout.Descriptor](1024, nil)
	return v
}

func (v *Views) fresh(at time.Time) bool {
	return v.ttl > 0 && v.now().Sub(at) < v.ttl
}

// SnapshotMeta returns snapshot metadata; immutable, cached forever.
func (v *Views) SnapshotMeta(ctx context.Context, id layout.SessionID, ver uint32) (layout.SnapshotMeta, error) {
	return readThrough(&v.mu, v.metas, metaKey{id, ver}, func() (layout.SnapshotMeta, error) {
		m, err := v.store.ReadSnapshotMeta(ctx, id, ver)
		if err == nil && m.TypeInvalid != "" {
			v.log("snapshot type is none of checkpoint, provisional and queueing; counted as a checkpoint, as a missing one is",
				"session", id.String(), "version", ver, "type", m.TypeInvalid)
		}
		return m, err
	})
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
		return v.store.ListRefs(ctx, func(key string, err error) { v.log("skipping malformed ref key", "key", key, "err", err) })
	})
}

// Ref reads one ref, re-read at most once per TTL.
func (v *Views) Ref(ctx context.Context, name string) (layout.Ref, error) {
	return readFresh(v, func() memo[layout.Ref] { return v.refVals[name] }, func(m memo[layout.Ref]) { v.refVals[name] = m }, func() (layout.Ref, error) {
		return v.store.ReadRef(ctx, name)
	})
}

// InvalidateRefs drops cached refs after this mount changed one.
func (v *Views) InvalidateRefs() {
	v.mu.Lock()
	v.refs = memo[[]string]{}
	v.refVals = map[string]memo[layout.Ref]{}
	v.mu.Unlock()
}

// Namespaces lists memory namespaces with their latest versions, at most
// once per TTL.
func (v *Views) Namespaces(ctx context.Context) ([]layout.Namespace, error) {
	return readFresh(v, func() memo[[]layout.Namespace] { return v.ns }, func(m memo[[]layout.Namespace]) { v.ns = m }, func() ([]layout.Namespace, error) {
		return v.store.ListNamespaces(ctx, func(key string, err error) { v.log("skipping malformed memory key", "key", key, "err", err) })
	})
}

// InvalidateMemories drops the cached namespace list.
func (v *Views) InvalidateMemories() {
	v.mu.Lock()
	v.ns = memo[[]layout.Namespace]{}
	v.mu.Unlock()
}

// Memory returns the records of namespace ns at version ver; immutable.
func (v *Views) Memory(ctx context.Context, ns string, ver uint32) ([]layout.Descriptor, error) {
	return readThrough(&v.mu, v.mems, memKey{ns, ver}, func() ([]layout.Descriptor, error) {
		return v.store.ReadMemory(ctx, ns, ver)
	})
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
