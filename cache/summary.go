package cache

import (
	"context"
	"time"

	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sync/errgroup"
)

// summaryWalk bounds how many empty snapshots Summary reads back before
// it loads the whole state instead.
const summaryWalk = 16

type summary struct {
	version   uint32
	updatedAt time.Time
	checked   time.Time
}

// Summary returns a session's latest version and the time of its last
// content append without loading its state: one LIST and, when the
// version moved, the latest snapshot (walking back over empty ones). It is
// what a session directory's attributes need, so `ls -l sessions/` over
// many sessions does not build every session's full state.
func (c *Cache) Summary(ctx context.Context, id layout.SessionID) (version uint32, updatedAt time.Time, err error) {
	now := c.opts.Now()
	c.mu.Lock()
	s, loaded := c.sessions.Peek(id)
	sum, ok := c.summaries[id]
	c.mu.Unlock()
	if loaded {
		if st := s.st.Load(); st != nil && s.fresh() {
			return st.Version, st.UpdatedAt, nil
		}
	}
	if ok && c.opts.MetadataTTL > 0 && now.Sub(sum.checked) < c.opts.MetadataTTL {
		return sum.version, sum.updatedAt, nil
	}
	fp, err := c.store.LatestVersion(ctx, id)
	if err != nil {
		return 0, time.Time{}, err
	}
	c.stats.checks.Add(1)
	switch {
	case loaded && s.st.Load() != nil && s.st.Load().Version == fp:
		st := s.st.Load()
		sum = summary{version: fp, updatedAt: st.UpdatedAt}
	case ok && sum.version == fp:
	default:
		sum, err = c.summarise(ctx, id, fp)
		if err != nil {
			return 0, time.Time{}, err
		}
	}
	sum.checked = now
	c.mu.Lock()
	if c.summaries == nil {
		c.summaries = map[layout.SessionID]summary{}
	}
	c.summaries[id] = sum
	c.mu.Unlock()
	return sum.version, sum.updatedAt, nil
}

func (c *Cache) summarise(ctx context.Context, id layout.SessionID, fp uint32) (summary, error) {
	for v := fp; v > 0 && fp-v < summaryWalk; v-- {
		snaps, err := c.snapshots(ctx, id, v, v)
		if err != nil {
			return summary{}, err
		}
		// A snapshot of fork records only counts as empty.
		var newest time.Time
		content := false
		for _, ds := range snaps { // one snapshot, version v
			newest, content = layout.AppendTime(ds)
		}
		if content {
			if newest.IsZero() {
				break // no times here: let the state decide
			}
			return summary{version: fp, updatedAt: newest}, nil
		}
	}
	if fp == 0 {
		return summary{version: 0, updatedAt: id.Time()}, nil
	}
	st, err := c.State(ctx, id)
	if err != nil {
		return summary{}, err
	}
	return summary{version: st.Version, updatedAt: st.UpdatedAt}, nil
}

// DefaultSummaryParallel bounds the requests a batch of summaries keeps
// in flight.
const DefaultSummaryParallel = 32

// Summaries computes the summary of every session in ids concurrently, at
// most par at a time (DefaultSummaryParallel when par < 1), so that the
// attributes the kernel then asks for entry by entry (READDIRPLUS, ls -l)
// are answered from the cache within the TTL: one freshness pass per
// listing, issued wide, instead of one round trip after another per
// session. A session whose summary fails is left out; its own getattr
// reports the error.
func (c *Cache) Summaries(ctx context.Context, ids []layout.SessionID, par int) {
	if c.opts.MetadataTTL <= 0 {
		return // every getattr checks the bucket anyway: nothing to keep
	}
	if par < 1 {
		par = DefaultSummaryParallel
	}
	var g errgroup.Group
	g.SetLimit(par)
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			_, _, _ = c.Summary(ctx, id) // the entry's getattr reports a failure
			return nil
		})
	}
	_ = g.Wait()
}
