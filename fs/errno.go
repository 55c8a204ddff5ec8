package fs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/gcerrors"
)

// errnoOf maps an error from the cache or layout to the errno a user sees
// (tree.md "Errors a user sees"). It is the only place that does. EIO and
// ESTALE are logged with the error, which names the key and the reason.
func (f *FS) errnoOf(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	e := classify(err)
	switch e {
	case syscall.EIO, syscall.ESTALE, syscall.ENOSPC:
		f.log.Error(op+" failed", "errno", e.Error(), "err", err)
	case syscall.ENOENT, syscall.EINTR:
	default:
		f.log.Debug(op+" failed", "errno", e.Error(), "err", err)
	}
	return e
}

func classify(err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, layout.ErrConflict), errors.Is(err, layout.ErrRefMoved):
		return syscall.ESTALE
	case errors.Is(err, layout.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, layout.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, layout.ErrCorrupt), errors.Is(err, layout.ErrTooLarge):
		return syscall.EIO
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return syscall.ENOENT
	case gcerrors.PermissionDenied:
		return syscall.EACCES
	case gcerrors.FailedPrecondition:
		return syscall.ESTALE
	}
	return syscall.EIO
}

var _ = slog.Default
