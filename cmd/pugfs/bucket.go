package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/internal/redact"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/drivers"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// bucketURL turns a command-line bucket argument into a URL for the
// gocloud URL mux: a plain path (absolute or relative) is the project's
// local driver, file:///abs/path; anything with a scheme is passed through.
// local is the directory for plain paths and file:// URLs, so callers can
// give a clear error for a directory that does not exist.
func bucketURL(arg string) (u, local string, err error) {
	if arg == "" {
		return "", "", usagef("empty BUCKET-URL")
	}
	if !strings.Contains(arg, "://") {
		abs, err := filepath.Abs(arg)
		if err != nil {
			return "", "", fmt.Errorf("bucket path %s: %w", arg, err)
		}
		return (&url.URL{Scheme: "file", Path: abs}).String(), abs, nil
	}
	p, err := url.Parse(arg)
	if err != nil || p.Scheme == "" {
		return "", "", usagef("BUCKET-URL %q is neither a path nor a URL", arg)
	}
	if p.Scheme == "file" || strings.HasSuffix(p.Scheme, "+file") {
		local = p.Path
		if p.Host == "." {
			local = strings.TrimPrefix(local, "/")
		}
	}
	if q := p.Query(); q.Has("prefix") && !strings.HasSuffix(q.Get("prefix"), "/") && q.Get("prefix") != "" {
		// gocloud roots the bucket at the prefix as a string, so
		// prefix=team wrote teamsessions/...: beside the directory
		// meant, where no other tool looks. A prefix is a directory.
		q.Set("prefix", q.Get("prefix")+"/")
		p.RawQuery = q.Encode()
		arg = p.String()
	}
	return arg, local, nil
}

// onLocalDisk reports whether arg is a local directory read as it is
// (file:// or a path, without a wrapper such as fault+ that may add
// latency).
func onLocalDisk(arg string) bool {
	u, local, err := bucketURL(arg)
	if err != nil || local == "" {
		return false
	}
	p, err := url.Parse(u)
	return err == nil && p.Scheme == "file"
}

// openBucket opens a bucket argument. With create, a missing local
// directory is created (pugfs demo); otherwise it is an error that says
// so, rather than the driver's ENOENT. timeout bounds the one request
// that checks a cloud bucket exists.
func openBucket(ctx context.Context, arg string, create bool, timeout time.Duration) (*blob.Bucket, string, error) {
	b, u, err := openBucketURL(ctx, arg, create)
	if err != nil {
		return nil, u, err
	}
	if err := checkBucketExists(ctx, b, u, timeout); err != nil {
		b.Close()
		return nil, u, err
	}
	return b, u, nil
}

// openBucketURL is openBucket without the request that checks a cloud
// bucket exists: a mount's probe is that request (missingBucket).
func openBucketURL(ctx context.Context, arg string, create bool) (*blob.Bucket, string, error) {
	u, local, err := bucketURL(arg)
	if err != nil {
		return nil, "", err
	}
	if local != "" {
		st, err := os.Stat(local)
		switch {
		case errors.Is(err, os.ErrNotExist) && create:
			if err := os.MkdirAll(local, 0o755); err != nil {
				return nil, u, fmt.Errorf("create bucket directory: %w", err)
			}
		case errors.Is(err, os.ErrNotExist):
			return nil, u, fmt.Errorf("bucket directory %s does not exist (pugfs demo or pugfs session new create one)", local)
		case err != nil:
			return nil, u, fmt.Errorf("bucket directory: %w", err)
		case !st.IsDir():
			return nil, u, fmt.Errorf("bucket %s is not a directory", local)
		}
	}
	b, err := drivers.OpenURL(ctx, u)
	if err != nil {
		// Drivers put the whole URL in their errors.
		return nil, u, redact.Err(fmt.Errorf("open bucket %s: %w", redact.URL(u), err), u)
	}
	return b, u, nil
}

// checkBucketExists turns a cloud bucket or container that does not
// exist into one line saying what to create with which tool; opening one
// succeeds on every driver, and the first request would otherwise fail
// with a NotFound that names a key. Other failures (credentials, network)
// are left to the first real request, which reports them as they are;
// a bucket that does not answer within timeout is an error.
func checkBucketExists(ctx context.Context, b *blob.Bucket, u string, timeout time.Duration) error {
	create := missingBucket(u)
	if create == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok, err := b.IsAccessible(ctx)
	if err != nil && (gcerrors.Code(err) == gcerrors.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)) {
		// Silent: every later request would wait as long again.
		return fmt.Errorf("bucket %s did not answer within %s (--request-timeout)", redact.URL(u), timeout)
	}
	if err != nil || ok {
		return nil
	}
	return errors.New(create)
}

// missingBucket is the line that says a cloud bucket or container of
// URL u does not exist and what to create with which tool; "" for a URL
// of no cloud.
func missingBucket(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	switch strings.TrimPrefix(p.Scheme, faultblob.SchemePrefix) {
	case "s3":
		return fmt.Sprintf("S3 bucket %q does not exist: create it first (aws s3 mb s3://%s; MinIO: mc mb ALIAS/%s; versitygw: a directory of that name under its root)", p.Host, p.Host, p.Host)
	case "gs":
		return fmt.Sprintf("GCS bucket %q does not exist: create it first (gcloud storage buckets create gs://%s; fake-gcs-server: POST /storage/v1/b or a directory under its -data)", p.Host, p.Host)
	case "azblob":
		return fmt.Sprintf("Azure container %q does not exist: create it first (az storage container create --name %s, with --connection-string for Azurite)", p.Host, p.Host)
	}
	return ""
}

// openStore opens a bucket argument as a layout store; create as for
// openBucket. Every request gets the deadline timeout (the commands'
// --request-timeout, requestTimeoutFlag), so a
// command on a bucket that stops answering fails instead of waiting
// forever; and the bucket is probed first, as a mount's is (within
// probeFor), so that a silent one fails the command after that, not
// after every retry of each of its requests (audit 27: `pugfs session
// new` took 332 s to fail, fsck 120 s). The caller closes the bucket.
func openStore(ctx context.Context, arg string, create bool, timeout time.Duration) (*layout.Store, *blob.Bucket, error) {
	if timeout <= 0 {
		return nil, nil, usagef("--request-timeout must be positive") // as a mount's (review 30)
	}
	b, u, err := openBucket(ctx, arg, create, timeout)
	if err != nil {
		return nil, nil, err
	}
	b = deadlineblob.Wrap(b, timeout)
	s := layout.New(b, nil)
	if err := probe(ctx, s, slog.New(slog.DiscardHandler)); err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("bucket %s is not usable: %v%s", redact.URL(u), err, probeHint(err))
	}
	return s, b, nil
}

// isEmptyBucket reports whether the bucket has no objects at all.
func isEmptyBucket(ctx context.Context, b *blob.Bucket) (bool, error) {
	_, err := b.List(nil).Next(ctx)
	if err == io.EOF {
		return true, nil
	}
	return false, err
}

// resolveSession accepts a session ID (32 hex, any case) or a session
// name (refs/sessions/<name>, §9.1) and returns the ID of an existing
// session.
func resolveSession(ctx context.Context, s *layout.Store, arg string) (layout.SessionID, error) {
	if id, err := layout.ParseSessionID(arg); err == nil {
		ok, err := s.SessionExists(ctx, id)
		if err != nil {
			return id, err
		}
		if ok {
			return id, nil
		}
		// A 32-hex name is possible; fall through to the name lookup.
	}
	id, err := s.ResolveSessionName(ctx, arg)
	switch {
	case errors.Is(err, layout.ErrInvalid):
		return id, fmt.Errorf("session %q: not a session ID and not a valid session name", arg)
	case errors.Is(err, layout.ErrNotFound):
		return id, fmt.Errorf("session %q does not exist (no such ID, and no refs/sessions/%s)", arg, arg)
	case err != nil:
		return id, err
	}
	if ok, err := s.SessionExists(ctx, id); err != nil {
		return id, err
	} else if !ok {
		return id, fmt.Errorf("refs/sessions/%s points at session %s, which has no manifest (run pugfs fsck)", arg, id)
	}
	return id, nil
}

// requestTimeoutFlag defines --request-timeout on a command that opens a
// bucket with openStore, as a mount has it.
func requestTimeoutFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("request-timeout", deadlineblob.DefaultTimeout, "give up on a bucket request (each attempt) that has made no progress for this `DURATION`; a bucket that does not answer its first request within about that fails the command")
}
