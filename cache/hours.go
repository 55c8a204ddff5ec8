package cache

import (
	"context"
	"slices"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// hourLists are the listings behind by-hour/: the hour partitions, and
// the sessions of each hour asked for. Guarded by Cache.mu.
type hourLists struct {
	hours   []uint32
	checked time.Time
	valid   bool
	// of holds each listed hour's sessions, in ID order.
	of map[uint32]hourList
}

type hourList struct {
	ids []layout.SessionID
	// partition: the LIST found the partition, even if nothing in it
	// is a session (the all-zero ID's hour of a bucket that has one):
	// by-hour/ lists such an hour, so its lookup is an empty directory.
	partition bool
	checked   time.Time
}

// Hours returns the hour counters of every hour partition, oldest first,
// re-listed at most once per TTL. A fresh full session list answers
// without a request; otherwise the partition tree is walked concurrently
// (layout.Store.ListHours).
func (c *Cache) Hours(ctx context.Context) ([]uint32, error) {
	now := c.opts.Now()
	c.mu.Lock()
	if c.hourLists.valid && c.freshAt(now, c.hourLists.checked) {
		hs := slices.Clone(c.hourLists.hours)
		c.mu.Unlock()
		return hs, nil
	}
	if c.list.valid && c.freshAt(now, c.list.checked) {
		hs := hoursOf(c.list.found)
		c.mu.Unlock()
		return hs, nil
	}
	known := c.knownHoursLocked()
	c.mu.Unlock()
	hs, err := c.store.ListHours(ctx, 0, known, c.skipKey)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.hourLists.hours, c.hourLists.checked, c.hourLists.valid = hs, now, true
	c.mu.Unlock()
	return slices.Clone(hs), nil
}

// HourSessions returns the sessions of one hour partition in ID order,
// re-listed at most once per TTL with one LIST per 1,000 sessions, or
// taken from a fresh full session list. Sessions this mount created are
// merged in immediately (SessionCreated).
func (c *Cache) HourSessions(ctx context.Context, hour uint32) ([]layout.SessionID, error) {
	ids, _, err := c.HourPartition(ctx, hour)
	return ids, err
}

// HourPartition is HourSessions, and whether the hour partition exists:
// it may hold keys that are no session (skipped and logged) and then
// has no sessions but is one of Hours. Taken from a fresh full session
// list, an hour without sessions exists only while Hours lists it from
// a fresh walk of its own.
func (c *Cache) HourPartition(ctx context.Context, hour uint32) ([]layout.SessionID, bool, error) {
	now := c.opts.Now()
	c.mu.Lock()
	if l, ok := c.hourLists.of[hour]; ok && c.freshAt(now, l.checked) {
		ids := slices.Clone(l.ids)
		c.mu.Unlock()
		return ids, l.partition || len(ids) > 0, nil
	}
	if c.list.valid && c.freshAt(now, c.list.checked) {
		var ids []layout.SessionID
		for _, l := range c.list.found {
			if l.ID.Hour() == hour {
				ids = append(ids, l.ID)
			}
		}
		// An hour whose keys are all no session is one of Hours as long
		// as its own walk is fresh, which Hours answers before the
		// session list: it exists then too (review 30).
		exists := len(ids) > 0
		if !exists && c.hourLists.valid && c.freshAt(now, c.hourLists.checked) {
			_, exists = slices.BinarySearch(c.hourLists.hours, hour)
		}
		c.mu.Unlock()
		slices.SortFunc(ids, layout.SessionID.Compare)
		return ids, exists, nil
	}
	c.mu.Unlock()
	l, err := c.hourReads.do(ctx, hour, func(ctx context.Context) (hourList, error) {
		c.mu.Lock()
		l, ok := c.hourLists.of[hour] // listed by a flight that ended since the look above
		c.mu.Unlock()
		if ok && c.freshAt(now, l.checked) {
			return l, nil
		}
		skipped := false // only this flight's goroutine calls bad
		ids, err := c.store.ListHour(ctx, hour, func(key string, err error) {
			skipped = true
			c.skipKey(key, err)
		})
		if err != nil {
			return hourList{}, err
		}
		l = hourList{ids: ids, partition: skipped || len(ids) > 0, checked: now}
		c.mu.Lock()
		if c.hourLists.of == nil {
			c.hourLists.of = map[uint32]hourList{}
		}
		c.hourLists.of[hour] = l
		c.mu.Unlock()
		return l, nil
	})
	if err != nil {
		return nil, false, err
	}
	return slices.Clone(l.ids), l.partition || len(l.ids) > 0, nil
}

// hoursAhead is how many hour partitions PrefetchHours lists at once
// after the one asked for.
const hoursAhead = 32

// PrefetchHours lists the hour partitions after hour that by-hour/
// showed last (the next hoursAhead of them), wide in parallel, unless
// their listings are fresh, when the hour before it was listed within
// the TTL too: a walk of the hours in order. `ls by-hour/*/` (or a day's hours, by glob)
// looks up and lists its arguments one after another in name order,
// which is the hours' order: one LIST after another, 48 of them 20 ms
// away took 1.2 s. Nothing is read when by-hour/ has not been listed
// within the TTL (a lone `cd`) or with a TTL of 0. Errors are left to
// each hour's own listing.
func (c *Cache) PrefetchHours(ctx context.Context, hour uint32) {
	now := c.opts.Now()
	c.mu.Lock()
	if !c.hourLists.valid || !c.freshAt(now, c.hourLists.checked) || (c.list.valid && c.freshAt(now, c.list.checked)) {
		c.mu.Unlock()
		return
	}
	hs := c.hourLists.hours
	i, _ := slices.BinarySearch(hs, hour+1)
	if i < 2 || hs[i-1] != hour {
		c.mu.Unlock()
		return
	}
	if l, ok := c.hourLists.of[hs[i-2]]; !ok || !c.freshAt(now, l.checked) {
		// Only a walk reads ahead: one hour looked at alone costs
		// its own LIST, not the next hoursAhead.
		c.mu.Unlock()
		return
	}
	var stale []uint32
	for _, h := range hs[i:min(len(hs), i+hoursAhead)] {
		if l, ok := c.hourLists.of[h]; !ok || !c.freshAt(now, l.checked) {
			stale = append(stale, h)
		}
	}
	c.mu.Unlock()
	ctx = schedblob.Speculative(ctx)
	wide(ctx, stale, func(h uint32) { _, _ = c.HourSessions(ctx, h) })
}

// hourCreatedLocked records a session this mount created in the hour
// listings; Cache.mu is held.
func (c *Cache) hourCreatedLocked(id layout.SessionID) {
	h := id.Hour()
	if c.hourLists.valid {
		if i, found := slices.BinarySearch(c.hourLists.hours, h); !found {
			c.hourLists.hours = slices.Insert(c.hourLists.hours, i, h)
		}
	}
	if l, ok := c.hourLists.of[h]; ok {
		if i, found := slices.BinarySearchFunc(l.ids, id, layout.SessionID.Compare); !found {
			l.ids = slices.Insert(slices.Clone(l.ids), i, id)
			c.hourLists.of[h] = l
		}
	}
}

// skipKey logs, once, a key under sessions/ that is not a session path;
// it is left out of listings.
func (c *Cache) skipKey(key string, err error) {
	c.warned.warn("skipping a key under sessions/ that is not a session path", key, err)
}

// knownHoursLocked returns the hour partitions this cache has seen: those
// of the last listings (however old) and of the sessions it has summaries
// of. A walk lists their levels at once (layout.Store.ListHours); it
// still returns only what it finds. Cache.mu is held.
func (c *Cache) knownHoursLocked() []uint32 {
	hs := slices.Clone(c.hourLists.hours)
	if c.list.valid {
		hs = append(hs, hoursOf(c.list.found)...)
	}
	for id := range c.summaries {
		hs = append(hs, id.Hour())
	}
	slices.Sort(hs)
	return slices.Compact(hs)
}

func hoursOf(found []layout.ListedSession) []uint32 {
	var hs []uint32
	for _, l := range found {
		hs = append(hs, l.ID.Hour())
	}
	slices.Sort(hs)
	return slices.Compact(hs)
}
