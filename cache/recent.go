package cache

import (
	"context"

	"github.com/pugmark/pugfs/layout"
)

// Recent snapshots: a session's summary reads its latest snapshot (to
// learn its last append), and a load of the same session soon after, the
// lookup of one of its files, needs that snapshot again: a second GET of
// an immutable object, one of the requests `cat sessions/*/b.txt` pays
// per session. Single snapshots read through Cache.snapshots are kept
// here, bounded in bytes, and loads of a single version take them from
// here. Snapshots never change, so nothing here can be stale.

const (
	// recentMaxBytes bounds the estimated memory of the snapshots kept.
	recentMaxBytes = 16 << 20
	// recentMaxDescs keeps only small snapshots: the large ones are read
	// by loads of long sessions anyway, in parallel.
	recentMaxDescs = 64
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

// readSnaps returns versions from..to of id: a single version from the
// recent snapshots when it is there, else from the store (and a single
// version read is kept).
func (c *Cache) readSnaps(ctx context.Context, id layout.SessionID, from, to uint32) ([][]layout.Descriptor, error) {
	if from == to {
		c.mu.Lock()
		ds, ok := c.recent.snaps[ancestorKey{id, from}]
		c.mu.Unlock()
		if ok {
			return [][]layout.Descriptor{ds}, nil
		}
	}
	snaps, err := c.store.ReadSnapshotRange(ctx, id, from, to, c.opts.Parallel)
	if err == nil && from == to && len(snaps) == 1 {
		c.mu.Lock()
		c.recent.addLocked(id, from, snaps[0])
		c.mu.Unlock()
	}
	return snaps, err
}
