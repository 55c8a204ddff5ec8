package readahead

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// versionOrder is versions 0..latest in the order of their names, and
// each one's position in it.
type versionOrder struct {
	vers []uint32
	idx  map[uint32]int
}

// version moves the version streams of pos's name in its session's
// history: one by the versions' numbers, one by their names; the one in
// order for longer fetches, as for a view's two orders (session).
func (r *ReadAhead) version(pos *Pos) {
	st, ok := r.states.Peek(pos.ID)
	if !ok || pos.At > st.Version {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	var k pick[struct{}]
	for _, byName := range []bool{false, true} {
		p := int(pos.At)
		if byName {
			p = r.versionOrderLocked(st.Version).idx[pos.At]
		}
		key := raKey{id: pos.ID, name: pos.Name, byName: byName}
		s, ok := r.versions.Get(key)
		if !ok {
			s = r.newStreamLocked(r.versions, key)
		}
		if r.stepLocked(s, p, now) {
			k.offer(s, p, struct{}{})
		}
	}
	s, at, _, ok := k.winner()
	if !ok {
		return
	}
	n := int(st.Version) + 1
	for ; s.ahead(s.next, at, window(s.run), n); s.next += s.dir {
		v := uint32(s.next)
		if s.key.byName {
			v = r.versionOrderLocked(st.Version).vers[s.next]
		}
		if v == 0 {
			continue // at/0 is empty
		}
		e, ok := st.SlotAt(pos.Name, v)
		if !ok || !r.bodies.Prefetchable(&e.Descriptor) {
			continue
		}
		if !r.reserveLocked(s, s.next, e.Descriptor.Size) {
			break
		}
		r.goBody(s.ctx, Pos{ID: pos.ID, At: v, Name: pos.Name}, handOver(s.next), &e.Descriptor)
	}
}

// versionOrderLocked returns versions 0..latest in the order of their
// names (at/'s listing, the shell's glob).
func (r *ReadAhead) versionOrderLocked(latest uint32) *versionOrder {
	if o, ok := r.verOrders.Get(latest); ok {
		return o
	}
	o := &versionOrder{vers: make([]uint32, 0, int(latest)+1), idx: make(map[uint32]int, int(latest)+1)}
	for v := range uint64(latest) + 1 {
		o.vers = append(o.vers, uint32(v))
	}
	slices.SortFunc(o.vers, func(a, b uint32) int {
		return strings.Compare(strconv.FormatUint(uint64(a), 10), strconv.FormatUint(uint64(b), 10))
	})
	for i, v := range o.vers {
		o.idx[v] = i
	}
	r.verOrders.Add(latest, o)
	return o
}
