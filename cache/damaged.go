package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	if ds, ok := r.snaps[v]; ok {
		return ds, nil
	}
	if err, ok := r.errs[v]; ok {
		return nil, err
	}
	return nil, fmt.Errorf("session %s: %w: version %d is not in the bucket (latest %d)", id, layout.ErrNotFound, v, r.version)
}

// DamagedVersions returns the versions of the damaged session id's own
// snapshots that are in the bucket, in order (never nil). They may leave
// gaps, or end with a version far past the others (a stray key): the
// history of a damaged session lists them, not every number up to its
// latest (audit 13: 4,294,967,295 of them for one such key, the mount
// then out of memory).
func (c *Cache) DamagedVersions(ctx context.Context, id layout.SessionID) ([]uint32, error) {
	r, err := c.readableOf(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.versions, nil
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
	for _, v := range r.versions {
		for _, d := range r.snaps[v] {
			if d.SequenceNumber == n {
				return layout.Entry{Descriptor: d, Session: id, Version: v}, true, nil
			}
		}
	}
	return layout.Entry{}, false, err
}

// readable is what can be read of a damaged session's own snapshots,
// each read alone: snaps[v] is version v's delta, errs says why a listed
// version could not be read, and versions are the versions listed, in
// order.
type readable struct {
	version  uint32
	versions []uint32
	snaps    map[uint32][]layout.Descriptor
	errs     map[uint32]error
}

// readableOf reads the snapshots of the damaged session id that its
// listing shows (one LIST a 1,000), one by one, c.opts.Parallel at a
// time, and keeps the result (c.readable) until the session has a newer
// version. A version missing from the listing is a gap, not a read:
// reading 1..latest sent a request per missing version (a gap of
// 100,000 blocked a listing for 10 minutes) and failed the readable ones
// with the first "not found" (audit 13). An error other than damage, or
// a snapshot gone since it was listed, fails it.
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
	listed, err := c.store.SnapshotVersions(ctx, id)
	if err != nil {
		return nil, err
	}
	r = &readable{version: latest, versions: []uint32{}, snaps: map[uint32][]layout.Descriptor{}, errs: map[uint32]error{}}
	for _, v := range listed {
		if v <= latest {
			r.versions = append(r.versions, v)
		}
	}
	slices.Sort(r.versions)
	snaps := make([][]layout.Descriptor, len(r.versions))
	errs := make([]error, len(r.versions))
	sem := make(chan struct{}, c.opts.Parallel)
	var wg sync.WaitGroup
	for i, v := range r.versions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			got, err := c.store.ReadSnapshotRange(ctx, id, v, v, 1)
			switch {
			case err != nil:
				errs[i] = err
			case len(got) != 1:
				errs[i] = fmt.Errorf("snapshot %d of %s: %w", v, id, layout.ErrNotFound)
			case got[0] == nil:
				snaps[i] = []layout.Descriptor{}
			default:
				snaps[i] = got[0]
			}
		})
	}
	wg.Wait()
	for i, v := range r.versions {
		switch err := errs[i]; {
		case err == nil:
			r.snaps[v] = snaps[i]
		case errors.Is(err, layout.ErrCorrupt):
			r.errs[v] = err
		default:
			return nil, err
		}
	}
	if n := len(r.versions); n > 0 && r.versions[n-1] == latest {
		// Kept only when the listing has caught up with the latest
		// version (LIST may lag, §2.5): a listing short of it would
		// stay until the session moved on.
		c.mu.Lock()
		c.readable.Add(id, r)
		c.mu.Unlock()
	}
	return r, nil
}
