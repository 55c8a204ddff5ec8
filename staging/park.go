package staging

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/layout"
)

// A staged file released and kept for the next fsync (--commit=fsync, a
// pugfs exec run before its checkpoint) is parked: its spill file gets a
// name in the Writer's park directory and its descriptor is closed. One
// descriptor held per staged file until the commit made a run of more
// files than `ulimit -n` fail (EMFILE at a create, the whole run kept
// under failed/: audit 15); a checkout of a large tree writes that many.
// A handle that opens the file again opens the name (unparkLocked); a
// commit opens it only while it reads it (spillLocked), so a checkpoint
// of 100,000 parked files holds a few descriptors at a time.
//
// The park directory is StagingDir/parked-*, made at the first park and
// removed by Shutdown (which keeps what it holds first, as it keeps every
// file not committed). Where a file's name is there says what it is. A
// file closed and not committed (parked) is <session>/<name>.<time>-<n>,
// its name as the failed directory names it (keptName): the next mount
// sweeps a crashed one's staging directory (cmd/pugfs) and moves these
// into the failed directory, so a crash keeps what was closed and not yet
// fsynced, as an unmount does. Any other file there is a plain number,
// which the sweep removes: one being written again through a handle
// (files open for writing die with a crashed mount, README), committed
// while a handle held it, or removed while held; and every file of
// pugfs exec (Hold) while its command runs: a run killed then keeps
// nothing, its output unfinished (README); once the command exited 0,
// the run's files get kept names too (KeepOnCrash). Renames move a kept name with the file. A file
// holding only the blob it was opened on (lazy) has an empty spill file:
// parking closes it, and names nothing (parkedEmpty).

// parking is a Writer's park directory.
type parking struct {
	// mu guards everything below. Taken with Writer.mu and a File.mu
	// held, last.
	mu sync.Mutex
	// dir is the park directory, "" until the first park.
	dir string
	// closed is set by Shutdown: nothing is parked any more.
	closed bool
	next   uint64
	// keep: park files under names the sweep keeps (not Hold); staging
	// is the directory the park directory is made in. Set before the
	// Writer is shared.
	keep    bool
	staging string
}

// name returns a new name in the park directory: a plain number, or
// with kept, the kept name of file name of session id (keptName, with
// stamp as its suffix: a time and a count). It makes the directories it
// needs.
func (p *parking) name(kept bool, id layout.SessionID, name, stamp string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", errors.New("the writer was shut down")
	}
	if p.dir == "" {
		// The staging directory too may have been removed (spill).
		os.MkdirAll(p.staging, 0o700)
		dir, err := os.MkdirTemp(p.staging, "parked-")
		if err != nil {
			return "", fmt.Errorf("make the park directory: %w", err)
		}
		p.dir = dir
	}
	p.next++
	if !kept {
		return filepath.Join(p.dir, strconv.FormatUint(p.next, 10)), nil
	}
	sdir := filepath.Join(p.dir, id.String())
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return "", fmt.Errorf("make the park directory: %w", err)
	}
	return filepath.Join(sdir, keptName(name, stamp)), nil
}

// stamp is the suffix of a new kept name: the time, as the failed
// directory's names have it, and a count, so that two files of one name
// parked in one nanosecond stay apart.
func (p *parking) stamp() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return fmt.Sprintf(".%s-%d", time.Now().UTC().Format("20060102T150405.000000000"), p.next)
}

// renameParkedLocked gives the parked spill file of s a new name in the
// park directory, kept (with stamp, under s's name) or plain; best
// effort: when it fails, the name stays what it was. Caller holds s.mu
// exclusively.
func (s *File) renameParkedLocked(kept bool, stamp string) {
	p := s.parkedIn
	if s.parked == "" || p == nil {
		return
	}
	to, err := p.name(kept, s.parkedAs, s.name, stamp)
	if err != nil || os.Rename(s.parked, to) != nil {
		return
	}
	s.parked = to
	s.parkStamp = ""
	if kept {
		s.parkStamp = stamp
	}
}

// close removes the park directory: the Writer parks nothing any more.
// The names of files still parked go with it; their content is the
// caller's to have kept first (Shutdown).
func (p *parking) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir != "" {
		os.RemoveAll(p.dir)
		p.dir = ""
	}
	p.closed = true
}

// lost forgets dir, the park directory, found gone (the staging
// directory was removed while mounted): the next park makes another.
func (p *parking) lost(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir == dir {
		p.dir = ""
	}
}

// parkLocked parks s, released by its last handle and kept for the next
// fsync, unless another handle holds it, or its spill file cannot have a
// name (a file system without O_TMPFILE, where it has none to link); it
// reports busy when a read or stat held s.mu (parkLater). Caller holds
// Writer.mu, which File.mu is not waited for under.
func (w *Writer) parkLocked(id layout.SessionID, s *File) (busy bool) {
	if s.opens > s.readers {
		return false
	}
	if !s.mu.TryLock() {
		return true
	}
	defer s.mu.Unlock()
	w.parkHeldLocked(id, s)
	return false
}

// parkHeldLocked is parkLocked with s.mu held too (exclusively).
func (w *Writer) parkHeldLocked(id layout.SessionID, s *File) {
	if s.opens > s.readers || s.file == nil || s.committing != nil {
		return
	}
	if s.lazy != nil {
		s.setSpillLocked(nil) // empty
		s.parkedEmpty = true
		return
	}
	if !w.nameSpillLocked(id, s, w.keepsLocked(id) && s.dirty && !s.unlinked) {
		return
	}
	s.file.Close()
	s.file = nil
}

// nameSpillLocked gives the open spill file of s a name in the park
// directory, kept (one the sweep of a crashed mount keeps) or plain,
// renaming the one it has when it is the other kind; false when it
// cannot have one. Caller holds s.mu exclusively.
func (w *Writer) nameSpillLocked(id layout.SessionID, s *File, kept bool) bool {
	if s.parked != "" && !namedAs(s.file, s.parked) {
		s.parked, s.parkStamp = "", "" // the staging directory was removed: named again below
	}
	stamp := ""
	if kept && s.parkStamp == "" {
		stamp = w.park.stamp()
	}
	if s.parked != "" && kept != (s.parkStamp != "") {
		s.renameParkedLocked(kept, stamp) // e.g. named plain while written again
	}
	for attempt := 0; s.parked == ""; attempt++ {
		name, err := w.park.name(kept, id, s.name, stamp)
		if err == nil {
			err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", s.file.Fd()), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
		}
		if err == nil {
			s.parked, s.parkedIn, s.parkedAs, s.parkStamp = name, &w.park, id, stamp
			break
		}
		if _, serr := os.Stat(filepath.Dir(name)); errors.Is(serr, os.ErrNotExist) && attempt == 0 {
			w.park.lost(filepath.Dir(name))
			continue // in a new park directory
		}
		w.log.Debug("staged file not parked: it keeps its descriptor", "name", s.name, "err", err)
		return false
	}
	return true
}

// keepClosed gives the spill file of s, closed by a descriptor that
// wrote to it (a FLUSH; wrote is the descriptor's last write, File.Gen)
// and kept for the next fsync, the name a crash keeps at once, before
// the RELEASE that parks it: the kernel sends that after close(2) has
// returned, and not while a copy of the descriptor lives (dup, fork), and
// a mount killed in between lost a file its program had closed. The
// descriptor stays open until the RELEASE; a write through a copy of it
// meanwhile names the file plain again (unparkLocked), as for any file
// written through a handle. Left to the RELEASE, as before: a close of a
// descriptor that wrote nothing (the shell's own of `cmd > out`, whose
// copy cmd still writes through: review 27), a file another handle may
// write, and one a commit's upload or a read holds at that moment (a
// close does not wait for an upload).
func (w *Writer) keepClosed(id layout.SessionID, s *File, wrote uint64) {
	if wrote == 0 {
		return
	}
	w.keep(id, s, false, 0)
}

// keepCut names s kept again after truncate(2) of its path cut a file
// its last writer had closed (kept at that FLUSH, the RELEASE still to
// come): the cut goes through the file as a write would and names it
// plain (unparkLocked), and its own release cannot keep it while the
// other handle is open, so a crash lost a file nobody held for writing
// (review 27). A handle opened since writes, if it does, as after any
// keep: its write names the file plain.
//
// gen is the file's generation the cut left: a write through another
// handle since (the window between the cut and this) makes the file one
// open for writing again, not kept (review 30).
func (w *Writer) keepCut(id layout.SessionID, s *File, gen uint64) { w.keep(id, s, true, gen) }

// keep names the spill file of s kept, when a crash must keep it: s is
// dirty, not in a commit, at generation gen unless that is 0, and, unless
// anyOpens, open only through the handle being closed (and readers).
func (w *Writer) keep(id layout.SessionID, s *File, anyOpens bool, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	if (!anyOpens && s.opens-s.readers != 1) || ws == nil || ws.files[s.name] != s || !w.keepsLocked(id) || !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if s.file == nil || s.lazy != nil || !s.dirty || s.unlinked || s.failed != nil || s.committing != nil || s.parkStamp != "" || (gen != 0 && s.gen != gen) {
		return
	}
	w.nameSpillLocked(id, s, true)
}

// keepsLocked reports whether a crash keeps the parked files of session
// id: always, unless the Writer holds (pugfs exec), until KeepOnCrash.
// Caller holds Writer.mu.
func (w *Writer) keepsLocked(id layout.SessionID) bool {
	if w.park.keep {
		return true
	}
	ws := w.ss[id]
	return ws != nil && ws.keepOnCrash
}

// KeepOnCrash makes a crash from now on keep what session id has staged
// and not committed, as it keeps a mount's closed files: its parked files
// get kept names, and so do those parked later. pugfs exec calls it once
// its command exited 0, before the checkpoint: the output is whole then,
// and a run killed while committing it left its outcome unknown and
// every staged file to the next run's sweep, which removed them all (its
// exit 74 keeps them: audit 19). Files committed since are named plain
// again (unkeepLocked), so the sweep keeps only what may not have landed.
func (w *Writer) KeepOnCrash(id layout.SessionID) {
	w.mu.Lock()
	ws := w.ss[id]
	if ws == nil {
		w.mu.Unlock()
		return
	}
	ws.keepOnCrash = true
	files := make([]*File, 0, len(ws.files))
	for _, s := range ws.files {
		files = append(files, s)
	}
	w.mu.Unlock()
	// Renamed under File.mu alone (renameParkedLocked), which is not
	// waited for under Writer.mu; one parked meanwhile was parked under
	// the flag, and one opened again (a handle, not pugfs exec's case)
	// gets a plain name as always.
	for _, s := range files {
		s.mu.Lock()
		if s.parked != "" && s.parkStamp == "" && s.file == nil && s.dirty && !s.unlinked {
			s.renameParkedLocked(true, w.park.stamp())
		}
		s.mu.Unlock()
	}
}

// parkOrLaterLocked parks s now, or once the read or stat that holds it
// lets it go (parkLater), unless a parkLater of s already waits. Caller
// holds Writer.mu.
func (w *Writer) parkOrLaterLocked(id layout.SessionID, s *File) {
	if w.parkLocked(id, s) && !s.parkWaiting {
		s.parkWaiting = true
		go w.parkLater(id, s)
	}
}

// parkLater parks s, which its last release found busy (parkLocked),
// once the read or stat that holds it lets it go: nothing else would,
// and a file released so held its descriptor until the commit (review
// 19), and a crash lost it (review 21). It runs on a goroutine of its
// own, until s is parked or needs no parking (parkHeldLocked), and
// parks with the File.mu it waited for: taking Writer.mu first and
// trying File.mu after, it lost to reads that came meanwhile for as
// long as they kept coming (review 22). Writer.mu is only tried under
// File.mu, never waited for.
func (w *Writer) parkLater(id layout.SessionID, s *File) {
	for {
		s.mu.Lock()
		if w.mu.TryLock() {
			w.parkHeldLocked(id, s)
			s.parkWaiting = false
			w.mu.Unlock()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		// Wait for Writer.mu's holder, then try again.
		w.mu.Lock()
		//lint:ignore SA2001 the lock is taken to wait for its holder
		w.mu.Unlock()
	}
}

// parkIdle parks every file of session id that nobody holds, after a
// commit: one that failed leaves its files staged, and a rebase of an
// appended file, or a release that found it busy, may have left one
// open.
func (w *Writer) parkIdle(id layout.SessionID) {
	if w.cfg.Commit != CommitOnFsync {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws != nil {
		for _, s := range ws.files {
			w.parkOrLaterLocked(id, s)
		}
	}
}

// namedAs reports whether path names f's file: closing f then loses
// nothing.
func namedAs(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// unparkLocked opens the parked spill file of s again, for the handle
// that is about to use it; it stays open until the file is parked again
// or closed. Caller holds s.mu exclusively.
func (s *File) unparkLocked() error {
	if s.parkedEmpty {
		f, err := s.spill()
		if err != nil {
			return fmt.Errorf("stage %s: %w", s.name, err)
		}
		s.setSpillLocked(f)
		return nil
	}
	if s.file != nil || s.parked == "" {
		// Open: named kept only when its last descriptor closed it
		// (keepClosed), and about to change through a dup of that one.
		s.unkeepLocked()
		return nil
	}
	f, err := os.OpenFile(s.parked, os.O_RDWR, 0)
	if err != nil {
		return s.parkedLostLocked(fmt.Errorf("stage %s: open the parked spill file: %w", s.name, err))
	}
	s.file = f
	// Written again through a handle: what a crash leaves of it is not
	// what was closed (review 20), and dies with the mount, as any file
	// open for writing.
	if s.parkStamp != "" {
		s.renameParkedLocked(false, "")
	}
	return nil
}

// unkeepLocked names the parked spill file of s plain, when a crash must
// not keep it: its content was committed, or the file removed, while a
// handle held it (review 20). Caller holds s.mu exclusively.
func (s *File) unkeepLocked() {
	if s.parkStamp != "" {
		s.renameParkedLocked(false, "")
	}
}

// parkedLostLocked returns err, an open of the parked spill file that
// failed. When the name is gone (the staging directory was removed while
// mounted), so are the bytes: s holds nothing now, and its commits fail
// with err until it is cut to nothing or removed, as after a failed write
// (werr), instead of failing for the name at every fsync. Caller holds
// s.mu exclusively.
func (s *File) parkedLostLocked(err error) error {
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	nf, serr := s.spill()
	if serr != nil {
		return err
	}
	s.parked, s.parkStamp = "", ""
	s.setSpillLocked(nf)
	s.size, s.summed, s.lazy = 0, -1, nil
	s.linked.Store(false)
	s.werr, s.dirty = fmt.Errorf("%w (removed with the staging directory)", err), true
	s.gen++
	return s.werr
}

// spillLocked returns the spill file for one use by a commit (a hash, an
// upload, a copy kept under failed/, a rename's copy), and done, which
// the caller calls when it is through: a parked file is opened for that
// use only. Caller holds s.mu (shared is enough) and checked that s is
// not closed.
func (s *File) spillLocked() (f *os.File, done func(), err error) {
	if s.parkedEmpty {
		if f, err = s.spill(); err != nil {
			return nil, nil, err
		}
		return f, func() { f.Close() }, nil
	}
	if s.file != nil || s.parked == "" {
		return s.file, func() {}, nil
	}
	f, err = os.OpenFile(s.parked, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("stage %s: open the parked spill file: %w", s.name, err)
	}
	return f, func() { f.Close() }, nil
}

// setNameLocked gives s the name to (a rename). A spill file parked
// under its old name (park.go) is renamed with it, so that a crash keeps
// it under the name it has. Caller holds s.mu exclusively and
// Writer.mu.
func (s *File) setNameLocked(to string) {
	s.name = to
	if s.parkStamp != "" {
		s.renameParkedLocked(true, s.parkStamp) // the same stamp, the new name
	}
}

// closedLocked reports whether the spill file is closed for good (the
// file was forgotten); a parked one is not. Caller holds s.mu.
func (s *File) closedLocked() bool { return s.file == nil && s.parked == "" && !s.parkedEmpty }

// setSpillLocked makes f the spill file of s, closing the old one and
// removing its parked name. Caller holds s.mu exclusively.
func (s *File) setSpillLocked(f *os.File) {
	if s.file != nil {
		s.file.Close()
	}
	if s.parked != "" {
		os.Remove(s.parked)
		s.parked, s.parkStamp = "", ""
	}
	s.file, s.parkedEmpty = f, false
}
