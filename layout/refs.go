package layout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gocloud.dev/blob"
)

// maxRef bounds a ref body: one line.
const maxRef = 64 << 10

// Ref is a ref's target and the version token a compare-and-swap needs.
type Ref struct {
	Name   string
	Target string
	// ETag is the token RenameRef's If-Match compares: the object's ETag,
	// or what the driver conditions writes on instead (a GCS generation,
	// as decimal), see TokenHook.
	ETag string
	// ModTime is when the ref was last written: its object's
	// last-modified time (zero when the backend gave none).
	ModTime time.Time
}

// ReadRef returns ref name's target (§9): the body's single line, with a
// trailing newline tolerated.
func (s *Store) ReadRef(ctx context.Context, name string) (Ref, error) {
	key, err := RefKey(name)
	if err != nil {
		return Ref{}, err
	}
	a, err := s.head(ctx, key)
	if err != nil {
		return Ref{}, fmt.Errorf("read ref %s: %w", name, err)
	}
	body, err := s.getAll(ctx, key, maxRef)
	if err != nil {
		return Ref{}, fmt.Errorf("read ref %s: %w", name, err)
	}
	// §15: readers decode per Content-Encoding (a writer may compress even
	// a one-line body); an undeclared gzip or zstd body is sniffed, as for
	// manifests, since no line of text starts with either's magic.
	if body, err = DecodeBody(body, a.ContentEncoding, maxRef); err != nil {
		return Ref{}, fmt.Errorf("read ref %s: %w", key, err)
	}
	t := strings.TrimRight(string(body), "\r\n")
	if strings.ContainsAny(t, "\r\n") {
		return Ref{}, fmt.Errorf("read ref %s: %w: body is more than one line", key, ErrCorrupt)
	}
	return Ref{Name: name, Target: t, ETag: casToken(a), ModTime: a.ModTime}, nil
}

func refOptions() blob.WriterOptions {
	return blob.WriterOptions{ContentType: typeRef, CacheControl: CacheNoCache}
}

// ValidateRefTarget reports whether t can be a ref's target (§9): one
// line, not empty, no NUL.
func ValidateRefTarget(t string) error {
	if t == "" || strings.ContainsAny(t, "\r\n\x00") {
		return fmt.Errorf("%w: ref target %q: want one non-empty line", ErrInvalid, truncate(t))
	}
	return nil
}

// Link points ref name at target with an unconditional PUT (§9).
func (s *Store) Link(ctx context.Context, name, target string) error {
	key, err := RefKey(name)
	if err != nil {
		return err
	}
	if err := ValidateRefTarget(target); err != nil {
		return err
	}
	wo := refOptions()
	if err := s.put(ctx, key, []byte(target), &wo); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return nil
}

// linkIfAbsent creates ref name only if it does not exist. lost reports
// that the ref existed before this call wrote anything (its first PUT was
// refused): it is another writer's for certain, whatever a re-read says.
// A refusal after a retry may meet this call's own earlier PUT.
func (s *Store) linkIfAbsent(ctx context.Context, name, target string) (won, lost bool, err error) {
	key, err := RefKey(name)
	if err != nil {
		return false, false, err
	}
	wo := refOptions()
	wo.IfNotExist = true
	attempts, err := s.putCounted(ctx, key, []byte(target), &wo)
	if isPrecondition(err) {
		return false, attempts == 1, nil
	}
	return err == nil, false, err
}

// ErrWeakCAS reports that a rename went through on a backend without
// If-Match: the new value was written and read back, but a concurrent
// writer could have been overwritten in between (decisions.md §2.1).
var ErrWeakCAS = errors.New("backend has no If-Match: ref replaced by PUT and re-read")

// RenameRef sets ref name to target only if it still has the value read
// as prev (§9 Rename: If-Match on the prior version). On backends without
// If-Match it falls back to re-read + PUT + re-read and returns ErrWeakCAS
// with the write done, so callers can report the weaker guarantee. A
// mismatch is ErrRefChanged (an ErrConflict), unless the ref already holds target: that is
// how a retry meets its own earlier attempt whose response was lost.
//
// A write whose PUT may have landed (cut by its deadline, its reply
// lost) is settled by reading the ref back: holding target, it is done.
// When that read gets no answer, or shows the ref still as the PUT found
// it (the PUT may be under way still, and a server can complete it after
// the read), the outcome is unknown: a *RefOutcomeUnknownError, which
// ResolveRef settles once the bucket answers.
func (s *Store) RenameRef(ctx context.Context, name string, prev Ref, target string) error {
	key, err := RefKey(name)
	if err != nil {
		return err
	}
	if err := ValidateRefTarget(target); err != nil {
		return err
	}
	if prev.ETag == "" && prev.Target == "" {
		// Absent when its writer looked: create it only if it still is
		// (§9's compare-and-swap against "absent"). A plain PUT let two
		// mounts creating one ref both succeed, the first's value lost.
		wo := refOptions()
		wo.IfNotExist = true
		w := s.putRef(ctx, key, target, &wo)
		if w.err == nil {
			return nil
		}
		// It can still land while the ref is absent.
		pending := func(_ Ref, rerr error) bool { return errors.Is(rerr, ErrNotFound) }
		switch err := s.settleRef(ctx, name, target, w, pending); {
		case err == nil:
			return nil // our own lost response, or the very same value
		case errors.Is(err, ErrOutcomeUnknown):
			return err
		case isPrecondition(err):
			return fmt.Errorf("set ref %s (compare-and-swap): %w: it was created meanwhile", name, ErrRefChanged)
		default:
			return fmt.Errorf("set ref %s (compare-and-swap): %w", name, err)
		}
	}
	if prev.ETag != "" {
		var ap applied
		wo := conditionalOptions(refOptions(), Conditions{IfMatch: prev.ETag, Size: int64(len(target))}, &ap)
		w := s.putRef(ctx, key, target, wo)
		if w.err == nil {
			return nil
		}
		if !errors.Is(w.err, errNoCAS) {
			// It can still land while the ref has the version it was
			// conditioned on; on any other, its If-Match fails.
			pending := func(cur Ref, rerr error) bool { return rerr == nil && cur.ETag == prev.ETag }
			switch err := s.settleRef(ctx, name, target, w, pending); {
			case err == nil:
				// The PUT failed as seen from here, yet the ref holds
				// our target: an attempt whose response was lost
				// landed, and its retry (ours, or the client
				// library's) met its own write (§13.2). Another writer
				// setting the very same target is indistinguishable,
				// and leaves the ref as this write would.
				return nil
			case errors.Is(err, ErrOutcomeUnknown):
				return err
			case isPrecondition(err):
				return fmt.Errorf("set ref %s (compare-and-swap): %w", name, ErrRefChanged)
			default:
				return fmt.Errorf("set ref %s (compare-and-swap): %w", name, err)
			}
		}
		// The weak swap below.
	}
	cur, err := s.ReadRef(ctx, name)
	if err != nil && !(errors.Is(err, ErrNotFound) && prev.Target == "") {
		return fmt.Errorf("set ref %s (compare-and-swap): %w", name, err)
	}
	if cur.Target == target && target != prev.Target {
		return ErrWeakCAS // already there: as in the If-Match case above
	}
	if cur.Target != prev.Target {
		return fmt.Errorf("set ref %s (compare-and-swap): %w", name, ErrRefChanged)
	}
	wo := refOptions()
	if w := s.putRef(ctx, key, target, &wo); w.err != nil {
		// Unconditional: it can land whatever the ref holds meanwhile.
		pending := func(Ref, error) bool { return true }
		if err := s.settleRef(ctx, name, target, w, pending); err != nil {
			if errors.Is(err, ErrOutcomeUnknown) {
				return err
			}
			return fmt.Errorf("link %s: %w", name, err)
		}
	}
	back, err := s.ReadRef(ctx, name)
	if err != nil {
		// It landed; whether another writer's replaced it at once
		// (what this read is for) the bucket did not say.
		return &RefOutcomeUnknownError{Name: name, Target: target,
			Err: fmt.Errorf("set ref %s (compare-and-swap): written, then read back: %w", name, err)}
	}
	if back.Target != target {
		return fmt.Errorf("set ref %s (compare-and-swap): %w: another writer replaced it", name, ErrRefChanged)
	}
	return ErrWeakCAS
}

// refWrite is what became of a ref's PUT (putRef).
type refWrite struct {
	// unsure: an attempt may have landed though the PUT failed: one was
	// cut by its deadline or lost its reply (mayHaveLanded), or a retry
	// was refused on its precondition, which is what a retry meeting
	// its own earlier attempt's write gets (§13.2), whatever that
	// attempt's error said.
	unsure bool
	err    error
}

// putRef PUTs target at key, a ref's.
func (s *Store) putRef(ctx context.Context, key, target string, wo *blob.WriterOptions) refWrite {
	attempts, unsure, err := s.putTracked(ctx, key, []byte(target), wo)
	return refWrite{unsure: unsure || (attempts > 1 && isPrecondition(err)), err: err}
}

// settleRef reads ref name back after its write w of target failed:
// nil when the ref holds target (the write landed, its reply lost, or an
// identical write did: a ref carries nothing that tells them apart, see
// RefOutcomeUnknownError), w's error when the write failed, and a
// *RefOutcomeUnknownError when it may have landed (w.unsure) and the
// read got no answer, or found the ref as the write still pending
// (pending) would: a PUT cut by its deadline can be completed by the
// server after the read.
func (s *Store) settleRef(ctx context.Context, name, target string, w refWrite, pending func(cur Ref, rerr error) bool) error {
	cur, rerr := s.ReadRef(ctx, name)
	switch {
	case rerr == nil && cur.Target == target:
		return nil
	case !w.unsure:
		return w.err
	case rerr != nil && !refAnswered(rerr):
		return &RefOutcomeUnknownError{Name: name, Target: target, pending: pending, Err: fmt.Errorf("%w (and reading it back: %v)", w.err, rerr)}
	case pending(cur, rerr):
		return &RefOutcomeUnknownError{Name: name, Target: target, pending: pending, Err: fmt.Errorf("%w (and the ref does not hold it yet)", w.err)}
	}
	return w.err
}

// RefOutcomeUnknownError is ErrOutcomeUnknown of a ref write (§9): the
// PUT that set ref Name to Target may have landed, and the bucket did not
// say (Err says why). ResolveRef asks again.
//
// A ref has no transaction ID (§13.2 gives snapshots theirs): its body is
// its target, and its version token is not known to a writer whose reply
// was lost (an S3 or Azure ETag is the same for the same body anyway).
// So "landed" means that the ref holds Target, which an identical write
// by another writer also makes true; either leaves the ref as this
// write would.
type RefOutcomeUnknownError struct {
	Name, Target string
	Err          error
	// pending tells, of a read of the ref (its value, or the read's
	// error), whether the write can still land: the ref is as the PUT
	// found it (absent for a create, the version an If-Match named, any
	// for an unconditional PUT). Nil when the write landed and only what
	// came after it is unknown.
	pending func(cur Ref, rerr error) bool
}

// Error says that the outcome is unknown, and why.
func (e *RefOutcomeUnknownError) Error() string {
	return fmt.Sprintf("set ref %s: outcome unknown: the bucket did not answer whether the write landed: %v", e.Name, e.Err)
}

// Unwrap makes e match ErrOutcomeUnknown and whatever Err matches.
func (e *RefOutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// ResolveRef asks the bucket again what became of the ref write e left
// unknown: landed reports whether the ref holds e.Target now (cur is the
// ref then); an error means the bucket still did not say, or the ref is
// still as the write found it, which a server completing the PUT late
// can change yet (review 43: that was taken for "did not land", and the
// check stopped).
func (s *Store) ResolveRef(ctx context.Context, e *RefOutcomeUnknownError) (cur Ref, landed bool, err error) {
	cur, err = s.ReadRef(ctx, e.Name)
	switch {
	case err == nil && cur.Target == e.Target:
		return cur, true, nil
	case err != nil && !refAnswered(err):
		return Ref{}, false, err
	case e.pending != nil && e.pending(cur, err):
		return Ref{}, false, fmt.Errorf("ref %s: %w: it is still as the write found it", e.Name, ErrOutcomeUnknown)
	case err != nil:
		return Ref{}, false, nil
	}
	return cur, false, nil
}

// refAnswered reports a failed read of a ref that still tells what the
// ref holds: nothing, or something that is no target (not this write's).
func refAnswered(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTooLarge)
}

// DeleteRefIf removes ref name only if it still has the value read as
// prev (If-Match on its version token, as RenameRef): `mv` of a ref
// copies the value to the new name, then removes the old one, and a plain
// delete removed a value another writer had put there meanwhile, which
// was then nowhere (audit 28). A mismatch is ErrRefChanged. A ref gone
// already is no error (a retry meeting its own delete, or another
// writer's rm). On backends without conditional deletes it compares a
// re-read and deletes, returning ErrWeakCAS with the delete done.
func (s *Store) DeleteRefIf(ctx context.Context, name string, prev Ref) error {
	key, err := RefKey(name)
	if err != nil {
		return err
	}
	if prev.ETag != "" {
		opts := conditionalDelete(prev.ETag)
		err := s.retry(ctx, func() error {
			s.st.deletes.Add(1)
			return s.b.DeleteWithOptions(ctx, key, opts)
		})
		switch {
		case err == nil, isNotFound(err):
			return nil
		case isPrecondition(err):
			// Azure answers 412 for a blob that is gone too (review 30).
			if _, rerr := s.ReadRef(ctx, name); errors.Is(rerr, ErrNotFound) {
				return nil
			}
			return fmt.Errorf("remove ref %s (compare-and-delete): %w", name, ErrRefChanged)
		case !errors.Is(err, errNoCAS):
			return fmt.Errorf("remove ref %s (compare-and-delete): %w", name, err)
		}
	}
	cur, err := s.ReadRef(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove ref %s (compare-and-delete): %w", name, err)
	}
	if cur.Target != prev.Target || (prev.ETag != "" && cur.ETag != prev.ETag) {
		return fmt.Errorf("remove ref %s (compare-and-delete): %w", name, ErrRefChanged)
	}
	if err := s.delete(ctx, key); err != nil {
		return err
	}
	return ErrWeakCAS
}

// DeleteRef removes a ref.
func (s *Store) DeleteRef(ctx context.Context, name string) error {
	key, err := RefKey(name)
	if err != nil {
		return err
	}
	return s.delete(ctx, key)
}

// ListRefs returns every ref name under refs/ (both plain and kind/name),
// sorted; names that break §9's shape are passed to bad.
func (s *Store) ListRefs(ctx context.Context, bad func(key string, err error)) ([]string, error) {
	var out []string
	err := s.walk(ctx, RefsPrefix, "", func(o *blob.ListObject) (bool, error) {
		name := strings.TrimPrefix(o.Key, RefsPrefix)
		if err := ValidateRefName(name); err != nil {
			if bad != nil {
				bad(o.Key, err)
			}
			return true, nil
		}
		out = append(out, name)
		return true, nil
	})
	return out, err
}

// ResolveSessionName returns the session that refs/sessions/<name> points
// at (§9.1).
func (s *Store) ResolveSessionName(ctx context.Context, name string) (SessionID, error) {
	r, err := s.ReadRef(ctx, SessionRefName(name))
	if err != nil {
		return SessionID{}, err
	}
	id, err := ParseManifestKey(r.Target)
	if err != nil {
		return SessionID{}, fmt.Errorf("session ref %s: %w: %v", name, ErrCorrupt, err)
	}
	return id, nil
}

// CheckSessionRef is the §9.1 ownership re-check: ErrRefMoved unless
// refs/sessions/<name> still points at id's manifest.
func (s *Store) CheckSessionRef(ctx context.Context, name string, id SessionID) error {
	got, err := s.ResolveSessionName(ctx, name)
	if err != nil {
		return fmt.Errorf("check session ref %s: %w", name, err)
	}
	if got != id {
		return fmt.Errorf("session ref %s: %w: %s, not %s", name, ErrRefMoved, got, id)
	}
	return nil
}

// CreateNamedSession creates a session named name, or returns the existing
// one (§9.2). The ref is claimed with If-None-Match, so two creators cannot
// both believe they won; the loser deletes its dangling manifest and loads
// the winner's. A ref that already exists wins outright. created reports
// whether this call made the session.
func (s *Store) CreateNamedSession(ctx context.Context, name string, m *Manifest) (got *Manifest, created bool, err error) {
	refName := SessionRefName(name)
	if err := ValidateRefName(refName); err != nil {
		return nil, false, err
	}
	if id, err := s.ResolveSessionName(ctx, name); err == nil {
		got, err := s.LoadManifest(ctx, id)
		return got, false, err
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	if m == nil {
		m = s.NewRootManifest()
	}
	m.Name = name
	mine, made, err := s.CreateSession(ctx, m)
	if err != nil {
		return nil, false, err
	}
	key, _ := ManifestKey(m.Session)
	won, lost, claimErr := s.linkIfAbsent(ctx, refName, key)
	// Re-read the ref as §9.2 prescribes, so that a writer using plain
	// Link (another implementation) is detected too — and so that a claim
	// whose outcome is unknown (an error after the PUT may have landed,
	// §13.2) is settled by what the ref now says.
	winner, err := s.ResolveSessionName(ctx, name)
	if err != nil {
		if lost && made {
			// Lost for certain: the manifest dangles, whatever the
			// re-read would say (§9.2 2). Left, the bucket kept two
			// sessions of the name, one without its ref (review 4).
			if derr := s.delete(ctx, key); derr != nil {
				return nil, false, fmt.Errorf("create named session %s: lost the name to another writer; re-read ref: %w; delete dangling manifest %s: %v", name, err, key, derr)
			}
			return nil, false, fmt.Errorf("create named session %s: lost the name to another writer; re-read ref: %w", name, err)
		}
		dangling := ""
		if made {
			dangling = fmt.Sprintf(" (its manifest %s is left: it dangles unless the claim landed; pugfs fsck finds it)", key)
		}
		if claimErr != nil {
			return nil, false, fmt.Errorf("create named session %s: claim ref: %w%s", name, claimErr, dangling)
		}
		return nil, false, fmt.Errorf("create named session %s: re-read ref: %w%s", name, err, dangling)
	}
	if winner == m.Session {
		// won is false only when our own claim's response was lost and
		// its retry saw the ref we had just written.
		_ = won
		return mine, made, nil
	}
	// Only a manifest this call created is dangling; a session that
	// existed before (an explicit m naming it) is left alone (§5.1).
	if made {
		if err := s.delete(ctx, key); err != nil {
			return nil, false, fmt.Errorf("create named session %s: delete dangling manifest: %w", name, err)
		}
	}
	got, err = s.LoadManifest(ctx, winner)
	return got, false, err
}
