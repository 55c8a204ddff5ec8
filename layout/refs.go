package layout

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	return Ref{Name: name, Target: t, ETag: casToken(a)}, nil
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
		err := s.put(ctx, key, []byte(target), &wo)
		switch {
		case err == nil:
			return nil
		case s.refLanded(ctx, name, target):
			return nil // our own lost response, or the very same value
		case isPrecondition(err):
			return fmt.Errorf("set ref %s (compare-and-swap): %w: it was created meanwhile", name, ErrRefChanged)
		default:
			return fmt.Errorf("set ref %s (compare-and-swap): %w", name, err)
		}
	}
	if prev.ETag != "" {
		var ap applied
		wo := conditionalOptions(refOptions(), Conditions{IfMatch: prev.ETag, Size: int64(len(target))}, &ap)
		err := s.put(ctx, key, []byte(target), wo)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errNoCAS):
			// The weak swap below.
		case s.refLanded(ctx, name, target):
			// The PUT failed as seen from here, yet the ref holds our
			// target: an attempt whose response was lost landed, and its
			// retry (ours, or the client library's) met its own write
			// (§13.2). Another writer setting the very same target is
			// indistinguishable, and leaves the ref as this write would.
			return nil
		case isPrecondition(err):
			return fmt.Errorf("set ref %s (compare-and-swap): %w", name, ErrRefChanged)
		default:
			return fmt.Errorf("set ref %s (compare-and-swap): %w", name, err)
		}
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
	if err := s.Link(ctx, name, target); err != nil && !s.refLanded(ctx, name, target) {
		return err
	}
	back, err := s.ReadRef(ctx, name)
	if err != nil {
		return fmt.Errorf("set ref %s (compare-and-swap): read back: %w", name, err)
	}
	if back.Target != target {
		return fmt.Errorf("set ref %s (compare-and-swap): %w: another writer replaced it", name, ErrRefChanged)
	}
	return ErrWeakCAS
}

// refLanded reports whether ref name reads as target now: how a failed
// write is told apart from one whose response was lost.
func (s *Store) refLanded(ctx context.Context, name, target string) bool {
	cur, err := s.ReadRef(ctx, name)
	return err == nil && cur.Target == target
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
