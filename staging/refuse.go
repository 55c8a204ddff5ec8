package staging

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

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

// rebases reports whether a file only appended to is moved onto another
// writer's change instead of refused (rebaseAppended): by its close, or
// by the fsync that commits it (rebaseStale). pugfs exec's checkpoint
// (Hold) is not guarded at all.
func (w *Writer) rebases() bool { return !w.cfg.Hold }

// guards returns what b's members not refused yet built on a committed
// file: by name, that file's digest and version
// (layout.CommitRequest.Unchanged) and the member, for each change of the
// name in b's order. They are the files whose new content was built on
// what they held, and the descriptors made from a committed file (a
// rename's source, a chmod's). A name changed twice in one batch (chmod,
// then touch, before one fsync) has a guard for each change: keyed by
// name alone, the first change lost its guard, and landed whatever
// another writer did to the file meanwhile (review 36).
func (b *batch) guards(id layout.SessionID, rebases bool) map[string][]guard {
	out := map[string][]guard{}
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
			out[b.descs[i].Name] = append(out[b.descs[i].Name], guard{base: base, member: b.owner[i], moved: true, soft: b.soft[fb], index: i})
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
			if base, ok := b.baseOf(id, i, e); ok {
				base.AnyChange = appended
				out[e.Name] = append(out[e.Name], guard{base: base, member: b.owner[i], appended: appended})
			}
		} else if e == nil && s.absent != nil && s.absentAs == b.descs[i].Name {
			out[s.absentAs] = append(out[s.absentAs], guard{base: *s.absent, member: b.owner[i], appended: appended})
		}
		s.mu.RUnlock()
	}
	return out
}

// baseOf is the guard of the file of b's member at index i, built on e,
// and false for none. An entry a pending --commit=fsync change made
// (pendingEntry: the file was opened on it) is guarded as that change
// is, when it comes before i in b (Writer.baseOf): guarded by its own
// digest at version 0, an append to a file chmod'ed or renamed before
// the same fsync counted the name's own entry, or its absence, as another
// writer's change, and was moved onto it: the chmod undone, or the
// renamed bytes lost (review 36).
func (b *batch) baseOf(id layout.SessionID, i int, e *layout.Entry) (layout.FileBase, bool) {
	if pendingEntry(id, e) {
		for j := i - 1; j >= 0; j-- {
			if d := b.descs[j]; b.files[j] == nil && d.Name == e.Name && !d.Deleted && !b.dropped[j] {
				if fb := b.bases[j]; fb != nil {
					return *fb, true
				}
				return layout.FileBase{}, false
			}
		}
	}
	return *fileBase(id, e), true
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
func (w *Writer) refuseStale(b *batch, id layout.SessionID, st *cache.State, gs map[string][]guard, se *layout.StaleError) {
	refuse := func(name string, v uint32, g guard, clash bool) {
		if g.soft && !clash {
			if b.attrs[b.bases[g.index]] != nil {
				b.reapply[g.index] = true
				return
			}
			if !b.dropped[g.index] {
				if kept := b.drop(g.index); kept != "" {
					w.log.Warn("rename not made: another writer made its new name before the fsync, and the old name was written again since; the moved file is kept under a name of its own",
						"session", id, "name", name, "version", v, "kept", kept)
					return
				}
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
	for name, gl := range gs {
		for _, g := range gl {
			if st == nil || st.Version < g.base.Version {
				continue
			}
			e, ok := st.Slot(name)
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
			} else {
				for _, g := range gs[name] {
					refuse(name, se.Versions[i], g, false)
				}
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
	for n, e := range dir.Files() {
		if !gone[prefix+n] {
			return e.Version, true
		}
	}
	for n, sub := range dir.Subs() {
		if v, ok := liveUnder(sub, prefix+n+"/", gone); ok {
			return v, true
		}
	}
	return 0, false
}
