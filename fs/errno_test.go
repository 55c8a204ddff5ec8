package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/ingest"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/staging"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// backendErr returns a genuine gocloud error with code c, as a request
// through the portable bucket returns it: memblob's own NotFound, or a
// fault injected below the portable layer for the other codes.
func backendErr(t *testing.T, c gcerrors.ErrorCode) error {
	t.Helper()
	ctx := context.Background()
	mem := memblob.OpenBucket(nil)
	defer mem.Close()
	var err error
	if c == gcerrors.NotFound {
		_, err = mem.Attributes(ctx, "sessions/x/manifest.json")
	} else {
		inj := faultblob.NewInjector(faultblob.Options{})
		inj.Add(faultblob.Rule{FailProb: 1, Err: faultblob.PermanentError(c)})
		b := faultblob.Wrap(mem, inj)
		_, err = b.Attributes(ctx, "sessions/x/manifest.json")
	}
	if gcerrors.Code(err) != c {
		t.Fatalf("backendErr(%v) made %v (code %v)", c, err, gcerrors.Code(err))
	}
	return err
}

// refused is a dial error as net/http's client returns it inside a
// url.Error: the chain holds ECONNREFUSED.
func refused() error {
	op := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	return &url.Error{Op: "Get", URL: "http://127.0.0.1:1/bucket/key", Err: op}
}

// TestErrnoOf checks every row of errnoRules, in order, with the errors
// each row is for, and what is logged.
func TestErrnoOf(t *testing.T) {
	timeout := &deadlineblob.TimeoutError{Op: deadlineblob.OpHead, Key: "sessions/k/manifest.json", Timeout: 2e9}
	cases := []struct {
		name string
		err  func(t *testing.T) error
		want syscall.Errno
		log  bool // an Error line with the op and the error
	}{
		// interrupted
		{"cancelled", func(*testing.T) error { return context.Canceled }, syscall.EINTR, false},
		{"cancelled, wrapped with a timeout", func(*testing.T) error {
			return fmt.Errorf("get k: %w", errors.Join(timeout, context.Canceled))
		}, syscall.EINTR, false},
		{"backend canceled code", func(t *testing.T) error { return backendErr(t, gcerrors.Canceled) }, syscall.EINTR, false},

		// backend timeout, network
		{"deadline exceeded", func(*testing.T) error { return context.DeadlineExceeded }, syscall.EIO, true},
		{"request timeout naming the key", func(*testing.T) error {
			return fmt.Errorf("head sessions/k/manifest.json: %w", timeout)
		}, syscall.EIO, true},
		{"backend deadline code", func(t *testing.T) error { return backendErr(t, gcerrors.DeadlineExceeded) }, syscall.EIO, true},
		{"connection reset, bare errno", func(*testing.T) error {
			return fmt.Errorf("read body: %w", syscall.ECONNRESET)
		}, syscall.EIO, true},
		{"broken pipe", func(*testing.T) error { return fmt.Errorf("put: %w", syscall.EPIPE) }, syscall.EIO, true},
		{"host unreachable", func(*testing.T) error { return fmt.Errorf("dial: %w", syscall.EHOSTUNREACH) }, syscall.EIO, true},
		{"network unreachable", func(*testing.T) error { return fmt.Errorf("dial: %w", syscall.ENETUNREACH) }, syscall.EIO, true},
		{"errno timeout", func(*testing.T) error { return fmt.Errorf("dial: %w", syscall.ETIMEDOUT) }, syscall.EIO, true},
		{"refused connection", func(*testing.T) error { return fmt.Errorf("list sessions/: %w", refused()) }, syscall.EIO, true},
		{"dns failure", func(*testing.T) error {
			return &net.DNSError{Err: "no such host", Name: "bucket.example", IsNotFound: true}
		}, syscall.EIO, true},
		{"http client error", func(*testing.T) error {
			return &url.Error{Op: "Get", URL: "http://s3/k", Err: io.ErrUnexpectedEOF}
		}, syscall.EIO, true},

		// pugfs's sentinels
		{"conflict", func(*testing.T) error { return fmt.Errorf("commit s: %w", layout.ErrConflict) }, syscall.ESTALE, true},
		{"ref moved", func(*testing.T) error { return fmt.Errorf("rename: %w", layout.ErrRefMoved) }, syscall.ESTALE, true},
		{"not found", func(*testing.T) error { return fmt.Errorf("get k: %w", layout.ErrNotFound) }, syscall.ENOENT, false},
		{"session not found", func(*testing.T) error { return layout.ErrSessionNotFound }, syscall.ENOENT, false},
		{"blob missing", func(*testing.T) error { return fmt.Errorf("open blob objects/x: %w", layout.ErrBlobMissing) }, syscall.EIO, true},
		{"invalid", func(*testing.T) error { return fmt.Errorf("name: %w", layout.ErrInvalid) }, syscall.EINVAL, false},
		{"name not UTF-8", func(*testing.T) error { return fmt.Errorf("commit: %w", layout.CheckUTF8("caf\xe9")) }, syscall.EILSEQ, false},
		{"corrupt", func(*testing.T) error { return fmt.Errorf("snapshot: %w", layout.ErrCorrupt) }, syscall.EIO, true},
		{"too large", func(*testing.T) error { return fmt.Errorf("manifest: %w", layout.ErrTooLarge) }, syscall.EIO, true},
		{"retries exhausted", func(*testing.T) error { return fmt.Errorf("commit: %w", layout.ErrRetriesExhausted) }, syscall.EIO, true},
		{"commit outcome unknown", func(*testing.T) error {
			return fmt.Errorf("commit version 2 of s: %w: %w", layout.ErrOutcomeUnknown, context.DeadlineExceeded)
		}, syscall.EIO, true},
		{"ingestion refused", func(*testing.T) error {
			return fmt.Errorf("ingest file:///etc/shadow: %w: not under any --ingest-from prefix", ingest.ErrRefused)
		}, syscall.EACCES, false},
		{"no such name", func(*testing.T) error { return fmt.Errorf("setattr f: %w", staging.ErrNotExist) }, syscall.ENOENT, false},
		{"exists", func(*testing.T) error { return staging.ErrExist }, syscall.EEXIST, false},
		{"is a directory", func(*testing.T) error { return staging.ErrIsDir }, syscall.EISDIR, false},
		{"not a directory", func(*testing.T) error { return staging.ErrNotDir }, syscall.ENOTDIR, false},
		{"directory not empty", func(*testing.T) error { return staging.ErrNotEmpty }, syscall.ENOTEMPTY, false},
		{"rename into itself", func(*testing.T) error { return staging.ErrIntoItself }, syscall.EINVAL, false},
		{"rename across a send directory", func(*testing.T) error { return fmt.Errorf("rename x: %w", staging.ErrCrossSend) }, syscall.EXDEV, false},
		{"bad ref body", func(*testing.T) error { return staging.ErrBadRef }, syscall.EINVAL, false},
		// The kernel looks the name up again on it: no log line.
		{"changed since lookup", func(*testing.T) error { return fmt.Errorf("open f: %w", staging.ErrChanged) }, syscall.ESTALE, false},

		// backend codes
		{"backend not found", func(t *testing.T) error { return backendErr(t, gcerrors.NotFound) }, syscall.ENOENT, false},
		{"backend permission denied", func(t *testing.T) error { return backendErr(t, gcerrors.PermissionDenied) }, syscall.EACCES, true},
		{"backend precondition failed", func(t *testing.T) error { return backendErr(t, gcerrors.FailedPrecondition) }, syscall.ESTALE, true},

		// errnos that pass
		{"staging disk full", func(*testing.T) error {
			return fmt.Errorf("stage f: %w", &os.PathError{Op: "write", Path: "/staging/1", Err: syscall.ENOSPC})
		}, syscall.ENOSPC, true},
		{"quota", func(*testing.T) error {
			return &os.PathError{Op: "write", Path: "/staging/1", Err: syscall.EDQUOT}
		}, syscall.EDQUOT, true},
		{"directory not empty", func(*testing.T) error { return fmt.Errorf("rename d: %w", syscall.ENOTEMPTY) }, syscall.ENOTEMPTY, false},
		{"read-only", func(*testing.T) error { return syscall.EROFS }, syscall.EROFS, false},
		{"cross-session rename", func(*testing.T) error { return fmt.Errorf("rename: %w", syscall.EXDEV) }, syscall.EXDEV, false},
		{"exists", func(*testing.T) error { return fmt.Errorf("mkdir: %w", syscall.EEXIST) }, syscall.EEXIST, false},
		{"not permitted", func(*testing.T) error { return fmt.Errorf("chown: %w", syscall.EPERM) }, syscall.EPERM, false},
		{"access", func(*testing.T) error { return fmt.Errorf("open: %w", syscall.EACCES) }, syscall.EACCES, false},
		{"name too long", func(*testing.T) error { return syscall.ENAMETOOLONG }, syscall.ENAMETOOLONG, false},
		{"file too big", func(*testing.T) error { return &os.PathError{Op: "write", Path: "/s", Err: syscall.EFBIG} }, syscall.EFBIG, false},
		{"memory record too big to edit", func(*testing.T) error { return fmt.Errorf("truncate memory ns: %w", errTooLargeToBuffer) }, syscall.EFBIG, false},
		{"too many open files", func(*testing.T) error { return &os.PathError{Op: "open", Path: "/s", Err: syscall.EMFILE} }, syscall.EMFILE, false},
		{"xattr range", func(*testing.T) error { return syscall.ERANGE }, syscall.ERANGE, false},

		// everything else
		{"ENOSYS must not reach Flush", func(*testing.T) error { return fmt.Errorf("flush: %w", syscall.ENOSYS) }, syscall.EIO, true},
		{"EAGAIN", func(*testing.T) error { return syscall.EAGAIN }, syscall.EIO, true},
		{"plain error", func(*testing.T) error { return errors.New("cache: chunk stream ended early") }, syscall.EIO, true},
		{"truncated body", func(*testing.T) error { return fmt.Errorf("read k: %w", io.ErrUnexpectedEOF) }, syscall.EIO, true},
		{"backend internal", func(t *testing.T) error { return backendErr(t, gcerrors.Internal) }, syscall.EIO, true},

		// order: the first row wins where a chain holds several kinds
		{"network beats not found", func(*testing.T) error {
			return errors.Join(layout.ErrNotFound, syscall.ECONNRESET)
		}, syscall.EIO, true},
		{"timeout beats a passed errno", func(*testing.T) error {
			return errors.Join(timeout, syscall.ENOENT)
		}, syscall.EIO, true},
		{"sentinel beats backend code", func(t *testing.T) error {
			return fmt.Errorf("%w: %w", layout.ErrConflict, backendErr(t, gcerrors.NotFound))
		}, syscall.ESTALE, true},
	}
	hit := make([]bool, len(errnoRules))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &recorder{}
			f := &FS{log: slog.New(logs)}
			err := tc.err(t)
			got := f.errnoOf("read sessions/s/f", err)
			if got != tc.want {
				t.Errorf("errnoOf(%v) = %v (%d), want %v (%d)", err, got, int(got), tc.want, int(tc.want))
			}
			var loud []slog.Record
			for _, r := range logs.records {
				if r.Level >= slog.LevelInfo {
					loud = append(loud, r)
				}
			}
			switch {
			case !tc.log && len(loud) > 0:
				t.Errorf("logged %q at %v, want nothing above debug", loud[0].Message, loud[0].Level)
			case tc.log && len(loud) != 1:
				t.Errorf("%d log lines above debug, want one", len(loud))
			case tc.log:
				r := loud[0]
				attrs := map[string]any{}
				r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
				if r.Level != slog.LevelError || r.Message != "read sessions/s/f failed" {
					t.Errorf("log %v %q, want ERROR naming the op", r.Level, r.Message)
				}
				if attrs["err"] != err {
					t.Errorf("log err=%v, want the error itself", attrs["err"])
				}
				if attrs["errno"] != tc.want.Error() {
					t.Errorf("log errno=%v, want %q", attrs["errno"], tc.want.Error())
				}
			}
			_, r := classify(err)
			hit[r] = true
		})
	}
	for i, r := range errnoRules {
		if !hit[i] {
			t.Errorf("row %d (%s) of errnoRules has no case", i, r.name)
		}
	}
	if got := (&FS{}).errnoOf("x", nil); got != 0 {
		t.Errorf("errnoOf(nil) = %v, want 0", got)
	}
}

// recorder is a slog.Handler that keeps every record.
type recorder struct{ records []slog.Record }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// TestErrnoSets checks the two errno sets do not overlap (a network errno
// would pass unchanged if the order of the rows changed) and that no
// errno the kernel treats specially passes.
func TestErrnoSets(t *testing.T) {
	for e := range networkErrnos {
		if passedErrnos[e] {
			t.Errorf("%v is both a network errno and a passed one", e)
		}
	}
	for _, e := range []syscall.Errno{syscall.ENOSYS, syscall.EAGAIN, syscall.ECONNREFUSED} {
		if passedErrnos[e] {
			t.Errorf("%v passes to programs", e)
		}
	}
}

// TestErrnoLogRepeats: a failure errnoOf logged is not logged again
// within repeatQuiet, at Error level (audit 25: every stat of a file whose
// descriptor lies about its size logged a line, and an `ls -l` loop
// flooded the log); the same call on another name, another error, or the
// time passing is logged.
func TestErrnoLogRepeats(t *testing.T) {
	logs := &recorder{}
	f := &FS{log: slog.New(logs)}
	corrupt := fmt.Errorf("objects/sha256:ab: %w: stored body is 5 bytes", layout.ErrCorrupt)
	errors := func() int {
		n := 0
		for _, r := range logs.records {
			if r.Level == slog.LevelError {
				n++
			}
		}
		return n
	}
	for i, c := range []struct {
		op   string
		err  error
		want int // Error lines so far
	}{
		{"stat a", corrupt, 1},
		{"stat a", corrupt, 1},
		{"stat b", corrupt, 2},
		{"stat a", fmt.Errorf("%w: other", layout.ErrCorrupt), 3},
		{"stat a", corrupt, 3},
	} {
		if e := f.errnoOf(c.op, c.err); e != syscall.EIO {
			t.Fatalf("step %d: %v", i, e)
		}
		if got := errors(); got != c.want {
			t.Fatalf("step %d (%s: %v): %d Error lines, want %d", i, c.op, c.err, got, c.want)
		}
	}
	var r repeats
	now := time.Now()
	if !r.fresh("k", now) || r.fresh("k", now.Add(repeatQuiet-1)) || !r.fresh("k", now.Add(2*repeatQuiet)) {
		t.Error("a failure is not logged again within repeatQuiet, and is after it")
	}
}
