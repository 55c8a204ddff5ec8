package cache

import (
	"context"
	"errors"
	"fmt"

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
