package staging

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// unstage forgets the file staged under name (an unlink of it, or a
// rename over it) once no commit of it is in flight: its open descriptors
// then write to an unlinked file, and a commit of it that starts later
// drops it (namedNowLocked). committed reports that the file had a
// committed entry, which the caller's view of the session may predate: a
// flush that began after the caller's wait for commits in flight.
func (w *Writer) unstage(ws *session, name string) (s *File, committed bool) {
	s = w.stagedIdle(ws, name)
	if s == nil {
		return nil, false
	}
	committed = s.committed != nil
	w.unstageLocked(ws, name, s)
	return s, committed
}

// unstageLocked is unstage of s, staged under name, with w.mu and s.mu
// held (stagedIdle), which it releases.
func (w *Writer) unstageLocked(ws *session, name string, s *File) {
	delete(ws.files, name)
	s.dirty = false // unlinked before commit: nothing to keep
	s.unlinked = true
	switch {
	case s.opens <= 0 && s.committing == nil:
		// Nobody reads it any more: its parked name would stay on the
		// staging disk until unmount (review 19).
		s.setSpillLocked(nil)
	case s.committing == nil:
		s.unkeepLocked() // a crash must not bring it back (review 20)
	}
	s.mu.Unlock()
	w.mu.Unlock()
}

// unstageOver is unstage of a rename's target until the rename's
// outcome is known, which the rename then reports, once, to settle: on a
// failure the target is put back (its open descriptors write to it
// again and its close commits it, as a failed rename(2) leaves its
// target on a disk), on a success it stays unlinked. Left unlinked, a
// writer's bytes went nowhere, its close 0, while the bucket kept both
// names as they were (review 9). Meanwhile the target is busy, as if
// committing: its close waits for the outcome (it returned 0 at once, an
// unlinked file's, and then the rename failed: review 10), and an open
// of the name waits too (holdName). Writes go on; the target is dirty
// after a failure if it was before or was written since (review 10: a
// write in the window was forgotten). The caller holds ws.nsMu (so no
// other change of names runs meanwhile) and puts whatever it moved to
// name back before it settles a failure.
func (w *Writer) unstageOver(ws *session, name string) (settle func(failed bool)) {
	s := w.stagedIdle(ws, name)
	if s == nil {
		return func(bool) {}
	}
	dirty, gen := s.dirty, s.gen
	ch := make(chan struct{})
	s.committing = ch
	h := ws.holdName(name)
	w.unstageLocked(ws, name, s)
	return func(failed bool) {
		w.lockFile(s)
		if failed && ws.files[name] == nil {
			s.unlinked, s.dirty = false, dirty || s.gen != gen
			ws.files[name] = s
		}
		s.committing = nil
		close(ch)
		ws.releaseName(name, h, !failed)
		switch {
		case !failed && s.opens <= 0:
			s.setSpillLocked(nil) // as unstageLocked: replaced, held by nobody
		case !failed:
			s.unkeepLocked()
		}
		s.mu.Unlock()
		w.mu.Unlock()
	}
}

// lockFile takes w.mu and s.mu. A read holds s.mu shared for as long as
// its fetch from the bucket takes; it is not waited for with w.mu held,
// which every lookup needs, nor by spinning, which took w.mu over and
// over meanwhile (review 15).
func (w *Writer) lockFile(s *File) {
	for {
		w.mu.Lock()
		if s.mu.TryLock() {
			return
		}
		w.mu.Unlock()
		s.mu.Lock()
		//lint:ignore SA2001 the lock is taken to wait for its holder
		s.mu.Unlock()
	}
}

// nameHold is a rename in flight that moves a staged file from or over a
// name (session.held). Without it an open of the name in that window
// (the kernel sends one for a cached entry while a rename runs) staged
// the name anew, and a failed rename could then put back neither its
// source nor its target: the target's writer's bytes were lost, its
// close 0 (review 11).
type nameHold struct {
	done chan struct{}
	// moved is set before done is closed: the rename landed, and the
	// file the open was for is not under the name any more.
	moved bool
}

// holdName marks name as held by a rename in flight. Caller holds w.mu
// and ws.nsMu (so no other rename holds it).
func (ws *session) holdName(name string) *nameHold {
	h := &nameHold{done: make(chan struct{})}
	ws.held[name] = h
	return h
}

// releaseName ends h, held on name, with the rename's outcome. Caller
// holds w.mu.
func (ws *session) releaseName(name string, h *nameHold, moved bool) {
	h.moved = moved
	if ws.held[name] == h {
		delete(ws.held, name)
	}
	close(h.done)
}

// waitHeld waits until no rename holds name, or a directory above it
// (held as "dir/"), and reports whether one that did moved a file to or
// from it, and the session's move generation once none holds it, for
// install's second look (movedSinceLocked). The caller holds no lock.
func (w *Writer) waitHeld(ws *session, name string) (moved bool, mark uint64) {
	for {
		w.mu.Lock()
		h := ws.holdOfLocked(name)
		mark = ws.moveGen
		w.mu.Unlock()
		if h == nil {
			return moved, mark
		}
		<-h.done
		moved = moved || h.moved
	}
}

// holdOfLocked returns the hold of a rename in flight on name or on a
// directory above it, or nil. Caller holds w.mu.
func (ws *session) holdOfLocked(name string) *nameHold {
	if h := ws.held[name]; h != nil {
		return h
	}
	for i := 0; ; {
		j := strings.IndexByte(name[i:], '/')
		if j < 0 {
			return nil
		}
		i += j + 1
		if h := ws.held[name[:i]]; h != nil {
			return h
		}
	}
}

// dirMove is a directory a rename moved (session.moves).
type dirMove struct {
	gen uint64
	dir string // with a trailing /
}

// keptMoves bounds session.moves: an open that spans more directory
// moves of its session than this is ErrChanged whether or not one was
// above it (the kernel looks it up again, once). At 64, a session
// renaming directories busily made unrelated opens ESTALE (review 17).
const keptMoves = 4096

// movedLocked records that a rename moved directory dir. Caller holds
// w.mu.
func (ws *session) movedLocked(dir string) {
	ws.moveGen++
	if len(ws.moves) == keptMoves {
		ws.movesFrom = ws.moves[0].gen + 1
		ws.moves = append(ws.moves[:0], ws.moves[1:]...)
	}
	ws.moves = append(ws.moves, dirMove{ws.moveGen, dir + "/"})
}

// movedSinceLocked says whether something staged at name now, by an
// operation that waitHeld let through at mark, would stage it below a
// directory's old name: errHeld while a rename holds a directory above
// it, ErrChanged when one moved such a directory since mark (or so long
// ago that it is forgotten). Caller holds w.mu.
func (ws *session) movedSinceLocked(name string, mark uint64) error {
	if ws.holdOfLocked(name) != nil {
		return errHeld
	}
	if mark+1 < ws.movesFrom {
		return ErrChanged
	}
	for _, m := range ws.moves {
		if m.gen > mark && strings.HasPrefix(name, m.dir) {
			return ErrChanged
		}
	}
	return nil
}

// errHeld is install's and Mkdir's word that a rename holds a directory
// above the name: wait for it (waitHeld) and try again.
var errHeld = errors.New("held by a rename in flight")

// moveBack undoes a rename's move of the staged file s from from to to,
// when the rename then failed, releases from (h) and ends s's busy spell
// (done, the rename's mark). The caller holds ws.nsMu: from is held, so
// nothing was staged there meanwhile.
func (w *Writer) moveBack(ws *session, s *File, from, to string, h *nameHold, done chan struct{}) {
	w.lockFile(s)
	defer w.mu.Unlock()
	defer s.mu.Unlock()
	if ws.files[to] == s && ws.files[from] == nil {
		delete(ws.files, to)
		s.setNameLocked(from)
		ws.files[from] = s
	}
	ws.releaseName(from, h, false)
	endCommittingLocked(s, done)
}

// endCommittingLocked ends the busy spell done that a rename marked s
// with (File.committing): a close waiting for it goes on, under the name
// s has now. Caller holds s.mu.
func endCommittingLocked(s *File, done chan struct{}) {
	if s.committing == done {
		s.committing = nil
	}
	close(done)
}

// stagedIdle returns the file staged under name in ws with w.mu and its
// mu held, once no commit of it is in flight (nil, holding nothing, when
// none is staged). A commit that starts later takes the name the file
// has when it joins a batch (namedNowLocked).
//
// The file's mu may be held for as long as an upload of it takes (a
// flush that began after the caller's wait for commits in flight): it
// is waited for with w.mu released, since every lookup of every session
// needs w.mu.
func (w *Writer) stagedIdle(ws *session, name string) *File {
	for {
		w.mu.Lock()
		s := ws.files[name]
		if s == nil {
			w.mu.Unlock()
			return nil
		}
		if !s.mu.TryLock() {
			w.mu.Unlock()
			s.waitIdle()
			continue
		}
		if s.committing == nil {
			return s
		}
		ch := s.committing
		s.mu.Unlock()
		w.mu.Unlock()
		<-ch
	}
}

// lockStaged returns with w.mu held, and the mu of each file staged in
// ws under one of the names names gives (called with w.mu held, each
// time the files are taken) held too; unlock releases the files' (w.mu
// stays held). A file's mu is held shared for as long as an upload of it
// takes, and every lookup of every session needs w.mu: a busy file is
// waited for with w.mu released, and then everything is taken again. So
// is a file with a commit in flight (File.committing), unless the
// caller's own mark ours is what makes it busy. It returns the names of
// the files it holds.
func (w *Writer) lockStaged(ws *session, names func() []string, ours chan struct{}) (staged []string, unlock func()) {
	for {
		w.mu.Lock()
		var held []*File
		var busy *File
		staged = staged[:0]
		for _, name := range names() {
			s := ws.files[name]
			if s == nil {
				continue
			}
			if !s.mu.TryLock() {
				busy = s
				break
			}
			if s.committing != nil && s.committing != ours {
				s.mu.Unlock()
				busy = s
				break
			}
			held = append(held, s)
			staged = append(staged, name)
		}
		if busy == nil {
			return staged, func() {
				for _, s := range held {
					s.mu.Unlock()
				}
			}
		}
		for _, s := range held {
			s.mu.Unlock()
		}
		w.mu.Unlock()
		// Not waitIdle: a file busy with ours (a read holding its mu
		// when the rename takes its files back) waited for the mark only
		// this caller clears, and the rename never returned (review 16).
		busy.mu.Lock()
		for ch := busy.committing; ch != nil && ch != ours; ch = busy.committing {
			busy.mu.Unlock()
			<-ch
			busy.mu.Lock()
		}
		busy.mu.Unlock()
	}
}

// stagedUnder returns the names of the files staged in ws under
// directory dir. Caller holds w.mu.
func stagedUnder(ws *session, dir string) []string {
	var out []string
	for name := range ws.files {
		if strings.HasPrefix(name, dir+"/") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// keepParents keeps the directories above name as (local) directories:
// removing or moving away the last file of a directory leaves it there,
// empty, until rmdir, as on any filesystem (rm -r removes the files, then
// the directories). Empty directories are not stored in the bucket.
func (w *Writer) keepParents(id layout.SessionID, name string) {
	ws := w.session(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name, '/') {
		name = name[:i]
		ws.dirs[name] = true
	}
}

// Mkdir makes a local directory of a session: it is stored only once a
// file is written under it (tree.md "Writing"). As an open does, it waits
// for a rename of a directory above it, and is ErrChanged when that
// moved it: made under the old name after the move, it brought the old
// directory back (review 16).
func (w *Writer) Mkdir(id layout.SessionID, full string) error {
	ws := w.session(id)
	for {
		moved, mark := w.waitHeld(ws, full)
		if moved {
			return ErrChanged
		}
		w.mu.Lock()
		err := ws.movedSinceLocked(full, mark)
		if err == nil {
			ws.dirs[full] = true
		}
		w.mu.Unlock()
		if !errors.Is(err, errHeld) {
			return err
		}
	}
}

// Unlink removes the file at path parts of a session: a staged file is
// dropped, a committed one gets a tombstone.
func (w *Writer) Unlink(ctx context.Context, id layout.SessionID, parts []string) error {
	full := cache.JoinName(parts)
	if err := layout.CheckUTF8(full); err != nil {
		return err
	}
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	// A commit in flight of the name decides whether it is committed.
	w.waitCommits(id, full)
	st, err := w.cache.State(ctx, id)
	if err != nil {
		return err
	}
	slots, tree := w.Live(st)
	e, live := slots(full)
	if live && w.Hidden(id, full) {
		live = false
	}
	s, committed := w.unstage(ws, full)
	live = live || committed
	if !live {
		if s != nil {
			w.keepParents(id, full)
			return nil
		}
		if dir, ok := tree.Walk(parts); ok && dir != nil {
			return ErrIsDir
		}
		return ErrNotExist
	}
	op := pendingOp{desc: &layout.Descriptor{Name: full, Deleted: true, CreatedAt: w.cfg.Now().UTC()}}
	if w.cfg.Commit == CommitOnFsync && e.Name == full {
		// Guarded softly, as a rename's old name is: a rewrite another
		// mount makes of the file before the fsync is kept, with a log
		// line, where the removal deleted it (audit 41). (In close mode
		// the removal lands now, as rm on any file system does.)
		op.base = w.baseOf(ws, &e)
	}
	if err := w.queue(ctx, id, []pendingOp{op}); err != nil {
		return err
	}
	w.keepParents(id, full)
	return nil
}

// Rmdir removes an empty directory of a session. Only local directories
// can be empty: a stored one holds files.
func (w *Writer) Rmdir(ctx context.Context, id layout.SessionID, full string) error {
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	c, err := w.dirEntries(ctx, id, full)
	if err != nil {
		return err
	}
	if !c.empty() {
		return ErrNotEmpty
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ws.dirs[full] {
		return ErrNotExist
	}
	delete(ws.dirs, full)
	return nil
}

// Rename moves a file or a directory inside one session as one snapshot
// of tombstones and re-pointed descriptors; no blob is uploaded again.
//
// The descriptors copy the digests read from the bucket just before. When
// another mount rewrites a file being moved in the window between that
// read and the commit, the commit is refused (its removal of the old name
// is guarded) and the rename looks again: it moves the file as it is
// then, where it moved the old bytes and removed the rewrite with the old
// name.
func (w *Writer) Rename(ctx context.Context, id layout.SessionID, from, to string, noReplace bool) error {
	if from == to {
		return nil
	}
	if strings.HasPrefix(to, from+"/") {
		return ErrIntoItself // a directory into itself
	}
	if sendArea(from) != sendArea(to) {
		return ErrCrossSend
	}
	if err := errors.Join(layout.CheckUTF8(from), layout.CheckUTF8(to)); err != nil {
		return err // a directory's files are the commit's to refuse
	}
	for attempt := 1; ; attempt++ {
		err := w.rename(ctx, id, from, to, noReplace, attempt > 1)
		if !errors.Is(err, layout.ErrChangedUnder) || attempt == lookAgain {
			return err
		}
	}
}

// lookAgain bounds the attempts of a change made from what the bucket
// holds (a rename, a chmod) that another mount keeps changing under it.
const lookAgain = 4

// rename is one attempt of Rename; a refused commit moved nothing.
//
// The first attempt of a file's rename trusts the state for the metadata
// TTL (liveNow): its removal of the old name is guarded by the file it
// moves, and with noReplace (GNU mv's first try) the new name by its
// absence, so a rewrite or removal of the file, or a file made under the
// new name, by another mount that the state does not show refuses the
// commit, and the next attempt (recheck) reads the session from the
// bucket. A directory's rename and one of a name the state does not have
// are decided on the bucket's state at once: the files another mount put
// under the directory are not guarded. So is a noReplace rename with
// --commit=fsync: there a refused guard drops its own descriptor only
// (queue), and dropping the new name would leave the old name's removal
// to land by itself.
func (w *Writer) rename(ctx context.Context, id layout.SessionID, from, to string, noReplace, recheck bool) error {
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	slots, tree, at, err := w.liveNow(ctx, id, from, to, recheck)
	if err != nil {
		return err
	}
	exists := func(name string) (file, dir bool) { return w.kindOf(ws, slots, tree, name) }
	srcFile, srcDir := exists(from)
	if !recheck && (!srcFile || noReplace && w.cfg.Commit == CommitOnFsync) {
		if slots, tree, at, err = w.liveNow(ctx, id, from, to, true); err != nil {
			return err
		}
		srcFile, srcDir = exists(from)
	}
	if !srcFile && !srcDir {
		return ErrNotExist
	}
	dstFile, dstDir := exists(to)
	if noReplace && (dstFile || dstDir) {
		return ErrExist
	}
	now := w.cfg.Now().UTC()
	if srcFile {
		if dstDir {
			return ErrIsDir
		}
		var absentTo *layout.FileBase
		if noReplace && w.cfg.Commit != CommitOnFsync {
			absentTo = &layout.FileBase{Version: at} // as below
		}
		if moved, err := w.moveWrittenFile(ctx, id, ws, from, to, slots, now, absentTo); err != nil || moved {
			if moved {
				w.keepParents(id, from)
			}
			return err // refused: nothing moved
		}
		// A file open under the target name is replaced: its descriptors
		// now write to an unlinked file (unless the rename fails).
		settle := w.unstageOver(ws, to)
		// A file still being written moves with its staged data; open
		// handles keep writing to it under the new name. A failure
		// below moves it back before the target is put back.
		e, ok := slots(from)
		var src *File
		var srcHold *nameHold
		var srcDone chan struct{}
		fail := func(err error) error {
			if src != nil {
				w.moveBack(ws, src, from, to, srcHold, srcDone)
			}
			settle(true)
			return err
		}
		succeed := func() {
			if src != nil {
				w.lockFile(src)
				ws.releaseName(from, srcHold, true)
				endCommittingLocked(src, srcDone)
				src.mu.Unlock()
				w.mu.Unlock()
			}
			settle(false)
		}
		if s := w.stagedIdle(ws, from); s != nil {
			// Held: w.mu and s.mu, with no commit of s in flight.
			delete(ws.files, from)
			srcHold = ws.holdName(from)
			s.setNameLocked(to)
			// Busy until the outcome: a close of one of its descriptors
			// meanwhile committed its bytes under to, and they stayed
			// there when the rename then failed (review 15).
			srcDone = make(chan struct{})
			s.committing = srcDone
			dirty := s.dirty
			if !ok && !dirty && s.committed != nil {
				// Committed since slots was read, by a flush that began
				// after this rename's wait for commits in flight (a
				// forked child closing its copy of a descriptor).
				e, ok = *s.committed, true
			}
			s.mu.Unlock()
			ws.files[to] = s
			w.mu.Unlock()
			src = s
			if dirty {
				// Its commit happens on close, under the new name.
				if _, ok := slots(from); ok {
					if err := w.Queue(ctx, id, []layout.Descriptor{{Name: from, Deleted: true, CreatedAt: now}}); err != nil {
						return fail(err)
					}
				}
				succeed()
				w.keepParents(id, from)
				return nil
			}
		}
		if !ok {
			return fail(ErrNotExist)
		}
		moved := movedTo(e, id, to, now)
		retype(&moved, from, to)
		// Guarded: a rename moves the bytes read here, and another
		// mount's rewrite of from that lands before the commit would be
		// removed with the old name.
		gone := layout.Descriptor{Name: from, Deleted: true, CreatedAt: now}
		var absent *layout.FileBase
		if noReplace {
			// Not there as of the state: another mount's file made
			// under the name since refuses the commit, as a create's
			// with O_EXCL (File.absent). With --commit=fsync the
			// rename is dropped then, the old name's removal with it
			// (pendingOp.movedFrom): unguarded, it replaced the other
			// mount's file at the fsync (audit 41).
			absent = &layout.FileBase{Version: at}
		}
		if err := w.queue(ctx, id, []pendingOp{{desc: &gone, base: w.baseOf(ws, &e)}, {desc: &moved, base: absent, movedFrom: from}}); err != nil {
			return fail(err)
		}
		succeed()
		w.keepParents(id, from)
		return nil
	}
	// A directory: every live slot under it.
	if dstFile {
		return ErrNotDir
	}
	if dstDir {
		c, err := w.dirEntries(ctx, id, to)
		if err != nil {
			return err
		}
		if !c.empty() {
			return ErrNotEmpty // local subdirectories count too
		}
	}
	src, err := w.dirEntries(ctx, id, from)
	if err != nil {
		return err
	}
	for _, e := range src.files {
		// Another writer's name that JSON cannot carry: refused before
		// anything moves. With --commit=fsync the queued ops were
		// refused at every later fsync (review 11).
		if err := layout.CheckUTF8(e.Name); err != nil {
			return err
		}
	}
	// The files staged under the directory are taken now, with no
	// commit of theirs in flight, and what they were committed as since
	// the listing joins it: a file's close that landed under the old
	// name after the listing (its first commit: nothing guarded it) was
	// left there, and the directory came back with it (audit 17).
	staged, unlock := w.lockStaged(ws, func() []string { return stagedUnder(ws, from) }, nil)
	files := src.files
	index := map[string]int{}
	for i, e := range files {
		index[e.Name] = i
	}
	for _, name := range staged {
		c := ws.files[name].committed
		if c == nil || c.Name != name || c.Version <= src.version {
			// What the listing already decided on: a file it lacks
			// was removed, by another mount say, and moving its old
			// entry brought it back (review 16).
			continue
		}
		if i, ok := index[name]; !ok {
			files = append(files, *c)
		} else if c.Version > files[i].Version {
			files[i] = *c
		}
	}
	var ops []pendingOp
	for _, e := range files {
		moved := movedTo(e, id, to+strings.TrimPrefix(e.Name, from), now)
		retype(&moved, e.Name, moved.Name) // a directory's files keep their leaf names
		ops = append(ops, pendingOp{desc: &layout.Descriptor{Name: e.Name, Deleted: true, CreatedAt: now}, base: w.baseOfLocked(ws, &e)},
			pendingOp{desc: &moved})
	}
	var dirs []string
	for d := range ws.dirs {
		if d == from || strings.HasPrefix(d, from+"/") {
			dirs = append(dirs, d)
		}
	}
	if len(ops) == 0 {
		// Nothing in the bucket: a move of what this mount holds.
		w.moveLocalLocked(ws, from, to, staged, dirs, nil)
		unlock()
		ws.dirs[to] = true
		ws.movedLocked(from)
		w.mu.Unlock()
		w.keepParents(id, from)
		return nil
	}
	// Until the outcome, the staged files moved are busy (done): a
	// close of one meanwhile committed its bytes under the new name,
	// and they stayed there when the rename then failed (review 15).
	// Both directories are held: an open below either waits, then
	// looks its name up again when the rename landed (ErrChanged), and
	// a file created below the old name meanwhile was left there, the
	// directory with it (audit 17).
	done := make(chan struct{})
	w.moveLocalLocked(ws, from, to, staged, dirs, done)
	holdFrom, holdTo := ws.holdName(from+"/"), ws.holdName(to+"/")
	unlock()
	w.mu.Unlock()
	var moved []string
	for _, name := range staged {
		moved = append(moved, to+strings.TrimPrefix(name, from))
	}
	err = w.queue(ctx, id, ops)
	_, unlock = w.lockStaged(ws, func() []string { return moved }, done)
	names := moved
	if err != nil {
		// Nothing moved in the bucket: neither does anything here.
		// Left moved, the local directories showed the target as an
		// empty directory beside the source, and the mv tried again
		// moved the source into it.
		var backDirs []string
		for _, d := range dirs {
			backDirs = append(backDirs, to+strings.TrimPrefix(d, from))
		}
		w.moveLocalLocked(ws, to, from, moved, backDirs, nil)
		names = staged
	}
	for _, name := range names {
		if s := ws.files[name]; s != nil && s.committing == done {
			s.committing = nil
		}
	}
	close(done)
	if err == nil {
		ws.movedLocked(from)
	}
	ws.releaseName(from+"/", holdFrom, err == nil)
	ws.releaseName(to+"/", holdTo, err == nil)
	unlock()
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.keepParents(id, from)
	return nil
}

// moveLocalLocked renames the staged files named staged and the local
// directories dirs, all under from, to the same places under to, and
// marks the files busy with done (File.committing) unless it is nil.
// The caller holds ws.nsMu (releases wait for it, so every staged file
// is still there), w.mu and the mu of every file in staged (lockStaged).
func (w *Writer) moveLocalLocked(ws *session, from, to string, staged, dirs []string, done chan struct{}) {
	for _, name := range staged {
		s := ws.files[name]
		delete(ws.files, name)
		s.setNameLocked(to + strings.TrimPrefix(name, from))
		ws.files[s.name] = s
		if done != nil {
			s.committing = done
		}
	}
	for _, d := range dirs {
		delete(ws.dirs, d)
	}
	for _, d := range dirs {
		ws.dirs[to+strings.TrimPrefix(d, from)] = true
	}
}

// moveWrittenFile renames from to to when from's staged file holds
// changes built on what it read of the name (an edit in place, an
// append, a create that found it absent): the removal of from is
// committed first, guarded by what the file was built on, and the file
// then takes its new name with no commit of it in between. When another
// mount changed the name since, the rename is refused (ESTALE) and
// nothing moves, as that file's close would be refused. The removal was
// not guarded and the close under the new name was not either (its
// entry has the old name): another mount's rewrite of the name was gone
// from both names, every call returning 0 (review 6). A close that came
// while the removal was committed committed the file under the old name
// first, refused by that removal, and its bytes went on alone (review 7).
// In close mode the same snapshot gives to what the file was last
// committed as (its changes since land at its close, under to): with
// the removal alone, other mounts saw neither name until that close,
// and a mount that died before it lost the file, bytes an earlier close
// had acknowledged included (audit 11). absentTo, if set, guards to by
// its absence (a rename that must not replace).
// It reports whether it moved the file; with nothing so built on the
// name, it does nothing, and the caller renames. The caller holds
// ws.nsMu.
func (w *Writer) moveWrittenFile(ctx context.Context, id layout.SessionID, ws *session, from, to string, slots Slots, now time.Time, absentTo *layout.FileBase) (bool, error) {
	if _, listed := slots(from); !listed {
		return false, nil
	}
	if s := w.Staged(id, from); s != nil {
		// What the file was committed as, when its last commit's
		// outcome was unknown: its own landed commit would refuse the
		// removal (review 7).
		if _, err := w.settleUnknown(ctx, id, s); err != nil {
			return false, err
		}
	}
	s := w.stagedIdle(ws, from)
	if s == nil {
		return false, nil
	}
	var base *layout.FileBase
	var was *layout.Entry
	switch {
	case !s.dirty || s.unlinked || s.wholeOpens.Load() > 0:
	case s.committed != nil && s.committed.Name == from:
		base, was = w.baseOfLocked(ws, s.committed), s.committed
	case s.committed == nil && s.absent != nil && s.absentAs == from:
		b := *s.absent
		base = &b
	}
	if base == nil {
		s.mu.Unlock()
		w.mu.Unlock()
		return false, nil
	}
	// No commit of s starts until it has its new name (a close's waits
	// for this one): nsMu keeps it staged at from meanwhile.
	ch := make(chan struct{})
	s.committing = ch
	s.mu.Unlock()
	w.mu.Unlock()
	done := func() {
		s.mu.Lock()
		s.committing = nil
		close(ch)
		s.mu.Unlock()
	}
	// A file open under the target name is replaced: its descriptors
	// now write to an unlinked file. Before the commit, as a rename of
	// a file not being written does: a close of it during the commit
	// landed its bytes over the new name's, and the moved file's close
	// then put its own after them (review 8).
	settle := w.unstageOver(ws, to)
	gone := layout.Descriptor{Name: from, Deleted: true, CreatedAt: now}
	ops := []pendingOp{{desc: &gone, base: base}}
	var landed *layout.Entry
	if was != nil && w.cfg.Commit == CommitOnClose {
		moved := movedTo(*was, id, to, now)
		retype(&moved, from, to)
		ops = append(ops, pendingOp{desc: &moved, base: absentTo})
		res, err := w.commit(ctx, id, ops, nil)
		if err != nil {
			if res, err = w.settleMove(ctx, id, err); err != nil {
				settle(true)
				done()
				return false, err
			}
		}
		for _, d := range res.Descriptors {
			if d.Name == to && !d.Deleted {
				landed = &layout.Entry{Descriptor: d, Session: id, Version: res.Version}
			}
		}
	} else if err := w.queue(ctx, id, ops); err != nil {
		settle(true)
		done()
		return false, err
	}
	// s.mu may be held shared a moment (a read, a stat); no upload of s
	// runs while committing is set.
	w.lockFile(s)
	delete(ws.files, from)
	s.setNameLocked(to)
	ws.files[to] = s
	if landed != nil {
		// Its close builds on what to holds now: guarded by it, as
		// it was by what from held.
		s.committed = landed
	}
	s.committing = nil
	close(ch)
	s.mu.Unlock()
	w.mu.Unlock()
	// An open of to waits for this (replacing): it finds s there.
	settle(false)
	return true, nil
}

// settleMoveFor bounds how long a rename asks the bucket about its
// commit of unknown outcome (settleMove). A var for tests.
var settleMoveFor = 3 * time.Second

// settleMove answers err, the failed commit of a rename of a file open
// with changes (moveWrittenFile): when its outcome was unknown, it asks
// the bucket at once, by the commit's transaction ID, a few times within
// settleMoveFor, and returns the commit as it landed. Left to the
// background check (resolveLater), a rename whose snapshot had landed
// answered EIO and kept the file at the old name, where its close put
// the changes back: the file ended split across both names (review 8).
// A commit that did not land, or that the bucket still says nothing
// about, is err.
func (w *Writer) settleMove(ctx context.Context, id layout.SessionID, err error) (layout.CommitResult, error) {
	var u *layout.OutcomeUnknownError
	if !errors.As(err, &u) {
		return layout.CommitResult{}, err
	}
	// One deadline over every try: each is a HEAD and a GET to a bucket
	// that just left a PUT unanswered, and the rename holds the
	// session's nsMu meanwhile (every close, rm and mv of it waits).
	// Bounded by --request-timeout alone, six tries held them minutes
	// (review 9).
	ctx, cancel := context.WithTimeout(ctx, settleMoveFor)
	defer cancel()
	for delay := 100 * time.Millisecond; ; delay *= 2 {
		res, landed, rerr := w.store.ResolveCommit(ctx, u)
		switch {
		case rerr == nil && landed:
			w.log.Info("a rename whose outcome was unknown had landed", "session", id, "version", res.Version)
			w.onCommit(id, res.Descriptors)
			return res, nil
		case rerr == nil:
			// Known now: not landed. Said so, not "outcome unknown"
			// (review 9). The cause is text only: the rename failed
			// for the bucket's silence (EIO), whatever the error the
			// lost reply left (review 11).
			return layout.CommitResult{}, fmt.Errorf("rename in %s: its snapshot %d did not land (the bucket did not answer: %v)", id, u.Version, u.Err)
		}
		select {
		case <-ctx.Done():
			return layout.CommitResult{}, err
		case <-time.After(delay):
		}
	}
}

// liveNow is the live view of session id for a change of names from and
// to (a rename, a link), taken under the session's nsMu. A commit in
// flight of either name (a release committing a just-created file, say)
// has taken its name already: it lands first, then the view is read.
// Renaming under it moved a file whose descriptor still had the old
// name, and the file ended at the old name, or the rename found it
// neither staged nor committed. With fresh, the state is read from the
// bucket (one LIST), not trusted for the metadata TTL (stateFor). at is
// the version of the state.
func (w *Writer) liveNow(ctx context.Context, id layout.SessionID, from, to string, fresh bool) (slots Slots, tree *cache.Dir, at uint32, err error) {
	w.waitCommits(id, from, to)
	st, err := w.stateFor(ctx, id, fresh)
	if err != nil {
		return nil, nil, 0, err
	}
	slots, tree = w.Live(st)
	return slots, tree, st.Version, nil
}

// stateFor is the state of session id that a change made from what the
// bucket holds (a rename, a chmod, a link) copies digests from: with
// fresh, read from the bucket (one LIST); else as trusted for the
// metadata TTL, for a change whose commit is guarded by the files it
// copies.
func (w *Writer) stateFor(ctx context.Context, id layout.SessionID, fresh bool) (*cache.State, error) {
	if fresh {
		w.cache.Invalidate(id)
	}
	return w.cache.State(ctx, id)
}

// kindOf reports whether name is a file and whether it is a directory in
// the live view of ws (slots and tree, from Live), staged files and local
// directories included.
func (w *Writer) kindOf(ws *session, slots Slots, tree *cache.Dir, name string) (file, dir bool) {
	if _, ok := slots(name); ok && !w.Hidden(ws.id, name) {
		file = true
	}
	if w.Staged(ws.id, name) != nil {
		file = true
	}
	if d, ok := tree.Walk(strings.Split(name, "/")); ok && d != nil && d.FileCount()+d.SubCount() > 0 {
		dir = true
	}
	w.mu.Lock()
	if ws.dirs[name] {
		dir = true
	}
	w.mu.Unlock()
	return
}

// Link gives the file at from a second name, to, for link(2): tar and
// rsync -H make the members of an archive that are hard links with it.
// The layout has no inodes, so to becomes a file of its own with from's
// content, shared (a descriptor for the same blob, no upload), and its
// attributes (posix-mode, posix-mtime, metadata); the names are separate
// files from then on, as after cp --reflink. A file still staged
// (written, not committed yet: --commit=fsync, or open for writing) is
// copied as it is now into a staged file of its own, which commits as
// any written file does. to must not exist: link(2) never replaces.
func (w *Writer) Link(ctx context.Context, id layout.SessionID, from, to string) error {
	if sendArea(from) != sendArea(to) {
		return ErrCrossSend
	}
	if err := errors.Join(layout.CheckUTF8(from), layout.CheckUTF8(to)); err != nil {
		return err
	}
	c, err := w.link(ctx, id, from, to)
	if err != nil || c == nil {
		return err
	}
	// The copy is held as by an open: its release commits it in close
	// mode and leaves it staged until fsync in fsync mode.
	return w.Release(ctx, id, c)
}

// link does Link's work under the session's nsMu; it returns the staged
// copy of a staged file, held once, for the caller to release.
func (w *Writer) link(ctx context.Context, id layout.SessionID, from, to string) (*File, error) {
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	// The target must not exist, which no guard checks: the bucket says.
	slots, tree, _, err := w.liveNow(ctx, id, from, to, true)
	if err != nil {
		return nil, err
	}
	if file, dir := w.kindOf(ws, slots, tree, to); file || dir {
		return nil, ErrExist
	}
	if file, _ := w.kindOf(ws, slots, tree, from); !file {
		return nil, ErrNotExist
	}
	e, ok := slots(from)
	if s := w.stagedIdle(ws, from); s != nil {
		// nsMu keeps s staged and its spill file open: only a last
		// release, a rename or an unlink forgets it, and they take
		// nsMu.
		dirty := s.dirty && !s.unlinked
		if !dirty && s.committed != nil {
			e, ok = *s.committed, true
		}
		s.mu.Unlock()
		w.mu.Unlock()
		if dirty {
			return w.stageCopy(ws, s, to)
		}
	}
	if !ok {
		return nil, ErrNotExist
	}
	d := movedTo(e, id, to, w.cfg.Now().UTC())
	retype(&d, from, to)
	return nil, w.Queue(ctx, id, []layout.Descriptor{d})
}

// stageCopy stages a copy of s's content and attributes under to, held
// once (opens 1). The caller holds ws.nsMu, not w.mu or s.mu.
func (w *Writer) stageCopy(ws *session, s *File, to string) (*File, error) {
	nf, err := w.spill()
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", to, err)
	}
	s.mu.Lock()
	c := &File{name: to, file: nf, spill: w.spill, created: w.cfg.Now(), now: w.cfg.Now, sum: sha256.New(),
		size: s.size, dirty: true, touched: true, meta: cloneMap(s.meta), ctype: s.ctype,
		schema: s.schema, cacheControl: s.cacheControl, blobs: w.blobs, lazy: s.lazy}
	if s.lazy == nil {
		var f *os.File
		var done func()
		if f, done, err = s.spillLocked(); err == nil && f == nil {
			done()
			err = ErrClosed
		}
		if err == nil {
			// copy_file_range where the file system has it (an
			// io.LimitedReader of an *os.File): no copy through here.
			if _, err = f.Seek(0, io.SeekStart); err == nil {
				_, err = io.Copy(nf, io.LimitReader(f, s.size))
			}
			done()
		}
	}
	s.mu.Unlock()
	if err != nil {
		nf.Close()
		return nil, fmt.Errorf("stage %s: copy %s: %w", to, s.Name(), err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws.files[to] != nil {
		nf.Close()
		return nil, ErrExist
	}
	c.opens = 1
	ws.files[to] = c
	delete(ws.gone, to)
	return c, nil
}

// waitCommits waits until no staged file named one of names, or under one
// of them, has a commit in flight.
func (w *Writer) waitCommits(id layout.SessionID, names ...string) {
	w.mu.Lock()
	var busy []*File
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
		s.waitIdle()
	}
}

// SendDir is the directory of a session, as a slot-name prefix, whose
// files are cross-session writes: SendDir/<target-id>/<name> is committed
// as a descriptor named name with target-session target (§12.1). It is
// below the hidden .pugmark/, so no committed slot can be in the way.
const SendDir = ".pugmark/send"

// movedTo is e's descriptor under the name to, committed at now. A
// rename does not change a file's mtime (POSIX), so the time e showed
// is kept as posix-mtime when it has none, as a chmod keeps it
// (attrs.go); mv used to make the file's mtime the time of the mv.
func movedTo(e layout.Entry, id layout.SessionID, to string, now time.Time) layout.Descriptor {
	moved := e.Descriptor.Clone()
	moved.Name, moved.CreatedAt = to, now
	if _, set := moved.Metadata[layout.MetaPosixMtime]; !set {
		if moved.Metadata == nil {
			moved.Metadata = map[string]string{}
		}
		moved.Metadata[layout.MetaPosixMtime] = layout.FormatPosixMtime(layout.ShownMtime(e.Metadata, e.CreatedAt, id.Time()))
	}
	return moved
}

// sendArea is the SendDir/<target> directory name is in, SendDir for
// SendDir itself, or "" for a name outside SendDir.
func sendArea(name string) string {
	rest, ok := strings.CutPrefix(name, SendDir+"/")
	if !ok {
		if name == SendDir {
			return SendDir
		}
		return ""
	}
	t, _, _ := strings.Cut(rest, "/")
	return SendDir + "/" + t
}

// SendName splits a staged slot name under SendDir into the target
// session and the name the target gets; ok is false for any other name.
func SendName(full string) (target layout.SessionID, name string, ok bool) {
	rest, ok := strings.CutPrefix(full, SendDir+"/")
	if !ok {
		return target, "", false
	}
	t, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return target, "", false
	}
	id, err := layout.ParseSessionID(t)
	if err != nil || id.String() != t {
		return target, "", false
	}
	return id, name, true
}
