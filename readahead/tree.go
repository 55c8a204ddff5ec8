package readahead

import (
	"cmp"
	"slices"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// orderKey names a tree's traversal order: by name, or by inode number
// in one view. Each view has numbers of its own, and the latest
// version's view (.pugmark/at/<latest>/) shares its tree with the live
// one: keyed by the tree alone, whichever view was read first set the
// inode order of both (review 29).
type orderKey struct {
	tree  *cache.Dir
	byIno bool
	at    uint32 // the view, for byIno; 0 by name (one order for all views)
}

// treeOrder is a tree's files in traversal order.
type treeOrder struct {
	files []*layout.Entry
	idx   map[string]int // slot name -> position
}

// session moves the session streams of pos's view.
func (r *ReadAhead) session(pos *Pos, reader uint32) {
	st, ok := r.states.Peek(pos.ID)
	if !ok || pos.At > st.Version {
		return
	}
	tree := st.Tree()
	if pos.At > 0 {
		tree = r.states.TreeAt(st, pos.At)
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	// Both orders follow the reader, and the one it has kept to longer
	// fetches (pick): one file is not fetched twice over, and a few
	// reads that happen to fall in the other order do not take over.
	var k pick[*treeOrder]
	for _, byIno := range []bool{false, true} {
		if byIno && r.inos == nil {
			break
		}
		if s, ord, p, ok := r.stepOrderLocked(pos, tree, byIno, now, reader); ok {
			k.offer(s, p, ord)
		}
	}
	if s, at, order, ok := k.winner(); ok {
		r.fetchLocked(s, order, at)
	}
}

// stepOrderLocked moves the session stream of pos's view in one order
// that reader's access continues (matchLocked): it returns the stream,
// the order, pos's position in it, and whether the stream is a pattern.
func (r *ReadAhead) stepOrderLocked(pos *Pos, tree *cache.Dir, byIno bool, now time.Time, reader uint32) (*raStream, *treeOrder, int, bool) {
	k := orderKey{tree: tree, byIno: byIno}
	if byIno {
		k.at = pos.At
	}
	ord := r.orderLocked(k, pos)
	p, ok := ord.idx[pos.Name]
	if !ok {
		return nil, nil, 0, false
	}
	s := r.matchLocked(pos, tree, byIno, p, reader)
	s.reader = reader
	return s, ord, p, r.stepLocked(s, p, now)
}

// matchLocked returns the session stream of pos's view, in one order,
// that an access by reader at position p goes to: of those it is in
// order of, the one in order for longest; else the one reader moved last
// (it jumped); else a new one, in a free slot or in place of the one
// used least recently.
func (r *ReadAhead) matchLocked(pos *Pos, tree *cache.Dir, byIno bool, p int, reader uint32) *raStream {
	var best, mine, oldest *raStream
	free := -1
	for slot := range raViewStreams {
		key := raKey{id: pos.ID, at: pos.At, byIno: byIno, slot: slot}
		s, ok := r.trees.Peek(key)
		if ok && s.tree != tree {
			r.trees.Remove(key) // a new version: its positions mean nothing now
			ok = false
		}
		switch {
		case !ok:
			if free < 0 {
				free = slot
			}
		case s.continues(p) && (best == nil || s.run > best.run):
			best = s
		case s.reader == reader && mine == nil:
			mine = s
		}
		if ok && (oldest == nil || s.used.Before(oldest.used)) {
			oldest = s
		}
	}
	switch {
	case best != nil:
		r.trees.Get(best.key)
		return best
	case mine != nil:
		r.trees.Get(mine.key)
		return mine
	case free < 0:
		free = oldest.key.slot
		r.trees.Remove(oldest.key)
	}
	s := r.newStreamLocked(r.trees, raKey{id: pos.ID, at: pos.At, byIno: byIno, slot: free})
	s.tree = tree
	return s
}

// fetchLocked fetches ahead of position p of session stream s, in order
// ord.
func (r *ReadAhead) fetchLocked(s *raStream, ord *treeOrder, p int) {
	key := s.key
	for ; s.ahead(s.next, p, window(s.run), len(ord.files)); s.next += s.dir {
		e := ord.files[s.next]
		if !r.bodies.Prefetchable(&e.Descriptor) {
			continue
		}
		if !r.reserveLocked(s, s.next, e.Descriptor.Size) {
			break
		}
		r.goBody(s.ctx, Pos{ID: key.id, At: key.at, Name: e.Name}, handOver(s.next), &e.Descriptor)
	}
}

// orderLocked returns the files of k's tree (the tree of pos's view) in
// k's traversal order, depth first, cached for the few trees being
// traversed.
func (r *ReadAhead) orderLocked(k orderKey, pos *Pos) *treeOrder {
	if o, ok := r.orders.Get(k); ok {
		return o
	}
	o := &treeOrder{idx: map[string]int{}}
	var walk func(d *cache.Dir, prefix string)
	walk = func(d *cache.Dir, prefix string) {
		names := d.Names()
		if k.byIno {
			names = r.byInoLocked(d, prefix, names, pos)
		}
		for _, n := range names {
			if e, ok := d.File(n); ok {
				o.idx[prefix+n] = len(o.files)
				o.files = append(o.files, e)
			} else if sub, ok := d.Sub(n); ok {
				walk(sub, prefix+n+"/")
			}
		}
	}
	walk(k.tree, "")
	r.orders.Add(k, o)
	return o
}

// byInoLocked returns names, the entries of directory d (whose slot
// names start with prefix) in pos's view, sorted by the inode numbers
// the mount shows for them.
func (r *ReadAhead) byInoLocked(d *cache.Dir, prefix string, names []string, pos *Pos) []string {
	inos := make(map[string]uint64, len(names))
	for _, n := range names {
		if e, ok := d.File(n); ok {
			inos[n] = r.inos.File(pos.ID, pos.At, prefix+n, e)
		} else {
			inos[n] = r.inos.Dir(pos.ID, pos.At, prefix+n)
		}
	}
	sorted := slices.Clone(names)
	slices.SortStableFunc(sorted, func(a, b string) int { return cmp.Compare(inos[a], inos[b]) })
	return sorted
}
