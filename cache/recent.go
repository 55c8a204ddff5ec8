package cache

import (
	"context"
	"slices"

	"github.com/pugmark/pugfs/layout"
)

// Recent snapshots: a session's summary reads its latest snapshot (to
// learn its last append), and a load of the same session soon after, the
// lookup of one of its files, needs that snapshot again: a second GET of
// an immutable object, one of the requests `cat sessions/*/b.txt` pays
// per session. Single snapshots read through Cache.snapshots are kept
// here, bounded in bytes, and loads take the newest versions they need
// from here. Snapshots never change, so nothing here can be stale.

const (
	// recentMaxBytes bounds the estimated memory of the snapshots kept.
	recentMaxBytes = 16 << 20
	// recentMaxDescs keeps snapshots of up to this many descriptors: a
	// larger one is a commit of a whole tree, rare enough to read twice.
	recentMaxDescs = 1024
)

// recentSnaps is a byte-bounded LRU of single snapshots, guarded by
// Cache.mu.
type recentSnaps struct {
	order []ancestorKey // oldest first
	snaps map[ancestorKey][]layout.Descriptor
	bytes int64
}

// snapBytes estimates the memory a snapshot holds.
func snapBytes(ds []layout.Descriptor) int64 {
	n := int64(0)
	for i := range ds {
		n += 256 + int64(len(ds[i].Name)+len(ds[i].Data))
		for k, v := range ds[i].Metadata {
			n += int64(len(k) + len(v))
		}
	}
	return n
}

// addLocked keeps version v of id.
func (r *recentSnaps) addLocked(id layout.SessionID, v uint32, ds []layout.Descriptor) {
	if len(ds) > recentMaxDescs {
		return
	}
	k := ancestorKey{id, v}
	if r.snaps == nil {
		r.snaps = map[ancestorKey][]layout.Descriptor{}
	}
	if _, ok := r.snaps[k]; ok {
		return
	}
	r.snaps[k] = ds
	r.order = append(r.order, k)
	r.bytes += snapBytes(ds)
	for r.bytes > recentMaxBytes && len(r.order) > 1 {
		old := r.order[0]
		r.order = r.order[1:]
		r.bytes -= snapBytes(r.snaps[old])
		delete(r.snaps, old)
	}
}

// readSnaps returns versions from..to of id. The first of them that a
// lookup is reading early (early.go) come from those reads; the newest
// that are among the recent snapshots (the latest, when a summary just
// read it) are taken from there; only the rest is read from the store. A
// single version read is kept.
func (c *Cache) readSnaps(ctx context.Context, id layout.SessionID, from, to uint32) ([][]layout.Descriptor, error) {
	if early := c.earlyFrom(id, from, to); len(early) > 0 {
		return c.readSnapsEarly(ctx, id, from, to, early)
	}
	var tail [][]layout.Descriptor // newest first
	c.mu.Lock()
	for from > 0 && to >= from {
		ds, ok := c.recent.snaps[ancestorKey{id, to}]
		if !ok {
			break
		}
		tail = append(tail, ds)
		to--
	}
	c.mu.Unlock()
	slices.Reverse(tail)
	if len(tail) > 0 && to < from {
		return tail, nil
	}
	snaps, err := c.store.ReadSnapshotRange(ctx, id, from, to, c.opts.Parallel)
	if err != nil {
		return nil, err
	}
	if from == to && len(snaps) == 1 && len(tail) == 0 {
		c.mu.Lock()
		c.recent.addLocked(id, from, snaps[0])
		c.mu.Unlock()
	}
	return append(snaps, tail...), nil
}
