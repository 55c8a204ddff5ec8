package layout

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"gocloud.dev/gcerrors"
)

// Sentinel errors. Every error the package returns wraps one of these (or a
// backend error) with the key or session it concerns; test with errors.Is.
var (
	// ErrInvalid: an argument or a key/name is malformed.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrSessionNotFound: no manifest for the session (§6.3 step 3). It also
	// matches ErrNotFound.
	ErrSessionNotFound = &notFoundError{"session not found"}
	// ErrBlobMissing: the blob a reader asked for is not in the bucket.
	// Blobs are asked for because a descriptor references them, so this is
	// a damaged bucket rather than a name that does not exist; it also
	// matches ErrNotFound.
	ErrBlobMissing = &notFoundError{"blob missing from the bucket"}
	// ErrCorrupt: an object exists but cannot be decoded, fails its digest,
	// or contradicts the layout (a manifest whose ID disagrees with its path,
	// a cyclic parent chain, a version past 2^32-1).
	ErrCorrupt = errors.New("corrupt object")
	// ErrConflict: a checkpoint lost to a foreign checkpoint (decisions.md
	// §13.3); nothing was written.
	ErrConflict = errors.New("conflict: a foreign checkpoint landed first")
	// ErrRefChanged: a ref's compare-and-swap (§9 Rename) found another
	// value than the one its writer read. It also matches ErrConflict.
	ErrRefChanged = &conflictError{"conflict: the ref changed since it was read"}
	// ErrLateInput: an exact commit (CommitRequest.Exact) found snapshots
	// above its base, which it would have had to merge. It also matches
	// ErrConflict.
	ErrLateInput = &conflictError{"conflict: snapshots landed above the base while the writer worked"}
	// ErrChangedUnder: a commit would replace a file (CommitRequest.Unchanged)
	// that another writer changed since the committing writer read it: a
	// lost update. It also matches ErrConflict; a *StaleError says which.
	ErrChangedUnder = &conflictError{"conflict: another writer changed the file since it was read"}
	// ErrRetriesExhausted: a commit could not make progress within the retry
	// budget (§13.3).
	ErrRetriesExhausted = errors.New("commit retries exhausted")
	// ErrRefMoved: a session ref no longer points at the session (§9.1).
	ErrRefMoved = errors.New("session ref points elsewhere")
	// ErrTooLarge: an object or its decoded form exceeds the configured bound.
	ErrTooLarge = errors.New("object too large")
	// ErrOutcomeUnknown: a commit's snapshot PUT may have landed, and the
	// bucket did not answer the read that would tell (§13.2: its reply was
	// lost, and the backend then stopped answering). The snapshot may be
	// in the bucket, and a later listing shows it if it is; a retry of the
	// same transaction ID finds out. A ref write's is a
	// *RefOutcomeUnknownError, which ResolveRef settles.
	ErrOutcomeUnknown = errors.New("outcome unknown: the bucket did not answer whether the snapshot landed")
	// ErrNotUTF8: a name to be written holds bytes that are not UTF-8.
	// JSON carries only UTF-8 (encoding/json writes U+FFFD for the rest),
	// so such a name, which another writer's snapshot can hold, can be
	// read but never written back. It also matches ErrInvalid.
	ErrNotUTF8 = &invalidError{"name is not UTF-8"}
)

// invalidError is an ErrInvalid of its own kind.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// CheckUTF8 returns ErrNotUTF8, naming name, unless name is UTF-8.
func CheckUTF8(name string) error {
	if utf8.ValidString(name) {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrNotUTF8, truncate(name))
}

type notFoundError struct{ msg string }

// conflictError is a conflict other than a commit's (ErrConflict's own
// text speaks of checkpoints).
// StaleError is a commit refused because files it would replace were
// changed by other writers (ErrChangedUnder): Names are those files, each
// changed at Versions[i]. Nothing was written.
type StaleError struct {
	Session  SessionID
	Names    []string
	Versions []uint32
	// Clashes are the Names refused because they clash as paths with a
	// name another writer made (CommitRequest.Paths), not because it
	// changed them.
	Clashes []string
}

// Error names the first name that changed, or clashes, and the version
// that did it.
func (e *StaleError) Error() string {
	if slices.Contains(e.Clashes, e.Names[0]) {
		return fmt.Sprintf("commit to %s: %s clashes with a file or directory another writer made at version %d (one name cannot be both): %v", e.Session, e.Names[0], e.Versions[0], ErrChangedUnder)
	}
	return fmt.Sprintf("commit to %s: %s changed at version %d by another writer since it was read: %v", e.Session, e.Names[0], e.Versions[0], ErrChangedUnder)
}

// Unwrap makes a StaleError match ErrChangedUnder and ErrConflict.
func (e *StaleError) Unwrap() error { return ErrChangedUnder }

type conflictError struct{ msg string }

func (e *conflictError) Error() string        { return e.msg }
func (e *conflictError) Is(target error) bool { return target == ErrConflict }

func (e *notFoundError) Error() string        { return e.msg }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

// isNotFound reports a backend not-found (gocloud code) or our own.
func isNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || gcerrors.Code(err) == gcerrors.NotFound
}

// isPrecondition reports an If-None-Match / If-Match failure.
func isPrecondition(err error) bool {
	return gcerrors.Code(err) == gcerrors.FailedPrecondition
}

// refused reports a write error after which nothing landed: the backend
// answered with an error (a refusal, a 500, a 503), or the request was
// never sent. A request cut by a deadline, a broken connection or a
// cancel has no answer: it may have reached the backend, which can still
// complete it.
func refused(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.DeadlineExceeded, gcerrors.Canceled, gcerrors.Unknown:
		return false
	}
	return true
}

// mayHaveLanded reports a write error that leaves open whether the write
// landed (refused is false), except a condition no driver could set
// (errNoCAS): that one is raised before anything is sent.
func mayHaveLanded(err error) bool {
	return !refused(err) && !errors.Is(err, errNoCAS)
}

// isPermanent reports backend errors that retrying cannot fix.
func isPermanent(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.FailedPrecondition, gcerrors.InvalidArgument,
		gcerrors.PermissionDenied, gcerrors.Unimplemented, gcerrors.AlreadyExists,
		gcerrors.Canceled:
		return true
	}
	// errNoCAS: the backend cannot do If-Match; asking again will not help.
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrTooLarge) ||
		errors.Is(err, errNoCAS)
}
