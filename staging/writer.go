package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// CommitMode says when staged writes become snapshots.
type CommitMode int

const (
	// CommitOnClose commits each file when it is closed (flush) or
	// fsynced; concurrent closes share a snapshot (group commit).
	CommitOnClose CommitMode = iota
	// CommitOnFsync stages every change in a session until fsync of a
	// file or of the session directory, then commits them as one
	// snapshot.
	CommitOnFsync
)

// Config is how a Writer commits.
type Config struct {
	Commit       CommitMode
	SnapshotType layout.SnapshotType
	// GroupWindow is how long a commit waits for other closes in the
	// same session to share its snapshot.
	GroupWindow time.Duration
	// StagingDir holds the spill files of writes in progress.
	StagingDir string
	// FailedDir keeps the bytes of writes whose commit failed for good.
	FailedDir string
	// Hold, with CommitOnFsync, makes fsync(2) commit nothing: every
	// change stays staged until CommitSession (pugfs exec, whose handler
	// must not land anything before it exited, whatever it fsyncs).
	Hold bool
	// Uploads bounds the blob uploads of one commit in flight at once
	// (16 when zero); the mount's request scheduler bounds all its
	// requests. The mount gives three quarters of --max-requests.
	Uploads int
	// Now is the clock for created-at (tests pin it).
	Now func() time.Time
	Log *slog.Logger
}

// Store is what a Writer needs of the bucket: storing a blob from a
// staged file and committing a snapshot (*layout.Store).
type Store interface {
	PutBlobFile(ctx context.Context, f *os.File, d layout.Digest, size int64, opts layout.BlobOptions) (layout.BlobInfo, error)
	Commit(ctx context.Context, id layout.SessionID, req layout.CommitRequest) (layout.CommitResult, error)
	IngestReader(ctx context.Context, name string, r io.Reader, o layout.BlobOptions, tmpDir string) (layout.Descriptor, error)
	// ResolveCommit asks again about a commit whose outcome was unknown.
	ResolveCommit(ctx context.Context, e *layout.OutcomeUnknownError) (layout.CommitResult, bool, error)
}

// States is what a Writer needs of the session cache (*cache.Cache):
// the committed state it writes on top of, and the updates that follow a
// commit. A Writer is the only writer of those updates.
type States interface {
	State(ctx context.Context, id layout.SessionID) (*cache.State, error)
	// Peek returns the state as cached, without asking the bucket.
	Peek(id layout.SessionID) (*cache.State, bool)
	// MarkOf is taken before a commit and given to Committed, which
	// takes the commit for a check of the session as of then.
	MarkOf(id layout.SessionID) cache.Mark
	// Committed folds a commit of this mount into the cached state.
	Committed(id layout.SessionID, res layout.CommitResult, m cache.Mark)
	// Invalidate drops the cached state after a failed commit: the
	// session moved under it.
	Invalidate(id layout.SessionID)
	// SetName keeps the session's name in the registry after a commit.
	SetName(id layout.SessionID, name string)
}

// Blobs reads the content of a committed descriptor, decoded (the blob
// cache): a write to an existing file starts from it.
type Blobs interface {
	ReadAt(ctx context.Context, d *layout.Descriptor, p []byte, off int64) (int, error)
	// Size is the size of that content (the decoded size of an encoded
	// body): a file opened for writing shows it before its bytes are
	// fetched.
	Size(ctx context.Context, d *layout.Descriptor) (int64, error)
}

// spaceGiver is what of Blobs gives disk space back: copies kept beside
// the staged files, on their file system, that can be fetched again
// (blobcache.Cache.GiveBack). A staged write or an ingestion that finds
// the file system full asks it for room and tries once more. A Blobs
// without it has nothing to give.
type spaceGiver interface {
	GiveBack(n int64) int64
}

// giveBackAtLeast is what a write that found its file system full asks
// back at the least: one FUSE write is at most a MiB, and asking for each
// alone made a large copy into a full disk evict in slivers.
const giveBackAtLeast = 64 << 20

// roomFrom asks blobs for at least n bytes of disk space and reports
// whether it gave any.
func roomFrom(blobs Blobs, n int64) bool {
	g, ok := blobs.(spaceGiver)
	return ok && g.GiveBack(max(n, giveBackAtLeast)) > 0
}

// storedAdopter is what of Blobs a commit tells of a body it just stored
// from a staged file: the blob cache keeps a copy of it, so reading back
// what was written costs no fetch (blobcache.Cache.AdoptStored). A Blobs
// without it keeps nothing.
type storedAdopter interface {
	AdoptStored(d layout.Digest, size int64, f *os.File)
}

// Writer turns writes through the tree into commits: it holds the staged
// files and local directories of each session, commits them (group
// commit, or at fsync), renames and removes names, and updates the
// session cache after each commit. It knows nothing of FUSE: a front end
// calls it per operation and maps its errors (package fs, errno.go).
//
// LOCK ORDERING: session.fsyncMu, then session.nsMu, then
// session.commitMu, then Writer.mu, then File.mu. Writer.mu guards the
// per-session maps only; uploads and commits run without it. An upload
// holds its File.mu shared for as long as the PUT takes, so File.mu is
// never waited for with Writer.mu held: it is taken with TryLock, and a
// busy file is waited for with Writer.mu released (stagedIdle,
// lockStaged); but a batch whose snapshot landed (commitBatch) waits for
// the files it committed, whose uploads are over. parkLater holds File.mu
// and only tries Writer.mu. A staged file's commit in flight (File.committing) is waited for with none of
// Writer.mu, File.mu or commitMu held; so is a rename over a staged file
// (unstageOver marks it committing, and session.held its name), which
// holds nsMu until its outcome is known. The session cache's own locks
// come after all of these (Committed and State are called with commitMu
// held). File.fillMu (the copy of a file's committed bytes at its first
// write, which runs without File.mu) is taken with none of them held,
// before File.mu.
type Writer struct {
	cfg   Config
	store Store
	cache States
	blobs Blobs
	log   *slog.Logger
	// onCommit is told the descriptors of every commit, after the cache
	// has them (the front end drops what the kernel cached of them).
	onCommit func(id layout.SessionID, ds []layout.Descriptor)

	// mu guards ss and the maps and counters of every session in it,
	// and unknown.
	mu sync.Mutex
	ss map[layout.SessionID]*session // GUARDED_BY(mu)
	// unknown holds the commits whose outcome was unknown, by
	// transaction ID, while resolveLater asks about them, and those that
	// landed after all until Shutdown (a file released later keeps no
	// copy then). GUARDED_BY(mu)
	unknown map[uint64]*unknownOutcome

	st struct {
		commits, snapshots, descriptors, errors, conflicts atomic.Int64
	}
	// emfileAt is when warnDescriptors last logged (Unix nanoseconds).
	emfileAt atomic.Int64

	// ingestMu guards ingesting, the bytes of the staging directory
	// that ingestions under way took (reserveStaging).
	ingestMu  sync.Mutex
	ingesting int64 // GUARDED_BY(ingestMu)

	// park is where staged files released until an fsync are parked
	// (park.go).
	park parking

	// budget bounds the memory of the blob uploads in flight across the
	// Writer (budget.go).
	budget *uploadBudget
	// commitFor bounds a commit past its uploads, and uploadFor each
	// upload, with a second per MiB of its body on top (commitDeadline;
	// tests shorten them).
	commitFor, uploadFor time.Duration

	// later runs the checks of commits whose outcome was unknown
	// (resolveLater); Shutdown cancels them and waits.
	later       sync.WaitGroup
	laterCtx    context.Context
	laterCancel context.CancelFunc
}

// session is one session's write state on this mount. Its maps and
// counters are GUARDED_BY(Writer.mu).
type session struct {
	id layout.SessionID
	// files are staged files by slot name (open, or dirty and not yet
	// committed).
	files map[string]*File
	// dirs are directories made by mkdir that hold nothing yet.
	dirs map[string]bool
	// held are the names a rename in flight moves a staged file from or
	// over (holdName): an open of one waits for its outcome (waitHeld).
	// A directory is held as "dir/".
	held map[string]*nameHold
	// moves are the directories renames moved lately ("dir/"), each at
	// the moveGen it made; those before movesFrom are forgotten. An open
	// or mkdir that began before such a move, and stages below the old
	// name after it, is ErrChanged (movedSinceLocked): it brought the old
	// directory back (review 16).
	moves     []dirMove
	moveGen   uint64
	movesFrom uint64
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
	// an fsync's commit, rename, unlink, rmdir and a metadata change.
	// Without it a rename saw a file staged, the release then committed
	// and forgot it, and the rename moved nothing (or moved a closed
	// spill file); an unlink dropped a file whose commit then landed,
	// and the file came back.
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
	// keepOnCrash makes the session's files parked under kept names in
	// Hold mode too (KeepOnCrash).
	keepOnCrash bool
}

type pendingOp struct {
	file *File              // a file to upload and describe at commit
	desc *layout.Descriptor // a ready descriptor (tombstone, rename)
	// base, for a desc made from a committed file (a rename's removal
	// of its source, a chmod's new descriptor of the same blob), is that
	// file: the commit is refused (layout.ErrChangedUnder) when another
	// writer gave the name other bytes since, and the caller looks again.
	base *layout.FileBase
	// soft marks a guard of --commit=fsync: the change showed as made
	// when it was queued, so a refusal at the fsync would refuse it
	// over and over. The descriptor is dropped instead (batch.dropped):
	// a rename's source rewritten since stays with the new bytes (the
	// rename moved the bytes it saw); a chmod or utimes of it (attr) is
	// made again on what the file holds then.
	soft bool
	// attr, for a desc made by a chmod or utimes of a committed file, is
	// that change.
	attr *AttrChange
	// movedFrom, for the new name of a rename guarded by that name's
	// absence (base), is the old name: when the guard drops the new name
	// (another writer made it), the old name's removal is dropped with it,
	// and the file stays where it was.
	movedFrom string
}

// fileBase is e as the base of a change built on it (a guard of
// layout.CommitRequest.Unchanged). An entry inherited from an ancestor
// (§11.3) has the ancestor's version: any write of the name in session
// id came after it.
func fileBase(id layout.SessionID, e *layout.Entry) *layout.FileBase {
	fb := &layout.FileBase{Digest: e.Digest, Version: e.Version}
	if e.Session != id {
		fb.Version = 0
	}
	return fb
}

// pendingEntry tells whether e, an entry of session id's live view
// (Live), is one a pending --commit=fsync change made: in no snapshot
// yet, so at version 0, which no committed descriptor of the session has.
func pendingEntry(id layout.SessionID, e *layout.Entry) bool {
	return e.Version == 0 && e.Session == id
}

// baseOf is fileBase for a change of session ws queued on e, the entry
// its live view shows. An entry a pending change made is no file of the
// bucket: the change is guarded as that pending change is on the name,
// by the committed file it was made from (a chmod's) or not at all (a
// rename's destination, an ingest), and lands after it in the same
// snapshot or a later one. Guarded by the entry's digest at version 0,
// any entry of the name counted as another writer's change: chmod f;
// mv f g; fsync left f beside g, and chmod then touch dropped the chmod
// (review 36). A pending entry whose change has landed since gives its
// own digest at version 0, as before.
func (w *Writer) baseOf(ws *session, e *layout.Entry) *layout.FileBase {
	if !pendingEntry(ws.id, e) {
		return fileBase(ws.id, e)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.baseOfLocked(ws, e)
}

// baseOfLocked is baseOf; caller holds w.mu.
func (w *Writer) baseOfLocked(ws *session, e *layout.Entry) *layout.FileBase {
	if !pendingEntry(ws.id, e) {
		return fileBase(ws.id, e)
	}
	for i := len(ws.pending) - 1; i >= 0; i-- {
		if d := ws.pending[i].desc; d != nil && d.Name == e.Name {
			if d.Deleted {
				break
			}
			return ws.pending[i].base // queue copies it
		}
	}
	return fileBase(ws.id, e)
}

// Stats counts what a Writer committed and what failed.
type Stats struct {
	// Commits counts committed changes (a file's content, a rename's
	// descriptors, a tombstone), Snapshots the snapshots they shared,
	// Descriptors the descriptors those held.
	Commits, Snapshots, Descriptors int64
	// Errors counts failed uploads and commits, Conflicts those that
	// failed because the session moved under them.
	Errors, Conflicts int64
}

// New returns a Writer that stores through store and keeps c up to date.
// onCommit, if not nil, is called after every commit.
func New(cfg Config, store Store, c States, blobs Blobs, onCommit func(layout.SessionID, []layout.Descriptor)) *Writer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.SnapshotType == "" {
		cfg.SnapshotType = layout.Provisional
	}
	if cfg.GroupWindow <= 0 {
		cfg.GroupWindow = 2 * time.Millisecond
	}
	if cfg.Uploads <= 0 {
		cfg.Uploads = 16
	}
	if onCommit == nil {
		onCommit = func(layout.SessionID, []layout.Descriptor) {}
	}
	w := &Writer{cfg: cfg, store: store, cache: c, blobs: blobs, log: cfg.Log, onCommit: onCommit,
		ss: map[layout.SessionID]*session{}, unknown: map[uint64]*unknownOutcome{},
		budget: newUploadBudget(uploadSmallBytes, uploadLargeFrom, uploadLargeSlots), commitFor: commitDeadline, uploadFor: commitDeadline}
	w.park.keep, w.park.staging = !cfg.Hold, cfg.StagingDir
	w.laterCtx, w.laterCancel = context.WithCancel(context.Background())
	return w
}

// Mode is the commit mode the Writer was made with.
func (w *Writer) Mode() CommitMode { return w.cfg.Commit }

// Stats returns what the Writer committed so far.
func (w *Writer) Stats() Stats {
	return Stats{w.st.commits.Load(), w.st.snapshots.Load(), w.st.descriptors.Load(), w.st.errors.Load(), w.st.conflicts.Load()}
}

func (w *Writer) session(id layout.SessionID) *session {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	if ws == nil {
		ws = &session{id: id, files: map[string]*File{}, dirs: map[string]bool{}, gone: map[string]bool{}, held: map[string]*nameHold{}}
		w.ss[id] = ws
	}
	return ws
}

// Hidden reports whether name (a full slot name) of a session was
// removed locally and its removal is not committed yet: the committed
// state still has it, the tree must not show it.
func (w *Writer) Hidden(id layout.SessionID, name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	if ws == nil || !ws.gone[name] {
		return false
	}
	// A staged file of the same name shows again.
	_, ok := ws.files[name]
	return !ok
}

// Local is an entry of a directory that only this mount has: a staged
// file (File set) or a directory made by mkdir or holding staged files.
type Local struct {
	Name string
	File *File
}

// Overlay returns the local entries of directory prefix (a full slot
// name, "" for the session root) of a session, in two steps: Overlay
// notes them now, and the function it returns gives every staged file
// noted and the local directories not seen in the committed tree. A
// listing must note them before it reads the committed state: a commit
// moves a file from the staged set into the state, so a file is in the
// staged set noted first or in the state read after, and never in
// neither (a just-created file missing from ls). A staged file shadows a
// committed entry of its name (an append, a file a directory rename
// carried), as in Lookup: the listing shows the staged file, not the
// entry its commit replaces.
func (w *Writer) Overlay(id layout.SessionID, prefix string) func(seen map[string]bool) []Local {
	w.mu.Lock()
	ws := w.ss[id]
	if ws == nil {
		w.mu.Unlock()
		return func(map[string]bool) []Local { return nil }
	}
	if prefix != "" {
		prefix += "/"
	}
	var files []Local
	dirs := map[string]bool{}
	for full, s := range ws.files {
		rest, ok := strings.CutPrefix(full, prefix)
		if !ok {
			continue
		}
		if first, _, nested := strings.Cut(rest, "/"); nested {
			dirs[first] = true
		} else {
			files = append(files, Local{Name: rest, File: s})
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
	return func(seen map[string]bool) []Local {
		out := append([]Local(nil), files...)
		for name := range dirs {
			if !seen[name] {
				out = append(out, Local{Name: name})
			}
		}
		return out
	}
}

// Lookup finds a local entry of a session by its full slot name: a
// staged file, or a local directory (file nil, ok true).
func (w *Writer) Lookup(id layout.SessionID, full string) (file *File, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	if ws == nil {
		return nil, false
	}
	if file, ok = ws.files[full]; ok {
		return file, true
	}
	if ws.dirs[full] {
		return nil, true
	}
	for f := range ws.files {
		if strings.HasPrefix(f, full+"/") {
			return nil, true
		}
	}
	return nil, false
}

// Staged returns the staged file of a name, if any.
func (w *Writer) Staged(id layout.SessionID, name string) *File {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws != nil {
		return ws.files[name]
	}
	return nil
}

// Retain counts a read-only open of a staged file so it outlives the
// writer's close while being read. It refuses (false) a staged file whose
// last release already forgot it: its spill file is closed or about to be,
// and its content is the committed entry now. Counting such a file
// anyway made the reader's handle read a closed file (EIO, seen by the
// property test on a read right after a create). Release it with
// ReleaseRead.
func (w *Writer) Retain(id layout.SessionID, s *File) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws == nil || ws.files[s.name] != s {
		return false
	}
	s.opens++
	s.readers++
	return true
}

// Open returns the staged file for name, creating it from base.
func (w *Writer) Open(ctx context.Context, id layout.SessionID, name string, base *layout.Entry, truncate bool) (*File, error) {
	return w.OpenFrom(ctx, id, name, func() *layout.Entry { return base }, truncate)
}

// OpenFrom is open with the base asked for only once no staged file of
// the name is left: an open that looked at its inode while the last close
// of the name was being released saw the staged file (and so no base), and
// found it gone when it got here; staging from nothing then dropped the
// file's content (echo hello > f; echo world >> f made f "world").
func (w *Writer) OpenFrom(ctx context.Context, id layout.SessionID, name string, baseOf func() *layout.Entry, truncate bool) (*File, error) {
	return w.openFrom(ctx, id, name, baseOf, truncate, false)
}

// OpenFresh is OpenFrom for open(2) for writing, and for truncate(2) and
// setxattr(2) of a path, with close-to-open consistency (as NFS checks a
// file's attributes at open): an open that keeps the content (no
// O_TRUNC) of a committed file first checks the session against the
// bucket, one LIST. When another writer changed the file since the front
// end looked it up, the file is staged from the bucket's content instead
// and says so (Rebased); when another writer removed it, the open is
// ErrChanged. Without the check, an append through a mount that loaded
// the session within its metadata TTL started from the content before
// another mount's append, and its commit replaced that append. A file
// already staged on this mount, and a session holding pending
// --commit=fsync changes (whose local view is newer than the bucket's),
// are not checked.
//
// A changed file used to be ErrChanged too, for the kernel to look the
// name up again and retry; but it retries once, and two mounts appending
// to one file in a loop changed it again in between (1 or 2 opens in 40
// failed with ESTALE). Opening what the bucket holds now is what that
// retry would have done.
//
// A create that keeps content (no base: the front end found no file, no
// truncation: O_CREAT without O_TRUNC) is checked too: when another
// mount committed the name within the TTL, the file is staged from its
// content (Rebased), or `>>` through this mount replaced it. A create
// with O_TRUNC replaces whatever is there anyway, and one with O_EXCL
// (tar x, cp, rsync's temporary files) is OpenExclusive's: checked at its
// commit, not here, where it would cost every new file a round trip.
func (w *Writer) OpenFresh(ctx context.Context, id layout.SessionID, name string, baseOf func() *layout.Entry, truncate bool) (*File, error) {
	return w.openFrom(ctx, id, name, baseOf, truncate, true)
}

// OpenExclusive is open(2) with O_CREAT|O_EXCL of a name the front end
// found absent: ErrExist when the session as this mount knows it has a
// file or directory there (the kernel's negative entry can be older than
// that), else a new empty staged file. Its first commit is refused
// (layout.ErrChangedUnder, ESTALE at close) when another writer committed
// the name after the state it was found absent in: O_EXCL across mounts
// without a round trip per create (tar x, cp, mkstemp), where the later
// commit replaced the other mount's file. Checking the bucket at the
// create would cost every new file a LIST.
func (w *Writer) OpenExclusive(ctx context.Context, id layout.SessionID, name string) (*File, error) {
	if err := layout.CheckUTF8(name); err != nil {
		return nil, err
	}
	ws := w.session(id)
	for {
		moved, mark := w.waitHeld(ws, name)
		if moved {
			return nil, ErrChanged // as openFrom: a rename moved its directory
		}
		st, err := w.cache.State(ctx, id)
		if err != nil {
			return nil, err
		}
		slots, tree := w.Live(st)
		if file, dir := w.kindOf(ws, slots, tree, name); file || dir {
			return nil, ErrExist
		}
		s, err := w.newStaged(ctx, name, nil, true)
		if err != nil {
			return nil, err
		}
		s.dirty = true
		s.absent, s.absentAs = &layout.FileBase{Version: st.Version}, name
		other, _, err := w.install(ws, name, s, nil, true, mark)
		switch {
		case errors.Is(err, errHeld):
			continue // a rename holds its directory: wait for it
		case err != nil:
			return nil, err
		case other != s:
			// Another open staged the name meanwhile: it exists now.
			w.Release(ctx, id, other)
			return nil, ErrExist
		}
		return s, nil
	}
}

// share returns the file staged under name in ws with one more open, or
// nil when there is none.
func (w *Writer) share(ws *session, name string) *File {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := ws.files[name]
	if s != nil {
		s.opens++
	}
	return s
}

func (w *Writer) openFrom(ctx context.Context, id layout.SessionID, name string, baseOf func() *layout.Entry, truncate, fresh bool) (*File, error) {
	if err := layout.CheckUTF8(name); err != nil {
		return nil, err // refused at the open, not by the commit at close
	}
	ws := w.session(id)
	for attempt := 0; ; attempt++ {
		moved, mark := w.waitHeld(ws, name)
		if moved {
			// A rename moved another file to the name, or this one
			// away, while the kernel sent the open: it looks the name
			// up again (ESTALE) and opens what is there now.
			return nil, ErrChanged
		}
		if s := w.share(ws, name); s != nil {
			if truncate {
				if err := s.Truncate(ctx, 0); err != nil {
					// The caller gets no handle to release: the open
					// share took is dropped here, or the file's last
					// release never came (never committed, never
					// forgotten, its spill file open for good).
					w.Release(ctx, id, s)
					return nil, err
				}
			}
			return s, nil
		}
		base := baseOf()
		rebased := false
		var absent *layout.FileBase
		if fresh && base != nil && !truncate {
			var err error
			if base, rebased, err = w.checkBase(ctx, id, name, base); err != nil {
				return nil, err
			}
		} else if fresh && base == nil && !truncate {
			// A create that keeps content (O_CREAT without O_TRUNC: >>,
			// O_RDWR) of a name the front end found absent: another
			// mount may have committed it within the TTL, and staging
			// from nothing would replace what it committed.
			var err error
			if base, absent, err = w.checkAbsent(ctx, id, name); err != nil {
				return nil, err
			}
			rebased = base != nil
		}
		s, err := w.newStaged(ctx, name, base, truncate)
		if err != nil {
			return nil, err
		}
		s.rebased = rebased
		if absent != nil {
			// Built on nothing, as an append to an empty file: a file
			// another mount committed under the name after the check
			// is not replaced (two mounts' first `>>` of one log kept
			// only the later line, both closes succeeding; audit 8).
			s.absent, s.absentAs = absent, name
		}
		if base == nil || truncate {
			s.dirty = true // a new or truncated file is a change even if empty
		}
		other, ok, err := w.install(ws, name, s, base, truncate, mark)
		switch {
		case errors.Is(err, errHeld):
			continue // a rename holds its directory: wait for it
		case err != nil:
			return nil, err
		case ok:
			return other, nil
		}
		// Staged from a base another file of the name was committed
		// over, and forgotten, meanwhile: the content it started from
		// is gone. Stage again from what is committed now.
		s.close()
		if attempt == 8 {
			return nil, fmt.Errorf("open %s: %w: committed over again and again while it was opened", name, ErrChanged)
		}
	}
}

// install makes s the staged file of name, or shares the one another
// open installed first (and closes s). It refuses (ok false) when s was
// staged from base but the name's committed entry is another one now: a
// file of the name was staged, committed and forgotten while s was being
// staged (four threads appending: one staged the file as it was before
// the others' commits, and its commit dropped their lines). Only close
// mode commits and forgets files while others open them.
// A rename that holds a directory above name, or moved one since mark
// (waitHeld), closes s too: errHeld (wait for the rename, then try
// again) or ErrChanged. Checked before only, by waitHeld, an open that
// began before a directory's rename staged its file under the old name
// after it, and the old directory came back (review 16).
func (w *Writer) install(ws *session, name string, s *File, base *layout.Entry, truncate bool, mark uint64) (*File, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := ws.movedSinceLocked(name, mark); err != nil {
		s.close()
		return nil, false, err
	}
	if other := ws.files[name]; other != nil {
		// Lost a race with another open: use theirs.
		s.close()
		other.opens++
		return other, true, nil
	}
	if !truncate && w.cfg.Commit == CommitOnClose {
		// The cache's locks come after Writer.mu, and Peek asks nothing
		// of the bucket.
		if st, ok := w.cache.Peek(ws.id); ok {
			e, exists := st.Slot(name)
			if exists != (base != nil) || (exists && e.Digest != base.Digest) {
				return nil, false, nil
			}
		}
	}
	s.opens = 1
	ws.files[name] = s
	delete(ws.gone, name)
	return s, true, nil
}

// checkBase returns the entry name has in the bucket now, for an open
// whose front end found base (OpenFresh): base itself, or the entry with
// the same bytes and newer metadata (a chmod from elsewhere), or the
// entry with other bytes (changed true), or ErrChanged when the file is
// gone.
func (w *Writer) checkBase(ctx context.Context, id layout.SessionID, name string, base *layout.Entry) (e *layout.Entry, changed bool, err error) {
	w.mu.Lock()
	ws := w.ss[id]
	pending := ws != nil && len(ws.pending) > 0
	w.mu.Unlock()
	if pending {
		return base, false, nil
	}
	w.cache.Invalidate(id)
	st, err := w.cache.State(ctx, id)
	if err != nil {
		return nil, false, fmt.Errorf("open %s: check the session: %w", name, err)
	}
	now, ok := st.Slot(name)
	if !ok {
		return nil, false, fmt.Errorf("open %s: %w: removed", name, ErrChanged)
	}
	return &now, now.Digest != base.Digest || now.Size != base.Size, nil
}

// checkAbsent returns the entry name has in the bucket now, for a create
// that keeps content (OpenFresh with no base and no truncation), or, when
// the name is absent, the guard of that absence (File.absent): one LIST,
// as checkBase, and none for a session holding pending --commit=fsync
// changes, whose local view is newer than the bucket's.
func (w *Writer) checkAbsent(ctx context.Context, id layout.SessionID, name string) (*layout.Entry, *layout.FileBase, error) {
	w.mu.Lock()
	ws := w.ss[id]
	pending := ws != nil && len(ws.pending) > 0
	var removed *layout.FileBase
	if pending {
		removed = removedBaseLocked(ws, name)
	}
	w.mu.Unlock()
	if pending {
		// Removed by a pending change (rm, or the old name of a mv):
		// built on the file that change removes, the create is guarded
		// as it is. Unguarded, it replaced what another mount made of
		// that file before the fsync, an append to it lost (audit 41).
		return nil, removed, nil
	}
	w.cache.Invalidate(id)
	st, err := w.cache.State(ctx, id)
	if errors.Is(err, layout.ErrSessionNotFound) {
		return nil, nil, nil // the create fails, or makes the session, as before
	}
	if err != nil {
		return nil, nil, fmt.Errorf("create %s: check the session: %w", name, err)
	}
	if now, ok := st.Slot(name); ok {
		return &now, nil, nil
	}
	return nil, &layout.FileBase{Version: st.Version}, nil
}

// removedBaseLocked returns the guard of the pending change that removes
// name last, if the last pending change of it is a guarded removal.
// Caller holds w.mu.
func removedBaseLocked(ws *session, name string) *layout.FileBase {
	for i := len(ws.pending) - 1; i >= 0; i-- {
		if d := ws.pending[i].desc; d != nil && d.Name == name {
			if fb := ws.pending[i].base; d.Deleted && fb != nil {
				c := *fb
				c.AnyChange = false // what the create keeps is bytes, not metadata
				return &c
			}
			return nil
		}
	}
	return nil
}

// liveView is the live state of a session as this mount shows it: the
// committed slots with the ops pending in --commit=fsync applied, over
// them (over), and the tree derived from st's or from the view before
// (cache.DeriveTree). A view of the ops pending before and ops queued
// since is derived from that view: each pending rename, removal or chmod
// copied every slot of the session and built its tree again, so an rm -r
// in a large session cost O(n) a file (review 34).
type liveView struct {
	st  *cache.State
	gen uint64
	// ops is how many pending ops the view applied, head and tail the
	// descriptors of the first and the last: ops are only appended to
	// the pending list, or taken from its front (a commit), so the same
	// two there mean the same ops.
	ops        int
	head, tail *layout.Descriptor
	over       map[string]liveSlot
	tree       *cache.Dir
}

// liveSlot is a pending op's slot: its entry, or gone (removed).
type liveSlot struct {
	e    layout.Entry
	gone bool
}

// Slots looks a name up in the live slots of a session (Live).
type Slots func(name string) (layout.Entry, bool)

// Live returns the live slots and tree of st's session on this mount:
// st's own unless --commit=fsync holds pending renames, tombstones or
// ingests, which must show (and hide) before they are committed. The
// slots are looked up one name at a time: the whole map of a session
// of 50,000 files, built for each close, made every commit cost what
// the session holds (audit 31).
func (w *Writer) Live(st *cache.State) (Slots, *cache.Dir) {
	w.mu.Lock()
	ws := w.ss[st.ID]
	if ws == nil || len(ws.pending) == 0 {
		w.mu.Unlock()
		return st.Slot, st.Tree()
	}
	prev := ws.view
	if prev != nil && prev.st == st && prev.gen == ws.gen {
		w.mu.Unlock()
		return prev.slot, prev.tree
	}
	gen := ws.gen
	ops := append([]pendingOp(nil), ws.pending...)
	w.mu.Unlock()
	if prev != nil && (prev.st != st || prev.ops > len(ops) || ops[0].desc != prev.head || ops[prev.ops-1].desc != prev.tail) {
		prev = nil
	}
	v := &liveView{st: st, gen: gen, ops: len(ops), head: ops[0].desc, tail: ops[len(ops)-1].desc,
		over: make(map[string]liveSlot, len(ops))}
	from, was, tree := 0, Slots(st.Slot), st.Tree()
	if prev != nil {
		for k, c := range prev.over {
			v.over[k] = c
		}
		from, was, tree = prev.ops, prev.slot, prev.tree
	}
	var changed []string
	for _, op := range ops[from:] {
		if op.desc == nil {
			continue
		}
		if e := (layout.Entry{Descriptor: *op.desc, Session: st.ID}); e.IsSlot() {
			v.over[e.Name] = liveSlot{e: e, gone: e.Deleted}
			changed = append(changed, e.Name)
		}
	}
	v.tree = cache.DeriveTree(tree, was, v.slot, changed)
	w.mu.Lock()
	if ws.gen == gen {
		ws.view = v
	}
	w.mu.Unlock()
	return v.slot, v.tree
}

// slot looks name up in v's slots.
func (v *liveView) slot(name string) (layout.Entry, bool) {
	if c, ok := v.over[name]; ok {
		if c.gone {
			return layout.Entry{}, false
		}
		return c.e, true
	}
	return v.st.Slot(name)
}

// dirContent is what is under a directory of a session on this mount.
type dirContent struct {
	// files are the live committed slots under it, by name.
	files []layout.Entry
	// staged are the names of staged files under it.
	staged []string
	// dirs are the local (mkdir'd, not yet stored) directories under it.
	dirs []string
	// version is the session's version files is as of.
	version uint32
}

// empty reports whether the directory holds nothing, so that rmdir may
// remove it and a rename may replace it (POSIX: else ENOTEMPTY).
func (c dirContent) empty() bool {
	return len(c.files)+len(c.staged)+len(c.dirs) == 0
}

// dirEntries returns what is under directory prefix of a session: live
// committed slots (less those removed locally), staged files and local
// directories.
func (w *Writer) dirEntries(ctx context.Context, id layout.SessionID, prefix string) (dirContent, error) {
	var c dirContent
	st, err := w.cache.State(ctx, id)
	if err != nil {
		return c, err
	}
	_, tree := w.Live(st)
	c.version = st.Version
	under := prefix + "/"
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.ss[id]
	// The files under prefix, from the tree: every live name was
	// scanned, a cost of what the session holds for each rmdir of rm -r
	// (audit 31). The tree holds the names that are paths.
	var walk func(d *cache.Dir)
	walk = func(d *cache.Dir) {
		for _, e := range d.Files() {
			if ws == nil || !ws.gone[e.Name] {
				c.files = append(c.files, *e)
			}
		}
		for _, sub := range d.Subs() {
			walk(sub)
		}
	}
	if d, ok := tree.Walk(strings.Split(prefix, "/")); ok && d != nil {
		walk(d)
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

// CheckInvariants returns the first broken invariant of the Writer's
// state, or nil; tests call it after what they drive. Every staged file
// is filed under the name it has, has its spill file and a non-negative
// open count, of which its readers are a part; no name is both a staged file and a local directory; the
// upload counters never go below zero.
func (w *Writer) CheckInvariants() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, ws := range w.ss {
		if ws.uploading < 0 {
			return fmt.Errorf("session %s: %d uploads in flight", id, ws.uploading)
		}
		for name, s := range ws.files {
			s.mu.RLock()
			sname, open, opens := s.name, !s.closedLocked(), s.opens
			s.mu.RUnlock()
			switch {
			case sname != name:
				return fmt.Errorf("session %s: staged file %q filed under %q", id, sname, name)
			case !open:
				return fmt.Errorf("session %s: staged file %q is filed but its spill file is closed", id, name)
			case opens < 0:
				return fmt.Errorf("session %s: staged file %q has %d opens", id, name, opens)
			case s.readers < 0 || s.readers > opens:
				return fmt.Errorf("session %s: staged file %q has %d readers of %d opens", id, name, s.readers, opens)
			case ws.dirs[name]:
				return fmt.Errorf("session %s: %q is both a staged file and a local directory", id, name)
			}
		}
	}
	return nil
}
