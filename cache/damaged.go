package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/pugmark/pugfs/layout"
)

// History below a damaged snapshot. A session one of whose snapshots
// cannot be decoded has no state (State fails with layout.ErrCorrupt):
// its files depend on every snapshot. Its versions before the damaged
// one do not, and they are what someone looking into the damage wants
// to see. They are built on demand from snapshots 1..v, and the largest
// such state built is kept per session (a state of versions 1..k answers
// for every v <= k), in a small LRU of its own (Cache.partial): damaged
// sessions are rare, and a state of them never goes into the session
// LRU, which would then count the session as loaded.

// partialMax bounds the damaged sessions whose partial state is kept.
const partialMax = 16

// StateUpTo returns a state of id that holds versions 1..v at least: the
// session's state when it loads; else, when the load failed on a damaged
// snapshot, one built from snapshots 1..v alone, which fails as they do.
// It is for history (.pugmark/at/<v>), never for the live tree.
func (c *Cache) StateUpTo(ctx context.Context, id layout.SessionID, v uint32) (*State, error) {
	st, err := c.State(ctx, id)
	if err == nil || !errors.Is(err, layout.ErrCorrupt) {
		return st, err
	}
	c.mu.Lock()
	p, ok := c.partial.Get(id)
	c.mu.Unlock()
	if ok && p.Version >= v {
		return p, nil
	}
	latest, lerr := c.store.LatestVersion(ctx, id)
	if lerr != nil {
		return nil, err
	}
	if v > latest {
		return nil, fmt.Errorf("session %s: %w: version %d, latest %d", id, layout.ErrNotFound, v, latest)
	}
	p, perr := c.entry(id).build(ctx, v)
	if perr != nil {
		return nil, perr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.partial.Peek(id); !ok || old.Version < p.Version {
		c.partial.Add(id, p)
	}
	return p, nil
}

// Snapshot returns the delta committed at version v of id
// (.pugmark/snapshots/<v>.json): from the session's state, or, when a
// snapshot of the session is damaged, from the snapshots read one by one,
// so that the damage costs its own version and no other.
func (c *Cache) Snapshot(ctx context.Context, id layout.SessionID, v uint32) ([]layout.Descriptor, error) {
	st, err := c.State(ctx, id)
	if err == nil {
		ds, ok := st.Snapshot(v)
		if !ok {
			return nil, fmt.Errorf("session %s: %w: version %d, latest %d", id, layout.ErrNotFound, v, st.Version)
		}
		return ds, nil
	}
	if !errors.Is(err, layout.ErrCorrupt) {
		return nil, err
	}
	r, rerr := c.readableOf(ctx, id)
	if rerr != nil {
		return nil, rerr
	}
	if v == 0 || v > r.version {
		return nil, fmt.Errorf("session %s: %w: version %d, latest %d", id, layout.ErrNotFound, v, r.version)
	}
	if r.snaps[v-1] == nil {
		return nil, r.errs[v]
	}
	return r.snaps[v-1], nil
}

// Seq returns the descriptor of id whose sequence number is n
// (.pugmark/seq/<n>); ok is false when there is none. When a snapshot of
// the session is damaged, the descriptor is looked for in those that can
// be read, and the damage is the answer when none holds it: it may be in
// the damaged one, so "no such descriptor" would not be known.
func (c *Cache) Seq(ctx context.Context, id layout.SessionID, n int64) (e layout.Entry, ok bool, err error) {
	st, err := c.State(ctx, id)
	if err == nil {
		e, ok := st.Seq(n)
		return e, ok, nil
	}
	if !errors.Is(err, layout.ErrCorrupt) {
		return layout.Entry{}, false, err
	}
	r, rerr := c.readableOf(ctx, id)
	if rerr != nil {
		return layout.Entry{}, false, rerr
	}
	for i, ds := range r.snaps {
		for _, d := range ds {
			if d.SequenceNumber == n {
				return layout.Entry{Descriptor: d, Session: id, Version: uint32(i) + 1}, true, nil
			}
		}
	}
	return layout.Entry{}, false, err
}

// readable is what can be read of a damaged session's own snapshots,
// each read alone: snaps[v-1] is version v's delta, nil when it cannot be
// read, and errs says why.
type readable struct {
	version uint32
	snaps   [][]layout.Descriptor
	errs    map[uint32]error
}

// readableOf reads every snapshot of the damaged session id one by one,
// c.opts.Parallel at a time, and keeps the result (c.readable) until the
// session has a newer version. An error other than damage fails it.
func (c *Cache) readableOf(ctx context.Context, id layout.SessionID) (*readable, error) {
	latest, _, err := c.freshVersion(ctx, id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	r, ok := c.readable.Get(id)
	c.mu.Unlock()
	if ok && r.version == latest {
		return r, nil
	}
	r = &readable{version: latest, snaps: make([][]layout.Descriptor, latest), errs: map[uint32]error{}}
	errs := make([]error, latest)
	sem := make(chan struct{}, c.opts.Parallel)
	var wg sync.WaitGroup
	for v := uint32(1); v <= latest; v++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			snaps, err := c.store.ReadSnapshotRange(ctx, id, v, v, 1)
			if err == nil && len(snaps) == 1 {
				r.snaps[v-1] = snaps[0]
				if r.snaps[v-1] == nil {
					r.snaps[v-1] = []layout.Descriptor{}
				}
				return
			}
			if err == nil {
				err = fmt.Errorf("snapshot %d of %s: %w", v, id, layout.ErrNotFound)
			}
			errs[v-1] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, layout.ErrCorrupt) {
			return nil, err
		}
		r.errs[uint32(i)+1] = err
	}
	c.mu.Lock()
	c.readable.Add(id, r)
	c.mu.Unlock()
	return r, nil
}
