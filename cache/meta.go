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
	refVals map[string]*memo[layout.Ref]
	metas   *simplelru.LRU[metaKey, layout.SnapshotMeta]
	mems    *simplelru.LRU[memKey, []layout.Descriptor]
}

type memo[T any] struct {
	v  T
	at time.Time
	ok bool
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
	v := &Views{store: store, ttl: c.opts.MetadataTTL, now: c.opts.Now, refVals: map[string]*memo[layout.Ref]{},
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
	k := metaKey{id, ver}
	v.mu.Lock()
	m, ok := v.metas.Get(k)
	v.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := v.store.ReadSnapshotMeta(ctx, id, ver)
	if err != nil {
		return m, err
	}
	v.mu.Lock()
	v.metas.Add(k, m)
	v.mu.Unlock()
	return m, nil
}

// LatestCheckpoint returns the newest checkpoint at or below st.Version.
func (v *Views) LatestCheckpoint(ctx context.Context, st *State) (uint32, bool, error) {
	for ver := st.Version; ver > 0; ver-- {
		m, err := v.SnapshotMeta(ctx, st.ID, ver)
		if err != nil {
			return 0, false, err
		}
		if m.Type == layout.Checkpoint {
			return ver, true, nil
		}
	}
	return 0, false, nil
}

// Refs lists ref names, re-listed at most once per TTL.
func (v *Views) Refs(ctx context.Context) ([]string, error) {
	v.mu.Lock()
	if v.refs.ok && v.fresh(v.refs.at) {
		r := v.refs.v
		v.mu.Unlock()
		return r, nil
	}
	v.mu.Unlock()
	at := v.now()
	r, err := v.store.ListRefs(ctx, func(key string, err error) { v.log("skipping malformed ref key", "key", key, "err", err) })
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.refs = memo[[]string]{r, at, true}
	v.mu.Unlock()
	return r, nil
}

// Ref reads one ref, re-read at most once per TTL.
func (v *Views) Ref(ctx context.Context, name string) (layout.Ref, error) {
	v.mu.Lock()
	if m, ok := v.refVals[name]; ok && v.fresh(m.at) {
		r := m.v
		v.mu.Unlock()
		return r, nil
	}
	v.mu.Unlock()
	at := v.now()
	r, err := v.store.ReadRef(ctx, name)
	if err != nil {
		return r, err
	}
	v.mu.Lock()
	v.refVals[name] = &memo[layout.Ref]{r, at, true}
	v.mu.Unlock()
	return r, nil
}

// InvalidateRefs drops cached refs after this mount changed one.
func (v *Views) InvalidateRefs() {
	v.mu.Lock()
	v.refs = memo[[]string]{}
	v.refVals = map[string]*memo[layout.Ref]{}
	v.mu.Unlock()
}

// Namespaces lists memory namespaces with their latest versions, at most
// once per TTL.
func (v *Views) Namespaces(ctx context.Context) ([]layout.Namespace, error) {
	v.mu.Lock()
	if v.ns.ok && v.fresh(v.ns.at) {
		r := v.ns.v
		v.mu.Unlock()
		return r, nil
	}
	v.mu.Unlock()
	at := v.now()
	r, err := v.store.ListNamespaces(ctx, func(key string, err error) { v.log("skipping malformed memory key", "key", key, "err", err) })
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.ns = memo[[]layout.Namespace]{r, at, true}
	v.mu.Unlock()
	return r, nil
}

// InvalidateMemories drops the cached namespace list.
func (v *Views) InvalidateMemories() {
	v.mu.Lock()
	v.ns = memo[[]layout.Namespace]{}
	v.mu.Unlock()
}

// Memory returns the records of namespace ns at version ver; immutable.
func (v *Views) Memory(ctx context.Context, ns string, ver uint32) ([]layout.Descriptor, error) {
	k := memKey{ns, ver}
	v.mu.Lock()
	r, ok := v.mems.Get(k)
	v.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := v.store.ReadMemory(ctx, ns, ver)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.mems.Add(k, r)
	v.mu.Unlock()
	return r, nil
}

// TreeAt returns the tree of st's session at version ver (history is
// immutable; trees are cached by session and version).
func (c *Cache) TreeAt(st *State, ver uint32) *Dir {
	if ver >= st.Version {
		return st.Tree()
	}
	k := ancestorKey{st.ID, ver}
	c.mu.Lock()
	if c.trees == nil {
		c.trees, _ = simplelru.NewLRU[ancestorKey, *Dir](256, nil)
	}
	t, ok := c.trees.Get(k)
	c.mu.Unlock()
	if ok {
		return t
	}
	t = BuildTree(st.SlotsAt(ver))
	c.mu.Lock()
	c.trees.Add(k, t)
	c.mu.Unlock()
	return t
}
