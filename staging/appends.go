package staging

import (
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// moveOn answers a commit of s that err refused because the file
// changed since s read it: a change that is s's own commit whose outcome
// was unknown (settleUnknown), or another writer's under bytes s only
// appended (rebaseAppended). ok says to commit s again, at generation
// gen.
func (w *Writer) moveOn(ctx context.Context, id layout.SessionID, s *File, err error) (gen uint64, ok bool) {
	var se *layout.StaleError
	if !errors.As(err, &se) || ctx.Err() != nil {
		return 0, false
	}
	adopted, uerr := w.settleUnknown(ctx, id, s)
	switch {
	case uerr != nil:
		// Moved, its bytes could land twice: refused instead.
		w.log.Warn("file not moved onto the session's changes: whether its last commit landed is still unknown", "session", id, "name", s.Name(), "err", uerr)
		return 0, false
	case adopted:
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.gen, true
	}
	return w.rebaseAppended(ctx, id, s, err)
}

// settleUnknown asks the bucket what became of s's last commit when its
// outcome was unknown (File.unknown; one GET, by its transaction ID):
// landed, it is what s was committed as, and s builds on it (adopted);
// not landed, s is as it was. A file written again after a close that
// was EIO for such a commit had its next commit refused by it, as by
// another writer's: appended to, the close moved both appends onto it
// and the first landed twice; edited, or renamed, it was ESTALE (review
// 6, review 7). A commit of the same bytes by another writer is not
// taken for s's own. The error is the bucket's when it cannot tell yet.
func (w *Writer) settleUnknown(ctx context.Context, id layout.SessionID, s *File) (adopted bool, err error) {
	s.mu.RLock()
	u, name := s.unknown, s.unknownName
	s.mu.RUnlock()
	if u == nil {
		return false, nil
	}
	res, landed, err := w.store.ResolveCommit(ctx, u)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unknown != u {
		return false, nil // settled meanwhile
	}
	s.unknown = nil
	if !landed || s.unlinked {
		return false, nil
	}
	for _, d := range res.Descriptors {
		if d.Name != name || d.Deleted {
			continue
		}
		e := layout.Entry{Descriptor: d, Session: id, Version: res.Version}
		s.committed, s.absent = &e, nil
		if s.appendFrom >= 0 {
			// Only appended to since: what it holds past that commit.
			s.appendFrom = d.Size
		}
		s.dirty, s.failed = true, nil
		s.gen++
		w.log.Info("a commit whose outcome was unknown had landed: the file's next commit builds on it", "session", id, "name", name, "version", res.Version)
		return true, nil
	}
	return false, nil
}

// rebaseAppended answers a commit of s that err refused because another
// writer changed the file since s read it (a layout.StaleError naming
// it, not as a clash), when everything s did since was append through
// O_APPEND descriptors (File.appendFrom): s becomes the content the
// session holds now followed by the bytes s appended, guarded by that
// content, and ok says to commit it again. It returns the generation s
// is at then. Two mounts appending lines to one log then both land, as
// two processes appending to one file on a disk do; their closes were
// ESTALE, one line in failed/ for each lost race (audit 8). A file
// removed (or renamed) meanwhile is made again with the appended bytes
// alone, guarded by its absence, as a rotated log's writer starts the
// next one; it came back with all it had read. One that another change
// of s made more than an append since stays refused.
//
// The caller is s's commit in flight (s.committing is its): no other
// commit of s runs meanwhile; writes may, and the bytes they append
// are taken along.
func (w *Writer) rebaseAppended(ctx context.Context, id layout.SessionID, s *File, err error) (gen uint64, ok bool) {
	var se *layout.StaleError
	if !errors.As(err, &se) || ctx.Err() != nil {
		return 0, false // not a lost race, or the close was interrupted
	}
	s.mu.RLock()
	name, from, lazy := s.name, s.appendFrom, s.lazy != nil
	s.mu.RUnlock()
	if !slices.Contains(se.Names, name) || slices.Contains(se.Clashes, name) {
		return 0, false // a clash: refused
	}
	// The refusal invalidated the session's state, or found the change
	// in it: either way the state read here shows that change or a later
	// one, and the commit's guard refuses any other.
	st, serr := w.cache.State(ctx, id)
	if serr != nil {
		w.log.Warn("appended file not moved onto another writer's commit: reading the session failed", "session", id, "name", name, "err", serr)
		return 0, false
	}
	cur, exists := st.Slot(name)
	s.mu.RLock()
	was := s.committed
	s.mu.RUnlock()
	if exists && was != nil && cur.Digest == was.Digest && cur.Version == was.Version && cur.Session == was.Session {
		// Refused, yet the file is what the commit was built on: moved,
		// it would be refused again, as often as it tried (a fork's
		// inherited file did so until appendPatience; review 6).
		w.log.Error("appended file not moved: its commit was refused by the content it was built on", "session", id, "name", name, "version", cur.Version)
		return 0, false
	}
	base := w.baseEntry(id, was, st)
	if lazy || from < 0 {
		return w.rebaseAttrs(ctx, id, s, name, cur, exists, was, base)
	}
	// The other writer's content is fetched into a new spill file
	// without s.mu: reads and stats of s, and more appends, go on.
	nf, serr := s.spill()
	if serr != nil {
		w.log.Warn("appended file not moved onto another writer's commit", "session", id, "name", name, "err", serr)
		return 0, false
	}
	var n int64
	sum, ctype := sha256.New(), ""
	if exists {
		n, sum, ctype, serr = copyContent(ctx, s.blobs, nf, &cur, name)
		if serr != nil {
			nf.Close()
			w.log.Warn("appended file not moved onto another writer's commit: reading its content failed", "session", id, "name", name, "err", serr)
			return 0, false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appendFrom < 0 || s.lazy != nil || s.unlinked || s.closedLocked() || s.name != name || s.werr != nil {
		nf.Close()
		w.log.Info("appended file not moved onto another writer's commit: changed otherwise, removed or renamed here meanwhile", "session", id, "name", name)
		return 0, false
	}
	tail := s.size - s.appendFrom
	// A parked file is opened for the copy only.
	if f, done, err := s.spillLocked(); err != nil {
		serr = err
	} else {
		_, serr = io.Copy(io.MultiWriter(io.NewOffsetWriter(nf, n), sum), io.NewSectionReader(f, s.appendFrom, tail))
		done()
	}
	if serr != nil {
		nf.Close()
		w.log.Warn("appended file not moved onto another writer's commit: copying its appended bytes failed", "session", id, "name", name, "err", serr)
		return 0, false
	}
	s.setSpillLocked(nf)
	s.size, s.sum, s.summed = n+tail, sum, n+tail
	s.linked.Store(false)
	s.appendFrom = n
	s.replaced = nil
	if exists {
		// The other writer's attributes, but for those this file changed
		// itself (a chmod before the fsync it was built on, a touch -d
		// through its descriptor): it took the other writer's whole, and
		// they were lost (audit 41, F2). A file made here (was is nil)
		// changed none: its create mode is no chmod of the file it
		// appends to, as a second open(O_CREAT) on a disk changes
		// nothing of the file the first made (review 43).
		schema, meta := cur.SchemaURL, cloneMap(cur.Metadata)
		if was != nil {
			if s.schema != was.SchemaURL {
				schema = s.schema
			}
			meta = layout.MergeMetadata(metaOf(base), s.meta, cur.Metadata)
			if tail == 0 {
				// Nothing appended: the bytes are the other writer's, and
				// so is their time, unless this file set one itself.
				meta = keptTimeOf(meta, s.meta, base, &cur, id.Time())
			}
		}
		s.committed, s.absent = &cur, nil
		s.meta, s.schema, s.cacheControl, s.ctype = meta, schema, cur.CacheControl, ctype
	} else {
		s.committed, s.absent, s.absentAs = nil, &layout.FileBase{Version: st.Version}, name
	}
	if tail > 0 || !exists {
		s.contentChangedLocked()
	}
	s.dirty, s.failed = true, nil
	s.gen++
	s.rebases.Add(1)
	w.log.Info("appended bytes moved onto another writer's commit of the file", "session", id, "name", name,
		"version", st.Version, "onto", n, "appended", tail)
	return s.gen, true
}

// rebaseAttrs is rebaseAppended for a file that changed none of the
// bytes it was staged from, was (only its attributes: a setfattr, a
// touch or chmod through a descriptor): it becomes cur, the file as
// another writer left it, with the attributes it changed itself, as a
// chmod waiting for the fsync is made again on a rewrite (reapplyAttrs).
// Its commit was refused, ESTALE where the chmod landed (audit 41, F7).
// An edit stays refused, and so does a file removed meanwhile: there is
// nothing to put the attributes on.
func (w *Writer) rebaseAttrs(ctx context.Context, id layout.SessionID, s *File, name string, cur layout.Entry, exists bool, was, base *layout.Entry) (gen uint64, ok bool) {
	if !exists || was == nil {
		return 0, false
	}
	s.mu.RLock()
	same := s.lazy != nil && s.lazy.Digest == was.Digest
	if !same && s.lazy == nil && s.sum != nil && s.summed == s.size && s.size == was.Size {
		// Hashed whole by the commit just refused: no read of the bytes.
		var d layout.Digest
		copy(d[:], s.sum.Sum(nil))
		same = d == was.Digest
	}
	at := s.gen
	s.mu.RUnlock()
	if !same {
		return 0, false // an edit: refused
	}
	// Staged from cur as an open of it is (Writer.stage): inline bytes
	// copied, a blob held lazily.
	nf, err := s.spill()
	var n, size int64
	var sum hash.Hash
	var ctype string
	if err == nil {
		if cur.InlineOK() {
			n, sum, ctype, err = copyContent(ctx, s.blobs, nf, &cur, name)
		} else {
			size, err = s.blobs.Size(ctx, &cur.Descriptor)
		}
		if err != nil {
			nf.Close()
		}
	}
	if err != nil {
		w.log.Warn("changed attributes not moved onto another writer's commit of the file", "session", id, "name", name, "err", err)
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != at || s.unlinked || s.closedLocked() || s.name != name || s.werr != nil {
		nf.Close()
		w.log.Info("changed attributes not moved onto another writer's commit: changed otherwise, removed or renamed here meanwhile", "session", id, "name", name)
		return 0, false
	}
	mine := s.meta
	s.meta = keptTimeOf(layout.MergeMetadata(metaOf(base), mine, cur.Metadata), mine, base, &cur, id.Time())
	if s.schema == was.SchemaURL {
		s.schema = cur.SchemaURL
	}
	if s.ctype == was.ContentType {
		s.ctype = cur.ContentType
	}
	e := cur
	s.setSpillLocked(nf)
	s.linked.Store(false)
	if cur.InlineOK() {
		s.lazy, s.size, s.sum, s.summed = nil, n, sum, n
		if s.ctype == "" {
			s.ctype = ctype
		}
	} else {
		s.holdLazilyLocked(&e, size)
	}
	if s.appendFrom >= 0 {
		s.appendFrom = s.size
	}
	s.committed, s.absent, s.replaced = &e, nil, nil
	s.cacheControl = cur.CacheControl
	s.dirty, s.failed = true, nil
	s.gen++
	s.rebases.Add(1)
	w.log.Info("changed attributes moved onto another writer's commit of the file", "session", id, "name", name, "version", cur.Version)
	return s.gen, true
}

// baseEntry is the bucket's file that e, the entry a staged file was
// built on, stands for: e itself, or for an entry a pending change made
// (a chmod waiting for the fsync), the committed file that change was
// made from, as st shows it at its version (nil when there is none).
func (w *Writer) baseEntry(id layout.SessionID, e *layout.Entry, st *cache.State) *layout.Entry {
	if e == nil || !pendingEntry(id, e) {
		return e
	}
	fb := w.baseOf(w.session(id), e)
	if fb == nil || fb.Version == 0 {
		return nil
	}
	if be, ok := st.SlotAt(e.Name, fb.Version); ok && be.Digest == fb.Digest {
		return &be
	}
	return nil
}

// metaOf is e's metadata, nil for no entry.
func metaOf(e *layout.Entry) map[string]string {
	if e == nil {
		return nil
	}
	return e.Metadata
}

// keptTimeOf is merged (layout.MergeMetadata of base's metadata, mine
// and cur's) with the time cur shows, pinned as posix-mtime as a chmod
// pins it (AttrChange.Apply), unless mine set a time of its own: the time
// of a file whose bytes are another writer's, when this one changed only
// attributes. MergeMetadata keeps mine's, which a content write clears,
// and a metadata change pins the time its bytes showed (an fchmod): kept,
// the other writer's new bytes showed the old bytes' time (review 43).
// born is the session's time, what a file with no time of its own shows.
func keptTimeOf(merged, mine map[string]string, base, cur *layout.Entry, born time.Time) map[string]string {
	mv, inMine := mine[layout.MetaPosixMtime]
	if inMine && base != nil {
		bv, inBase := base.Metadata[layout.MetaPosixMtime]
		pinned := layout.FormatPosixMtime(layout.ShownMtime(base.Metadata, base.CreatedAt, born))
		inMine = !(inBase && mv == bv) && mv != pinned
	}
	if inMine {
		return merged
	}
	merged = maps.Clone(merged)
	if merged == nil {
		merged = map[string]string{}
	}
	merged[layout.MetaPosixMtime] = layout.FormatPosixMtime(layout.ShownMtime(cur.Metadata, cur.CreatedAt, born))
	return merged
}
