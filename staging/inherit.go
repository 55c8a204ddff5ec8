package staging

import (
	"maps"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// inherit sets req.Inherited for the files of b whose metadata came from
// a descriptor of the name (layout.CommitRequest.Inherited): the entry
// they were filled from or cut away (a `>`), or their own last commit.
// Their metadata then takes what another writer changed of the file since
// that descriptor, in st (up to req's Base, which st gives) here and
// above it in the commit: a rewrite from a mount whose view was older
// than another mount's chmod or setfattr put the old mode and attributes
// back (audit 28 F4), as memory records did before
// layout.MemoryWrite.Inherited. req.Descriptors are b's live descriptors,
// in order (batch.request).
func (b *batch) inherit(req *layout.CommitRequest, id layout.SessionID, st *cache.State) {
	files := b.live(b.files)
	for i := range req.Descriptors {
		s, d := files[i], &req.Descriptors[i]
		if s == nil || d.Deleted {
			continue
		}
		s.mu.RLock()
		e := s.committed
		if e == nil {
			e = s.replaced
		}
		var mb layout.MetaBase
		// An entry a pending --commit=fsync change made (a chmod before
		// the same fsync) is in no snapshot: its metadata is this
		// mount's, and merged as a base at version 0 every key it set
		// counted as removed by the bucket's entry (review 36).
		ok := e != nil && e.Name == d.Name && !pendingEntry(id, e)
		if ok {
			mb = layout.MetaBase{Version: fileBase(id, e).Version, Metadata: e.Metadata}
		}
		s.mu.RUnlock()
		if !ok {
			continue
		}
		cur, found := st.Slot(d.Name)
		switch {
		case !found && st.Version >= mb.Version:
			continue // removed since: the file is made again with its own
		case found && cur.Session == id && cur.Version > mb.Version:
			if st.RemovedAfter(d.Name, mb.Version) {
				continue // removed, and made again by another writer: not this file (review 33)
			}
			d.Metadata = layout.MergeMetadata(mb.Metadata, d.Metadata, cur.Metadata)
			mb = layout.MetaBase{Version: cur.Version, Metadata: cur.Metadata}
		}
		if req.Inherited == nil {
			req.Inherited = map[string]layout.MetaBase{}
		}
		req.Inherited[d.Name] = mb
	}
}

// tookMetadata gives s the metadata changes its commit took from another
// writer (inherit): sent is what s was described with, landed what was
// committed. What s changed since it was described stays.
func tookMetadata(s *File, sent, landed map[string]string) {
	if maps.Equal(sent, landed) {
		return
	}
	s.meta = layout.MergeMetadata(sent, s.meta, landed)
}
