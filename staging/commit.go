package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sys/unix"
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
	if w.dropOpen(s) {
		return nil
	}
	// Perhaps the last: what follows may commit and forget s.
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	var err error
	for {
		w.mu.Lock()
		if s.opens > 1 {
			s.opens-- // another open took the duty over
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
	err := s.withContent(ctx, func() error {
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
// whether it did.
func (w *Writer) dropOpen(s *File) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.opens > 1 {
		s.opens--
		return true
	}
	return false
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

// Deadlines of a commit beyond its requests' own (--request-timeout,
// restarted while an upload's bytes move): the snapshot's commit once the
// uploads are done gets commitDeadline, and each upload, from when the
// budget lets it start, commitDeadline and a second per uploadMinRate
// bytes of its body: an upload slower than 1 MiB/s over a whole file of
// 10 GiB (3 hours) is given up, a faster one is not, where every upload
// of more than 10 minutes was. Waiting for room in the budget counts in
// neither: each upload holding it is bounded so. A backend that stops
// answering fails a request well before any of these.
const (
	commitDeadline = 10 * time.Minute
	uploadMinRate  = 1 << 20 // bytes a second
)

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
		s.mu.RLock()
		dirty := s.dirty && s.failed == nil && !s.unlinked
		s.mu.RUnlock()
		if dirty {
			s.opens++ // held until flushed: its last release may come meanwhile
			files = append(files, s)
		}
	}
	w.mu.Unlock()
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, s := range files {
		wg.Go(func() {
			errs[i] = w.Flush(ctx, id, s, true)
			if err := w.Release(ctx, id, s); errs[i] == nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

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

// CommitSession commits everything staged in a session as ONE snapshot
// of the Writer's snapshot type written on top of base, and returns where
// it landed. It is how pugfs exec ends a handler invocation: base is the
// version the invocation started from, not whatever the session cache
// shows by now, so that a foreign checkpoint that landed meanwhile is a
// conflict (layout.ErrConflict) and never silently built upon; late says
// what snapshots of other types above base do. Unlike FsyncSession it
// commits even when nothing is staged: an invocation is one checkpoint,
// also when its handler wrote nothing, because the checkpoint is what
// marks its input as consumed. On error nothing was committed (but for
// layout.ErrOutcomeUnknown: then perhaps) and everything stays staged
// (and is kept in the failed directory at Shutdown unless Discard drops
// it).
func (w *Writer) CommitSession(ctx context.Context, id layout.SessionID, base layout.Position, late LateInput) (layout.CommitResult, error) {
	res, err := w.commitStaged(ctx, id, &sessionBase{pos: base, exact: late == RefuseLateInput}, true)
	w.parkIdle(id)
	return res, err
}

// LateInput is what a commit on a base (CommitSession) does with
// provisional and queueing snapshots that landed above the base while its
// writer worked.
type LateInput int

const (
	// MergeLateInput lands the snapshot above them (§13.3: a checkpoint
	// subsumes them).
	MergeLateInput LateInput = iota
	// RefuseLateInput lands nothing and fails with layout.ErrLateInput
	// (layout.CommitRequest.Exact).
	RefuseLateInput
)

// sessionBase is where a CommitSession snapshot must be written.
type sessionBase struct {
	pos   layout.Position
	exact bool // at pos.Version+1 or not at all
}

// Discard drops everything staged in a session without committing or
// keeping it: the changes of a handler that failed are not its output.
// Files still open elsewhere stay usable but are no longer changes.
func (w *Writer) Discard(id layout.SessionID) {
	ws := w.session(id)
	ws.fsyncMu.Lock()
	defer ws.fsyncMu.Unlock()
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, s := range ws.files {
		s.mu.Lock()
		s.dirty = false
		s.mu.Unlock()
		if s.opens <= 0 {
			delete(ws.files, name)
			s.close()
		}
	}
	ws.pending = nil
	ws.dirs = map[string]bool{}
	ws.gone = map[string]bool{}
	ws.gen++
}

// commitStaged commits the pending ops and dirty files of a session as
// one snapshot, on base if set; empty commits an empty snapshot when
// nothing is staged instead of doing nothing.
func (w *Writer) commitStaged(ctx context.Context, id layout.SessionID, base *sessionBase, empty bool) (layout.CommitResult, error) {
	ws := w.session(id)
	ws.fsyncMu.Lock()
	defer ws.fsyncMu.Unlock()
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	w.mu.Lock()
	ops := append([]pendingOp(nil), ws.pending...)
	taken := len(ops)
	seen := map[*File]bool{}
	for _, op := range ops {
		if op.file != nil {
			seen[op.file] = true
		}
	}
	names := make([]string, 0, len(ws.files))
	for n := range ws.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if s := ws.files[n]; !seen[s] {
			s.mu.RLock()
			dirty := s.dirty && s.failed == nil // see File.failed
			s.mu.RUnlock()
			if dirty {
				ops = append(ops, pendingOp{file: s})
			}
		}
	}
	gens := make([]uint64, len(ops))
	for i, op := range ops {
		if op.file != nil {
			op.file.mu.RLock()
			gens[i] = op.file.gen
			op.file.mu.RUnlock()
		}
	}
	w.mu.Unlock()
	if len(ops) == 0 && !empty {
		return layout.CommitResult{}, nil
	}
	res, err := w.commit(ctx, id, ops, base)
	started := time.Now()
	for moved := 1; err != nil && base == nil && w.cfg.Commit == CommitOnFsync && time.Since(started) < appendPatience; moved++ {
		// As a close does (flush): files only appended to go onto the
		// other writers' commits, and the one snapshot is tried again.
		// It was refused, and those files went to the failed directory
		// (audit 9).
		if !w.rebaseStale(ctx, id, ops, gens, err) {
			break
		}
		if moved == appendAttempts {
			w.log.Warn("fsync still not committed: other writers keep changing files it appended to first; trying on", "session", id, "commits", moved)
		}
		res, err = w.commit(ctx, id, ops, base)
	}
	var se *layout.StaleError
	if errors.As(err, &se) {
		// Files another writer changed since they were read: those are
		// settled as failed commits, and the rest stays for the next
		// fsync. Refusing everything the fsync held, as for a lost
		// checkpoint, sent the other files to the failed directory too;
		// leaving the stale file staged refused every later fsync.
		w.refuseFiles(ws, ops, gens, se)
		return res, err
	}
	if errors.Is(err, layout.ErrConflict) {
		w.refuse(ws, ops, gens, taken, err)
		return res, err
	}
	if err != nil {
		// The pending ops stay for the next fsync: nothing is dropped.
		return res, err
	}
	w.mu.Lock()
	// Ops queued while the commit ran come after the ones it took.
	ws.pending = append([]pendingOp(nil), ws.pending[taken:]...)
	ws.gen++
	for _, op := range ops {
		if s := op.file; s != nil && s.opens <= 0 && ws.files[s.name] == s {
			delete(ws.files, s.name)
			s.close()
		}
	}
	w.mu.Unlock()
	return res, nil
}

// rebaseStale moves the files of ops that err (a layout.StaleError)
// names onto the other writers' commits (rebaseAppended) and reports
// whether every name it gives was so moved: then gens holds their new
// generations and the commit may be tried again. Else the files it
// could not move are refused; the ones it moved stay staged (their
// generation changed: refuseFiles leaves them), for the next fsync. The
// caller holds the session's fsyncMu: in fsync mode no other commit of
// a file runs (flush commits nothing).
func (w *Writer) rebaseStale(ctx context.Context, id layout.SessionID, ops []pendingOp, gens []uint64, err error) bool {
	var se *layout.StaleError
	if !errors.As(err, &se) || len(se.Names) == 0 {
		return false
	}
	moved := map[string]bool{}
	next := slices.Clone(gens)
	for i, op := range ops {
		s := op.file
		if s == nil || !slices.Contains(se.Names, s.Name()) {
			continue
		}
		g, ok := w.moveOn(ctx, id, s, err)
		if ok {
			moved[s.Name()], next[i] = true, g
		}
	}
	for _, name := range se.Names {
		if !moved[name] {
			return false
		}
	}
	copy(gens, next)
	return true
}

// refuse settles the ops of a checkpoint that lost to another one
// (layout.ErrConflict): they were changes to a state that is no longer
// the session's, and committed at the next fsync they would land on the
// winner's. Files are marked failed as a failed close marks them (their
// content is kept in the failed directory, now if nobody holds them,
// else at their release); removals and renames are dropped with a log
// line, and the names show the winner's state again. A file written
// again since the commit took it keeps its new content staged.
func (w *Writer) refuse(ws *session, ops []pendingOp, gens []uint64, taken int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws.pending = append([]pendingOp(nil), ws.pending[taken:]...)
	ws.gen++
	why := "checkpoint lost to another one"
	if errors.Is(err, layout.ErrLateInput) {
		why = "input arrived while the handler ran (--late-input=abort)"
	}
	// The first keepLogged changes get a line each, the rest one line
	// for all, as keepLocked's: a lost checkpoint of 20,000 files wrote
	// 20,000 lines, 9.7 MB on the handler's stderr (audit 19).
	// dropped: renames, removals; unchanged: files holding the blob they
	// were opened on, which have no copy (keepLocked).
	logged, dropped, kept, unchanged, lost := 0, 0, 0, 0, 0
	level := func() slog.Level {
		logged++
		if logged > keepLogged {
			return slog.LevelDebug
		}
		return slog.LevelError
	}
	for i, op := range ops {
		if d := op.desc; d != nil {
			w.log.Log(context.Background(), level(), why+": change dropped", "session", ws.id, "name", d.Name, "removal", d.Deleted, "err", err)
			dropped++
			if d.Deleted {
				delete(ws.gone, d.Name)
			}
			continue
		}
		switch w.refuseFileAt(ws, op.file, gens[i], err, why+"; staged data kept", level) {
		case refusedKept:
			kept++
		case refusedUnchanged:
			unchanged++
		case refusedLost:
			lost++
		}
	}
	if more := logged - keepLogged; more > 0 {
		w.log.Error(why+": more changes dropped or kept, as above", "session", ws.id, "more", more, "dropped", dropped, "kept", kept, "unchanged", unchanged, "lost", lost, "dir", filepath.Join(w.cfg.FailedDir, ws.id.String()), "err", err)
	}
}

// refuseFileLocked settles s, taken by a commit at generation gen that
// was refused with err, as a failed commit: its content is kept in the
// failed directory, now if nobody holds it, else at its release. A file
// written again since keeps its new content staged. Caller holds w.mu.
func (w *Writer) refuseFileLocked(ws *session, s *File, gen uint64, err error, why string) {
	w.refuseFileAt(ws, s, gen, err, why, func() slog.Level { return slog.LevelError })
}

// refused is what refuseFileAt did with a file.
type refused int

const (
	refusedLater     refused = iota // not now: written since, or held (kept at its release)
	refusedKept                     // its copy is in the failed directory
	refusedUnchanged                // it held the blob it was opened on: no copy
	refusedLost                     // no copy could be made (logged)
)

// refuseFileAt is refuseFileLocked with the line of a file settled now
// at the level level gives (asked only then), and says what it did.
func (w *Writer) refuseFileAt(ws *session, s *File, gen uint64, err error, why string, level func() slog.Level) refused {
	s.mu.Lock()
	lost := s.gen == gen && s.dirty && !s.unlinked
	if lost {
		s.failed = err
	}
	lazy := s.lazy != nil
	s.mu.Unlock()
	if !lost || s.opens > 0 || ws.files[s.name] != s {
		return refusedLater
	}
	r := refusedKept
	if w.salvageAt(ws.id, s, why, level()) == "" {
		r = refusedLost
		if lazy {
			r = refusedUnchanged
		}
	}
	delete(ws.files, s.name)
	s.close()
	return r
}

// refuseFiles settles the staged files of ops that se names as failed
// commits (refuseFileLocked).
func (w *Writer) refuseFiles(ws *session, ops []pendingOp, gens []uint64, se *layout.StaleError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, op := range ops {
		if s := op.file; s != nil && slices.Contains(se.Names, s.name) {
			w.refuseFileLocked(ws, s, gens[i], se, "another writer changed the file since it was read; staged data kept")
		}
	}
}

// Queue adds ready descriptors (tombstones, renames) as one change: in
// close mode they are committed now as one snapshot; in fsync mode they
// wait for fsync.
func (w *Writer) Queue(ctx context.Context, id layout.SessionID, ds []layout.Descriptor) error {
	ops := make([]pendingOp, len(ds))
	for i := range ds {
		ops[i] = pendingOp{desc: &ds[i]}
	}
	return w.queue(ctx, id, ops)
}

// queue is Queue of descriptor ops, some guarded (pendingOp.base). With
// --commit=fsync the guards are soft (pendingOp.soft): the change has
// shown as made since the call, and only the fsync that commits it could
// refuse it, over and over, for a name the writer no longer looks at; a
// guarded descriptor whose file another writer changed before the fsync
// is dropped instead, so that the rewrite is neither removed nor
// replaced by the bytes the change read.
func (w *Writer) queue(ctx context.Context, id layout.SessionID, ops []pendingOp) error {
	if w.cfg.Commit == CommitOnFsync {
		ws := w.session(id)
		w.mu.Lock()
		for _, op := range ops {
			d := *op.desc
			var fb *layout.FileBase
			if op.base != nil {
				b := *op.base
				fb = &b
			}
			ws.pending = append(ws.pending, pendingOp{desc: &d, base: fb, soft: fb != nil, attr: op.attr})
			if d.Deleted {
				ws.gone[d.Name] = true
			} else {
				delete(ws.gone, d.Name)
			}
		}
		ws.gen++
		w.mu.Unlock()
		return nil
	}
	_, err := w.commit(ctx, id, ops, nil)
	return err
}

// namedNowLocked settles the descriptors of uploaded files on the names
// their files have now, when the commit joins a batch. A file removed or
// renamed over since its upload is dropped: its bytes go nowhere. One
// renamed is committed under its new name. The name was taken before the
// upload, and a rename or unlink that ran meanwhile (after its own wait
// for commits in flight) commits its snapshot first, so committing the
// old name undid it: a flush from a forked child closing its copy of a
// descriptor at exec, racing mv onto that file, left the replaced bytes
// in the bucket (CI, TestWriteOpenFileMovedOrRemoved). Files under
// .pugmark/send/<target>/ become cross-session writes (§12.1), recorded
// here and delivered by the caller. files[i] is nil for a descriptor
// that is not a file's. Caller holds w.mu.
func namedNowLocked(descs []layout.Descriptor, files []*File, bases []*layout.FileBase) ([]layout.Descriptor, []*File, []*layout.FileBase) {
	keep := 0
	for i, d := range descs {
		if s := files[i]; s != nil {
			s.mu.RLock()
			gone, name := s.unlinked, s.name
			s.mu.RUnlock()
			if gone {
				continue
			}
			d.Name = name
			if target, rel, ok := SendName(name); ok {
				d.Name, d.TargetSession = rel, target
			}
		}
		descs[keep], files[keep], bases[keep] = d, files[i], bases[i]
		keep++
	}
	return descs[:keep], files[:keep], bases[:keep]
}

// batch is a group commit: descriptors from concurrent closes in one
// session that share one snapshot.
type batch struct {
	descs []layout.Descriptor
	files []*File
	// bases are the guards of descriptors made from a committed file
	// (pendingOp.base), nil for the others.
	bases []*layout.FileBase
	// owner is the member (the commit call, in the order they joined)
	// each descriptor came from.
	owner  []int
	sealed bool
	// members counts the commits that joined.
	members int
	// stale holds the members refused because a file of theirs was
	// changed by another writer since they read it (a lost update,
	// layout.StaleError): the rest of the batch commits without them.
	stale map[int]error
	// soft are the bases of pendingOp.soft guards; dropped are the
	// descriptors (by index) dropped because such a file changed, and
	// reapply those of a chmod or utimes (attrs, by base) to make again
	// on what the file holds now (reapplyAttrs; reapplied counts).
	soft      map[*layout.FileBase]bool
	attrs     map[*layout.FileBase]*AttrChange
	dropped   map[int]bool
	reapply   map[int]bool
	reapplied map[int]int
	done      chan struct{}
	err       error
	res       layout.CommitResult
	// base, if set, is the position the snapshot must be written on
	// (CommitSession) instead of the cached state's.
	base *sessionBase
}

// commit uploads the blobs of ops, then commits their descriptors,
// sharing a snapshot with other commits of the session that arrive within
// the group window. It returns once this call's descriptors are durable.
// A commit with a base never shares its snapshot: it is written on that
// base or not at all.
func (w *Writer) commit(ctx context.Context, id layout.SessionID, ops []pendingOp, base *sessionBase) (layout.CommitResult, error) {
	// Uploads and commits outlive an interrupted syscall: tying them to
	// the request context would abandon half-done work. Each upload has
	// a deadline of its own (upload), and what follows them another.
	ctx = context.WithoutCancel(ctx)
	ws := w.session(id)
	w.mu.Lock()
	ws.uploading++
	w.mu.Unlock()
	joined := false
	defer func() {
		if !joined {
			w.mu.Lock()
			ws.uploading--
			w.mu.Unlock()
		}
	}()
	// The blobs go up together, Config.Uploads at a time: one after
	// another, an fsync of 300 staged files was 300 round trips (7.4 s
	// at 20 ms a request: the remote audit), and pugfs exec commits so.
	// 16 at a time, 20,000 files 20 ms away took 51 s (audit 19).
	descs := make([]layout.Descriptor, len(ops))
	files := make([]*File, len(ops))
	bases := make([]*layout.FileBase, len(ops))
	errs := make([]error, len(ops))
	sem := make(chan struct{}, w.cfg.Uploads)
	var wg sync.WaitGroup
	for i, op := range ops {
		if op.desc != nil {
			descs[i], bases[i] = *op.desc, op.base
			continue
		}
		files[i] = op.file
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			descs[i], errs[i] = w.upload(ctx, op.file)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// upload marked the files it stored clean, but none of them is
		// committed: left clean, the next fsync skipped them, their
		// release forgot them and Shutdown kept no copy.
		redirty(files)
		w.st.errors.Add(1)
		return layout.CommitResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.commitFor)
	defer cancel()
	w.mu.Lock()
	ws.uploading--
	joined = true
	if descs, files, bases = namedNowLocked(descs, files, bases); len(descs) == 0 && len(ops) > 0 {
		w.mu.Unlock()
		return layout.CommitResult{}, nil // every file was removed meanwhile
	}
	b := ws.batch
	leader := false
	switch {
	case base != nil:
		b = &batch{done: make(chan struct{}), base: base}
		leader = true
	case b == nil || b.sealed:
		b = &batch{done: make(chan struct{})}
		ws.batch = b
		leader = true
	}
	member := b.members
	for _, op := range ops {
		if op.soft {
			if b.soft == nil {
				b.soft, b.attrs = map[*layout.FileBase]bool{}, map[*layout.FileBase]*AttrChange{}
				b.reapply, b.reapplied = map[int]bool{}, map[int]int{}
			}
			b.soft[op.base] = true
			if op.attr != nil {
				b.attrs[op.base] = op.attr
			}
		}
	}
	b.descs = append(b.descs, descs...)
	b.files = append(b.files, files...)
	b.bases = append(b.bases, bases...)
	for range descs {
		b.owner = append(b.owner, member)
	}
	b.members++
	w.mu.Unlock()
	if !leader {
		<-b.done
		return b.resultOf(member)
	}
	// Gather: when other commits of the session are under way, or the
	// last batch was shared, wait the group window for more to join. A
	// lone writer does not wait at all.
	w.mu.Lock()
	busy := (ws.uploading > 0 || ws.lastBatch > 1) && base == nil
	w.mu.Unlock()
	if busy {
		window := time.NewTimer(w.cfg.GroupWindow)
		<-window.C
	}
	// Closes that arrive while an earlier batch is being committed join
	// this one: it is sealed only once it may commit.
	ws.commitMu.Lock()
	w.mu.Lock()
	b.sealed = true
	if ws.batch == b {
		ws.batch = nil
	}
	ws.lastBatch = b.members
	w.mu.Unlock()
	b.res, b.err = w.commitBatch(ctx, ws, b)
	var unknown *layout.OutcomeUnknownError
	if base == nil && errors.As(b.err, &unknown) {
		// pugfs exec (a base) asks again itself, and says so.
		w.resolveLater(unknown, b.descs)
	}
	ws.commitMu.Unlock()
	close(b.done)
	return b.resultOf(member)
}

// resultOf is what the commit call that joined b as member gets.
func (b *batch) resultOf(member int) (layout.CommitResult, error) {
	if err := b.stale[member]; err != nil {
		return layout.CommitResult{}, err
	}
	return b.res, b.err
}

// upload stores a staged file's blob and returns its descriptor. The
// staged file is no longer dirty once its descriptor is built; if the
// commit then fails, dirty is set again.
func (w *Writer) upload(ctx context.Context, s *File) (layout.Descriptor, error) {
	for {
		s.mu.Lock()
		if s.werr != nil {
			// Half a file is not committed as if it were the file.
			err := s.werr
			s.mu.Unlock()
			return layout.Descriptor{}, fmt.Errorf("commit %s: %w", s.name, err)
		}
		d, err := s.describeLocked(w.cfg.Now())
		gen := s.gen
		c := s.committed
		stored := s.lazy != nil || c != nil && c.Digest == d.Digest
		s.mu.Unlock()
		if err != nil {
			return d, fmt.Errorf("commit %s: read staged data: %w", d.Name, err)
		}
		// Room for the upload is waited for holding nothing of the
		// file: a write queued for its lock behind this wait would
		// hold up its reads and stats too, behind other uploads
		// (review 23).
		release := func() {}
		if !stored {
			if release, err = w.budget.acquire(ctx, d.Size); err != nil {
				return d, fmt.Errorf("commit %s: %w", d.Name, err)
			}
		}
		// The upload's deadline starts once it may start: a large file
		// waiting for a slot behind other sessions' uploads of many GiB
		// timed out before sending a byte, as any upload over 10
		// minutes did.
		uctx, cancel := context.WithTimeout(ctx, w.commitFor+time.Duration(d.Size/uploadMinRate)*time.Second)
		ended := func() { release(); cancel() }
		// Shared during the upload: the file can be read and stat'ed,
		// and nothing can change what is being stored.
		s.mu.RLock()
		if s.gen != gen {
			s.mu.RUnlock()
			ended()
			continue // written to since it was hashed
		}
		if stored {
			// The bytes it was staged from or last committed (a touch,
			// an fchmod, a rewrite with the same bytes, a copy of a file
			// held lazily): a committed descriptor names that blob,
			// which is stored whatever a descriptor carries (§3.1) and
			// stays when names go (§10). Put again, it was a round trip
			// that stored nothing.
			s.mu.RUnlock()
			ended()
			s.mu.Lock()
			if s.gen == gen {
				s.dirty = false
			}
			s.mu.Unlock()
			return d, nil
		}
		f, done, err := s.spillLocked()
		if err != nil {
			s.mu.RUnlock()
			ended()
			return d, fmt.Errorf("commit %s: %w", d.Name, err)
		}
		info, err := w.store.PutBlobFile(uctx, f, d.Digest, d.Size, layout.BlobOptions{ContentType: d.ContentType})
		ended()
		done()
		if info.Linked {
			s.linked.Store(true) // before any writer gets mu (unshareLocked)
		}
		s.mu.RUnlock()
		if err != nil {
			return d, fmt.Errorf("commit %s: %w", d.Name, err)
		}
		s.mu.Lock()
		if s.gen == gen {
			s.dirty = false // else changed again after the upload: still dirty
		}
		s.mu.Unlock()
		return d, nil
	}
}

// commitBatch commits b as one snapshot; the caller holds ws.commitMu.
//
// A file whose new content was built on what it held (an append, an edit
// in place: the staged file's committed entry) is guarded against a lost
// update: when another writer gave it other bytes since, up to the state
// here or in a snapshot the commit lands above, the member that brought
// it is refused (ESTALE on its close or fsync, its data kept as a failed
// commit's) and the rest of the batch commits. Without the guard, two
// mounts appending to one file kept the lines of the last to close.
// pugfs exec's checkpoint (a batch with a base) is not guarded: its
// --late-input decides what becomes of what landed meanwhile.
func (w *Writer) commitBatch(ctx context.Context, ws *session, b *batch) (layout.CommitResult, error) {
	id := ws.id
	st, err := w.cache.State(ctx, id)
	if err != nil {
		w.failBatch(b)
		return layout.CommitResult{}, err
	}
	req := layout.CommitRequest{Type: w.cfg.SnapshotType, Descriptors: b.descs}
	base := st.Position()
	if b.base != nil {
		base, req.Exact = b.base.pos, b.base.exact
	} else {
		w.refuseStale(b, id, st, b.guards(id, w.rebases()), nil)
		w.reapplyAttrs(b, id, st)
		if req, err = b.request(id, w.cfg.SnapshotType, w.rebases()); err != nil {
			return layout.CommitResult{}, w.settleDropped(ws, b, err) // every member refused or dropped
		}
	}
	var res layout.CommitResult
	var se *layout.StaleError
	mark := w.cache.MarkOf(id)
	for {
		req.Base = &base
		res, err = w.store.Commit(ctx, id, req)
		if b.base != nil || !errors.As(err, &se) {
			break
		}
		// Changed by another writer in a snapshot the commit was to
		// land above: without the members that read it, again.
		w.refuseStale(b, id, nil, b.guards(id, w.rebases()), se)
		if len(b.reapply) > 0 {
			// On the state as the bucket has it now (refuseStale
			// dropped this mount's); without it, the changes drop.
			now, _ := w.cache.State(ctx, id)
			w.reapplyAttrs(b, id, now)
		}
		if req, err = b.request(id, w.cfg.SnapshotType, w.rebases()); err != nil {
			return layout.CommitResult{}, w.settleDropped(ws, b, err)
		}
	}
	if err != nil {
		w.failBatch(b)
		w.st.errors.Add(1)
		if errors.Is(err, layout.ErrConflict) {
			w.st.conflicts.Add(1)
		}
		var unknown *layout.OutcomeUnknownError
		if errors.As(err, &unknown) {
			for i, s := range b.live(b.files) {
				if s != nil {
					s.mu.Lock()
					s.unknown, s.unknownName = unknown, req.Descriptors[i].Name
					s.mu.Unlock()
				}
			}
		}
		w.cache.Invalidate(id)
		return res, fmt.Errorf("commit to session %s: %w", id, err)
	}
	w.settleDropped(ws, b, nil)
	w.st.commits.Add(int64(len(req.Descriptors)))
	w.st.snapshots.Add(1)
	w.st.descriptors.Add(int64(len(res.Descriptors)))
	w.cache.Committed(id, res, mark)
	w.cache.SetName(id, st.Manifest.Name)
	files := b.live(b.files)
	w.mu.Lock()
	for i, d := range res.Descriptors {
		if d.Deleted {
			delete(ws.gone, d.Name)
		}
		if s := files[i]; s != nil {
			e := layout.Entry{Descriptor: d, Session: id, Version: res.Version}
			s.mu.Lock()
			s.committed, s.unknown = &e, nil
			if s.appendFrom >= 0 || !s.dirty {
				// What it holds is e's bytes and, at most, appends.
				s.appendFrom = d.Size
			}
			if !s.dirty {
				// Committed while a handle holds it (a file nobody
				// holds is closed next): a crash must not keep it as
				// if it were not (review 20).
				s.unkeepLocked()
			}
			s.mu.Unlock()
		}
	}
	w.mu.Unlock()
	w.onCommit(id, res.Descriptors)
	return res, nil
}

// rebases reports whether a file only appended to is moved onto another
// writer's change instead of refused (rebaseAppended): by its close, or
// by the fsync that commits it (rebaseStale). pugfs exec's checkpoint
// (Hold) is not guarded at all.
func (w *Writer) rebases() bool { return !w.cfg.Hold }

// guards returns what b's members not refused yet built on a committed
// file: by name, that file's digest and version
// (layout.CommitRequest.Unchanged), and the member. They are the files
// whose new content was built on what they held, and the descriptors made
// from a committed file (a rename's source, a chmod's).
func (b *batch) guards(id layout.SessionID, rebases bool) map[string]guard {
	out := map[string]guard{}
	for i, s := range b.files {
		if b.stale[b.owner[i]] != nil || b.dropped[i] {
			continue
		}
		if fb := b.bases[i]; fb != nil {
			// Made from the file, with its metadata as read: any
			// later descriptor of it refuses the change, which
			// would undo that descriptor's change or removal.
			base := *fb
			base.AnyChange = true
			out[b.descs[i].Name] = guard{base: base, member: b.owner[i], moved: true, soft: b.soft[fb], index: i}
		}
		if s == nil {
			continue
		}
		s.mu.RLock()
		// Only appended to: its bytes go onto whatever the file is by
		// the commit (rebaseAppended), so any change of it counts, a
		// removal too (then they make the file again alone). Committed
		// whole, it came back with all it had read: a log rotated on
		// another mount (mv log old) held every line in both files
		// (audit 9).
		appended := s.appendFrom >= 0 && rebases
		if e := s.committed; e != nil && e.Name == b.descs[i].Name && s.wholeOpens.Load() == 0 {
			base := *fileBase(id, e)
			base.AnyChange = appended
			out[e.Name] = guard{base: base, member: b.owner[i], appended: appended}
		} else if e == nil && s.absent != nil && s.absentAs == b.descs[i].Name {
			out[s.absentAs] = guard{base: *s.absent, member: b.owner[i], appended: appended}
		}
		s.mu.RUnlock()
	}
	return out
}

// guard is a file of a batch built on what it held (batch.guards).
type guard struct {
	base   layout.FileBase
	member int
	// moved marks a descriptor made from the file (a rename, a chmod),
	// which its caller makes again from what is there now; else the
	// file's new content, kept as a failed commit's.
	moved bool
	// soft marks a guard whose descriptor (index) is dropped, not its
	// member refused (pendingOp.soft).
	soft  bool
	index int
	// appended marks a file only appended to since it was read, whose
	// refused commit is moved onto the change (rebaseAppended): a
	// removal refuses it too.
	appended bool
}

// refuseStale refuses the members of b with a guarded file that another
// writer changed: in st (up to its version, when st is set) or as se says
// (a snapshot the commit was to land above).
func (w *Writer) refuseStale(b *batch, id layout.SessionID, st *cache.State, gs map[string]guard, se *layout.StaleError) {
	refuse := func(name string, v uint32, g guard, clash bool) {
		if g.soft && !clash {
			if b.attrs[b.bases[g.index]] != nil {
				b.reapply[g.index] = true
				return
			}
			if !b.dropped[g.index] {
				b.drop(g.index)
				w.log.Warn("change not committed: another writer changed the file before the fsync; its bytes are kept",
					"session", id, "name", name, "version", v, "removal", b.descs[g.index].Deleted)
			}
			return
		}
		if b.stale == nil {
			b.stale = map[int]error{}
		}
		err, _ := b.stale[g.member].(*layout.StaleError)
		if err == nil {
			err = &layout.StaleError{Session: id}
			b.stale[g.member] = err
		}
		if slices.Contains(err.Names, name) {
			return
		}
		// Every name, so that a refused fsync settles each file.
		err.Names, err.Versions = append(err.Names, name), append(err.Versions, v)
		switch {
		case clash:
			err.Clashes = append(err.Clashes, name)
			w.log.Error("commit refused: another writer made this name a file where it is a directory here, or a directory where it is a file (one name cannot be both: the tree would hide one); data kept",
				"session", err.Session, "name", name, "version", v)
		case g.moved:
			w.log.Info("change not committed: another writer changed the file since it was read; looking again", "session", err.Session, "name", name, "version", v)
		case g.appended:
			w.log.Info("another writer changed the file since it was read; its appended bytes go onto that change", "session", err.Session, "name", name, "version", v)
		default:
			w.log.Error("commit refused: another writer changed the file since it was read; data kept", "session", err.Session, "name", name, "version", v)
		}
	}
	// refuseClash refuses the member whose live descriptor is name.
	refuseClash := func(name string, v uint32) {
		for i, d := range b.descs {
			if d.Name == name && !d.Deleted && !b.dropped[i] {
				refuse(name, v, guard{member: b.owner[i], index: i}, true)
			}
		}
	}
	for name, g := range gs {
		if st != nil && st.Version >= g.base.Version {
			e, ok := st.Slots()[name]
			v := e.Version
			if ok && e.Session != id {
				// Inherited from an ancestor (§11.3), as fileBase
				// takes it: no descriptor of the name in this session
				// yet. At the ancestor's version, it was a change of
				// itself: a fork's inherited file could not be moved,
				// chmod'ed, or appended to (its close moved the bytes
				// onto that entry for as long as it tried; review 6).
				v = 0
			}
			switch {
			case ok && g.base.ChangedSince(&e.Descriptor, v):
				refuse(name, e.Version, g, false)
			case !ok && g.appended && g.base.Digest != (layout.Digest{}) && st.Version > g.base.Version:
				refuse(name, st.Version, g, false) // removed since
			}
		}
	}
	if st != nil {
		for _, c := range clashesIn(b, st) {
			refuseClash(c.name, c.version)
		}
	}
	if se != nil {
		// The session moved past this mount's state: the next look at
		// it (a retried create, the kernel's next lookup) reads it again.
		w.cache.Invalidate(id)
		for i, name := range se.Names {
			if slices.Contains(se.Clashes, name) {
				refuseClash(name, se.Versions[i])
			} else if g, ok := gs[name]; ok {
				refuse(name, se.Versions[i], g, false)
			}
		}
	}
	for _, s := range b.refusedFiles() {
		s.mu.Lock()
		s.dirty = true // not committed: the release keeps it as failed
		s.mu.Unlock()
	}
}

// clash is a live name of a batch that clashes as a path with a name of
// the state it commits on, made at version.
type clash struct {
	name    string
	version uint32
}

// clashesIn returns the live names of b that clash as paths with the
// live names of st, the state the commit is based on (the commit itself
// checks the snapshots it lands above: layout.CommitRequest.Paths): a
// file where st has a directory with files, or a name under a file of
// st. What b removes itself does not count (rm -r x, then a file x).
// The kernel keeps a mount from making such a name in what it has seen,
// but it may have looked before this state came: another mount made the
// name within the TTL.
func clashesIn(b *batch, st *cache.State) []clash {
	gone := map[string]bool{}
	for i, d := range b.descs {
		if d.Deleted && !b.dropped[i] {
			gone[d.Name] = true
		}
	}
	var out []clash
	for i, d := range b.descs {
		if d.Deleted || !d.IsSlot() || b.dropped[i] || b.stale[b.owner[i]] != nil {
			continue
		}
		for j := len(d.Name) - 1; j > 0; j-- {
			if d.Name[j] != '/' || gone[d.Name[:j]] {
				continue
			}
			if e, ok := st.Slot(d.Name[:j]); ok {
				out = append(out, clash{d.Name, e.Version})
				break
			}
		}
		if dir, ok := st.Tree().Walk(strings.Split(d.Name, "/")); ok {
			if v, ok := liveUnder(dir, d.Name+"/", gone); ok {
				out = append(out, clash{d.Name, v})
			}
		}
	}
	return out
}

// liveUnder returns the version of a file in dir (whose names start with
// prefix) that is not in gone, if there is one.
func liveUnder(dir *cache.Dir, prefix string, gone map[string]bool) (uint32, bool) {
	for n, e := range dir.Files {
		if !gone[prefix+n] {
			return e.Version, true
		}
	}
	for n, sub := range dir.Dirs {
		if v, ok := liveUnder(sub, prefix+n+"/", gone); ok {
			return v, true
		}
	}
	return 0, false
}

// drop leaves descriptor i of b out of its commit (batch.dropped).
func (b *batch) drop(i int) {
	if b.dropped == nil {
		b.dropped = map[int]bool{}
	}
	b.dropped[i] = true
}

// refusedFiles are the staged files of b's refused members.
func (b *batch) refusedFiles() []*File {
	var out []*File
	for i, s := range b.files {
		if s != nil && b.stale[b.owner[i]] != nil {
			out = append(out, s)
		}
	}
	return out
}

// live returns the elements of xs (one per descriptor of b) of members
// not refused, in order.
func (b *batch) live(xs []*File) []*File {
	var out []*File
	for i, x := range xs {
		if b.stale[b.owner[i]] == nil && !b.dropped[i] {
			out = append(out, x)
		}
	}
	return out
}

// request is the commit of b's members not refused, guarded; an error
// when every member was refused (nothing to commit).
func (b *batch) request(id layout.SessionID, typ layout.SnapshotType, rebases bool) (layout.CommitRequest, error) {
	req := layout.CommitRequest{Type: typ, Paths: true}
	for i, d := range b.descs {
		if b.stale[b.owner[i]] == nil && !b.dropped[i] {
			req.Descriptors = append(req.Descriptors, d)
		}
	}
	for name, g := range b.guards(id, rebases) {
		if req.Unchanged == nil {
			req.Unchanged = map[string]layout.FileBase{}
		}
		req.Unchanged[name] = g.base
	}
	if len(req.Descriptors) == 0 && len(b.descs) > 0 {
		if len(b.stale) == 0 {
			return req, errAllDropped
		}
		return req, layout.ErrChangedUnder
	}
	return req, nil
}

// settleDropped shows again the names of the removals b dropped (the
// other writer's file), and returns err, nil for errAllDropped.
func (w *Writer) settleDropped(ws *session, b *batch, err error) error {
	w.mu.Lock()
	for i := range b.dropped {
		if d := b.descs[i]; d.Deleted {
			delete(ws.gone, d.Name)
		}
	}
	w.mu.Unlock()
	if errors.Is(err, errAllDropped) {
		return nil
	}
	return err
}

// errAllDropped is batch.request's answer when every descriptor of the
// batch was dropped (batch.dropped) and none refused: nothing to commit,
// and nothing failed.
var errAllDropped = errors.New("every change of the batch dropped")

// failBatch marks the files of a batch that did not land dirty again.
func (w *Writer) failBatch(b *batch) { redirty(b.files) }

// redirty marks files (nil entries skipped) dirty: their uploads cleared
// it, and the commit they were for did not land.
func redirty(files []*File) {
	for _, s := range files {
		if s != nil {
			s.mu.Lock()
			s.dirty = true
			s.mu.Unlock()
		}
	}
}

// Ingest stores what r yields as a blob (§3.2: hashed as it streams,
// spilled to the staging directory) and commits it as file name of a
// session, as one change (Queue), with o's type and encoding (the
// source's). source names r in errors and logs; size is what r is
// expected to yield (-1 unknown): a source the staging directory has no
// room for is ENOSPC before a byte is read, where the spill filled the
// disk for everyone first (audit 14: a sparse file of 1 TiB costs its
// owner nothing); ingestions under way count against the room with
// their sizes. mode, unless nil, is a local source's permission bits,
// which the file keeps as cp keeps them under the usual umask (022: no
// write bits for others): a source its owner kept 0600 became 0644 for
// every user of a shared mount (audit 14).
func (w *Writer) Ingest(ctx context.Context, id layout.SessionID, name, source string, r io.Reader, size int64, mode *uint32, o layout.BlobOptions) (layout.Descriptor, error) {
	if err := layout.CheckUTF8(name); err != nil {
		return layout.Descriptor{}, err // before the upload, not after
	}
	res, err := w.reserveStaging(size)
	if err != nil {
		return layout.Descriptor{}, fmt.Errorf("ingest %s: %w", source, err)
	}
	defer res.release()
	r = res.counting(r)
	d, err := w.store.IngestReader(ctx, source, r, o, w.cfg.StagingDir)
	if err != nil {
		return d, err
	}
	d.Name = name
	if mode != nil {
		if m := *mode & layout.KeptModeBits &^ 0o022; m != layout.DefaultFileMode {
			d.Metadata = map[string]string{layout.MetaPosixMode: layout.FormatPosixMode(m)}
		}
	}
	return d, w.Queue(ctx, id, []layout.Descriptor{d})
}

// ingestReserve is the room an ingestion leaves on the staging directory's
// file system: others' writes stage there too.
const ingestReserve = 64 << 20

// reserveStaging takes n bytes of the staging directory's room for an
// ingestion: ENOSPC unless they are free beside what the ingestions
// under way still have to stage (two of them each passed the check
// against the same free space: review 12). What the ingestion has read
// is on the disk, in its free space already, and no longer reserved
// (counting): counted twice, a second ingestion that fit was ENOSPC
// (review 13).
func (w *Writer) reserveStaging(n int64) (*stagingRoom, error) {
	if n < 0 {
		return &stagingRoom{w: w}, nil
	}
	w.ingestMu.Lock()
	defer w.ingestMu.Unlock()
	if err := roomFor(w.cfg.StagingDir, n+w.ingesting); err != nil {
		return nil, err
	}
	w.ingesting += n
	return &stagingRoom{w: w, left: n}, nil
}

// stagingRoom is an ingestion's reservation (reserveStaging).
type stagingRoom struct {
	w    *Writer
	left int64 // GUARDED_BY(w.ingestMu): reserved and not yet read
}

// take gives back n bytes read: they are staged now.
func (r *stagingRoom) take(n int64) {
	r.w.ingestMu.Lock()
	n = min(n, r.left)
	r.left -= n
	r.w.ingesting -= n
	r.w.ingestMu.Unlock()
}

// release gives back what is left when the ingestion ends.
func (r *stagingRoom) release() { r.take(math.MaxInt64) }

// counting returns rd, taking what is read of it off the reservation.
func (r *stagingRoom) counting(rd io.Reader) io.Reader {
	return readFunc(func(p []byte) (int, error) {
		n, err := rd.Read(p)
		r.take(int64(n))
		return n, err
	})
}

// readFunc is an io.Reader of a function.
type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// roomFor returns ENOSPC unless dir's file system has n bytes free for an
// unprivileged writer, and ingestReserve beyond (n < 0: not known, not
// checked; a statfs that fails checks nothing either).
func roomFor(dir string, n int64) error {
	if n < 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil
	}
	if free := int64(st.Bavail) * st.Frsize; n+ingestReserve > free {
		return fmt.Errorf("%d bytes to stage, %d free in %s: %w", n, free, dir, syscall.ENOSPC)
	}
	return nil
}
