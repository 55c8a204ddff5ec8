package cache

import (
	"context"
	"slices"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// summaryWalk bounds how many empty snapshots Summary reads back before
// it loads the whole state instead.
const summaryWalk = 16

// DefaultSummaryWait is how long a listing of sessions waits for the
// summaries it started (Options.SummaryWait). Past it the listing answers
// without the attributes of the entries still missing, while their
// requests go on: a session whose backend requests stall holds up no
// other (consistency.md §3). The kernel then looks such an entry up on
// its own, and that lookup waits for the session's requests (Summary).
const DefaultSummaryWait = 5 * time.Second

// MaxSummaryBatch bounds the summaries one listing fetches: past it (a
// bucket of 100,000 sessions, say) a plain ls would wait for a request per
// session it never shows the attributes of, so the listing fetches none
// and each entry's attributes cost their requests when asked for.
const MaxSummaryBatch = 5000

// DefaultSummaryParallel bounds the summaries a listing has in flight.
const DefaultSummaryParallel = 64

type summary struct {
	version   uint32
	updatedAt time.Time
	// checked is the time taken before the LIST that gave version.
	checked time.Time
	// stamp is what a listing showed of snapshot version when the
	// summary was learnt (zero: unknown); another stamp for it means
	// another snapshot under the same key (staleStamp).
	stamp layout.Stamp
}

// staleStamp reports whether the last listing shows snapshot sum.version
// of id with another stamp than the one sum was learnt from: the bucket
// was written again, and sum speaks of a snapshot that is gone.
func (c *Cache) staleStamp(id layout.SessionID, sum summary) bool {
	if sum.stamp == (layout.Stamp{}) || sum.version == 0 {
		return false
	}
	st, ok := c.store.ListedStamp(id, sum.version)
	return ok && st != sum.stamp
}

// sumFlight is one computation of a session's summary, shared by every
// caller that asks while it runs. done is closed when sum and err are
// set.
type sumFlight struct {
	done chan struct{}
	sum  summary
	err  error
}

// Listed is one session of a listing: its latest version and the time of
// its last content append, when Known.
type Listed struct {
	ID        layout.SessionID
	Version   uint32
	UpdatedAt time.Time
	// Known is false when the listing has no summary for the session:
	// one that failed, stalled past Options.SummaryWait, or was not
	// fetched because the listing is longer than MaxSummaryBatch.
	Known bool
}

// Summary returns a session's latest version and the time of its last
// content append without loading its state: one LIST and, when the
// version moved, the latest snapshot (walking back over empty ones). It is
// what a session directory's attributes need, so `ls -l sessions/` over
// many sessions does not build every session's full state. Concurrent
// callers share one computation. A caller asking for this one session
// (a lookup, a stat) waits for it as long as its requests take, each
// bounded by its own deadline and retries: a slow backend is slow, not an
// error. Only a listing bounds its wait (ListSessions).
func (c *Cache) Summary(ctx context.Context, id layout.SessionID) (version uint32, updatedAt time.Time, err error) {
	if st, ok := c.frozenOf(id); ok {
		return st.Version, st.UpdatedAtVersion(st.Version), nil
	}
	if sum, ok := c.knownSummary(id, c.opts.Now(), time.Time{}); ok {
		return sum.version, sum.updatedAt, nil
	}
	f := c.summaryFlight(id, 0, false, time.Time{})
	select {
	case <-f.done:
		return f.sum.version, f.sum.updatedAt, f.err
	case <-ctx.Done():
		return 0, time.Time{}, ctx.Err()
	}
}

// FirstLoadMax bounds the versions of a session whose first lookup
// loads its whole state (Find): one wave of snapshot reads in parallel.
const FirstLoadMax = 64

// Find is Summary for a path walk (a lookup of sessions/<id>). A session
// that no listing and no summary of this mount has shown is most likely
// about to be read (cd, find, cat of a path into it), so Find reads its
// manifest and its first snapshots (early.go), whose keys follow from
// the ID, beside the freshness LIST; and when the LIST shows at most
// FirstLoadMax versions, Find loads the state (the manifest and every
// snapshot at once) where Summary would read the latest snapshot: one
// round trip for a short session, two for a longer one, after which the
// walk's first readdir waits for none. A session a listing showed gets
// none of this: `ls -l sessions/` looks entries up again once their
// entry TTL has passed, and would load every session for nothing. A
// state that fails to load leaves the lookup to Summary, so a damaged
// session is still found and its readdir says what is wrong. Nor does a
// session whose copies an earlier mount kept (Store.KeptSession): the
// LIST vouches for them, and the load after it reads none.
func (c *Cache) Find(ctx context.Context, id layout.SessionID) (version uint32, updatedAt time.Time, err error) {
	if st, ok := c.frozenOf(id); ok {
		return st.Version, st.UpdatedAtVersion(st.Version), nil
	}
	if c.firstContact(id) {
		// A session of an hour by-hour/ listed: its link was followed
		// (ls -lL, find -L), and so will the others' be, one after
		// another. Their summaries are fetched ahead, together.
		c.WarmSummaries(c.listedHour(id))
		// A session an earlier mount read has its manifest and
		// snapshots kept in the cache directory, which the hour's LIST
		// vouches for (layout.Keeper): reading them beside the LIST
		// would only cost GETs.
		if !c.store.KeptSession(id) {
			go func() {
				// Its result lands in the manifest cache; a failure (no
				// such session) is the lookup's to report.
				_, _ = c.manifest(context.WithoutCancel(ctx), id)
			}()
			stop := c.readEarly(ctx, id)
			defer stop()
		}
		v, _, err := c.freshVersion(ctx, id)
		if err != nil {
			// Summary would ask the same, and wait out the same retries
			// again: a stalled hour LIST made a lookup fail after 10x
			// --request-timeout, not 5x (the remote audit).
			return 0, time.Time{}, err
		}
		if v > 0 && v <= FirstLoadMax {
			if st, err := c.State(ctx, id); err == nil {
				return st.Version, st.UpdatedAt, nil
			}
		}
	}
	return c.Summary(ctx, id)
}

// listedHour returns the other sessions of id's hour when that hour was
// listed on its own (HourSessions: by-hour/<hour>/) within the TTL.
func (c *Cache) listedHour(id layout.SessionID) []layout.SessionID {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.hourLists.of[id.Hour()]
	if !ok || !c.freshAt(now, l.checked) {
		return nil
	}
	out := make([]layout.SessionID, 0, len(l.ids))
	for _, o := range l.ids {
		if o != id {
			out = append(out, o)
		}
	}
	return out
}

// WarmSummaries starts computing, in the background and DefaultSummaryParallel
// at a time, the summaries of ids that the cache has none of (at most
// MaxSummaryBatch): a listing of by-hour/<hour>/ followed by a stat of
// each link's session (ls -lL, find -L) went one session after another,
// each lookup a round trip or two and five GETs (the remote audit). The
// sessions of one hour share that hour's LIST, and each reads its latest
// snapshot, wide in parallel. A plain listing of the links costs
// nothing: the first link followed starts it (Find).
func (c *Cache) WarmSummaries(ids []layout.SessionID) {
	now := c.opts.Now()
	var todo []layout.SessionID
	for _, id := range ids {
		if _, ok := c.knownSummary(id, now, time.Time{}); !ok {
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 || len(todo) > MaxSummaryBatch {
		return
	}
	go func() {
		sem := make(chan struct{}, DefaultSummaryParallel)
		for _, id := range todo {
			sem <- struct{}{}
			f := c.summaryFlight(id, 0, false, time.Time{})
			go func() {
				<-f.done
				<-sem
			}()
		}
	}()
}

// firstContact reports whether the cache knows nothing of id: no state,
// no summary (nor one being computed), no place in the last listing, no
// manifest.
func (c *Cache) firstContact(id layout.SessionID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions.Contains(id) || c.manifests.Contains(id) {
		return false
	}
	if _, ok := c.sumFlights[id]; ok {
		return false
	}
	if _, ok := c.summaries[id]; ok {
		return false
	}
	if c.list.valid {
		if _, found := slices.BinarySearchFunc(c.list.found, id, func(l layout.ListedSession, id layout.SessionID) int { return l.ID.Compare(id) }); found {
			return false
		}
	}
	return true
}

// knownSummary returns what the cache knows of id without asking the
// bucket: a fresh loaded state's version, or a summary checked within the
// TTL or at or after since (the start of the listing that asks).
func (c *Cache) knownSummary(id layout.SessionID, now, since time.Time) (summary, bool) {
	c.mu.Lock()
	s, loaded := c.sessions.Peek(id)
	sum, ok := c.summaries[id]
	c.mu.Unlock()
	if loaded {
		if st := s.st.Load(); st != nil && s.fresh() {
			return summary{version: st.Version, updatedAt: st.UpdatedAt}, true
		}
	}
	if ok && (c.freshAt(now, sum.checked) || (!since.IsZero() && !sum.checked.Before(since))) {
		return sum, true
	}
	return summary{}, false
}

// listedVersion returns the latest version of id that a listing's
// freshness pass or a summary found within the TTL, and when it was
// found; ok is false when there is none that fresh.
func (c *Cache) listedVersion(id layout.SessionID) (version uint32, checked time.Time, ok bool) {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	sum, known := c.summaries[id]
	if !known || !c.freshAt(now, sum.checked) {
		return 0, time.Time{}, false
	}
	return sum.version, sum.checked, true
}

// freshAt reports whether something checked at t may still be used at
// now; a TTL of 0 means "check every time".
func (c *Cache) freshAt(now, t time.Time) bool {
	return c.opts.MetadataTTL > 0 && now.Sub(t) < c.opts.MetadataTTL
}

// summaryFlight returns the computation of id's summary in flight,
// starting one if there is none. With known set, fp is the latest version
// as a listing saw it at checked, and no LIST is sent for it.
func (c *Cache) summaryFlight(id layout.SessionID, fp uint32, known bool, checked time.Time) *sumFlight {
	c.mu.Lock()
	if f, ok := c.sumFlights[id]; ok {
		c.mu.Unlock()
		return f
	}
	f := &sumFlight{done: make(chan struct{})}
	if c.sumFlights == nil {
		c.sumFlights = map[layout.SessionID]*sumFlight{}
	}
	c.sumFlights[id] = f
	c.mu.Unlock()
	go func() {
		// Not tied to one caller's context: others may be waiting on
		// it, and every request has a deadline of its own.
		sum, err := c.computeSummary(context.Background(), id, fp, known, checked)
		c.mu.Lock()
		if err == nil {
			if c.summaries == nil {
				c.summaries = map[layout.SessionID]summary{}
			}
			if prev, ok := c.summaries[id]; !ok || prev.version != sum.version {
				c.summaryLearntLocked()
			}
			c.summaries[id] = sum
		}
		delete(c.sumFlights, id)
		c.mu.Unlock()
		f.sum, f.err = sum, err
		close(f.done)
	}()
	return f
}

// computeSummary finds id's latest version (unless known) and its last
// content append, reading a snapshot only when the version is one it has
// no summary of.
func (c *Cache) computeSummary(ctx context.Context, id layout.SessionID, fp uint32, known bool, checked time.Time) (summary, error) {
	if !known {
		var err error
		if fp, checked, err = c.freshVersion(ctx, id); err != nil {
			return summary{}, err
		}
	}
	// The stamp the listing that gave fp showed, taken before anything
	// is read: what the summary learnt below is then of that snapshot.
	stamp, _ := c.store.ListedStamp(id, fp)
	c.mu.Lock()
	s, loaded := c.sessions.Peek(id)
	prev, ok := c.summaries[id]
	c.mu.Unlock()
	if loaded {
		if st := s.st.Load(); st != nil && st.Version == fp {
			return summary{version: fp, updatedAt: st.UpdatedAt, checked: checked, stamp: stamp}, nil
		}
	}
	if ok && prev.version == fp && !c.staleStamp(id, prev) {
		prev.checked = checked
		return prev, nil
	}
	sum, err := c.summarise(ctx, id, fp)
	sum.checked, sum.stamp = checked, stamp
	return sum, err
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

// ListSessions lists every session with its summary: one freshness pass
// per listing. The pass (listed: one LIST per hour partition, at most
// once per TTL) gives every session's latest version; a session whose
// summary is of that version is confirmed without a request, and the
// summaries of the others (one snapshot GET each) are computed wide, at
// most DefaultSummaryParallel at a time and none when more than
// MaxSummaryBatch are missing. The listing waits for them at most
// Options.SummaryWait: an entry whose summary is not there by then is
// returned without one (Known false) while its computation goes on, so a
// stalled session holds up no other (consistency.md §3). Inside the TTL
// of the last pass the listing costs no request.
func (c *Cache) ListSessions(ctx context.Context) ([]Listed, error) {
	found, since, err := c.listed(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, len(found))
	type todo struct {
		i     int
		fp    uint32
		known bool
	}
	var missing []todo
	now := c.opts.Now()
	c.mu.Lock()
	for i, l := range found {
		out[i].ID = l.ID
		if s, ok := c.sessions.Peek(l.ID); ok {
			// This mount's own commits show at once, whatever LIST says.
			if st := s.st.Load(); st != nil && s.fresh() {
				out[i].Version, out[i].UpdatedAt, out[i].Known = st.Version, st.UpdatedAt, true
				continue
			}
		}
		sum, ok := c.summaries[l.ID]
		// The listing saw the version when it saw a snapshot or the
		// manifest (no snapshot: version 0).
		known := l.Version > 0 || l.Manifest
		switch {
		case ok && known && sum.version == l.Version && !c.staleStamp(l.ID, sum):
			if sum.checked.Before(since) {
				sum.checked = since // confirmed by this pass's LIST
				c.summaries[l.ID] = sum
			}
		case ok && (c.freshAt(now, sum.checked) || !sum.checked.Before(since)):
			// Checked since the pass (a lookup): newer than the pass.
		default:
			missing = append(missing, todo{i, l.Version, known})
			continue
		}
		out[i].Version, out[i].UpdatedAt, out[i].Known = sum.version, sum.updatedAt, true
	}
	c.mu.Unlock()
	if len(missing) == 0 || len(missing) > MaxSummaryBatch {
		return out, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sem := make(chan struct{}, DefaultSummaryParallel)
		for _, m := range missing {
			sem <- struct{}{}
			f := c.summaryFlight(found[m.i].ID, m.fp, m.known, since)
			go func() {
				<-f.done
				<-sem
			}()
		}
		for range cap(sem) {
			sem <- struct{}{}
		}
	}()
	t := time.NewTimer(c.opts.SummaryWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	now = c.opts.Now()
	for _, m := range missing {
		if sum, ok := c.knownSummary(found[m.i].ID, now, since); ok {
			out[m.i].Version, out[m.i].UpdatedAt, out[m.i].Known = sum.version, sum.updatedAt, true
		}
	}
	return out, nil
}
