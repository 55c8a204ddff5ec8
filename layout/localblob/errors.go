package localblob

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"gocloud.dev/gcerrors"
	"golang.org/x/sys/unix"
)

// Sentinel errors. The driver wraps them with the operation and key; test
// with errors.Is (gocloud's wrapper keeps the chain) and with gcerrors.Code
// for the portable classification noted on each.
var (
	// ErrPreconditionFailed: an IfNotExist write found an object, or an
	// If-Match write or delete found a different ETag or no object
	// (gcerrors.FailedPrecondition).
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrChecksumMismatch: the body did not match WriteOptions.SHA256 or
	// WriterOptions.ContentMD5; nothing was published
	// (gcerrors.InvalidArgument, not FailedPrecondition, so that a bad
	// digest is never mistaken for "the object already exists").
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrKeyConflict: the key cannot be stored because a file exists where
	// the key needs a directory, or a directory exists where it needs a
	// file ("a" and "a/b" cannot both be objects on a filesystem)
	// (gcerrors.InvalidArgument).
	ErrKeyConflict = errors.New("key conflicts with an existing file or directory")
)

var (
	errEmptyKey    = errors.New("empty key")
	errNameTooLong = errors.New("encoded key exceeds the filesystem's name or path length limit")
	errNotObject   = errors.New("not an object (directory or special file)")
	errClosed      = errors.New("bucket is closed")
	errTempGone    = errors.New("temporary file disappeared before publication (removed as stale?)")
	errUnsupported = errors.New("not supported by localblob")
)

// Internal codes, mapped to gcerrors codes by (*bucket).ErrorCode. Kept
// separate so the package does not depend on gcerrors' numeric values.
type code int

const (
	codeUnknown code = iota
	codeNotFound
	codeInvalid
	codePrecondition
	codeUnimplemented
	codeClosed
)

// opError carries the classification, the operation and the key, so that
// messages name the key (gocloud's conformance suite requires it for
// not-found errors) and ErrorCode does not have to guess.
type opError struct {
	code code
	op   string
	key  string
	err  error
}

func newError(c code, op, key string, err error) error {
	return &opError{code: c, op: op, key: key, err: err}
}

func (e *opError) Error() string {
	return fmt.Sprintf("localblob: %s %q: %v", e.op, e.key, e.err)
}

func (e *opError) Unwrap() error { return e.err }

func hasCode(err error, c code) bool {
	var oe *opError
	return errors.As(err, &oe) && oe.code == c
}

// errorCode classifies err for gocloud.
func errorCode(err error) gcerrors.ErrorCode {
	var oe *opError
	if errors.As(err, &oe) {
		switch oe.code {
		case codeNotFound:
			return gcerrors.NotFound
		case codeInvalid:
			return gcerrors.InvalidArgument
		case codePrecondition:
			return gcerrors.FailedPrecondition
		case codeUnimplemented:
			return gcerrors.Unimplemented
		case codeClosed:
			return gcerrors.FailedPrecondition
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return gcerrors.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return gcerrors.DeadlineExceeded
	case errors.Is(err, fs.ErrNotExist):
		return gcerrors.NotFound
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return gcerrors.PermissionDenied
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return gcerrors.ResourceExhausted
	case errors.Is(err, unix.ENAMETOOLONG):
		return gcerrors.InvalidArgument
	}
	return gcerrors.Unknown
}

// notFound reports whether a syscall error means "there is no object
// here": the name is missing, a path component is a file, or the path
// crosses a symlink (which the driver never follows).
func notFound(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) ||
		errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
}
