package layout

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"gocloud.dev/blob"
)

// NewTransactionID returns a non-zero transaction ID from crypto/rand
// (§13.2).
func NewTransactionID() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("layout: crypto/rand failed: " + err.Error())
		}
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// Position is a point in a session's log: a version and the sequence
// number of the last descriptor at or below it.
type Position struct {
	Version uint32
	LastSeq int64
}

// CommitRequest is one snapshot to append.
type CommitRequest struct {
	Type        SnapshotType
	Descriptors []Descriptor
	// Base is the position the writer's view was built on. A checkpoint
	// conflicts with any foreign checkpoint above Base (decisions.md
	// §13.3). Nil means "the latest, discovered now": there is no view to
	// protect, so such a commit never conflicts and lands at the next free
	// version, also when the listing was stale (§14.3).
	Base *Position
	// TransactionID, if non-zero, is used instead of a fresh one; a
	// retry of a commit whose outcome is unknown passes the same ID
	// (§13.2) and the Base of its first attempt: it inspects every
	// version above Base for its own snapshot. Without a Base it is
	// ErrInvalid: no version tells where the search may stop (the newest
	// checkpoint did not: another writer's checkpoint may land above the
	// lost attempt, which was then committed again; review 4).
	// ResolveCommit settles an OutcomeUnknownError without committing.
	TransactionID uint64
	// Exact lands the snapshot at Base.Version+1 or not at all: a
	// snapshot found above Base is ErrLateInput instead of being merged
	// under this one (§13.3 lets a checkpoint subsume them; a writer
	// that must have seen every input before it is subsumed asks for
	// this and runs again), unless it is no input (NotInput: fork
	// records only, not a checkpoint), which the snapshot lands above.
	// Needs a Base.
	Exact bool
	// Unchanged guards against lost updates: name -> the file the
	// writer's new content of it was built on (an append, an edit in
	// place). Every snapshot the commit lands above, other than Base's,
	// is read, and one above that file's version that gives the name
	// other bytes refuses the commit with a *StaleError
	// (ErrChangedUnder); a removal does not (the file is written again,
	// as after a remove on another mount). The caller checks the
	// versions up to Base itself. Needs a Base.
	Unchanged map[string]FileBase
	// Paths refuses a descriptor whose name clashes as a path with a
	// name that a snapshot the commit lands above, other than Base's,
	// makes live: a file where that snapshot has a directory (x where it
	// has x/y), or a name under one of its files (x/y where it has x).
	// The tree shows a name that is both as the file (decisions.md,
	// "Names as paths"), so the commit would hide the other writer's
	// files, or its own, on every mount. It is a *StaleError
	// (ErrChangedUnder) with the names in Clashes. The caller checks the
	// versions up to Base itself. Needs a Base.
	Paths bool
	// Inherited keeps other writers' metadata changes under a file's new
	// content: name -> the metadata the descriptor took from the file as
	// its writer read it, and the version that held it. A live
	// descriptor of the name in a snapshot the commit lands above,
	// other than Base's and above that version, gives the metadata the
	// writer did not change itself (MergeMetadata): a rewrite (>) from a
	// mount whose view was older than another mount's chmod or setfattr
	// put the old mode and attributes back (audit 28). The caller merges
	// the versions up to Base itself.
	Inherited map[string]MetaBase
}

// MetaBase is the metadata a writer read a file with and the version
// whose snapshot held it (0 for a file inherited from an ancestor,
// §11.3: any descriptor of the name in the session came after it).
type MetaBase struct {
	Version  uint32
	Metadata map[string]string
}

// FileBase is the file a writer read and built its new content on: the
// digest of its bytes and the version whose snapshot holds it.
type FileBase struct {
	Digest  Digest
	Version uint32
	// AnyChange makes any later descriptor of the name a change: a
	// removal, or a new descriptor of the same bytes (another writer's
	// chmod, utimes or setfattr), not only new bytes. For a descriptor
	// made from the file itself (a chmod's copy of it, a rename's
	// removal of the old name), which carries the file's metadata as it
	// was read: it would undo the other writer's change, or bring back
	// the file it removed. New content written over a file is its own;
	// a removal or a metadata change under it does not count.
	AnyChange bool
}

// ChangedSince reports whether d, at version v, gives the file b is the
// base of other bytes than b's (a later write of the name), or with
// AnyChange any later descriptor of it.
func (b FileBase) ChangedSince(d *Descriptor, v uint32) bool {
	if v <= b.Version || !d.IsSlot() {
		return false
	}
	return b.AnyChange || !d.Deleted && d.Digest != b.Digest
}

// CommitResult describes a landed snapshot.
type CommitResult struct {
	Version       uint32
	TransactionID uint64
	// Descriptors as committed: renumbered and normalised.
	Descriptors []Descriptor
	// Attempts is the number of versions tried (1 when nothing raced).
	Attempts int
	// prevSeq is the last sequence number below the snapshot, so that an
	// empty commit still knows where the log stands.
	prevSeq int64
}

// LastSeq returns the sequence number of the last descriptor at or below
// the committed version (the one before it for an empty snapshot).
func (r CommitResult) LastSeq() int64 {
	if len(r.Descriptors) == 0 {
		return r.prevSeq
	}
	return r.Descriptors[len(r.Descriptors)-1].SequenceNumber
}

// Position returns where the log stands after the commit.
func (r CommitResult) Position() Position {
	return Position{Version: r.Version, LastSeq: r.LastSeq()}
}

// Commit appends a snapshot to session id (§13). Sequence numbers are
// assigned here, and re-derived on every retry so that §7.3 holds for
// whoever wins. Conflicts follow decisions.md §13.3: our own transaction at
// the next version is success; a checkpoint losing to a foreign checkpoint
// is ErrConflict; everything else moves to the next free version, at most
// CommitRetries times (then ErrRetriesExhausted).
func (s *Store) Commit(ctx context.Context, id SessionID, req CommitRequest) (CommitResult, error) {
	if req.Type == "" {
		req.Type = Checkpoint
	}
	if _, err := ParseSnapshotType(string(req.Type)); err != nil {
		return CommitResult{}, err
	}
	if (req.Exact || len(req.Unchanged) > 0 || req.Paths) && req.Base == nil {
		return CommitResult{}, fmt.Errorf("commit to %s: %w: an exact or guarded commit needs a base", id, ErrInvalid)
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if d.Data != nil && (len(d.Data) > InlineLimit || DigestOf(d.Data) != d.Digest) {
			return CommitResult{}, fmt.Errorf("commit to %s: %w: descriptor %q: inline data does not match its digest or exceeds %d bytes", id, ErrInvalid, d.Name, InlineLimit)
		}
		if d.Fork && d.TargetSession == id {
			return CommitResult{}, fmt.Errorf("commit to %s: %w: descriptor %q: a session cannot fork into itself", id, ErrInvalid, d.Name)
		}
		if err := CheckUTF8(d.Name); err != nil {
			// JSON would carry it as U+FFFD: two names would become one.
			return CommitResult{}, fmt.Errorf("commit to %s: descriptor: %w", id, err)
		}
	}
	if len(req.Inherited) > 0 {
		// Merged into as the commit goes (mergeInherited): the
		// caller's request stays as it was.
		req.Inherited = maps.Clone(req.Inherited)
		req.Descriptors = slices.Clone(req.Descriptors)
	}
	txn := req.TransactionID
	// A caller-supplied ID may already have landed (§13.2): every version
	// above the base must then be inspected, never skipped.
	retry := txn != 0
	if !retry {
		txn = NewTransactionID()
	}
	var pos Position
	if req.Base != nil {
		pos = *req.Base
	} else {
		if retry {
			return CommitResult{}, fmt.Errorf("commit to %s: %w: a retry with a transaction ID needs the base of its first attempt", id, ErrInvalid)
		}
		v, err := s.LatestVersion(ctx, id)
		if err != nil {
			return CommitResult{}, fmt.Errorf("commit to %s: %w", id, err)
		}
		if pos, err = s.positionAt(ctx, id, v); err != nil {
			return CommitResult{}, fmt.Errorf("commit to %s: %w", id, err)
		}
	}
	// awaits counts awaitTaken's waits, at most maxAwaits a commit: one
	// at each of a hundred attempts was minutes (review 17), one a
	// version gave up on a version refused again while still in flight
	// (review 18).
	awaits := 0
	for attempt := 1; attempt <= s.opts.CommitRetries; attempt++ {
		if pos.Version == ^uint32(0) {
			return CommitResult{}, fmt.Errorf("commit to %s: %w: version space exhausted", id, ErrInvalid)
		}
		v := pos.Version + 1
		if err := seqRoom(id, pos.LastSeq, len(req.Descriptors)); err != nil {
			return CommitResult{}, fmt.Errorf("commit to %s: %w", id, err)
		}
		ds := renumber(id, req.Descriptors, pos.LastSeq+1)
		landed, err := s.commitAt(ctx, id, v, req.Type, txn, ds)
		if err != nil {
			return CommitResult{}, fmt.Errorf("commit version %d of %s: %w", v, id, err)
		}
		if landed {
			return CommitResult{Version: v, TransactionID: txn, Descriptors: ds, Attempts: attempt, prevSeq: pos.LastSeq}, nil
		}
		// Version v exists and is not ours.
		if !req.Exact && !retry && !(req.Type == Checkpoint && req.Base != nil) {
			// Provisional and queueing commits (and checkpoints without
			// a base) only need the newest position, and the snapshots
			// above v for their guards.
			next, own, err := s.stepOver(ctx, id, v, txn, &req, &awaits)
			switch {
			case own:
				return s.ownCommitAt(ctx, id, v, txn, attempt)
			case errors.Is(err, errNotTaken):
				continue // the other write of v failed: v is free
			case err != nil:
				return CommitResult{}, err
			}
			pos = next
			continue
		}
		meta, err := s.ReadSnapshotMeta(ctx, id, v)
		if errors.Is(err, ErrNotFound) && awaits < maxAwaits {
			awaits++
			if meta, err = s.awaitTaken(ctx, id, v); errors.Is(err, errNotTaken) {
				continue // the other write of v failed: v is free
			}
		}
		if err != nil {
			return CommitResult{}, takenUnread(id, v, txn, err)
		}
		if meta.TransactionID == txn {
			return s.ownCommitAt(ctx, id, v, txn, attempt)
		}
		if req.Exact {
			// Every version from Base.Version+1 to v was tried in
			// turn and checked for our transaction: no earlier
			// attempt of ours can be above v. What holds v is input,
			// unless it holds fork records only (§11.2 step 4: they
			// are not input; a handler that forks its own session
			// makes one), which the snapshot goes above; a
			// foreign checkpoint never is.
			if meta.Type == Checkpoint {
				return CommitResult{}, fmt.Errorf("commit to %s at version %d: %w", id, v, ErrLateInput)
			}
			ds, err := s.ReadSnapshot(ctx, id, v)
			if err != nil {
				return CommitResult{}, fmt.Errorf("commit to %s: inspect version %d: %w", id, v, err)
			}
			if !NotInput(ds) {
				return CommitResult{}, fmt.Errorf("commit to %s at version %d: %w", id, v, ErrLateInput)
			}
			if n := len(ds); n > 0 {
				pos = Position{Version: v, LastSeq: ds[n-1].SequenceNumber}
			} else {
				pos.Version = v
			}
			continue
		}
		guarded := req.Type == Checkpoint && req.Base != nil
		if guarded && meta.Type == Checkpoint {
			return CommitResult{}, fmt.Errorf("commit checkpoint to %s at version %d: %w", id, v, ErrConflict)
		}
		// Guarded checkpoints and retries of a caller's transaction.
		// Every version above our base must be inspected for a
		// foreign checkpoint (or our own earlier attempt): those
		// up to the latest are, by their metadata, and the next try
		// goes above them. Stepping one version a try counted each
		// as an attempt, and a handler that 150 inputs arrived for
		// while it ran exhausted the retries with nobody contending.
		latest, err := s.LatestVersion(ctx, id)
		if err != nil {
			return CommitResult{}, fmt.Errorf("commit to %s: %w", id, err)
		}
		if _, err := s.checkAbove(ctx, id, v, max(latest, v), &req); err != nil {
			return CommitResult{}, err
		}
		for w := v + 1; w <= latest; w++ {
			meta, err := s.ReadSnapshotMeta(ctx, id, w)
			if err != nil {
				return CommitResult{}, fmt.Errorf("commit to %s: inspect version %d: %w", id, w, err)
			}
			if meta.TransactionID == txn {
				return s.ownCommitAt(ctx, id, w, txn, attempt)
			}
			if guarded && meta.Type == Checkpoint {
				return CommitResult{}, fmt.Errorf("commit checkpoint to %s at version %d: %w", id, w, ErrConflict)
			}
		}
		if pos, err = s.positionAt(ctx, id, max(latest, v)); err != nil {
			return CommitResult{}, fmt.Errorf("commit to %s: %w", id, err)
		}
	}
	return CommitResult{}, fmt.Errorf("commit to %s: %w after %d attempts", id, ErrRetriesExhausted, s.opts.CommitRetries)
}

// takenUnread is the error of a commit whose read of the metadata of
// version v, which it found taken, failed with err.
func takenUnread(id SessionID, v uint32, txn uint64, err error) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
		return fmt.Errorf("commit to %s: inspect version %d: %w", id, v, err)
	}
	// The bucket did not answer, and one of our PUTs of v may be what the
	// retry found there (its reply lost): only the transaction ID tells.
	return fmt.Errorf("commit to %s: inspect version %d: %w", id, v, &OutcomeUnknownError{id, v, txn, err})
}

// awaitTaken reads the metadata of version v, which a commit's create
// was refused as taken, until it is there: a backend may refuse a
// conditional create while another one of the key is in flight
// (versitygw does, with 412) and serve the key only once that one
// completes. Read once, the missing version failed the commit
// ("inspect version: not found"): 1-7% of two mounts' commits to one
// session at once, their bytes sent to failed/ (audit 18). After
// inFlightFor without it, the other write failed and v is free:
// errNotTaken, and the commit tries v again.
func (s *Store) awaitTaken(ctx context.Context, id SessionID, v uint32) (SnapshotMeta, error) {
	deadline := time.Now().Add(inFlightFor)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		select {
		case <-ctx.Done():
			return SnapshotMeta{}, ctx.Err()
		case <-time.After(delay):
		}
		meta, err := s.ReadSnapshotMeta(ctx, id, v)
		if !errors.Is(err, ErrNotFound) {
			return meta, err
		}
		if time.Now().After(deadline) {
			return SnapshotMeta{}, errNotTaken
		}
	}
}

// inFlightFor bounds awaitTaken's wait for another writer's create of a
// version in flight. A var for tests.
var inFlightFor = 2 * time.Second

// maxAwaits bounds the awaitTaken waits of one commit or delivery.
const maxAwaits = 3

// errNotTaken is awaitTaken's word that the version refused as taken
// never appeared.
var errNotTaken = errors.New("refused as taken, and not there")

// stepReads is how many versions from the one a commit found taken
// stepOver reads at once.
const stepReads = 8

// stepOver returns the position that a commit which found version v
// taken goes above next, for a commit that needs the newest position
// only (and the snapshots above v for its guards, req.Unchanged and
// req.Paths, which it checks as checkAbove does). It takes one round
// trip where it can: v's metadata, read for its transaction ID (own
// reports v as the commit's own snapshot, which a PUT retried after a
// lost reply finds there), at once with the snapshots v to
// v+stepReads-1, the first missing one ending the log. Versions are
// dense (a snapshot is created only above one that exists) and a GET
// after a create sees it (§2.5), which a LIST need not (§14.3).
// Only when all of them exist does it list for the newest.
//
// Reading the metadata, then listing, then reading the snapshots was
// three round trips after each refused PUT: against another mount
// committing back to back (a chmod loop, about one commit each 25 ms on
// a bucket 20 ms away) the commit never caught up, and failed with
// ErrRetriesExhausted after 9 s (audit 5). From what it reads to the
// PUT at the next version is one round trip now, as the other mount's.
//
// A version refused as taken and not there yet is waited for
// (awaitTaken) while *awaits is below maxAwaits, which it counts.
func (s *Store) stepOver(ctx context.Context, id SessionID, v uint32, txn uint64, req *CommitRequest, awaits *int) (pos Position, own bool, err error) {
	n := min(stepReads, uint64(^uint32(0))-uint64(v)+1)
	var meta SnapshotMeta
	var merr error
	snaps := make([][]Descriptor, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { meta, merr = s.ReadSnapshotMeta(ctx, id, v) })
	for i := range n {
		wg.Go(func() { snaps[i], errs[i] = s.ReadSnapshot(ctx, id, v+uint32(i)) })
	}
	wg.Wait()
	if errors.Is(merr, ErrNotFound) && *awaits < maxAwaits {
		*awaits++
		if _, merr = s.awaitTaken(ctx, id, v); merr == nil {
			return s.stepOver(ctx, id, v, txn, req, awaits) // there now: read it all again
		}
		if errors.Is(merr, errNotTaken) {
			return Position{}, false, merr
		}
	}
	if merr != nil {
		return Position{}, false, takenUnread(id, v, txn, merr)
	}
	if meta.TransactionID == txn {
		return Position{}, true, nil
	}
	latest := v + uint32(n) - 1
	unread := false // a version there that could not be read
	for i, err := range errs {
		if err == nil {
			continue
		}
		if i > 0 && errors.Is(err, ErrNotFound) {
			latest, snaps = v+uint32(i)-1, snaps[:i]
			break
		}
		if req.guarded() {
			return Position{}, false, fmt.Errorf("commit to %s: inspect version %d: %w", id, v+uint32(i), err)
		}
		// Unguarded, a commit needs the newest snapshot only (as it
		// did before it read these): a bad one below it is not its
		// business.
		unread = true
	}
	if unread || uint64(latest-v)+1 == n {
		// All there (more may have landed than one round reads), or
		// one could not be read: list.
		newest, err := s.LatestVersion(ctx, id)
		if err != nil {
			return Position{}, false, fmt.Errorf("commit to %s: %w", id, err)
		}
		if unread || newest > latest && (!req.reads() || !req.guarded() && newest-latest > mergeReads) {
			// The newest alone gives the position (a metadata merge
			// is best effort: an unreadable snapshot does not fail
			// the commit, as it fails a guard).
			newest = max(newest, latest)
			if pos, err = s.positionAt(ctx, id, newest); err != nil {
				return Position{}, false, fmt.Errorf("commit to %s: %w", id, err)
			}
			return pos, false, nil
		}
		if newest > latest {
			more, err := s.ReadSnapshotRange(ctx, id, latest+1, newest, checkAboveReads)
			if err != nil && !req.guarded() {
				// A metadata merge alone is best effort.
				if pos, err = s.positionAt(ctx, id, newest); err != nil {
					return Position{}, false, fmt.Errorf("commit to %s: %w", id, err)
				}
				return pos, false, nil
			}
			if err != nil {
				return Position{}, false, fmt.Errorf("commit to %s: inspect versions %d-%d: %w", id, latest+1, newest, err)
			}
			snaps, latest = append(snaps, more...), newest
		}
	}
	if err := checkRead(id, v, snaps, req); err != nil {
		return Position{}, false, err
	}
	if pos, err = s.positionAbove(ctx, id, v, latest, snaps); err != nil {
		return Position{}, false, fmt.Errorf("commit to %s: %w", id, err)
	}
	return pos, false, nil
}

// ownCommitAt is the result of a commit found landed at version v (its
// own earlier attempt, §13.2), after attempt tries.
func (s *Store) ownCommitAt(ctx context.Context, id SessionID, v uint32, txn uint64, attempt int) (CommitResult, error) {
	r, err := s.ownCommit(ctx, id, v, txn)
	if err != nil {
		return CommitResult{}, fmt.Errorf("commit to %s: %w", id, err)
	}
	r.Attempts = attempt
	return r, nil
}

// ownCommit describes our own snapshot found at version v, as stored.
func (s *Store) ownCommit(ctx context.Context, id SessionID, v uint32, txn uint64) (CommitResult, error) {
	ds, err := s.ReadSnapshot(ctx, id, v)
	if err != nil {
		return CommitResult{}, err
	}
	pos, err := s.positionAt(ctx, id, v)
	if err != nil {
		return CommitResult{}, err
	}
	return CommitResult{Version: v, TransactionID: txn, Descriptors: ds, Attempts: 1, prevSeq: pos.LastSeq - int64(len(ds))}, nil
}

// renumber copies ds with sequence numbers from first on and the
// self-targeted cross-session field dropped (§12.3).
// seqRoom reports whether n more descriptors can follow last in session
// id's log: sequence numbers are int64s, and one past the largest wraps
// to the most negative, a log §7.3 forbids (another writer's snapshot can
// end anywhere; review 4).
func seqRoom(id SessionID, last int64, n int) error {
	if last > math.MaxInt64-int64(n) {
		return fmt.Errorf("%w: sequence numbers of %s exhausted (the last is %d)", ErrInvalid, id, last)
	}
	return nil
}

func renumber(id SessionID, ds []Descriptor, first int64) []Descriptor {
	out := make([]Descriptor, len(ds))
	for i, d := range ds {
		d = d.Clone()
		d.SequenceNumber = first + int64(i)
		if !d.Fork && d.TargetSession == id {
			d.TargetSession = SessionID{}
		}
		out[i] = d
	}
	return out
}

// commitAt tries to create snapshot v. It returns landed=false (and no
// error) when the key already exists; the caller then inspects it. When a
// write's outcome is unknown (an error after the request may have reached
// the backend, §13.2), the key is read back: our transaction ID there
// means it landed.
func (s *Store) commitAt(ctx context.Context, id SessionID, v uint32, t SnapshotType, txn uint64, ds []Descriptor) (landed bool, err error) {
	key, err := SnapshotKey(id, v)
	if err != nil {
		return false, err
	}
	body, err := EncodeDescriptors(ds)
	if err != nil {
		return false, err
	}
	err = s.put(ctx, key, body, &blob.WriterOptions{
		IfNotExist:      true,
		ContentType:     typeJSON,
		ContentEncoding: EncodingZstd,
		CacheControl:    CacheImmutable,
		Metadata: map[string]string{
			MetaSnapshotSession: id.String(),
			MetaSnapshotVersion: strconv.FormatUint(uint64(v), 10),
			MetaTransactionID:   strconv.FormatUint(txn, 10),
			MetaSnapshotType:    string(t),
		},
	})
	if err == nil {
		return true, nil
	}
	if isPrecondition(err) {
		return false, nil
	}
	// Unknown outcome: read back.
	meta, herr := s.ReadSnapshotMeta(ctx, id, v)
	if herr == nil && meta.TransactionID == txn {
		return true, nil
	}
	if herr == nil {
		return false, nil // someone else's snapshot: the caller inspects it
	}
	if errors.Is(herr, ErrNotFound) && refused(err) {
		return false, err // the backend said no: nothing landed
	}
	// Not there yet is no answer after a PUT that may be under way still
	// (a deadline cut it, the connection broke): a server can complete
	// it after this read, and "nothing landed" sent pugfs exec's
	// supervisor to run the handler again, its outputs landing twice.
	return false, &OutcomeUnknownError{id, v, txn, fmt.Errorf("%w (and reading it back: %v)", err, herr)}
}

// OutcomeUnknownError is ErrOutcomeUnknown with what ResolveCommit needs
// to find out later: transaction TransactionID's snapshot was sent for
// Version of Session, and Err is why nobody knows whether it landed.
type OutcomeUnknownError struct {
	Session       SessionID
	Version       uint32
	TransactionID uint64
	Err           error
}

// Error says that the outcome is unknown, and why.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("%v: %v", ErrOutcomeUnknown, e.Err)
}

// Unwrap makes e match ErrOutcomeUnknown and whatever Err matches.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// ResolveCommit asks the bucket again what became of the commit e left
// unknown: landed reports whether its snapshot is there (r describes it,
// as Commit would have); an error means the bucket still did not say.
func (s *Store) ResolveCommit(ctx context.Context, e *OutcomeUnknownError) (r CommitResult, landed bool, err error) {
	meta, err := s.ReadSnapshotMeta(ctx, e.Session, e.Version)
	switch {
	case errors.Is(err, ErrNotFound):
		return CommitResult{}, false, nil
	case err != nil:
		return CommitResult{}, false, err
	case meta.TransactionID != e.TransactionID:
		return CommitResult{}, false, nil // another writer's
	}
	r, err = s.ownCommit(ctx, e.Session, e.Version, e.TransactionID)
	return r, err == nil, err
}

// positionAt returns the last sequence number at or below version v,
// walking back over empty snapshots to the manifest's first sequence
// number.
func (s *Store) positionAt(ctx context.Context, id SessionID, v uint32) (Position, error) {
	for w := v; w > 0; w-- {
		ds, err := s.ReadSnapshot(ctx, id, w)
		if err != nil {
			return Position{}, err
		}
		if len(ds) > 0 {
			return Position{Version: v, LastSeq: ds[len(ds)-1].SequenceNumber}, nil
		}
	}
	m, err := s.LoadManifest(ctx, id)
	if err != nil {
		return Position{}, err
	}
	return Position{Version: v, LastSeq: m.FirstSequenceNumber - 1}, nil
}

// positionAbove is positionAt(to) for a commit that read snapshots
// from..to (checkAbove; nil when it read none): the newest of them with
// a descriptor gives the position without reading it again.
func (s *Store) positionAbove(ctx context.Context, id SessionID, from, to uint32, snaps [][]Descriptor) (Position, error) {
	if len(snaps) == 0 {
		return s.positionAt(ctx, id, to)
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if ds := snaps[i]; len(ds) > 0 {
			return Position{Version: to, LastSeq: ds[len(ds)-1].SequenceNumber}, nil
		}
	}
	pos, err := s.positionAt(ctx, id, from-1)
	pos.Version = to
	return pos, err
}

// mergeReads bounds the snapshots more than one round of stepOver's a
// commit reads for its metadata merge alone (CommitRequest.Inherited,
// best effort): a rewrite stepping over a long run of other commits did
// one LIST and read one snapshot before the merge, and would read them
// all (review 33).
const mergeReads = 64

// checkAboveReads bounds the snapshots checkAbove reads at once.
const checkAboveReads = 16

// checkAbove reads versions from..to, which a commit is about to land
// above, for a new digest of a name in req.Unchanged and, with
// req.Paths, for a live name that clashes as a path with one of req's.
// It returns the snapshots it read (nil when it needed none), at once:
// read one after another, a commit that another mount's stream of
// commits kept stepping over took a round trip per version it stepped
// over, fell further behind at every try, and failed after 100 tries
// and a minute where it could have landed (audit 5).
func (s *Store) checkAbove(ctx context.Context, id SessionID, from, to uint32, req *CommitRequest) ([][]Descriptor, error) {
	if !req.reads() {
		return nil, nil
	}
	snaps, err := s.ReadSnapshotRange(ctx, id, from, to, checkAboveReads)
	if err != nil && !req.guarded() {
		return nil, nil // a metadata merge alone is best effort
	}
	if err != nil {
		return nil, fmt.Errorf("commit to %s: inspect versions %d-%d: %w", id, from, to, err)
	}
	if err := checkRead(id, from, snaps, req); err != nil {
		return nil, err
	}
	return snaps, nil
}

// guarded reports whether r must not land over some change: a guard of
// r.Unchanged, or with r.Paths a name that clashes as a path with r's.
func (r *CommitRequest) guarded() bool {
	return len(r.Unchanged) > 0 || r.Paths && NewPathClash(r.Descriptors) != nil
}

// reads reports whether r needs the snapshots it lands above: it is
// guarded, or merges metadata (Inherited).
func (r *CommitRequest) reads() bool {
	return r.guarded() || len(r.Inherited) > 0
}

// checkRead is checkAbove on snapshots read: snaps[i] is version from+i.
// A *StaleError names what req must not land over; else the descriptors
// of req.Inherited take the metadata changes those snapshots made.
func checkRead(id SessionID, from uint32, snaps [][]Descriptor, req *CommitRequest) error {
	var clash *PathClash
	if req.Paths {
		clash = NewPathClash(req.Descriptors)
	}
	stale := &StaleError{Session: id}
	add := func(name string, v uint32) bool {
		if slices.Contains(stale.Names, name) {
			return false
		}
		stale.Names = append(stale.Names, name)
		stale.Versions = append(stale.Versions, v)
		return true
	}
	for i, ds := range snaps {
		v := from + uint32(i)
		for _, d := range ds {
			if b, ok := req.Unchanged[d.Name]; ok && b.ChangedSince(&d, v) {
				add(d.Name, v)
			}
			for _, n := range clash.With(&d) {
				if add(n, v) {
					stale.Clashes = append(stale.Clashes, n)
				}
			}
		}
	}
	if len(stale.Names) > 0 {
		return stale
	}
	mergeInherited(from, snaps, req)
	return nil
}

// mergeInherited gives each descriptor of req.Inherited the metadata
// changes of the name's newest descriptor in snaps (version from+i)
// above its base, and moves the base there: the next snapshots read are
// merged onto that one. A removal ends the merge, also when the name was
// made again after it (another file, whose mode and attributes are not
// the writer's file's: review 33): the file is written again with the
// writer's metadata, as after an rm on another mount.
func mergeInherited(from uint32, snaps [][]Descriptor, req *CommitRequest) {
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		b, ok := req.Inherited[d.Name]
		if !ok || !d.IsSlot() || d.Deleted {
			continue
		}
		theirs, at, removed := newestOf(d.Name, from, snaps, b.Version)
		switch {
		case removed:
			delete(req.Inherited, d.Name)
		case theirs != nil:
			d.Metadata = MergeMetadata(b.Metadata, d.Metadata, theirs.Metadata)
			req.Inherited[d.Name] = MetaBase{Version: at, Metadata: theirs.Metadata}
		}
	}
}

// newestOf returns the last descriptor of name in snaps (version from+i)
// above version after, and its version; removed reports a removal of
// the name among them.
func newestOf(name string, from uint32, snaps [][]Descriptor, after uint32) (newest *Descriptor, at uint32, removed bool) {
	for i, ds := range snaps {
		v := from + uint32(i)
		if v <= after {
			continue
		}
		for j := range ds {
			if ds[j].Name == name && ds[j].IsSlot() {
				newest, at = &ds[j], v
				removed = removed || ds[j].Deleted
			}
		}
	}
	return newest, at, removed
}

// PathClash finds the names of a commit that clash as paths with a live
// name: a file where the other is a directory, or the other way round.
type PathClash struct {
	files map[string]bool     // the commit's live names
	dirs  map[string][]string // each directory of those -> the names under it
}

// NewPathClash returns the clash finder of the live names of ds, or nil
// when they have none.
func NewPathClash(ds []Descriptor) *PathClash {
	p := &PathClash{files: map[string]bool{}, dirs: map[string][]string{}}
	for i := range ds {
		d := &ds[i]
		if !d.IsSlot() || d.Deleted {
			continue
		}
		p.files[d.Name] = true
		for j := len(d.Name) - 1; j > 0; j-- {
			if d.Name[j] == '/' {
				p.dirs[d.Name[:j]] = append(p.dirs[d.Name[:j]], d.Name)
			}
		}
	}
	if len(p.files) == 0 {
		return nil
	}
	return p
}

// With returns the names the live name of d clashes with: those under d
// (d is a file where they make a directory), or the one that d is under
// (they make a file where d is in a directory).
func (p *PathClash) With(d *Descriptor) []string {
	if p == nil || !d.IsSlot() || d.Deleted {
		return nil
	}
	out := slices.Clone(p.dirs[d.Name])
	for j := len(d.Name) - 1; j > 0; j-- {
		if d.Name[j] == '/' && p.files[d.Name[:j]] {
			out = append(out, d.Name[:j])
		}
	}
	return out
}

// NotInput reports whether a snapshot's descriptors are nothing a handler
// takes as input: fork records only (§11.2 step 4 filters them out of the
// parent's input stream), or none.
func NotInput(ds []Descriptor) bool {
	for _, d := range ds {
		if !d.Fork {
			return false
		}
	}
	return true
}

// PositionAt is positionAt for callers without a cache.
func (s *Store) PositionAt(ctx context.Context, id SessionID, v uint32) (Position, error) {
	return s.positionAt(ctx, id, v)
}
