package fs

import (
	"context"
	"strings"
	"syscall"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// retain counts a read-only open of a staged file so it outlives the
// writer's close while being read. It refuses (false) a staged file whose
// last release already forgot it: its spill file is closed or about to be,
// and its content is the committed entry now. Counting such a file
// anyway made the reader's handle read a closed file (EIO, seen by the
// property test on a read right after a create).
func (w *writer) retain(id layout.SessionID, s *staged) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws == nil || ws.files[s.name] != s {
		return false
	}
	s.opens++
	return true
}

// slot returns the name s is staged under now; a rename changes it.
// Callers must not hold s.mu.
func (s *staged) slot() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.name
}

// drop forgets a staged file (unlink of a name being written).
func (w *writer) drop(id layout.SessionID, s *staged) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws != nil && ws.files[s.name] == s {
		delete(ws.files, s.name)
		s.mu.Lock()
		s.dirty = false // unlinked before commit: nothing to keep
		s.unlinked = true
		s.mu.Unlock()
	}
}

// keepParents keeps the directories above name as (local) directories:
// removing or moving away the last file of a directory leaves it there,
// empty, until rmdir, as on any filesystem (rm -r removes the files, then
// the directories). Empty directories are not stored in the bucket.
func (w *writer) keepParents(id layout.SessionID, name string) {
	ws := w.session(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name, '/') {
		name = name[:i]
		ws.dirs[name] = true
	}
}

// mkdir makes a local directory of a session: it is stored only once a
// file is written under it (tree.md "Writing").
func (w *writer) mkdir(id layout.SessionID, full string) {
	ws := w.session(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	ws.dirs[full] = true
}

// unlink removes the file at path parts of a session: a staged file is
// dropped, a committed one gets a tombstone.
func (w *writer) unlink(ctx context.Context, id layout.SessionID, parts []string) syscall.Errno {
	f := w.f
	full := cache.JoinName(parts)
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	// A commit in flight of the name decides whether it is committed.
	w.waitCommits(id, full)
	st, err := f.cache.State(ctx, id)
	if err != nil {
		return f.errnoOf("unlink "+full, err)
	}
	slots, tree := w.live(st)
	_, live := slots[full]
	if live && w.hidden(id, true, nil, full) {
		live = false
	}
	s := w.stagedFile(id, full)
	if s != nil {
		w.drop(id, s)
	}
	if !live {
		if s != nil {
			w.keepParents(id, full)
			return 0
		}
		if dir, ok := tree.Walk(parts); ok && dir != nil {
			return syscall.EISDIR
		}
		return syscall.ENOENT
	}
	if err := w.queue(ctx, id, []layout.Descriptor{{Name: full, Deleted: true, CreatedAt: f.cfg.Now().UTC()}}); err != nil {
		return f.errnoOf("unlink "+full, err)
	}
	w.keepParents(id, full)
	return 0
}

// rmdir removes an empty directory of a session. Only local directories
// can be empty: a stored one holds files.
func (w *writer) rmdir(ctx context.Context, id layout.SessionID, full string) syscall.Errno {
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	c, err := w.dirEntries(ctx, id, full)
	if err != nil {
		return w.f.errnoOf("rmdir "+full, err)
	}
	if !c.empty() {
		return syscall.ENOTEMPTY
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ws.dirs[full] {
		return syscall.ENOENT
	}
	delete(ws.dirs, full)
	return 0
}

// rename moves a file or a directory inside one session as one snapshot
// of tombstones and re-pointed descriptors; no blob is uploaded again.
func (w *writer) rename(ctx context.Context, id layout.SessionID, from, to string, noReplace bool) syscall.Errno {
	f := w.f
	if from == to {
		return 0
	}
	if strings.HasPrefix(to, from+"/") {
		return syscall.EINVAL // a directory into itself
	}
	// A commit in flight of what is renamed or replaced (a release
	// committing a just-created file, say) has taken its name already:
	// let it land, then look where things are. Renaming under it moved a
	// file whose descriptor still had the old name, and the file ended at
	// the old name, or the rename found it neither staged nor committed.
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	w.waitCommits(id, from, to)
	st, err := f.cache.State(ctx, id)
	if err != nil {
		return f.errnoOf("rename "+from, err)
	}
	slots, tree := w.live(st)
	exists := func(name string) (file, dir bool) {
		if _, ok := slots[name]; ok && !w.hidden(id, true, nil, name) {
			file = true
		}
		if w.stagedFile(id, name) != nil {
			file = true
		}
		if d, ok := tree.Walk(strings.Split(name, "/")); ok && d != nil && len(d.Names()) > 0 {
			dir = true
		}
		w.mu.Lock()
		if ws.dirs[name] {
			dir = true
		}
		w.mu.Unlock()
		return
	}
	srcFile, srcDir := exists(from)
	if !srcFile && !srcDir {
		return syscall.ENOENT
	}
	dstFile, dstDir := exists(to)
	if noReplace && (dstFile || dstDir) {
		return syscall.EEXIST
	}
	now := f.cfg.Now().UTC()
	if srcFile {
		if dstDir {
			return syscall.EISDIR
		}
		// A file open under the target name is replaced: its descriptors
		// now write to an unlinked file.
		if s := w.stagedFile(id, to); s != nil {
			w.drop(id, s)
		}
		// A file still being written moves with its staged data; open
		// handles keep writing to it under the new name.
		if s := w.stagedFile(id, from); s != nil {
			w.mu.Lock()
			delete(ws.files, from)
			s.mu.Lock()
			s.name = to
			dirty := s.dirty
			s.mu.Unlock()
			ws.files[to] = s
			w.mu.Unlock()
			if dirty {
				// Its commit happens on close, under the new name.
				if _, ok := slots[from]; ok {
					if err := w.queue(ctx, id, []layout.Descriptor{{Name: from, Deleted: true, CreatedAt: now}}); err != nil {
						return f.errnoOf("rename "+from, err)
					}
				}
				w.keepParents(id, from)
				return 0
			}
		}
		e, ok := slots[from]
		if !ok {
			return syscall.ENOENT
		}
		moved := e.Descriptor.Clone()
		moved.Name = to
		moved.CreatedAt = now
		if err := w.queue(ctx, id, []layout.Descriptor{{Name: from, Deleted: true, CreatedAt: now}, moved}); err != nil {
			return f.errnoOf("rename "+from, err)
		}
		w.keepParents(id, from)
		return 0
	}
	// A directory: every live slot under it.
	if dstFile {
		return syscall.ENOTDIR
	}
	if dstDir {
		c, err := w.dirEntries(ctx, id, to)
		if err != nil {
			return f.errnoOf("rename "+from, err)
		}
		if !c.empty() {
			return syscall.ENOTEMPTY // local subdirectories count too
		}
	}
	src, err := w.dirEntries(ctx, id, from)
	if err != nil {
		return f.errnoOf("rename "+from, err)
	}
	var ds []layout.Descriptor
	for _, e := range src.files {
		moved := e.Descriptor.Clone()
		moved.Name = to + strings.TrimPrefix(e.Name, from)
		moved.CreatedAt = now
		ds = append(ds, layout.Descriptor{Name: e.Name, Deleted: true, CreatedAt: now}, moved)
	}
	w.mu.Lock()
	for _, name := range src.staged {
		s := ws.files[name] // still there: releases wait for nsMu
		delete(ws.files, name)
		nn := to + strings.TrimPrefix(name, from)
		s.mu.Lock()
		s.name = nn
		s.mu.Unlock()
		ws.files[nn] = s
	}
	for d := range ws.dirs {
		if d == from || strings.HasPrefix(d, from+"/") {
			delete(ws.dirs, d)
			ws.dirs[to+strings.TrimPrefix(d, from)] = true
		}
	}
	if len(ds) == 0 {
		ws.dirs[to] = true
	}
	w.mu.Unlock()
	if len(ds) > 0 {
		if err := w.queue(ctx, id, ds); err != nil {
			return f.errnoOf("rename "+from, err)
		}
	}
	w.keepParents(id, from)
	return 0
}

// waitCommits waits until no staged file named one of names, or under one
// of them, has a commit in flight.
func (w *writer) waitCommits(id layout.SessionID, names ...string) {
	w.mu.Lock()
	var busy []*staged
	if ws := w.ss[id]; ws != nil {
		for full, s := range ws.files {
			for _, n := range names {
				if full == n || strings.HasPrefix(full, n+"/") {
					busy = append(busy, s)
					break
				}
			}
		}
	}
	w.mu.Unlock()
	for _, s := range busy {
		s.mu.Lock()
		for s.committing != nil {
			ch := s.committing
			s.mu.Unlock()
			<-ch
			s.mu.Lock()
		}
		s.mu.Unlock()
	}
}
