package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// RecordStore is what Records needs of the bucket (*layout.Store).
type RecordStore interface {
	PutBody(ctx context.Context, name string, body []byte, o layout.BlobOptions) (layout.Descriptor, error)
	LatestMemoryVersion(ctx context.Context, ns string) (uint32, error)
	ReadMemory(ctx context.Context, ns string, v uint32) ([]layout.Descriptor, error)
	WriteMemory(ctx context.Context, ns string, w layout.MemoryWrite) (layout.MemoryResult, error)
	NewRootManifest() *layout.Manifest
	CreateSession(ctx context.Context, m *layout.Manifest) (*layout.Manifest, bool, error)
	ReadRef(ctx context.Context, name string) (layout.Ref, error)
	RenameRef(ctx context.Context, name string, prev layout.Ref, target string) error
	ResolveRef(ctx context.Context, e *layout.RefOutcomeUnknownError) (layout.Ref, bool, error)
	DeleteRef(ctx context.Context, name string) error
	DeleteRefIf(ctx context.Context, name string, prev layout.Ref) error
	SessionExists(ctx context.Context, id layout.SessionID) (bool, error)
}

// RecordCaches are the caches a record write makes stale: the memory
// and ref views, and the session list and state (a session made by mkdir,
// or the writer session a mount makes for its memory records).
type RecordCaches struct {
	InvalidateMemories func()
	InvalidateRefs     func()
	SessionCreated     func(layout.SessionID)
	InvalidateSession  func(layout.SessionID)
}

// Records writes what lives outside sessions' content: memory records
// (§8), refs (§9) and new sessions' manifests (§5), and it is the only
// code that does. Each write is
// one layout call, and the caches it makes stale are dropped right after,
// whether it succeeded or not (a failed write may have landed).
//
// LOCK ORDERING: idMu is a leaf.
type Records struct {
	store  RecordStore
	caches RecordCaches
	now    func() time.Time
	log    *slog.Logger

	// idMu serialises the making of id, the session this mount names as
	// the writer of its memory records (§8.2), on the first memory write.
	idMu sync.Mutex
	id   layout.SessionID // GUARDED_BY(idMu)
	// making is the manifest of the writer session a memory write failed
	// to create, nil when none did: the next write creates it again
	// (commit).
	making *layout.Manifest // GUARDED_BY(idMu)

	failedDir  string
	writerFile string // RecordOptions.WriterFile

	// later runs the background checks of ref writes whose outcome was
	// unknown (resolveRefLater); Close cancels laterCtx and waits.
	later       sync.WaitGroup
	laterCtx    context.Context
	laterCancel context.CancelFunc
	// resolveFirst is how long a background check waits before it first
	// asks the bucket (resolveRefFirst; tests shorten it), and resolved,
	// if set, is told its answer (tests).
	// unsettled are the ref writes of unknown outcome a background check
	// asks about, with their copies in the failed directory: a later
	// write of the same descriptor that finds one landed (ResolveRef)
	// settles it, its copy removed, where the check then found the ref
	// holding the later write and kept the copy (review 44).
	// GUARDED_BY(unsettledMu).
	unsettledMu  sync.Mutex
	unsettled    map[*layout.RefOutcomeUnknownError]string
	resolveFirst time.Duration
	// resolveFor is how long it keeps asking (resolveLaterFor; tests
	// shorten it).
	resolveFor time.Duration
	resolved   func(name string, landed bool)
}

// RecordOptions configure Records; each may be left zero.
type RecordOptions struct {
	// Now is the clock (time.Now).
	Now func() time.Time
	// Log gets the record writes that failed (slog.Default).
	Log *slog.Logger
	// FailedDir is where the data of a memory or ref write that failed
	// is kept (memories/ and refs/ in it), as a session commit's is
	// (Writer's failed directory): a shell redirection never sees
	// close(2)'s error. Empty keeps nothing.
	FailedDir string
	// WriterFile, if set, keeps the ID of the session a mount makes to
	// name as the writer of its memory records (§8.2), so the next
	// mount of the bucket names it again instead of making another:
	// every mount that wrote a record left an empty session in
	// sessions/ (audit 30).
	WriterFile string
}

// NewRecords returns the record writer of a mount. Any of the caches'
// functions may be nil.
func NewRecords(store RecordStore, caches RecordCaches, opts RecordOptions) *Records {
	now, log := opts.Now, opts.Log
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	nop := func() {}
	if caches.InvalidateMemories == nil {
		caches.InvalidateMemories = nop
	}
	if caches.InvalidateRefs == nil {
		caches.InvalidateRefs = nop
	}
	if caches.SessionCreated == nil {
		caches.SessionCreated = func(layout.SessionID) {}
	}
	if caches.InvalidateSession == nil {
		caches.InvalidateSession = func(layout.SessionID) {}
	}
	r := &Records{store: store, caches: caches, now: now, log: log, failedDir: opts.FailedDir, writerFile: opts.WriterFile,
		resolveFirst: resolveRefFirst, resolveFor: resolveLaterFor}
	r.laterCtx, r.laterCancel = context.WithCancel(context.Background())
	return r
}

// Close stops the background checks of ref writes whose outcome was
// unknown and waits for them: what they had not settled stays in the
// failed directory. Call it when the mount stops.
func (r *Records) Close() {
	r.laterCancel()
	r.later.Wait()
}

// keep keeps body, the data of a write of name (kind "memories" or
// "refs") that failed with err, under the failed directory, and says so
// in the log: nothing a user wrote is dropped silently. It returns the
// copy's path ("" when none was made).
func (r *Records) keep(kind, name string, body []byte, err error) string {
	if r.failedDir == "" {
		r.log.Error("write failed", "kind", kind, "name", name, "err", err)
		return ""
	}
	dir := filepath.Join(r.failedDir, kind)
	dst := filepath.Join(dir, keptName(name, "."+r.now().UTC().Format("20060102T150405.000000000")))
	werr := os.MkdirAll(dir, 0o700)
	if werr == nil {
		werr = os.WriteFile(dst, body, 0o600)
	}
	if werr != nil {
		r.log.Error("write failed, and its data could not be kept", "kind", kind, "name", name, "err", err, "keep", werr)
		return ""
	}
	r.log.Error("write failed; its data is kept", "kind", kind, "name", name, "path", dst, "err", err)
	return dst
}

// commit returns the commit envelope of this mount's memory writes
// (§8.2). A mount is not a session, so it names one as the writer:
// the one an earlier mount of the bucket made (RecordOptions.WriterFile)
// while it exists, else one it makes on its first memory write. Readers
// and fsck find it.
//
// Making it is a create of its manifest, with an ID of its own: when that
// fails, the manifest may have landed all the same (a PUT cut by its
// deadline, its reply lost and the read back unanswered), an empty session
// in the bucket. The next write creates that very manifest again, which
// §5.1 makes idempotent, rather than another one: each failed first step
// left a session of its own, and §5.1 forbids deleting a manifest to tidy
// up after one. Its ID goes to WriterFile before the create, so the next
// mount names it if it landed.
func (r *Records) commit(ctx context.Context) (layout.MemoryCommit, error) {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	if r.id.IsZero() && r.making == nil {
		id, err := r.keptWriter(ctx)
		if err != nil {
			return layout.MemoryCommit{}, err
		}
		r.id = id
	}
	if r.id.IsZero() {
		m := r.making
		if m == nil {
			m = r.store.NewRootManifest()
			m.Agent = "pugfs"
			m.Metadata = map[string]string{"pugfs": "writer of the memory records of a mount"}
			r.making = m
			r.keepWriter(m.Session)
		}
		if _, _, err := r.store.CreateSession(ctx, m); err != nil {
			return layout.MemoryCommit{}, fmt.Errorf("make the writer session %s of this mount's memory records: %w", m.Session, err)
		}
		r.making = nil
		r.caches.SessionCreated(m.Session)
		r.id = m.Session
	}
	return layout.MemoryCommit{Session: r.id}, nil
}

// keptWriter returns the writer session WriterFile names, if the bucket
// has it (one request), else the zero ID. An error is a bucket that did
// not answer: the session may be there, and making another one would
// leave it unused.
func (r *Records) keptWriter(ctx context.Context) (layout.SessionID, error) {
	if r.writerFile == "" {
		return layout.SessionID{}, nil
	}
	b, err := os.ReadFile(r.writerFile)
	if err != nil {
		return layout.SessionID{}, nil
	}
	id, err := layout.ParseSessionID(strings.TrimSpace(string(b)))
	if err != nil {
		return layout.SessionID{}, nil
	}
	ok, err := r.store.SessionExists(ctx, id)
	if err != nil {
		return layout.SessionID{}, fmt.Errorf("look up the writer session %s of this mount's memory records: %w", id, err)
	}
	if !ok {
		return layout.SessionID{}, nil
	}
	return id, nil
}

// keepWriter records id in WriterFile for the next mount. A failure, or
// a file torn by a crash (keptWriter does not parse it), costs that
// mount a session of its own, so it is logged at debug level only.
func (r *Records) keepWriter(id layout.SessionID) {
	if r.writerFile == "" {
		return
	}
	if err := os.WriteFile(r.writerFile, []byte(id.String()+"\n"), 0o600); err != nil {
		r.log.Debug("could not keep the memory writer session for the next mount", "file", r.writerFile, "err", err)
	}
}

// PutMemory stores body as record e.Name of namespace ns, keeping e's
// metadata and schema, merged into the namespace (§8.3), and returns the
// record as committed. base, if set, is the digest of the record body was
// built on (an append, an edit in place): when another writer changed the
// record since, nothing is written (layout.ErrChangedUnder, a lost update
// otherwise) and body is kept as a failed write's.
func (r *Records) PutMemory(ctx context.Context, ns string, e layout.Descriptor, body []byte, base *layout.Digest) (layout.Descriptor, error) {
	d, err := r.putMemory(ctx, ns, e, body, base)
	if err != nil {
		r.keep("memories", ns+"/"+e.Name, body, err)
	}
	return d, err
}

// RewriteMemory is PutMemory of a record written whole (opened with
// O_TRUNC) over the record whose metadata the writer read as inherited:
// the record's mode and other metadata are taken as they are at the
// merge, but for what the writer changed itself (layout.MemoryWrite's
// Inherited), as a local file keeps its mode and attributes through a
// rewrite made by another process.
func (r *Records) RewriteMemory(ctx context.Context, ns string, e layout.Descriptor, body []byte, inherited map[string]string) (layout.Descriptor, error) {
	d, err := r.putGuarded(ctx, ns, e, body, layout.MemoryWrite{Inherited: map[string]map[string]string{e.Name: inherited}})
	if err != nil {
		r.keep("memories", ns+"/"+e.Name, body, err)
	}
	return d, err
}

// PutMemoryAttrs is PutMemory for a change of a record's attributes
// alone (chmod, utimes: body is the record's bytes as read, base their
// digest): when another writer changed the record since, the change is
// made on what it holds then (current reads it), up to appendAttempts
// times, instead of being refused, and a refused one keeps no copy,
// since no byte of the caller's is lost. A record removed meanwhile
// stays removed (ErrNotExist). It returns the descriptor and the body
// committed.
//
// inherited is the metadata the record had when read: a retry keeps what
// another writer changed of it since (layout.MemoryWrite.Inherited), or
// the other mount's new key was dropped by the chmod (review 31).
// keptTime marks a change that set no time (a chmod: e's posix-mtime is
// the time the bytes read showed, kept): made on other bytes, it keeps
// theirs, where it stamped the other writer's newer bytes with the
// older time, which make and rsync then miss (review 31).
func (r *Records) PutMemoryAttrs(ctx context.Context, ns string, e layout.Descriptor, body []byte, base *layout.Digest, inherited map[string]string, keptTime bool, current func(context.Context) ([]byte, *layout.Descriptor, error)) (layout.Descriptor, []byte, error) {
	var meta map[string]map[string]string
	if inherited != nil {
		meta = map[string]map[string]string{e.Name: inherited}
	}
	for attempt := 1; ; attempt++ {
		d, err := r.putGuarded(ctx, ns, e, body, layout.MemoryWrite{Holds: map[string]layout.Digest{e.Name: *base}, Inherited: meta})
		if err == nil || !errors.Is(err, layout.ErrChangedUnder) || attempt == appendAttempts {
			return d, body, err
		}
		cur, now, err := current(ctx)
		if err != nil {
			return layout.Descriptor{}, nil, err
		}
		if now == nil {
			return layout.Descriptor{}, nil, ErrNotExist
		}
		body, base = cur, &now.Digest
		if keptTime {
			e.Metadata = maps.Clone(e.Metadata)
			if e.Metadata == nil {
				e.Metadata = map[string]string{}
			}
			e.Metadata[layout.MetaPosixMtime] = layout.FormatPosixMtime(layout.ShownMtime(now.Metadata, now.CreatedAt, time.Time{}))
		}
	}
}

// EditMemory is PutMemory of a record edited in place through a
// descriptor opened on the record whose metadata the writer read as
// inherited (base its digest): the bytes are refused if another writer
// changed them since (ErrChangedUnder), and the metadata merged as
// RewriteMemory's is. An edit through a descriptor opened before
// another mount's chmod put the mode read at the open back (review 40).
func (r *Records) EditMemory(ctx context.Context, ns string, e layout.Descriptor, body []byte, base layout.Digest, inherited map[string]string) (layout.Descriptor, error) {
	d, err := r.putGuarded(ctx, ns, e, body, layout.MemoryWrite{
		Unchanged: map[string]layout.Digest{e.Name: base},
		Inherited: map[string]map[string]string{e.Name: inherited},
	})
	if err != nil {
		r.keep("memories", ns+"/"+e.Name, body, err)
	}
	return d, err
}

func (r *Records) putMemory(ctx context.Context, ns string, e layout.Descriptor, body []byte, base *layout.Digest) (layout.Descriptor, error) {
	var guard layout.MemoryWrite
	if base != nil {
		guard.Unchanged = map[string]layout.Digest{e.Name: *base}
	}
	return r.putGuarded(ctx, ns, e, body, guard)
}

// putGuarded is putMemory with the guards of w (Unchanged, Holds).
func (r *Records) putGuarded(ctx context.Context, ns string, e layout.Descriptor, body []byte, w layout.MemoryWrite) (layout.Descriptor, error) {
	cm, err := r.commit(ctx)
	if err != nil {
		return layout.Descriptor{}, err
	}
	d, err := r.store.PutBody(ctx, e.Name, body, layout.BlobOptions{ContentType: ContentTypeOf(e.Name, body)})
	if err != nil {
		return layout.Descriptor{}, err
	}
	d.CreatedAt = r.now().UTC()
	d.Metadata, d.SchemaURL = maps.Clone(e.Metadata), e.SchemaURL
	w.Put, w.Commit = []layout.Descriptor{d}, cm
	res, err := r.store.WriteMemory(ctx, ns, w)
	r.caches.InvalidateMemories()
	if err != nil {
		return layout.Descriptor{}, err
	}
	for _, rec := range res.Records {
		if rec.Name == d.Name {
			d = rec
		}
	}
	return d, nil
}

// AppendMemory is PutMemory of a record written through a descriptor
// opened with O_APPEND that only appended its last tail bytes to the
// record it read (base; nil when there was none): when another writer
// changed the record since, the tail goes onto what it holds then
// (current reads it: its body and digest, a nil digest when it is gone),
// as O_APPEND does on a local disk, instead of the write being refused.
// A record removed or renamed away meanwhile (a log rotated with `mv log
// log.1`) is made again with the tail alone, as a session's file is: it
// came back with all the writer had read, every rotated line in both
// records (audit 28). inherited is the metadata of the record as the
// writer read it (nil for none): the merge keeps other writers' changes
// of it since (a chmod from another mount), as RewriteMemory does. It
// returns the descriptor and the body committed.
func (r *Records) AppendMemory(ctx context.Context, ns string, e layout.Descriptor, body []byte, base *layout.Digest, tail int, inherited map[string]string, current func(context.Context) ([]byte, *layout.Digest, error)) (layout.Descriptor, []byte, error) {
	appended := body[len(body)-tail:]
	var meta map[string]map[string]string
	if inherited != nil {
		meta = map[string]map[string]string{e.Name: inherited}
	}
	holds := func(base *layout.Digest) layout.MemoryWrite {
		var want layout.Digest // none: the record is made
		if base != nil {
			want = *base
		}
		return layout.MemoryWrite{Holds: map[string]layout.Digest{e.Name: want}, Inherited: meta}
	}
	for attempt := 1; ; attempt++ {
		d, err := r.putGuarded(ctx, ns, e, body, holds(base))
		if err == nil {
			return d, body, nil
		}
		if errors.Is(err, layout.ErrChangedUnder) && attempt < appendAttempts {
			cur, dig, rerr := current(ctx)
			if rerr == nil {
				body, base = append(cur, appended...), dig
				if dig == nil {
					body = bytes.Clone(appended)
				}
				continue
			}
			err = rerr
		}
		r.keep("memories", ns+"/"+e.Name, body, err)
		return layout.Descriptor{}, nil, err
	}
}

// appendAttempts bounds how often AppendMemory puts its bytes on a
// record other writers keep changing: as often as a session's commit
// retries (decisions.md §13.3), since each lost race is another writer's
// landed change. With five, two mounts appending to one record in a loop
// failed one close in 25 (audit 8).
const appendAttempts = 100

// RemoveMemory removes record name of namespace ns; ErrNotExist when it
// has none.
func (r *Records) RemoveMemory(ctx context.Context, ns, name string) error {
	res, err := r.store.WriteMemory(ctx, ns, layout.MemoryWrite{Remove: []string{name}})
	r.caches.InvalidateMemories()
	if err != nil {
		return err
	}
	if !res.Changed {
		return ErrNotExist
	}
	return nil
}

// RenameMemory moves a record inside its namespace as one memory commit
// (the old name removed, the same blob under the new one). ErrNotExist
// when there is no such record; ErrExist when noReplace and the new name
// is taken. A record another writer changes between the read and the
// merge is moved as it is then: the rename is made again from the
// namespace's state, up to renameAttempts times, then ESTALE
// (layout.ErrChangedUnder).
func (r *Records) RenameMemory(ctx context.Context, ns, from, to string, noReplace bool) error {
	for attempt := 1; ; attempt++ {
		err := r.renameMemory(ctx, ns, from, to, noReplace)
		if !errors.Is(err, layout.ErrChangedUnder) || attempt == renameAttempts {
			return err
		}
	}
}

// renameAttempts bounds how often a rename of a record is made again
// from the bucket's state when another writer changed the record.
const renameAttempts = 4

func (r *Records) renameMemory(ctx context.Context, ns, from, to string, noReplace bool) error {
	v, err := r.store.LatestMemoryVersion(ctx, ns)
	if err != nil {
		return err
	}
	var recs []layout.Descriptor
	if v > 0 {
		if recs, err = r.store.ReadMemory(ctx, ns, v); err != nil {
			return err
		}
	}
	var src *layout.Descriptor
	for i := range recs {
		switch recs[i].Name {
		case from:
			src = &recs[i]
		case to:
			if noReplace {
				return ErrExist
			}
		}
	}
	if src == nil {
		return ErrNotExist
	}
	cm, err := r.commit(ctx)
	if err != nil {
		return err
	}
	moved := src.Clone()
	moved.Name, moved.Commit, moved.SequenceNumber = to, nil, 0
	moved.CreatedAt = r.now().UTC()
	// The merge reads the namespace again: it moves the record read
	// here only if that is still what the old name holds, or it put the
	// old bytes under the new name and dropped another writer's new ones
	// with the old name (audit 28).
	holds := map[string]layout.Digest{from: src.Digest}
	if noReplace {
		holds[to] = layout.Digest{} // still free, or another writer's record made there meanwhile is lost (review 30)
	}
	_, err = r.store.WriteMemory(ctx, ns, layout.MemoryWrite{Put: []layout.Descriptor{moved}, Remove: []string{from},
		Holds: holds, Moved: map[string]string{to: from}, Commit: cm})
	r.caches.InvalidateMemories()
	return err
}

// ErrBadRef is a ref body that is not one line holding a target.
var ErrBadRef = errors.New("a ref is one line holding its target")

// WriteRef points ref name at the first line of body. prev is the ref as
// the writer read it (existed false when there was none): the write is
// a compare-and-swap against it, or a create. It returns the ref as it
// is after the write, for the writer's next one.
func (r *Records) WriteRef(ctx context.Context, name string, prev layout.Ref, existed bool, body []byte) (now layout.Ref, nowExists bool, err error) {
	now, nowExists, err = r.writeRef(ctx, name, prev, existed, body)
	if err != nil {
		dst := r.keep("refs", name, body, err)
		var u *layout.RefOutcomeUnknownError
		if errors.As(err, &u) {
			r.resolveRefLater(u, dst)
		}
	}
	return now, nowExists, err
}

// resolveRefFirst is how long the background check of a ref write whose
// outcome was unknown waits before it first asks the bucket: its PUT may
// be under way still (cut by a deadline here, not at the server).
const resolveRefFirst = time.Second

// resolveRefLater asks the bucket, in the background and for up to
// resolveLaterFor, what became of a ref write whose outcome was unknown
// (layout.RefOutcomeUnknownError): its close returned EIO and its body
// went to the failed directory (kept; "" when none was made), yet the
// write may have landed. Once the ref reads as the write's target, the
// write is done: the copy is removed, as that of a write that landed at
// once is never made (the ref holds those bytes, and a copy left says
// "not written" to whoever puts it back), and the refs view is dropped.
// A ref found holding anything else keeps the copy. The answer goes to
// the log, as a commit's does (Writer.resolveLater).
func (r *Records) resolveRefLater(u *layout.RefOutcomeUnknownError, kept string) {
	r.unsettledMu.Lock()
	if r.unsettled == nil {
		r.unsettled = map[*layout.RefOutcomeUnknownError]string{}
	}
	r.unsettled[u] = kept
	r.unsettledMu.Unlock()
	r.later.Add(1)
	go func() {
		defer r.later.Done()
		defer r.settle(u)
		ctx, cancel := context.WithTimeout(r.laterCtx, r.resolveFor)
		defer cancel()
		for delay := r.resolveFirst; ; delay = min(max(2*delay, time.Second), 30*time.Second) {
			select {
			case <-ctx.Done():
				r.log.Warn("the outcome of a ref write stayed unknown: its copy in the failed directory stays", "ref", u.Name, "target", u.Target, "path", kept)
				if r.resolved != nil {
					r.resolved(u.Name, false)
				}
				return
			case <-time.After(delay):
			}
			if !r.isUnsettled(u) {
				return // settled by a later write of its descriptor
			}
			cur, landed, err := r.store.ResolveRef(ctx, u)
			if err != nil {
				continue
			}
			var ok bool
			if kept, ok = r.settle(u); !ok {
				return // settled meanwhile by a later write of its descriptor
			}
			if landed {
				r.caches.InvalidateRefs()
				if kept != "" {
					if err := os.Remove(kept); err != nil && !errors.Is(err, os.ErrNotExist) {
						r.log.Warn("could not remove the copy of a ref write the ref holds", "path", kept, "err", err)
					}
				}
				r.log.Warn("a ref write whose outcome was unknown landed after all: the ref holds its target, and its copy in the failed directory was removed", "ref", u.Name, "target", u.Target, "removed", kept)
			} else {
				r.log.Info("a ref write whose outcome was unknown did not land: what its close kept in the failed directory is all there is", "ref", u.Name, "target", u.Target, "holds", cur.Target, "path", kept)
			}
			if r.resolved != nil {
				r.resolved(u.Name, landed)
			}
			return
		}
	}()
}

// ResolveRef asks the bucket again what became of a ref write whose
// outcome was unknown (layout.Store.ResolveRef): whether the ref holds
// its target now, and the ref then.
// One that landed is settled: its copy in the failed directory is
// removed, and its background check stops.
func (r *Records) ResolveRef(ctx context.Context, u *layout.RefOutcomeUnknownError) (layout.Ref, bool, error) {
	cur, landed, err := r.store.ResolveRef(ctx, u)
	if err == nil && landed {
		if kept, _ := r.settle(u); kept != "" {
			if rerr := os.Remove(kept); rerr == nil {
				r.log.Info("a ref write whose outcome was unknown had landed: its copy in the failed directory was removed", "ref", u.Name, "target", u.Target, "removed", kept)
			}
		}
		r.caches.InvalidateRefs()
	}
	return cur, landed, err
}

// settle forgets u, a ref write of unknown outcome, and returns the copy
// its check was keeping ("" for none); ok is false when it was settled
// already.
func (r *Records) settle(u *layout.RefOutcomeUnknownError) (kept string, ok bool) {
	r.unsettledMu.Lock()
	defer r.unsettledMu.Unlock()
	kept, ok = r.unsettled[u]
	delete(r.unsettled, u)
	return kept, ok
}

// isUnsettled reports whether u's check is still wanted.
func (r *Records) isUnsettled(u *layout.RefOutcomeUnknownError) bool {
	r.unsettledMu.Lock()
	defer r.unsettledMu.Unlock()
	_, ok := r.unsettled[u]
	return ok
}

// CheckRef returns ErrBadRef unless body is what ref name may hold: one
// line, not empty, and for a session ref a manifest's storage path
// (§9.1). It asks the bucket nothing (whether that session exists is
// WriteRef's to learn).
func CheckRef(name string, body []byte) error {
	target := strings.TrimRight(string(body), "\r\n")
	if err := layout.ValidateRefTarget(target); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRef, err)
	}
	if strings.HasPrefix(name, layout.SessionRefName("")) {
		// §9.1: a session ref's body is exactly a manifest's storage
		// path; anything else is a name no reader can resolve.
		id, perr := layout.ParseManifestKey(target)
		if key, _ := layout.ManifestKey(id); perr != nil || key != target {
			return fmt.Errorf("%w: refs/%s must hold a session's manifest path (sessions/year=.../manifest.json), not %q", ErrBadRef, name, target)
		}
	}
	return nil
}

func (r *Records) writeRef(ctx context.Context, name string, prev layout.Ref, existed bool, body []byte) (now layout.Ref, nowExists bool, err error) {
	if err := CheckRef(name, body); err != nil {
		return prev, existed, err
	}
	target := strings.TrimRight(string(body), "\r\n")
	if strings.HasPrefix(name, layout.SessionRefName("")) {
		id, _ := layout.ParseManifestKey(target)
		ok, serr := r.store.SessionExists(ctx, id)
		if serr != nil {
			return prev, existed, serr
		}
		if !ok {
			return prev, existed, fmt.Errorf("refs/%s: %w: %s", name, layout.ErrSessionNotFound, target)
		}
	}
	// A ref absent at open is created only if it still is (RenameRef
	// with no prior value): a plain Link let two mounts creating one ref
	// both succeed, the first one's value lost.
	if !existed {
		prev = layout.Ref{}
	}
	err = r.store.RenameRef(ctx, name, prev, target)
	if errors.Is(err, layout.ErrWeakCAS) {
		r.log.Warn("ref replaced without compare-and-swap: the backend has no If-Match", "ref", name)
		err = nil
	}
	r.caches.InvalidateRefs()
	if err != nil {
		return prev, existed, err
	}
	nr, rerr := r.store.ReadRef(ctx, name)
	if rerr == nil && nr.Target == target {
		return nr, true, nil
	}
	// Another writer's swap landed between this one and the read: its
	// token is not this descriptor's to write on (taken, the next write
	// through it replaced the other writer's value: review 40). A token
	// no object has makes that write ESTALE, as a swap lost is.
	return layout.Ref{Name: name, Target: target, ETag: supersededRef}, true, nil
}

// supersededRef is the token of a ref this mount wrote and another
// writer replaced at once: no object's (an S3 or Azure ETag is quoted, a
// GCS generation of "0" is "absent", a local token random).
const supersededRef = "0"

// DeleteRef removes ref name; layout.ErrNotFound when there is none.
func (r *Records) DeleteRef(ctx context.Context, name string) error {
	if _, err := r.store.ReadRef(ctx, name); err != nil {
		return err
	}
	err := r.store.DeleteRef(ctx, name)
	r.caches.InvalidateRefs()
	return err
}

// DeleteRefIf removes ref name only if it still holds prev, the value a
// rename copied to its new name (layout.Store.DeleteRefIf):
// layout.ErrRefChanged otherwise, when the rename is made again from the
// bucket's state.
func (r *Records) DeleteRefIf(ctx context.Context, name string, prev layout.Ref) error {
	err := r.store.DeleteRefIf(ctx, name, prev)
	if errors.Is(err, layout.ErrWeakCAS) {
		r.log.Warn("ref removed without compare-and-delete: the backend has no conditional delete", "ref", name)
		err = nil
	}
	r.caches.InvalidateRefs()
	return err
}

// CreateSession makes an empty root session with ID id (mkdir in
// sessions/); it is idempotent (§5.1).
func (r *Records) CreateSession(ctx context.Context, id layout.SessionID) error {
	if _, _, err := r.store.CreateSession(ctx, &layout.Manifest{Session: id, FirstSequenceNumber: 1}); err != nil {
		return err
	}
	r.caches.SessionCreated(id)
	r.caches.InvalidateSession(id)
	return nil
}
