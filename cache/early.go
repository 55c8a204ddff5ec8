package cache

import (
	"context"
	"sync/atomic"

	"github.com/pugmark/pugfs/layout"
)

// Early snapshot reads. A first lookup of a session that no listing has
// shown (Find: cd, find or cat of a path into it) learns the session's
// latest version from a LIST, and only then could read its snapshots: two
// round trips before the first readdir, 40 ms on a bucket 20 ms away.
// The keys of the first versions follow from the ID alone, so Find reads
// versions 1..earlyVersions beside the LIST and the manifest: a session
// of that many versions or fewer is loaded after one round trip, and a
// longer one has its first snapshots in hand when the LIST answers. The
// cost is a "not found" GET for each of those versions a shorter session
// lacks, once per session and mount; a session a listing showed never
// pays it (its version is known, and its load reads what exists).

// earlyVersions is how many first versions Find reads before the LIST
// answers.
const earlyVersions = 4

// earlyRead is one early snapshot read; used is set when a load took its
// result.
type earlyRead struct {
	flight[[]layout.Descriptor]
	used atomic.Bool
}

// readEarly starts the reads of id's first versions and returns the
// function that ends them: it drops the reads from Cache.early, so that
// they live as long as the lookup that started them, and cancels those
// still running. A load that took a read before then keeps it.
func (c *Cache) readEarly(ctx context.Context, id layout.SessionID) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mine []*earlyRead
	var keys []ancestorKey
	c.mu.Lock()
	for v := uint32(1); v <= earlyVersions; v++ {
		k := ancestorKey{id, v}
		if _, ok := c.early[k]; ok {
			continue // another lookup's
		}
		fl := &earlyRead{flight: flight[[]layout.Descriptor]{done: make(chan struct{})}}
		if c.early == nil {
			c.early = map[ancestorKey]*earlyRead{}
		}
		c.early[k] = fl
		keys, mine = append(keys, k), append(mine, fl)
		c.stats.earlyReads.Add(1)
		go func() {
			defer close(fl.done)
			snaps, err := c.store.ReadSnapshotRange(ctx, id, k.v, k.v, 1)
			if err == nil && len(snaps) == 1 {
				fl.v = snaps[0]
			} else if err == nil {
				err = layout.ErrNotFound
			}
			fl.err = err
		}()
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		for _, k := range keys {
			delete(c.early, k)
		}
		c.mu.Unlock()
		cancel()
		for _, fl := range mine {
			if !fl.used.Load() {
				c.stats.earlyMisses.Add(1)
			}
		}
	}
}

// earlyFrom returns the early reads of id's versions from, from+1, ...
// up to to, in order, stopping at the first version without one.
func (c *Cache) earlyFrom(id layout.SessionID, from, to uint32) []*earlyRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*earlyRead
	for v := from; v <= to && v != 0; v++ {
		fl, ok := c.early[ancestorKey{id, v}]
		if !ok {
			break
		}
		out = append(out, fl)
	}
	return out
}

// readSnapsEarly is readSnaps where versions from..from+len(early)-1 have
// early reads: it reads the versions after them meanwhile, and reads
// again any early one that failed (cancelled with its lookup, or read
// before it existed).
func (c *Cache) readSnapsEarly(ctx context.Context, id layout.SessionID, from, to uint32, early []*earlyRead) ([][]layout.Descriptor, error) {
	type read struct {
		snaps [][]layout.Descriptor
		err   error
	}
	rest := make(chan read, 1)
	if next := from + uint32(len(early)); next <= to {
		go func() {
			snaps, err := c.readSnaps(ctx, id, next, to)
			rest <- read{snaps, err}
		}()
	} else {
		rest <- read{}
	}
	// Not to-from+1 up front: a stray key can make to the last version
	// there is (4,294,967,295), and the reads fail at the gap long
	// before (audit 13).
	out := make([][]layout.Descriptor, 0, min(int(to-from)+1, 4096))
	for i, fl := range early {
		select {
		case <-fl.done:
		case <-ctx.Done():
			<-rest
			return nil, ctx.Err()
		}
		ds := fl.v
		if fl.err == nil {
			fl.used.Store(true)
		} else {
			v := from + uint32(i)
			snaps, err := c.store.ReadSnapshotRange(ctx, id, v, v, 1)
			if err != nil {
				<-rest
				return nil, err
			}
			ds = snaps[0]
		}
		out = append(out, ds)
	}
	r := <-rest
	if r.err != nil {
		return nil, r.err
	}
	return append(out, r.snaps...), nil
}
