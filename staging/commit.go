package staging

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

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
func (w *Writer) commitStaged(ctx context.Context, id layout.SessionID, base *sessionBase, empty bool) (res layout.CommitResult, err error) {
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
	// Files whose writes failed (werr: a full staging disk) cannot be
	// committed until they are written again or removed; the others are,
	// and the fsync still fails naming them. Left in, one file cut short
	// by ENOSPC refused every later fsync of the session, the files
	// written whole with it, after the disk had room again (audit 27).
	var broken []error
	// Renames and removals waiting for this fsync may involve such a
	// file (a rename of it: the old name's removal is pending): the
	// fsync then commits nothing past it, or the rename landed half, the
	// old name gone and the new one left out (review 30).
	pendingOps := len(ops) > 0
	for _, n := range names {
		if s := ws.files[n]; !seen[s] {
			s.mu.RLock()
			dirty := s.dirty && s.failed == nil // see File.failed
			werr := s.werr
			s.mu.RUnlock()
			switch {
			case dirty && werr != nil && base == nil && !pendingOps: // an fsync; a checkpoint lands whole or not at all
				broken = append(broken, fmt.Errorf("%s not committed: %w", s.name, werr))
			case dirty:
				ops = append(ops, pendingOp{file: s})
			}
		}
	}
	if len(broken) > 0 {
		defer func() {
			if err == nil {
				err = fmt.Errorf("%d files not committed, their writes failed (write them again whole, or remove them): %w", len(broken), errors.Join(broken...))
			}
		}()
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
	res, err = w.commit(ctx, id, ops, base)
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
			ws.pending = append(ws.pending, pendingOp{desc: &d, base: fb, soft: fb != nil, attr: op.attr, movedFrom: op.movedFrom})
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
	soft  map[*layout.FileBase]bool
	attrs map[*layout.FileBase]*AttrChange
	// movedFrom are the old names of renames whose new name is guarded
	// by its absence (pendingOp.movedFrom), by that guard.
	movedFrom map[*layout.FileBase]string
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
				b.movedFrom = map[*layout.FileBase]string{}
			}
			b.soft[op.base] = true
			if op.attr != nil {
				b.attrs[op.base] = op.attr
			}
			if op.movedFrom != "" {
				b.movedFrom[op.base] = op.movedFrom
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
	started := time.Now()
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
		uctx, cancel := context.WithTimeout(ctx, w.uploadFor+time.Duration(d.Size/uploadMinRate)*time.Second)
		ended := func() { release(); cancel() }
		// Shared during the upload: the file can be read and stat'ed,
		// and nothing can change what is being stored.
		s.mu.RLock()
		if s.gen != gen {
			s.mu.RUnlock()
			ended()
			if time.Since(started) > w.uploadFor {
				// Bounded as the whole commit was before the uploads had
				// deadlines of their own (review 25).
				return d, fmt.Errorf("commit %s: written to all along for %v: %w", d.Name, w.uploadFor, context.DeadlineExceeded)
			}
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
		if a, ok := w.blobs.(storedAdopter); ok && err == nil && !info.Linked {
			a.AdoptStored(d.Digest, d.Size, f) // s.mu held: the bytes stay what was stored
		}
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
		b.inherit(&req, id, st)
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
		b.inherit(&req, id, st)
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
	sent := b.liveDescs()
	w.mu.Lock()
	for i, d := range res.Descriptors {
		if d.Deleted {
			delete(ws.gone, d.Name)
		}
		if s := files[i]; s != nil {
			e := layout.Entry{Descriptor: d, Session: id, Version: res.Version}
			s.mu.Lock()
			s.committed, s.unknown = &e, nil
			tookMetadata(s, sent[i].Metadata, d.Metadata)
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
			if s.keptAt != "" && !s.keptDigest.IsZero() && s.keptDigest == d.Digest {
				// Kept in the failed directory while this commit was
				// in flight (the mount stopping): those bytes landed,
				// and the copy read as bytes never committed (review
				// 43). By digest, not generation: an older commit of
				// the file landing removed the copy of newer bytes
				// (review 44).
				if err := os.Remove(s.keptAt); err == nil {
					w.log.Info("committed after all: the copy kept when the mount stopped is removed", "session", id, "name", d.Name, "path", s.keptAt, "version", res.Version)
				}
				s.keptAt = ""
			}
			s.mu.Unlock()
		}
	}
	w.mu.Unlock()
	w.onCommit(id, res.Descriptors)
	return res, nil
}

// drop leaves descriptor i of b out of its commit (batch.dropped).
//
// A rename's new name dropped (another writer made it before the fsync)
// takes the old name's removal with it: the file stays where it was, and
// the other writer's file is not replaced (audit 41). When the batch
// writes the old name again (mv c a after mv a n), the file could stay
// nowhere: it lands under a name of its own beside the new one, which
// drop returns (review 42: its bytes were lost).
func (b *batch) drop(i int) (keptAs string) {
	fb := b.bases[i]
	from, moved := b.movedFrom[fb]
	if moved && fb != nil && b.writesAgain(from, i) {
		keptAs = fmt.Sprintf("%s.conflict-%s", b.descs[i].Name, time.Now().UTC().Format("20060102T150405.000000000Z"))
		b.descs[i].Name, b.bases[i] = keptAs, nil // a name nobody has: no guard
		delete(b.movedFrom, fb)
		return keptAs
	}
	if b.dropped == nil {
		b.dropped = map[int]bool{}
	}
	b.dropped[i] = true
	if moved && fb != nil {
		for j := i - 1; j >= 0; j-- {
			if d := b.descs[j]; d.Name == from && d.Deleted && !b.dropped[j] {
				b.dropped[j] = true
				break
			}
		}
	}
	return ""
}

// writesAgain reports whether b makes name again, other than by the
// rename at index i that moved it away.
func (b *batch) writesAgain(name string, i int) bool {
	for j, d := range b.descs {
		if j != i && d.Name == name && !d.Deleted && !b.dropped[j] {
			return true
		}
	}
	return false
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

// liveDescs returns the descriptors of b's members not refused and not
// dropped, in order, as they joined (before inherit merged into them).
func (b *batch) liveDescs() []layout.Descriptor {
	var out []layout.Descriptor
	for i, d := range b.descs {
		if b.stale[b.owner[i]] == nil && !b.dropped[i] {
			out = append(out, d)
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
	for name, gs := range b.guards(id, rebases) {
		if req.Unchanged == nil {
			req.Unchanged = map[string]layout.FileBase{}
		}
		// The first change of the name in the batch is the one built on
		// the bucket; the later ones were built on it. A metadata change
		// counts only if it counts for all of them: a refusal refuses
		// every change of the name, and an edit after a chmod was refused
		// for another mount's chmod (review 39), where the chmod alone
		// is made again.
		base := gs[0].base
		for _, g := range gs[1:] {
			base.AnyChange = base.AnyChange && g.base.AnyChange
		}
		req.Unchanged[name] = base
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
