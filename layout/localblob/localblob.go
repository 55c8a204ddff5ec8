package localblob

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
	"golang.org/x/sys/unix"
)

// Scheme is the URL scheme the package registers on blob.DefaultURLMux:
// file:///abs/path[?create_dir=true].
const Scheme = "file"

const (
	// tmpDirName holds unpublished bodies and sidecars. It lives under the
	// root so that publication is a same-filesystem link or rename.
	tmpDirName = reservedPrefix + "tmp"
	// metaDirName holds sidecars on filesystems without user xattrs.
	metaDirName     = reservedPrefix + "meta"
	defaultPageSize = 1000
)

// DefaultStaleTempAge is how old an abandoned temp file must be before
// OpenBucket deletes it. Generous, because a slow writer's temp file looks
// exactly like an abandoned one.
const DefaultStaleTempAge = time.Hour

func init() {
	blob.DefaultURLMux().RegisterBucket(Scheme, &URLOpener{})
}

// Options configure OpenBucket.
type Options struct {
	// CreateDir creates the root directory (and its parents) if missing,
	// like fileblob's create_dir.
	CreateDir bool
	// StaleTempAge is the age past which OpenBucket removes leftover temp
	// files of crashed writers. Zero means DefaultStaleTempAge; negative
	// disables the sweep. A live writer that has not written for that long
	// loses its temp file too; its Close then fails cleanly and publishes
	// nothing.
	StaleTempAge time.Duration

	// forceSidecar makes writes use sidecars as on a filesystem without
	// user xattrs, so tests can exercise that path on ext4.
	forceSidecar bool
	// beforeSync, if set, runs before a write's body is fsynced: tests
	// make the fsync as slow as a large body on a slow disk.
	beforeSync func()
}

// URLOpener opens file:// URLs. The path must be absolute
// (file:///srv/bucket), or relative with host "." (file://./bucket).
// Query parameters: create_dir[=true|false] (see Options.CreateDir). Unknown
// parameters are an error, so a typo is not silently ignored.
type URLOpener struct {
	// Options are the defaults; query parameters override them.
	Options Options
}

// OpenBucketURL implements blob.BucketURLOpener.
func (o *URLOpener) OpenBucketURL(_ context.Context, u *url.URL) (*blob.Bucket, error) {
	opts := o.Options
	for k, vs := range u.Query() {
		switch k {
		case "create_dir":
			// A bare "?create_dir" means true, as in fileblob; an explicit
			// value must parse, so "create_dir=no" is not read as true.
			v := true
			if vs[0] != "" {
				var err error
				if v, err = strconv.ParseBool(vs[0]); err != nil {
					return nil, fmt.Errorf("open bucket %v: create_dir: %w", u, err)
				}
			}
			opts.CreateDir = v
		default:
			return nil, fmt.Errorf("open bucket %v: invalid query parameter %q", u, k)
		}
	}
	p := u.Path
	switch u.Host {
	case "", "localhost":
	case ".":
		p = strings.TrimPrefix(p, "/")
	default:
		return nil, fmt.Errorf("open bucket %v: host %q is not supported (only local paths)", u, u.Host)
	}
	if p == "" {
		return nil, fmt.Errorf("open bucket %v: empty path", u)
	}
	return OpenBucket(filepath.FromSlash(p), &opts)
}

// OpenBucket opens the directory dir as a bucket. dir must exist unless
// opts.CreateDir is set. It removes temp files left by crashed writers
// (see Options.StaleTempAge). A read-only directory can be opened; writes
// then fail.
func OpenBucket(dir string, opts *Options) (*blob.Bucket, error) {
	b, err := openBucket(dir, opts)
	if err != nil {
		return nil, err
	}
	return blob.NewBucket(b), nil
}

type bucket struct {
	dir    string // absolute root, for messages
	rootfd int
	opts   Options

	// noXattr is set once the filesystem refuses user xattrs.
	noXattr atomic.Bool

	// mu guards the reference count and the lazily opened dirs. Writers
	// hold a reference from NewTypedWriter to Close, so Close of the
	// bucket never closes an fd a writer is about to publish through.
	mu     sync.Mutex
	refs   int
	closed bool
	tmpfd  int
	metafd int
}

func openBucket(dir string, opts *Options) (*bucket, error) {
	if opts == nil {
		opts = &Options{}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localblob: %w", err)
	}
	if opts.CreateDir {
		if err := os.MkdirAll(abs, 0o777); err != nil {
			return nil, fmt.Errorf("localblob: create %s: %w", abs, err)
		}
	}
	var fd int
	err = retryEINTR(func() error {
		var err error
		fd, err = unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("localblob: open bucket %s: %w", abs, &os.PathError{Op: "open", Path: abs, Err: err})
	}
	b := &bucket{dir: abs, rootfd: fd, opts: *opts, tmpfd: -1, metafd: -1}
	if opts.forceSidecar {
		b.noXattr.Store(true)
	}
	age := opts.StaleTempAge
	if age == 0 {
		age = DefaultStaleTempAge
	}
	if age > 0 {
		b.sweepTemp(age)
	}
	return b, nil
}

// sweepTemp removes temp files older than age. Best effort: a failure
// only leaves garbage that is invisible to readers and listings.
func (b *bucket) sweepTemp(age time.Duration) {
	fd, err := openDir(b.rootfd, tmpDirName)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), tmpDirName)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-age)
	for _, n := range names {
		st, err := fstatat(fd, n)
		if err != nil || !isReg(&st) || !modTime(&st).Before(cutoff) {
			continue
		}
		_ = unix.Unlinkat(fd, n, 0)
	}
}

// enter takes a reference on the bucket's fds for one operation.
func (b *bucket) enter(op, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return newError(codeClosed, op, key, errClosed)
	}
	b.refs++
	return nil
}

func (b *bucket) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refs--
	if b.closed && b.refs == 0 {
		b.closeFDs()
	}
}

func (b *bucket) closeFDs() {
	closeFD(b.rootfd)
	closeFD(b.tmpfd)
	closeFD(b.metafd)
	b.rootfd, b.tmpfd, b.metafd = -1, -1, -1
}

// Close implements driver.Bucket. Writers still open may finish.
func (b *bucket) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		if b.refs == 0 {
			b.closeFDs()
		}
	}
	return nil
}

// tmpDir returns the temp dir's fd, creating the dir on first use so that
// read-only buckets can be opened.
func (b *bucket) tmpDir() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tmpfd >= 0 {
		return b.tmpfd, nil
	}
	fd, err := b.ensureDirLocked(tmpDirName, true)
	if err != nil {
		return -1, err
	}
	b.tmpfd = fd
	return fd, nil
}

// metaDir returns the sidecar dir's fd, or -1 if it does not exist and
// create is false. A missing dir is not cached: another process may create
// it at any time.
func (b *bucket) metaDir(create bool) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.metafd >= 0 {
		return b.metafd, nil
	}
	fd, err := b.ensureDirLocked(metaDirName, create)
	if err != nil {
		if !create && notFound(err) {
			return -1, nil
		}
		return -1, err
	}
	b.metafd = fd
	return fd, nil
}

func (b *bucket) ensureDirLocked(name string, create bool) (int, error) {
	if create {
		err := retryEINTR(func() error { return unix.Mkdirat(b.rootfd, name, 0o777) })
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, &os.PathError{Op: "mkdir", Path: filepath.Join(b.dir, name), Err: err}
		}
	}
	return openDir(b.rootfd, name)
}

// ErrorCode implements driver.Bucket.
func (b *bucket) ErrorCode(err error) gcerrors.ErrorCode { return errorCode(err) }

// As implements driver.Bucket; the driver exposes no bucket-level types.
func (b *bucket) As(any) bool { return false }

// ErrorAs implements driver.Bucket: errors wrap *os.PathError, syscall
// errnos and the package's sentinels, all reachable with errors.As.
func (b *bucket) ErrorAs(err error, i any) bool { return errors.As(err, i) }

// SignedURL implements driver.Bucket; a local directory has no URL to sign.
func (b *bucket) SignedURL(_ context.Context, key string, _ *driver.SignedURLOptions) (string, error) {
	return "", newError(codeUnimplemented, "signed URL", key, errUnsupported)
}

// walk opens the directories of p below the root, one component at a time,
// creating missing ones if create is set. It returns the fds of every
// level (fds[0] is a fresh fd for the root itself, so that each caller has
// its own open file description to flock) and whether any directory was
// created. Each created directory's parent is fsynced before descending,
// so a published object is never left under a directory entry that a
// crash could lose.
func (b *bucket) walk(dirs []string, create bool) (fds []int, err error) {
	fd, err := openDir(b.rootfd, ".")
	if err != nil {
		return nil, err
	}
	fds = append(fds, fd)
	defer func() {
		if err != nil {
			closeAll(fds)
			fds = nil
		}
	}()
	for _, c := range dirs {
		cur := fds[len(fds)-1]
		var next int
		for attempt := 0; ; attempt++ {
			next, err = openDir(cur, c)
			if err == nil {
				break
			}
			if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				st, serr := fstatat(cur, c)
				if serr == nil && !isDir(&st) {
					// A file (or symlink) sits where the key needs a directory.
					err = ErrKeyConflict
					return fds, err
				}
			}
			if !create || !errors.Is(err, unix.ENOENT) || attempt >= 16 {
				return fds, err
			}
			merr := retryEINTR(func() error { return unix.Mkdirat(cur, c, 0o777) })
			switch {
			case merr == nil:
				if err := fsyncFD(cur); err != nil {
					return fds, err
				}
			case errors.Is(merr, unix.ENOENT):
				// cur itself was pruned by a concurrent Delete after we
				// opened it: start again from the root.
				err = errRetry
				return fds, err
			case !errors.Is(merr, unix.EEXIST):
				err = &os.PathError{Op: "mkdir", Path: c, Err: merr}
				return fds, err
			}
			// Created, or created by someone else; open it (again). If a
			// concurrent Delete removed it meanwhile, the loop retries.
		}
		fds = append(fds, next)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		closeFD(fd)
	}
}

// pruneDirs removes now-empty directories of a deleted key, deepest first,
// up to but excluding the root. Best effort: it stops at the first
// directory that is not empty (or already gone). A writer that loses its
// directory to this races safely: its publish fails with ENOENT and it
// walks again.
func pruneDirs(fds []int, dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Unlinkat(fds[i], dirs[i], unix.AT_REMOVEDIR); err != nil {
			return
		}
	}
}
