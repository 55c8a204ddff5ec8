package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Release drops one open of s. The last open of a file left dirty
// commits it first (close mode), and returns that commit's error: what
// made it dirty was acknowledged to someone (a truncate(2) or setxattr
// while another open held the file, a write racing the commit of a
// release), so it is not a failed commit. Only content whose own commit
// failed and was returned by close(2) or fsync(2) (s.failed) goes to the
// failed directory, and never appears later as if that call had
// succeeded. A staged file nobody holds any more is forgotten: its content
// is in the committed state.
func (w *Writer) Release(ctx context.Context, id layout.SessionID, s *File) error {
	ws := w.session(id)
	if w.dropOpen(id, s) {
		return nil
	}
	// Perhaps the last: what follows may commit and forget s.
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	var err error
	for {
		w.mu.Lock()
		if s.opens > 1 {
			w.dropLocked(id, s) // another open took the duty over
			w.mu.Unlock()
			return err
		}
		// Shared: w.mu is held, and an upload of s (holding s.mu shared)
		// must not stall every other writer operation until it ends.
		s.mu.RLock()
		dirty, failed := s.dirty && !s.unlinked, s.failed != nil
		var unknown *layout.OutcomeUnknownError
		errors.As(s.failed, &unknown)
		s.mu.RUnlock()
		mine := ws.files[s.name] == s
		if dirty && !failed && mine && w.cfg.Commit == CommitOnFsync {
			s.opens--
			w.parkOrLaterLocked(id, s)
			w.mu.Unlock()
			return err // kept until the session is fsynced
		}
		if dirty && !failed && w.cfg.Commit == CommitOnClose {
			// This call still holds the last open, so nobody releases s
			// under it; an open that arrives meanwhile takes the duty
			// over (the next round sees opens > 1). Not under nsMu: a
			// commit that moves appended bytes can take long, and every
			// rm, mv and chmod of the session waited for it (review 6).
			w.mu.Unlock()
			ws.nsMu.Unlock()
			err = w.Flush(ctx, id, s, true)
			ws.nsMu.Lock()
			continue
		}
		s.opens--
		switch {
		case dirty && unknown != nil:
			// The close said EIO; the bytes may be in the session all
			// the same, and the copy is what to compare them with.
			w.keepUnknownLocked(id, s, unknown)
		case dirty:
			w.salvageLocked(id, s, "commit failed; staged data kept")
		}
		if mine {
			delete(ws.files, s.name)
		}
		w.mu.Unlock()
		s.close()
		return err
	}
}

// TruncateName is truncate(2) of a path: name is staged (or its staged
// file shared) and cut to size, committed at once when commit is set, as
// close(2) would, and released. Left to the release, the commit would
// wait for the last other open of the file and its error would reach
// nobody. It returns the staged file, already released, so the caller
// can show what it became. (open(O_TRUNC) is not this: the front end
// stages the cut with the open, OpenFresh, and the close commits it.)
//
// A failed truncate leaves the file as it was. When the staged file held
// nothing but the entry it was last committed as and the commit fails, it
// is filled again from that entry: the handles still open on it read the
// committed bytes, not the cut that was refused.
func (w *Writer) TruncateName(ctx context.Context, id layout.SessionID, name string, baseOf func() *layout.Entry, size int64, commit bool) (*File, error) {
	s := w.share(w.session(id), name)
	if s == nil {
		var err error
		if s, err = w.OpenFresh(ctx, id, name, baseOf, size == 0); err != nil {
			return nil, err
		}
	}
	var was *layout.Entry // what s holds when the cut is refused
	var touched bool
	var meta map[string]string
	var gen uint64
	var kept bool // named kept before the cut (keepClosed)
	err := s.withContent(ctx, func() error {
		kept = kept || s.parkStamp != "" // a retry after a fill finds it unkept
		was = nil
		if !s.dirty && s.werr == nil && s.committed != nil {
			was = s.committed
		}
		touched, meta = s.touched, cloneMap(s.meta)
		err := s.truncateLocked(size)
		gen = s.gen
		return err
	})
	if err == nil && commit {
		if err = w.Flush(ctx, id, s, true); err != nil && was != nil {
			w.restore(ctx, s, gen, was, touched, meta)
		}
	}
	if err == nil && kept && w.cfg.Commit == CommitOnFsync {
		w.keepCut(id, s, gen)
	}
	if rerr := w.Release(ctx, id, s); err == nil {
		err = rerr
	}
	return s, err
}

// restore fills s again with e, the entry it held before a truncate whose
// commit failed, unless s changed since (gen).
func (w *Writer) restore(ctx context.Context, s *File, gen uint64, e *layout.Entry, touched bool, meta map[string]string) {
	// Without mu: stat and reads of s go on meanwhile (holdLazilyLocked).
	size, err := s.blobs.Size(ctx, &e.Descriptor)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitCommitLocked()
	if s.gen != gen || s.unlinked || s.failed == nil {
		return // written, removed or committed meanwhile: that stands
	}
	s.gen++
	if err == nil {
		err = s.unparkLocked()
	}
	if err == nil {
		err = s.unshareLocked()
	}
	if err == nil {
		if err = s.file.Truncate(0); err == nil {
			s.size = 0
			s.holdLazilyLocked(e, size)
		}
	}
	if err != nil {
		s.summed = -1
		// The refused cut is what s holds now, or part of e: it is not
		// committed, and close(2) says why.
		s.werr = fmt.Errorf("restore %s after its truncate failed: %w", s.name, err)
		return
	}
	s.dirty, s.failed, s.touched, s.meta = false, nil, touched, meta
}

// dropOpen drops one open of s when it is not the last, and reports
// whether it did. With --commit=fsync, a file that only readers hold
// then is parked, so that a crash keeps it (`tail -f` of a file its
// writer closed: review 27).
func (w *Writer) dropOpen(id layout.SessionID, s *File) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.opens > 1 {
		w.dropLocked(id, s)
		return true
	}
	return false
}

// dropLocked drops one open of s, which is not the last: parked when
// only readers hold it then (dropOpen). Caller holds Writer.mu.
func (w *Writer) dropLocked(id layout.SessionID, s *File) {
	s.opens--
	if ws := w.ss[id]; w.cfg.Commit == CommitOnFsync && s.opens == s.readers && ws != nil && ws.files[s.name] == s {
		w.parkOrLaterLocked(id, s)
	}
}

// ReleaseRead is Release of a handle Retain gave.
func (w *Writer) ReleaseRead(ctx context.Context, id layout.SessionID, s *File) error {
	w.mu.Lock()
	s.readers--
	w.mu.Unlock()
	return w.Release(ctx, id, s)
}

// Flush commits s if it is dirty (close(2) and fsync(2) of a file). With
// untouchedToo false, a created file nobody has written to yet is left for
// release.
func (w *Writer) Flush(ctx context.Context, id layout.SessionID, s *File, untouchedToo bool) error {
	return w.flush(ctx, id, s, untouchedToo, 0)
}

// FlushSince is Flush (untouchedToo false) for the close of a descriptor
// whose last write left s at generation wrote (File.Gen): once a commit
// that took s at that generation or later has landed, the descriptor's
// bytes are in the session and its close succeeds, though s may hold
// another descriptor's later writes whose commit was refused (that
// descriptor's own close said so). The close got the other's error, and
// a writer that retried on it wrote its line twice (audit 8).
func (w *Writer) FlushSince(ctx context.Context, id layout.SessionID, s *File, wrote uint64) error {
	return w.flush(ctx, id, s, false, wrote)
}

func (w *Writer) flush(ctx context.Context, id layout.SessionID, s *File, untouchedToo bool, wrote uint64) error {
	if w.cfg.Commit == CommitOnFsync {
		w.keepClosed(id, s, wrote)
		return nil
	}
	s.mu.Lock()
	// Closes of dup'd descriptors can flush the same staged file at
	// once: wait for a commit in flight, then decide on what is left.
	s.waitCommitLocked()
	if wrote != 0 && wrote <= s.landed {
		s.mu.Unlock()
		return nil
	}
	dirty, touched := s.dirty, s.touched
	if !dirty || (!touched && !untouchedToo) || s.unlinked {
		s.mu.Unlock()
		return nil
	}
	if err := s.failed; err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%s not committed: its commit failed and it has not changed since: %w", s.name, err)
	}
	ch := make(chan struct{})
	s.committing = ch
	gen := s.gen
	s.mu.Unlock()
	_, err := w.commit(ctx, id, []pendingOp{{file: s}}, nil)
	started := time.Now()
	for moved := 1; err != nil && time.Since(started) < appendPatience; moved++ {
		// Refused for another writer's commit of a file this one only
		// appended to: its bytes go onto that commit, again, for as long
		// as other writers land first (up to appendPatience, or the
		// caller's cancellation: a FUSE close has none).
		// Given up after 100, the close was ESTALE, and its bytes landed
		// with the next append's commit all the same (audit 9: a mount
		// appending to a 20 ms bucket lost 100 races in a row to one
		// whose commits are cheaper, 0.5% of closes).
		g, ok := w.moveOn(ctx, id, s, err)
		if !ok {
			break
		}
		if moved == appendAttempts {
			w.log.Warn("appended bytes still not committed: other writers keep changing the file first; trying on", "session", id, "name", s.Name(), "commits", moved)
		}
		gen = g
		_, err = w.commit(ctx, id, []pendingOp{{file: s}}, nil)
	}
	s.mu.Lock()
	s.committing = nil
	if err != nil && s.gen == gen {
		s.failed = err // else changed meanwhile: the new content may commit
	}
	if err == nil {
		s.landed = max(s.landed, gen)
	}
	close(ch)
	s.mu.Unlock()
	return err
}

// appendPatience bounds how long a close moves its appended bytes onto
// other writers' commits that keep landing first (rebaseAppended). The
// kernel waits for a FLUSH uninterruptibly (not even SIGKILL ends the
// process meanwhile), so this is how long a close can hang: far beyond
// the slowest seen under contention (16 s, audit 9), far below the 10
// minutes it was (review 6).
const appendPatience = 2 * time.Minute

// FsyncSession is fsync(2) of a session's directory: with
// --commit=fsync it commits everything staged in the session as one
// snapshot; in close mode it commits every staged file written since its
// last commit, as their closes would (flushSession). With Config.Hold it
// commits nothing: only CommitSession does.
func (w *Writer) FsyncSession(ctx context.Context, id layout.SessionID) error {
	if w.cfg.Hold {
		return nil
	}
	if w.cfg.Commit == CommitOnClose {
		return w.flushSession(ctx, id)
	}
	_, err := w.commitStaged(ctx, id, nil, false)
	w.parkIdle(id)
	return err
}

// flushSession flushes every staged file of a session that is dirty and
// not failed, at once (they share a snapshot as concurrent closes do),
// each as its close does: after a commit of it in flight, moved onto
// another writer's commit when only appended to. Committed all in one
// snapshot (commitStaged), an appended file another mount had committed
// meanwhile was refused, and its writer's close was then ESTALE with its
// bytes in the failed directory (review 6).
func (w *Writer) flushSession(ctx context.Context, id layout.SessionID) error {
	ws := w.session(id)
	w.mu.Lock()
	var files []*File
	for _, s := range ws.files {
		// File.mu is not waited for under Writer.mu: an upload holds it
		// shared for the whole PUT, a write through another descriptor
		// queues behind it, and an RLock here waited for both, holding
		// every lookup of the mount (review 36). A busy file is taken
		// and looked at below.
		if s.mu.TryRLock() {
			flushable := s.flushableLocked()
			s.mu.RUnlock()
			if !flushable {
				continue
			}
		}
		s.opens++ // held until flushed: its last release may come meanwhile
		files = append(files, s)
	}
	w.mu.Unlock()
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, s := range files {
		wg.Go(func() {
			s.mu.RLock()
			flushable := s.flushableLocked()
			s.mu.RUnlock()
			if flushable {
				errs[i] = w.Flush(ctx, id, s, true)
			}
			if err := w.Release(ctx, id, s); errs[i] == nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// flushableLocked tells whether a flush of the session would commit s:
// written since its last commit, which did not fail, and still named.
// Caller holds s.mu.
func (s *File) flushableLocked() bool { return s.dirty && s.failed == nil && !s.unlinked }

// Sync is fsync(2) of a descriptor of s (nil when nothing is staged for
// it): with --commit=fsync every staged change of the session is
// committed, else s alone. Either way a content of s whose commit failed
// and went back to the caller is that error again, until s is written
// again: the fsync of a checkpoint that lost its race must not succeed
// the second time it is asked.
func (w *Writer) Sync(ctx context.Context, id layout.SessionID, s *File) error {
	if w.cfg.Commit == CommitOnFsync {
		if err := w.FsyncSession(ctx, id); err != nil {
			return err
		}
		if s == nil {
			return nil
		}
		s.mu.RLock()
		defer s.mu.RUnlock()
		if err := s.failed; err != nil && s.dirty && !s.unlinked {
			return fmt.Errorf("%s not committed: its commit failed and it has not changed since: %w", s.name, err)
		}
		return nil
	}
	if s == nil {
		return nil
	}
	return w.Flush(ctx, id, s, true)
}
