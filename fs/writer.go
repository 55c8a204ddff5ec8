package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// writer turns writes through the tree into commits.
//
// LOCK ORDERING: wsession.fsyncMu, then wsession.nsMu, then
// wsession.commitMu, then writer.mu, then staged.mu. writer.mu guards the
// per-session maps only; uploads and commits run without it. A staged
// file's commit in flight (staged.committing) is waited for with none of
// writer.mu, staged.mu or commitMu held.
type writer struct {
	f  *FS
	mu sync.Mutex
	ss map[layout.SessionID]*wsession
	// mem holds namespaces made by mkdir that have no record yet.
	memDirs map[string]bool
	// memMu guards memID, the session this mount names as the writer of
	// its memory records (§8.2), made on the first memory write.
	memMu sync.Mutex
	memID layout.SessionID

	st struct {
		commits, snapshots, descriptors, errors, conflicts atomic.Int64
	}
}

// wsession is one session's write state on this mount.
type wsession struct {
	id layout.SessionID
	// files are staged files by slot name (open, or dirty and not yet
	// committed).
	files map[string]*staged
	// dirs are directories made by mkdir that hold nothing yet.
	dirs map[string]bool
	// gone hides names removed locally whose tombstones are pending
	// (fsync mode) or in flight.
	gone map[string]bool
	// pending ops of --commit=fsync, in order. They stay here until
	// their snapshot has landed, so the local view keeps showing them
	// while the commit is in flight.
	pending []pendingOp
	// gen counts changes of pending; view caches the live view for one
	// state and generation.
	gen  uint64
	view *liveView
	// fsyncMu serialises fsyncs of the session, so that each commits
	// the pending prefix it saw exactly once.
	fsyncMu sync.Mutex
	// nsMu serialises what moves a name between the staged files and
	// the committed state with what reads both to decide: the last
	// release of a staged file (it commits the file and forgets it),
	// an fsync's commit, rename, unlink and rmdir. Without it a rename
	// saw a file staged, the release then committed and forgot it, and
	// the rename moved nothing (or moved a closed spill file); an unlink
	// dropped a file whose commit then landed, and the file came back.
	nsMu sync.Mutex
	// batch is the group commit being gathered.
	batch *batch
	// uploading counts commits of this session that are storing their
	// blobs and have not joined a batch yet; lastBatch is the number of
	// commits the last batch held. Either says other writers are about:
	// only then does a batch's leader wait the group window.
	uploading int
	lastBatch int
	// commitMu serialises snapshot commits of this session from this
	// mount, so that group members land in order.
	commitMu sync.Mutex
}

type pendingOp struct {
	file *staged            // a file to upload and describe at commit
	desc *layout.Descriptor // a ready descriptor (tombstone, rename)
}

type writerStats struct {
	commits, snapshots, descriptors, errors, conflicts int64
}

func newWriter(f *FS) *writer {
	return &writer{f: f, ss: map[layout.SessionID]*wsession{}, memDirs: map[string]bool{}}
}

func (w *writer) stats() writerStats {
	return writerStats{w.st.commits.Load(), w.st.snapshots.Load(), w.st.descriptors.Load(), w.st.errors.Load(), w.st.conflicts.Load()}
}

func (w *writer) session(id layout.SessionID) *wsession {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	if ws == nil {
		ws = &wsession{id: id, files: map[string]*staged{}, dirs: map[string]bool{}, gone: map[string]bool{}}
		w.ss[id] = ws
	}
	return ws
}

// hidden reports a name removed locally but not yet committed.
func (w *writer) hidden(id layout.SessionID, live bool, parts []string, name string) bool {
	if !live {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	if ws == nil {
		return false
	}
	full := cache.JoinName(appendPart(parts, name))
	if ws.gone[full] {
		// A staged file of the same name shows again.
		_, ok := ws.files[full]
		return !ok
	}
	return false
}

// overlayOf returns local entries of directory d not in the committed
// tree: staged files and mkdir'd directories.
//
// It is taken in two steps: overlayOf notes the local entries now, and
// the function it returns makes the children of those not seen in the
// committed tree. A listing must note them before it reads the committed
// state: a commit moves a file from the staged set into the state, so a
// file is in the staged set noted first or in the state read after, and
// never in neither (a just-created file missing from ls).
func (w *writer) overlayOf(d *sessionDir) func(seen map[string]bool) []child {
	w.mu.Lock()
	ws := w.ss[d.id]
	if ws == nil {
		w.mu.Unlock()
		return func(map[string]bool) []child { return nil }
	}
	prefix := cache.JoinName(d.parts)
	if prefix != "" {
		prefix += "/"
	}
	type item struct {
		name string
		file *staged
	}
	var items []item
	dirs := map[string]bool{}
	for full, s := range ws.files {
		rest, ok := strings.CutPrefix(full, prefix)
		if !ok {
			continue
		}
		if first, _, nested := strings.Cut(rest, "/"); nested {
			dirs[first] = true
		} else {
			items = append(items, item{rest, s})
		}
	}
	for full := range ws.dirs {
		rest, ok := strings.CutPrefix(full, prefix)
		if !ok || rest == "" {
			continue
		}
		first, _, _ := strings.Cut(rest, "/")
		dirs[first] = true
	}
	w.mu.Unlock()
	return func(seen map[string]bool) []child {
		var out []child
		for _, it := range items {
			if !seen[it.name] {
				out = append(out, w.f.stagedChild(d, it.name, it.file))
			}
		}
		for name := range dirs {
			if !seen[name] {
				sub := &sessionDir{f: w.f, id: d.id, parts: appendPart(d.parts, name)}
				out = append(out, w.f.sessionSubdir(sub, name))
			}
		}
		return out
	}
}

// lookup finds a local entry of d.
func (w *writer) lookup(d *sessionDir, name string) (child, bool) {
	full := cache.JoinName(appendPart(d.parts, name))
	w.mu.Lock()
	ws := w.ss[d.id]
	var isFile, isDir bool
	var file *staged
	if ws != nil {
		file, isFile = ws.files[full]
		if !isFile {
			isDir = ws.dirs[full]
			for f := range ws.files {
				if strings.HasPrefix(f, full+"/") {
					isDir = true
					break
				}
			}
		}
	}
	w.mu.Unlock()
	switch {
	case isFile:
		return w.f.stagedChild(d, name, file), true
	case isDir:
		sub := &sessionDir{f: w.f, id: d.id, parts: appendPart(d.parts, name)}
		return w.f.sessionSubdir(sub, name), true
	}
	return child{}, false
}

// stagedFile returns the staged file of a name, if any.
func (w *writer) stagedFile(id layout.SessionID, name string) *staged {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws != nil {
		return ws.files[name]
	}
	return nil
}

// open returns the staged file for name, creating it from base.
func (w *writer) open(ctx context.Context, id layout.SessionID, name string, base *layout.Entry, truncate bool) (*staged, error) {
	return w.openFrom(ctx, id, name, func() *layout.Entry { return base }, truncate)
}

// openFrom is open with the base asked for only once no staged file of
// the name is left: an open that looked at its inode while the last close
// of the name was being released saw the staged file (and so no base), and
// found it gone when it got here; staging from nothing then dropped the
// file's content (echo hello > f; echo world >> f made f "world").
func (w *writer) openFrom(ctx context.Context, id layout.SessionID, name string, baseOf func() *layout.Entry, truncate bool) (*staged, error) {
	ws := w.session(id)
	w.mu.Lock()
	s := ws.files[name]
	if s != nil {
		s.opens++
		w.mu.Unlock()
		if truncate {
			if err := s.truncate(0); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	w.mu.Unlock()
	base := baseOf()
	s, err := w.newStaged(ctx, name, base, truncate)
	if err != nil {
		return nil, err
	}
	if base == nil || truncate {
		s.dirty = true // a new or truncated file is a change even if empty
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if other := ws.files[name]; other != nil {
		// Lost a race with another open: use theirs.
		s.close()
		other.opens++
		return other, nil
	}
	s.opens = 1
	ws.files[name] = s
	delete(ws.gone, name)
	return s, nil
}

// release drops one open of s. The last open of a file left dirty
// commits it first (close mode), and returns that commit's error: what
// made it dirty was acknowledged to someone (a truncate(2) or setxattr
// while another open held the file, a write racing the commit of a
// release), so it is not a failed commit. Only content whose own commit
// failed and was returned by close(2) or fsync(2) (s.failed) goes to the
// failed directory, and never appears later as if that call had
// succeeded. A staged file nobody holds any more is forgotten: its content
// is in the committed state.
func (w *writer) release(ctx context.Context, id layout.SessionID, s *staged) error {
	ws := w.session(id)
	w.mu.Lock()
	if s.opens > 1 {
		s.opens--
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	// Perhaps the last: what follows may commit and forget s.
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	var err error
	for {
		w.mu.Lock()
		if s.opens > 1 {
			s.opens--
			w.mu.Unlock()
			return err
		}
		// Shared: w.mu is held, and an upload of s (holding s.mu shared)
		// must not stall every other writer operation until it ends.
		s.mu.RLock()
		dirty, failed := s.dirty && !s.unlinked, s.failed
		s.mu.RUnlock()
		mine := ws.files[s.name] == s
		if dirty && mine && w.f.cfg.Commit == CommitOnFsync {
			s.opens--
			w.mu.Unlock()
			return err // kept until the session is fsynced
		}
		if dirty && !failed && w.f.cfg.Commit == CommitOnClose {
			// This call still holds the last open, so nobody releases s
			// under it; an open that arrives meanwhile takes the duty
			// over (the next round sees opens > 1).
			w.mu.Unlock()
			err = w.flush(ctx, id, s, true)
			continue
		}
		s.opens--
		if dirty {
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

// shutdown runs when the mount stops. What it still holds uncommitted is
// not dropped silently: written files (staged for --commit=fsync, or
// still open when the mount went away) are kept in the failed directory,
// and renames and removals waiting for an fsync are logged.
func (w *writer) shutdown() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, ws := range w.ss {
		for _, s := range ws.files {
			s.mu.RLock()
			keep := s.dirty && !s.unlinked
			s.mu.RUnlock()
			if keep {
				w.salvageLocked(id, s, "unmounted with uncommitted data; staged data kept")
			}
		}
		for _, op := range ws.pending {
			if d := op.desc; d != nil {
				w.f.log.Error("unmounted before fsync: change not committed", "session", id, "name", d.Name, "removal", d.Deleted)
			}
		}
	}
}

// salvageLocked keeps the bytes of a staged file whose commit failed (or
// never happened) and whose last descriptor is gone, so that data is
// never dropped silently; msg says why in the log.
func (w *writer) salvageLocked(id layout.SessionID, s *staged, msg string) {
	dir := filepath.Join(w.f.cfg.FailedDir, id.String())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		w.f.log.Error("could not keep the data of a failed commit", "session", id, "name", s.name, "err", err)
		return
	}
	dst := filepath.Join(dir, strings.ReplaceAll(s.name, "/", "%2F")+"."+time.Now().UTC().Format("20060102T150405.000000000"))
	s.mu.RLock()
	defer s.mu.RUnlock()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		buf := make([]byte, 1<<20)
		for off := int64(0); off < s.size && err == nil; {
			n, rerr := s.file.ReadAt(buf, off)
			if n > 0 {
				_, err = out.Write(buf[:n])
				off += int64(n)
			}
			if rerr != nil {
				break
			}
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		w.f.log.Error("could not keep the data of a failed commit", "session", id, "name", s.name, "err", err)
		return
	}
	w.f.log.Error(msg, "session", id, "name", s.name, "path", dst)
}

// flush commits s if it is dirty (close(2) and fsync(2) of a file). With
// untouchedToo false, a created file nobody has written to yet is left for
// release.
func (w *writer) flush(ctx context.Context, id layout.SessionID, s *staged, untouchedToo bool) error {
	if w.f.cfg.Commit == CommitOnFsync {
		return nil
	}
	s.mu.Lock()
	// Closes of dup'd descriptors can flush the same staged file at
	// once: wait for a commit in flight, then decide on what is left.
	for s.committing != nil {
		ch := s.committing
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	dirty, touched := s.dirty, s.touched
	if !dirty || (!touched && !untouchedToo) || s.unlinked {
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.committing = ch
	s.mu.Unlock()
	err := w.commit(ctx, id, []pendingOp{{file: s}})
	s.mu.Lock()
	s.committing = nil
	if err != nil {
		s.failed = true
	}
	close(ch)
	s.mu.Unlock()
	return err
}

// liveView is the live state of a session as this mount shows it: the
// committed slots with the ops pending in --commit=fsync applied.
type liveView struct {
	st    *cache.State
	gen   uint64
	slots map[string]layout.Entry
	tree  *cache.Dir
}

// live returns the live slots and tree of st's session on this mount:
// st's own unless --commit=fsync holds pending renames, tombstones or
// ingests, which must show (and hide) before they are committed.
func (w *writer) live(st *cache.State) (map[string]layout.Entry, *cache.Dir) {
	w.mu.Lock()
	ws := w.ss[st.ID]
	if ws == nil || len(ws.pending) == 0 {
		w.mu.Unlock()
		return st.Slots(), st.Tree()
	}
	if v := ws.view; v != nil && v.st == st && v.gen == ws.gen {
		w.mu.Unlock()
		return v.slots, v.tree
	}
	gen := ws.gen
	ops := append([]pendingOp(nil), ws.pending...)
	w.mu.Unlock()
	slots := make(map[string]layout.Entry, len(st.Slots())+len(ops))
	for k, v := range st.Slots() {
		slots[k] = v
	}
	for _, op := range ops {
		if op.desc != nil {
			layout.ApplySlot(slots, layout.Entry{Descriptor: *op.desc, Session: st.ID})
		}
	}
	v := &liveView{st: st, gen: gen, slots: slots, tree: cache.BuildTree(slots)}
	w.mu.Lock()
	if ws.gen == gen {
		ws.view = v
	}
	w.mu.Unlock()
	return v.slots, v.tree
}

// fsyncSession commits everything staged in a session as one snapshot
// (--commit=fsync), or the one file in close mode.
func (w *writer) fsyncSession(ctx context.Context, id layout.SessionID) error {
	ws := w.session(id)
	ws.fsyncMu.Lock()
	defer ws.fsyncMu.Unlock()
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	w.mu.Lock()
	ops := append([]pendingOp(nil), ws.pending...)
	taken := len(ops)
	seen := map[*staged]bool{}
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
			dirty := s.dirty
			s.mu.RUnlock()
			if dirty {
				ops = append(ops, pendingOp{file: s})
			}
		}
	}
	w.mu.Unlock()
	if len(ops) == 0 {
		return nil
	}
	err := w.commit(ctx, id, ops)
	if err != nil {
		// The pending ops stay for the next fsync: nothing is dropped.
		return err
	}
	w.mu.Lock()
	// Ops queued while the commit ran come after the ones it took.
	ws.pending = append([]pendingOp(nil), ws.pending[taken:]...)
	ws.gen++
	for _, op := range ops {
		if op.file != nil && op.file.opens <= 0 && ws.files[op.file.name] == op.file {
			delete(ws.files, op.file.name)
			op.file.close()
		}
	}
	w.mu.Unlock()
	return nil
}

// queue adds ready descriptors (tombstones, renames) as one change: in
// close mode they are committed now as one snapshot; in fsync mode they
// wait for fsync.
func (w *writer) queue(ctx context.Context, id layout.SessionID, ds []layout.Descriptor) error {
	if w.f.cfg.Commit == CommitOnFsync {
		ws := w.session(id)
		w.mu.Lock()
		for i := range ds {
			d := ds[i]
			ws.pending = append(ws.pending, pendingOp{desc: &d})
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
	ops := make([]pendingOp, len(ds))
	for i := range ds {
		d := ds[i]
		ops[i] = pendingOp{desc: &d}
	}
	return w.commit(ctx, id, ops)
}

// batch is a group commit: descriptors from concurrent closes in one
// session that share one snapshot.
type batch struct {
	descs  []layout.Descriptor
	files  []*staged
	sealed bool
	// members counts the commits that joined.
	members int
	done    chan struct{}
	err     error
	res     layout.CommitResult
}

// commit uploads the blobs of ops, then commits their descriptors,
// sharing a snapshot with other commits of the session that arrive within
// the group window. It returns once this call's descriptors are durable.
func (w *writer) commit(ctx context.Context, id layout.SessionID, ops []pendingOp) error {
	// Uploads and commits outlive an interrupted syscall: tying them to
	// the request context would abandon half-done work.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
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
	descs := make([]layout.Descriptor, 0, len(ops))
	var files []*staged
	for _, op := range ops {
		if op.desc != nil {
			descs = append(descs, *op.desc)
			files = append(files, nil)
			continue
		}
		d, err := w.upload(ctx, op.file)
		if err != nil {
			w.st.errors.Add(1)
			return err
		}
		descs = append(descs, d)
		files = append(files, op.file)
	}
	w.mu.Lock()
	ws.uploading--
	joined = true
	b := ws.batch
	leader := false
	if b == nil || b.sealed {
		b = &batch{done: make(chan struct{})}
		ws.batch = b
		leader = true
	}
	b.descs = append(b.descs, descs...)
	b.files = append(b.files, files...)
	b.members++
	w.mu.Unlock()
	if !leader {
		<-b.done
		return b.err
	}
	// Gather: when other commits of the session are under way, or the
	// last batch was shared, wait the group window for more to join. A
	// lone writer does not wait at all.
	w.mu.Lock()
	busy := ws.uploading > 0 || ws.lastBatch > 1
	w.mu.Unlock()
	if busy {
		window := time.NewTimer(w.f.cfg.GroupWindow)
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
	ws.commitMu.Unlock()
	close(b.done)
	return b.err
}

// upload stores a staged file's blob and returns its descriptor. The
// staged file is no longer dirty once its descriptor is built; if the
// commit then fails, dirty is set again.
func (w *writer) upload(ctx context.Context, s *staged) (layout.Descriptor, error) {
	for {
		s.mu.Lock()
		if s.werr != nil {
			// Half a file is not committed as if it were the file.
			err := s.werr
			s.mu.Unlock()
			return layout.Descriptor{}, fmt.Errorf("commit %s: %w", s.name, err)
		}
		d, err := s.describeLocked(w.f.cfg.Now())
		gen := s.gen
		s.mu.Unlock()
		if err != nil {
			return d, fmt.Errorf("commit %s: read staged data: %w", d.Name, err)
		}
		// Shared during the upload: the file can be read and stat'ed,
		// and nothing can change what is being stored.
		s.mu.RLock()
		if s.gen != gen {
			s.mu.RUnlock()
			continue // written to since it was hashed
		}
		_, err = w.f.store.PutBlobFile(ctx, s.file, d.Digest, d.Size, layout.BlobOptions{ContentType: d.ContentType})
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
func (w *writer) commitBatch(ctx context.Context, ws *wsession, b *batch) (layout.CommitResult, error) {
	id := ws.id
	st, err := w.f.cache.State(ctx, id)
	if err != nil {
		w.failBatch(b)
		return layout.CommitResult{}, err
	}
	base := st.Position()
	res, err := w.f.store.Commit(ctx, id, layout.CommitRequest{Type: w.f.cfg.SnapshotType, Descriptors: b.descs, Base: &base})
	if err != nil {
		w.failBatch(b)
		w.st.errors.Add(1)
		if errors.Is(err, layout.ErrConflict) {
			w.st.conflicts.Add(1)
		}
		w.f.cache.Invalidate(id)
		return res, fmt.Errorf("commit to session %s: %w", id, err)
	}
	w.st.commits.Add(int64(len(b.descs)))
	w.st.snapshots.Add(1)
	w.st.descriptors.Add(int64(len(res.Descriptors)))
	w.f.cache.Committed(id, res)
	w.f.cache.Registry.SetName(id, st.Manifest.Name)
	w.mu.Lock()
	for i, d := range res.Descriptors {
		if d.Deleted {
			delete(ws.gone, d.Name)
		}
		if s := b.files[i]; s != nil {
			e := layout.Entry{Descriptor: d, Session: id, Version: res.Version}
			s.mu.Lock()
			s.committed = &e
			s.mu.Unlock()
		}
	}
	w.mu.Unlock()
	w.f.notifyChanged(id, res.Descriptors)
	return res, nil
}

func (w *writer) failBatch(b *batch) {
	for _, s := range b.files {
		if s != nil {
			s.mu.Lock()
			s.dirty = true
			s.mu.Unlock()
		}
	}
}

// notifyChanged tells the kernel, from a background goroutine (calling
// it inside a request can deadlock, engineering.md), that names changed.
func (f *FS) notifyChanged(id layout.SessionID, ds []layout.Descriptor) {
	f.notify.enqueue(id, ds)
}

// dirContent is what is under a directory of a session on this mount.
type dirContent struct {
	// files are the live committed slots under it, by name.
	files []layout.Entry
	// staged are the names of staged files under it.
	staged []string
	// dirs are the local (mkdir'd, not yet stored) directories under it.
	dirs []string
}

// empty reports whether the directory holds nothing, so that rmdir may
// remove it and a rename may replace it (POSIX: else ENOTEMPTY).
func (c dirContent) empty() bool {
	return len(c.files)+len(c.staged)+len(c.dirs) == 0
}

// dirEntries returns what is under directory prefix of a session: live
// committed slots (less those removed locally), staged files and local
// directories.
func (w *writer) dirEntries(ctx context.Context, id layout.SessionID, prefix string) (dirContent, error) {
	var c dirContent
	st, err := w.f.cache.State(ctx, id)
	if err != nil {
		return c, err
	}
	live, _ := w.live(st)
	under := prefix + "/"
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	for name, e := range live {
		if strings.HasPrefix(name, under) && (ws == nil || !ws.gone[name]) {
			if _, ok := layout.NamePath(name); ok {
				c.files = append(c.files, e)
			}
		}
	}
	if ws != nil {
		for name := range ws.files {
			if strings.HasPrefix(name, under) {
				c.staged = append(c.staged, name)
			}
		}
		for name := range ws.dirs {
			if strings.HasPrefix(name, under) {
				c.dirs = append(c.dirs, name)
			}
		}
	}
	sort.Slice(c.files, func(i, j int) bool { return c.files[i].Name < c.files[j].Name })
	sort.Strings(c.staged)
	sort.Strings(c.dirs)
	return c, nil
}
