package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Freshness checks by hour partition. A traversal of many sessions (cat
// sessions/*/x, and the read-ahead in front of it) re-checks each
// session's latest version once per TTL. Asked session by session that is
// one LIST each: 2,000 sessions read one after another cost 2,000 round
// trips of re-checks, however wide the read-ahead. But a session's
// directory sits in the hour partition of its ID, and one LIST of a
// partition in full names the newest snapshot of every session in it
// (layout.Store.ListHourVersions). So a re-check lists the session's
// hour, and every session of that hour is confirmed until the TTL runs
// out: the re-checks of 2,000 sessions over 48 hours cost 48 LISTs. The
// re-checks of one hour that come while its LIST runs wait for it.
//
// An hour whose full listing takes more than hourCheckPages pages (long
// histories) is remembered as such, and its sessions are asked one by one
// as before; so is every session when the TTL is 0 (each access asks).
// Each page answers the sessions it shows in full as it comes: the one
// session of an hour with 10,000 versions is known from the first page
// (its newest snapshot comes first), not after the pages allowed and a
// LIST of its own.

// hourCheckPages bounds the pages of one hour check: past it the hour's
// sessions are asked one by one.
const hourCheckPages = 2

// hourCheckKeep is how many hour checks are kept before the expired ones
// are dropped.
const hourCheckKeep = 256

// hourCheck is one LIST of an hour partition in full, or one running.
type hourCheck struct {
	done    chan struct{} // closed when the check ended
	checked time.Time     // taken before the LIST
	// found are the sessions the check has shown in full, in ID order:
	// after each page those of the pages so far, so that a session whose
	// keys are on the first page of a long hour is answered from it.
	// page is closed, and replaced, when found grows. Both guarded by
	// Cache.mu.
	found []layout.ListedSession
	page  chan struct{}
	err   error // set before done is closed
}

// shown records the sessions the check's pages show in full so far.
func (c *Cache) shown(hc *hourCheck, found []layout.ListedSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc.found = found
	close(hc.page)
	hc.page = make(chan struct{})
}

// hourChecks are the last or running check of each hour, and the hours
// found too long to check whole. Guarded by Cache.mu.
type hourChecks struct {
	of   map[uint32]*hourCheck
	long map[uint32]bool
	// inval holds when Invalidate was last called for a session: an
	// hour check from before then no longer confirms it. Entries older
	// than the TTL can confirm nothing either way and are dropped.
	inval map[layout.SessionID]time.Time
}

// invalidateHourLocked records that id changed at now (Cache.Invalidate).
// c.mu is held.
func (c *Cache) invalidateHourLocked(id layout.SessionID, now time.Time) {
	if c.opts.MetadataTTL <= 0 {
		return
	}
	if c.hours.inval == nil {
		c.hours.inval = map[layout.SessionID]time.Time{}
	}
	if len(c.hours.inval) >= hourCheckKeep {
		for k, t := range c.hours.inval {
			if !c.freshAt(now, t) {
				delete(c.hours.inval, k)
			}
		}
	}
	c.hours.inval[id] = now
}

// freshVersion returns id's latest version as the bucket showed it at
// checked, no older than the TTL: from a listing's freshness pass or a
// summary (listedVersion), from a check of id's hour partition, or from a
// LIST of id's own snapshots.
func (c *Cache) freshVersion(ctx context.Context, id layout.SessionID) (version uint32, checked time.Time, err error) {
	if v, at, ok := c.listedVersion(id); ok {
		return v, at, nil
	}
	v, at, ok, err := c.hourVersion(ctx, id)
	if ok {
		return v, at, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The bucket did not answer the hour's LIST in time: asking
		// again for this one session would make its caller wait twice.
		return 0, time.Time{}, fmt.Errorf("latest version of %s: %w", id, err)
	}
	checked = c.opts.Now()
	c.stats.checks.Add(1)
	version, err = c.store.LatestVersion(ctx, id)
	return version, checked, err
}

// hourVersion returns id's latest version from a check of its hour
// partition within the TTL, running one when there is none; ok is false
// when the check cannot say (the hour is too long to list whole, the
// LIST failed, the listing does not show id) and id must be asked alone.
// err is the check's error when its LIST failed.
func (c *Cache) hourVersion(ctx context.Context, id layout.SessionID) (version uint32, checked time.Time, ok bool, err error) {
	if c.opts.MetadataTTL <= 0 {
		return 0, time.Time{}, false, nil
	}
	h := id.Hour()
	now := c.opts.Now()
	c.mu.Lock()
	hc := c.hours.of[h]
	if hc != nil {
		select {
		case <-hc.done:
			if !c.freshAt(now, hc.checked) || (hc.err != nil && !errors.Is(hc.err, layout.ErrLongPartition)) {
				hc = nil // expired, or failed: check again
			}
		default: // running: wait for it
		}
	}
	if hc == nil && c.hours.long[h] {
		c.mu.Unlock()
		return 0, time.Time{}, false, nil
	}
	if hc == nil {
		hc = c.startHourCheckLocked(h, now)
	}
	c.mu.Unlock()
	for {
		ended := closed(hc.done) // then found, read after it, is final
		c.mu.Lock()
		found, page, err := hc.found, hc.page, hc.err
		t, changed := c.hours.inval[id]
		c.mu.Unlock()
		if changed && !hc.checked.After(t) {
			return 0, time.Time{}, false, nil // changed since that LIST: ask alone
		}
		i, ok := slices.BinarySearchFunc(found, id, func(l layout.ListedSession, id layout.SessionID) int { return l.ID.Compare(id) })
		if ok && (found[i].Version > 0 || found[i].Manifest) {
			return found[i].Version, hc.checked, true, nil
		}
		if ended {
			if err != nil && !errors.Is(err, layout.ErrLongPartition) {
				return 0, time.Time{}, false, err
			}
			return 0, time.Time{}, false, nil // not in the hour, or past its pages: ask alone
		}
		select {
		case <-page:
		case <-hc.done:
		case <-ctx.Done():
			return 0, time.Time{}, false, nil
		}
	}
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// startHourCheckLocked starts the check of hour h. It runs apart from
// its first caller's context: every re-check of the hour waits for it,
// and each request has a deadline of its own. c.mu is held.
func (c *Cache) startHourCheckLocked(h uint32, now time.Time) *hourCheck {
	if c.hours.of == nil {
		c.hours.of, c.hours.long = map[uint32]*hourCheck{}, map[uint32]bool{}
	}
	if len(c.hours.of) >= hourCheckKeep {
		for k, old := range c.hours.of {
			select {
			case <-old.done:
				if !c.freshAt(now, old.checked) {
					delete(c.hours.of, k)
				}
			default:
			}
		}
	}
	hc := &hourCheck{done: make(chan struct{}), page: make(chan struct{}), checked: now}
	c.hours.of[h] = hc
	c.stats.hourChecks.Add(1)
	go func() {
		found, err := c.store.ListHourVersions(context.Background(), h, hourCheckPages, c.skipKey,
			func(found []layout.ListedSession) { c.shown(hc, found) })
		c.mu.Lock()
		long := errors.Is(err, layout.ErrLongPartition)
		if err == nil || long {
			hc.found = found // else what the pages before the failure showed stays
		}
		hc.err = err
		if long {
			c.hours.long[h] = true
		}
		c.mu.Unlock()
		close(hc.done)
	}()
	return hc
}
