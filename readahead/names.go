package readahead

import (
	"sort"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// raSessions is the sessions/ listing order name streams follow.
type raSessions struct {
	ids []layout.SessionID
	idx map[layout.SessionID]int
}

// name moves the name stream of name across sessions.
func (r *ReadAhead) name(id layout.SessionID, name string, read bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	key := raKey{name: name}
	s, ok := r.names.Get(key)
	if !ok {
		s = r.newStreamLocked(r.names, key)
		s.lastID = id
	}
	if s.lastID == id && s.last < 0 {
		return // one session so far: no pattern, and no listing asked for
	}
	s.lastID = id
	p, ok := r.sessions.idx[id]
	if !ok {
		// The order is the last listing of sessions/ (Listed), never
		// learned here: a listing walks every hour partition of the
		// bucket, one LIST each, and two lookups of a name by session
		// ID (a program that knows its IDs, on a mount that never
		// listed sessions/) made one, again every second for new
		// sessions, for a prediction (tree.md: looking up an ID works
		// even when a listing would be expensive).
		return
	}
	if !r.stepLocked(s, p, now) {
		return
	}
	if read && !s.reads {
		s.reads = true
		s.nextBody = p + s.dir
	}
	s.nextBody = s.past(s.nextBody, p)
	w, n := r.stateWindow(s, now), len(r.sessions.ids)
	if s.reads {
		// A body fetch loads (refreshes) the state first: the state
		// cursor follows the body cursor.
		for ; s.ahead(s.nextBody, p, w, n); s.nextBody += s.dir {
			r.goSession(s, s.nextBody, r.sessions.ids[s.nextBody], name, true)
		}
		s.next = s.past(s.next, s.nextBody-s.dir)
		return
	}
	for ; s.ahead(s.next, p, w, n); s.next += s.dir {
		r.goSession(s, s.next, r.sessions.ids[s.next], name, false)
	}
}

// stateWindow is how far ahead name stream s loads states. A state is
// fresh for the metadata TTL; one loaded further ahead than the reader
// gets in half of it would be checked again when the reader comes (two
// round trips, one after the other, on its path), so the window is at
// most what the reader's rate covers in TTL/2, and at least
// raMinStateWindow.
func (r *ReadAhead) stateWindow(s *raStream, now time.Time) int {
	w := window(s.run)
	el := now.Sub(s.t0)
	if r.ttl <= 0 || el <= 0 || s.last == s.p0 {
		return w
	}
	rate := float64(abs(s.last-s.p0)) / el.Seconds()
	return min(w, max(raMinStateWindow, int(rate*r.ttl.Seconds()/2)))
}

// goSession loads (or refreshes) the state of session id at position p
// of name stream s in the background and, with body, prefetches the
// body of name in it.
func (r *ReadAhead) goSession(s *raStream, p int, id layout.SessionID, name string, body bool) {
	ctx, gen := s.ctx, s.gen
	r.st.issued.Add(1)
	go func() {
		select {
		case r.stateSem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		r.st.inFlight.Add(1)
		st, err := r.states.State(schedblob.Speculative(ctx), id)
		r.st.inFlight.Add(-1)
		<-r.stateSem
		if err != nil {
			if ctx.Err() == nil {
				r.st.failed.Add(1)
			}
			return
		}
		r.st.states.Add(1)
		if r.warm != nil {
			r.warm(schedblob.Speculative(ctx), st, name)
		}
		if !body {
			return
		}
		e, ok := st.Slot(name)
		if !ok || !r.bodies.Prefetchable(&e.Descriptor) {
			return
		}
		r.mu.Lock()
		ok = s.gen == gen && r.reserveLocked(s, p, e.Descriptor.Size)
		r.mu.Unlock()
		if ok {
			r.body(ctx, Pos{ID: id, Name: name}, handOver(p), &e.Descriptor)
		}
	}()
}

// Listed records the order of a listing of sessions/ (readdir sorts it
// by name, as the shell's glob does).
func (r *ReadAhead) Listed(ids []layout.SessionID) {
	sorted := append([]layout.SessionID(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })
	idx := make(map[layout.SessionID]int, len(sorted))
	for i, id := range sorted {
		idx[id] = i
	}
	r.mu.Lock()
	r.sessions = raSessions{ids: sorted, idx: idx}
	r.mu.Unlock()
}
