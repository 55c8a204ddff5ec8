package fs

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/ingest"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
	"gocloud.dev/gcerrors"
)

// errnoOf maps an error from the cache or layout to the errno a user sees
// (tree.md "Errors a user sees"). It is the only place that does: the
// first row of errnoRules that matches decides. An EIO, ESTALE, ENOSPC or
// EDQUOT, and any row marked log, is logged with op and the error, which
// names the key and the reason; the program only sees the errno.
func (f *FS) errnoOf(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	e, i := classify(err)
	r := errnoRules[i]
	switch {
	case r.quiet:
		f.log.Debug(op+" failed", "errno", e.Error(), "cause", r.name, "err", err)
	case (r.log || alwaysLogged(e)) && f.logged.fresh(op+"\x00"+err.Error(), time.Now()):
		f.log.Error(op+" failed", "errno", e.Error(), "cause", r.name, "err", err)
	case r.log || alwaysLogged(e):
		f.log.Debug(op+" failed again", "errno", e.Error(), "cause", r.name, "err", err)
	case e == syscall.ENOENT || e == syscall.EINTR:
		// Routine: a lookup of a missing name, an interrupted call.
	default:
		f.log.Debug(op+" failed", "errno", e.Error(), "cause", r.name, "err", err)
	}
	return e
}

// repeats remembers the failures errnoOf logged lately, so that the same
// one (the same call on the same name, the same error) is logged once
// per repeatQuiet: a program retrying a read of a damaged file in a
// loop, or an `ls -l` loop over a directory holding one, wrote a line
// per call (audit 25). The zero value is ready.
type repeats struct {
	mu   sync.Mutex
	seen map[string]time.Time // GUARDED_BY(mu): when each was last logged
}

const (
	// repeatQuiet is how long a failure logged is not logged again.
	repeatQuiet = 10 * time.Second
	// repeatMax bounds the failures remembered: past it they are all
	// forgotten, and logged again at their next occurrence.
	repeatMax = 1024
)

// fresh reports whether the failure key was not logged within
// repeatQuiet of now, and records it as logged now if so.
func (r *repeats) fresh(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.seen[key]; ok && now.Sub(t) < repeatQuiet {
		return false
	}
	if r.seen == nil || len(r.seen) >= repeatMax {
		r.seen = map[string]time.Time{}
	}
	r.seen[key] = now
	return true
}

// alwaysLogged are the errnos a user cannot act on without the log: the
// program learns only that something failed, the log says which key and
// why.
func alwaysLogged(e syscall.Errno) bool {
	switch e {
	case syscall.EIO, syscall.ESTALE, syscall.ENOSPC, syscall.EDQUOT:
		return true
	}
	return false
}

// errnoRule is one row of errnoRules.
type errnoRule struct {
	// name says what the row recognises; it is logged as the cause.
	name string
	// match reports whether err is this row's kind of error.
	match func(err error) bool
	// errno is what the user sees; 0 passes on the syscall.Errno found
	// in the error's chain (passedErrno decides which may pass).
	errno syscall.Errno
	// log asks for a log line whatever the errno (alwaysLogged covers
	// EIO, ESTALE, ENOSPC, EDQUOT).
	log bool
	// quiet keeps a routine errno out of the log (debug level only),
	// even one alwaysLogged covers: an ESTALE the kernel answers by
	// looking the name up again is not a failure anybody must read.
	quiet bool
}

// errnoRules is the mapping, in order; the first match wins, and the last
// row matches everything. The order matters where an error chain holds
// more than one kind: an interrupted call is EINTR whatever was under way,
// and a network failure is EIO even though its chain holds an errno (a
// refused connection must not reach a program as ECONNREFUSED). A new
// sentinel of pugfs's own (such as a permission refusal of ingestion, as
// EACCES) goes with the layout sentinels, before the backend codes and
// the errno pass-through.
var errnoRules = []errnoRule{
	// The caller gave up: the FUSE request was interrupted.
	{name: "interrupted", match: isErr(context.Canceled), errno: syscall.EINTR},
	{name: "interrupted", match: hasCode(gcerrors.Canceled), errno: syscall.EINTR},

	// A commit's snapshot (or a ref write) may have landed, and the bucket
	// did not say (its reply lost, then no answer): close(2) has no errno
	// for "maybe".
	{name: "commit outcome unknown", match: isErr(layout.ErrOutcomeUnknown), errno: syscall.EIO},
	// The backend did not answer in time (--request-timeout) or could
	// not be reached.
	{name: "backend timeout", match: isErr(context.DeadlineExceeded), errno: syscall.EIO},
	{name: "backend timeout", match: hasCode(gcerrors.DeadlineExceeded), errno: syscall.EIO},
	{name: "network", match: isNetworkErrno, errno: syscall.EIO},
	{name: "network", match: isNetError, errno: syscall.EIO},

	// pugfs's own sentinels.
	{name: "conflict", match: isErr(layout.ErrConflict), errno: syscall.ESTALE},
	{name: "ref moved", match: isErr(layout.ErrRefMoved), errno: syscall.ESTALE},
	// A file whose blob is gone exists (its descriptor says so): its read
	// fails as a damaged bucket does, with the key in the log, not as a
	// missing name.
	{name: "blob missing", match: isErr(layout.ErrBlobMissing), errno: syscall.EIO},
	{name: "not found", match: isErr(layout.ErrNotFound), errno: syscall.ENOENT},
	// Another writer's name that JSON cannot carry: readable, never
	// written back (as file systems that hold names to UTF-8 answer).
	{name: "name not UTF-8", match: isErr(layout.ErrNotUTF8), errno: syscall.EILSEQ},
	{name: "invalid", match: isErr(layout.ErrInvalid), errno: syscall.EINVAL},
	{name: "corrupt", match: isErr(layout.ErrCorrupt), errno: syscall.EIO},
	{name: "too large", match: isErr(layout.ErrTooLarge), errno: syscall.EIO},
	{name: "commit retries exhausted", match: isErr(layout.ErrRetriesExhausted), errno: syscall.EIO},
	// The caller may not have the mount ingest that URL (issue #17).
	// Symlink logs the refusal itself, with who asked.
	{name: "ingestion refused", match: isErr(ingest.ErrRefused), errno: syscall.EACCES},
	// What the write engine refuses, as POSIX names it.
	{name: "no such name", match: isErr(staging.ErrNotExist), errno: syscall.ENOENT},
	{name: "exists", match: isErr(staging.ErrExist), errno: syscall.EEXIST},
	{name: "is a directory", match: isErr(staging.ErrIsDir), errno: syscall.EISDIR},
	{name: "not a directory", match: isErr(staging.ErrNotDir), errno: syscall.ENOTDIR},
	{name: "directory not empty", match: isErr(staging.ErrNotEmpty), errno: syscall.ENOTEMPTY},
	{name: "rename into itself", match: isErr(staging.ErrIntoItself), errno: syscall.EINVAL},
	{name: "rename across a send directory", match: isErr(staging.ErrCrossSend), errno: syscall.EXDEV},
	{name: "bad ref body", match: isErr(staging.ErrBadRef), errno: syscall.EINVAL},
	{name: "changed since lookup", match: isErr(staging.ErrChanged), errno: syscall.ESTALE, quiet: true},

	// The backend's answer, by its portable code.
	{name: "backend not found", match: hasCode(gcerrors.NotFound), errno: syscall.ENOENT},
	{name: "backend permission denied", match: hasCode(gcerrors.PermissionDenied), errno: syscall.EACCES, log: true},
	{name: "backend precondition failed", match: hasCode(gcerrors.FailedPrecondition), errno: syscall.ESTALE},

	// An errno from the local side (the staging disk, a deliberate
	// refusal of the fs code) that means something to a program.
	{name: "errno", match: isPassedErrno},

	// Anything else, an errno no program expects from a file included
	// (ENOSYS from Flush or Fsync would switch them off for the mount):
	// the backend or pugfs failed.
	{name: "other", match: func(error) bool { return true }, errno: syscall.EIO},
}

// classify returns the errno for err and the index of the row of
// errnoRules that chose it.
func classify(err error) (syscall.Errno, int) {
	for i, r := range errnoRules {
		if !r.match(err) {
			continue
		}
		if r.errno != 0 {
			return r.errno, i
		}
		return chainErrno(err), i
	}
	panic("unreachable: the last errno rule matches everything")
}

// isErr matches errors.Is(err, target).
func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// hasCode matches a gocloud error code.
func hasCode(c gcerrors.ErrorCode) func(error) bool {
	return func(err error) bool { return gcerrors.Code(err) == c }
}

// chainErrno returns the first syscall.Errno in err's chain, or 0.
func chainErrno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// networkErrnos are the errnos of a connection that failed: the bucket is
// unreachable, which a program must see as EIO.
var networkErrnos = map[syscall.Errno]bool{
	syscall.ECONNREFUSED: true, syscall.ECONNRESET: true, syscall.ECONNABORTED: true,
	syscall.EPIPE: true, syscall.ETIMEDOUT: true, syscall.EHOSTUNREACH: true,
	syscall.EHOSTDOWN: true, syscall.ENETUNREACH: true, syscall.ENETDOWN: true,
	syscall.ENETRESET: true, syscall.ENOTCONN: true, syscall.ESHUTDOWN: true,
	syscall.EADDRNOTAVAIL: true, syscall.EPROTO: true,
}

func isNetworkErrno(err error) bool { return networkErrnos[chainErrno(err)] }

// isNetError matches the other failures of the network stack, with or
// without an errno inside: a failed dial or connection, a DNS failure, a
// socket deadline, an HTTP client's url.Error. (The net.Error interface
// itself will not do: a bare syscall.Errno implements it.)
func isNetError(err error) bool {
	var (
		op  *net.OpError
		dns *net.DNSError
		ue  *url.Error
	)
	return errors.As(err, &op) || errors.As(err, &dns) || errors.As(err, &ue) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// passedErrnos are the errnos that mean the same to a program calling
// the filesystem as they meant where they arose, and so pass unchanged.
var passedErrnos = map[syscall.Errno]bool{
	syscall.ENOSPC: true, syscall.EDQUOT: true, syscall.ENOENT: true,
	syscall.EEXIST: true, syscall.ENOTEMPTY: true, syscall.EISDIR: true,
	syscall.ENOTDIR: true, syscall.EINVAL: true, syscall.ENAMETOOLONG: true,
	syscall.EACCES: true, syscall.EPERM: true, syscall.EROFS: true,
	syscall.EXDEV: true, syscall.EBADF: true, syscall.E2BIG: true,
	syscall.ERANGE: true, syscall.EFBIG: true, syscall.EMFILE: true,
	syscall.ENFILE: true, syscall.ENOTSUP: true, syscall.ENODATA: true,
	syscall.ELOOP: true, syscall.EMLINK: true, syscall.ENOMEM: true,
	syscall.EINTR: true, syscall.ESTALE: true, syscall.EIO: true,
}

func isPassedErrno(err error) bool { return passedErrnos[chainErrno(err)] }
