package fs

import (
	"context"
	"sort"
	"strings"
	"syscall"

	"github.com/pugmark/pugfs/layout"
)

// retain counts a read-only open of a staged file so it outlives the
// writer's close while being read.
func (w *writer) retain(id layout.SessionID, s *staged) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.opens++
	return true
}

// opensNow returns the number of opens of s.
func (s *staged) opensNow(w *writer) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return s.opens
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
	w.waitCommits(id, from, to)
	st, err := f.cache.State(ctx, id)
	if err != nil {
		return f.errnoOf("rename "+from, err)
	}
	ws := w.session(id)
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
		files, staged, err := w.dirEntries(ctx, id, to)
		if err != nil {
			return f.errnoOf("rename "+from, err)
		}
		if len(files)+len(staged) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	files, staged, err := w.dirEntries(ctx, id, from)
	if err != nil {
		return f.errnoOf("rename "+from, err)
	}
	var ds []layout.Descriptor
	for _, e := range files {
		moved := e.Descriptor.Clone()
		moved.Name = to + strings.TrimPrefix(e.Name, from)
		moved.CreatedAt = now
		ds = append(ds, layout.Descriptor{Name: e.Name, Deleted: true, CreatedAt: now}, moved)
	}
	w.mu.Lock()
	sort.Strings(staged)
	for _, name := range staged {
		s := ws.files[name]
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
