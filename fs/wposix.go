package fs

import (
	"context"
	"maps"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// changeAttrs keeps a chmod or utimes of a slot file as posix-mode /
// posix-mtime metadata (decisions.md). A file with a staged copy (being
// written, or just closed) takes the change on the staged file, so that
// it lands with the content in one descriptor; a committed file that is
// not being written gets a new descriptor of the same blob at once, with
// no staged copy of its content and no upload (writer.setAttrs).
func (n *slotFile) changeAttrs(ctx context.Context, c attrChange) syscall.Errno {
	name := n.slot()
	e, staged, errno, err := n.f.w.setAttrs(ctx, n.id, name, c)
	if err != nil {
		return n.f.errnoOf("setattr "+name, err)
	}
	if errno != 0 {
		return errno
	}
	if !staged {
		if e != nil && !n.adopt(*e) {
			// Another writer changed the bytes meanwhile: the next
			// lookup shows the file it made.
			n.f.log.Debug("setattr: content changed under a metadata change", "session", n.id, "name", name)
		}
		return 0
	}
	// The changeXattr way: through the staged file, committed by its
	// release (at once unless another open still holds it).
	committed := n.ent.Load()
	s, err := n.f.w.openFrom(ctx, n.id, name, n.base, false)
	if err != nil {
		return n.f.errnoOf("setattr "+name, err)
	}
	n.st.Store(s)
	s.mu.Lock()
	var keep time.Time
	if !s.dirty {
		// Clean: the bytes are committed already; only the metadata
		// changes, and the modification time stays what it was.
		if s.committed != nil {
			committed = s.committed
		}
		if committed != nil {
			keep = mtimeOf(committed.Metadata, committed.CreatedAt)
		}
	}
	before := cloneMap(s.meta)
	s.meta = c.apply(cloneMap(s.meta), keep)
	if c.mtimeTo || !maps.Equal(before, s.meta) {
		s.dirty, s.failed = true, false
		s.gen++
	}
	s.mu.Unlock()
	if err := n.f.w.release(ctx, n.id, s); err != nil {
		return n.f.errnoOf("setattr "+name, err)
	}
	return 0
}

// setAttrs commits c for a committed file of a session as a clone of its
// descriptor with the metadata changed and a new created-at: the same
// blob, so nothing is uploaded. It returns the entry the name has then
// (nil when it was removed just after). staged is true, and nothing is
// done, when the name has a staged file: the caller changes that instead.
// errno is ENOENT when the name has no file.
//
// It holds ws.nsMu, as rename does, so that no release commits the name
// between the look at its state and the new descriptor.
func (w *writer) setAttrs(ctx context.Context, id layout.SessionID, name string, c attrChange) (e *layout.Entry, staged bool, errno syscall.Errno, err error) {
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	w.waitCommits(id, name)
	if w.stagedFile(id, name) != nil {
		return nil, true, 0, nil
	}
	st, err := w.f.cache.State(ctx, id)
	if err != nil {
		return nil, false, 0, err
	}
	slots, _ := w.live(st)
	cur, ok := slots[name]
	if !ok || w.hidden(id, true, nil, name) {
		return nil, false, syscall.ENOENT, nil
	}
	d := cur.Descriptor.Clone()
	d.Metadata = c.apply(cloneMap(d.Metadata), mtimeOf(cur.Metadata, cur.CreatedAt))
	if !c.mtimeTo && maps.Equal(d.Metadata, cur.Metadata) {
		return &cur, false, 0, nil // nothing changes: no new version
	}
	d.CreatedAt = w.f.cfg.Now().UTC()
	if err := w.queue(ctx, id, []layout.Descriptor{d}); err != nil {
		return nil, false, 0, err
	}
	// An open that staged the name meanwhile (it read the old entry as
	// its base) keeps the change too.
	if s := w.stagedFile(id, name); s != nil {
		s.mu.Lock()
		s.meta = c.apply(cloneMap(s.meta), time.Time{})
		s.mu.Unlock()
	}
	if st, err = w.f.cache.State(ctx, id); err != nil {
		return nil, false, 0, err
	}
	slots, _ = w.live(st)
	if now, ok := slots[name]; ok {
		return &now, false, 0, nil
	}
	return nil, false, 0, nil
}
