// Package beneath opens paths relative to a directory fd without leaving
// that directory's subtree and without following symbolic links, so that
// a rename of the directory or a link planted inside it cannot redirect
// an open elsewhere. The local bucket driver and URL ingestion of file://
// sources share it.
package beneath

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openat2Missing is set once the kernel reports ENOSYS for openat2 (before
// Linux 5.6); from then on opens fall back to openat with O_NOFOLLOW, which
// still refuses a symlink as the final component but not in the middle.
var openat2Missing atomic.Bool

// RetryEINTR calls fn until it returns something other than EINTR.
func RetryEINTR(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Open opens path relative to dirfd without following symlinks or
// leaving dirfd's subtree (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS). A symbolic link anywhere on the path fails
// with ELOOP, a ".." out of the subtree with EXDEV; on kernels without
// openat2 only a link as the last component is refused, so callers that
// must hold on old kernels open one component at a time. O_CLOEXEC is
// always added. The error is an *os.PathError naming path.
func Open(dirfd int, path string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	var fd int
	err := RetryEINTR(func() error {
		var err error
		if !openat2Missing.Load() {
			fd, err = unix.Openat2(dirfd, path, &unix.OpenHow{
				Flags:   uint64(flags),
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			if !errors.Is(err, unix.ENOSYS) {
				return err
			}
			openat2Missing.Store(true)
		}
		fd, err = unix.Openat(dirfd, path, flags|unix.O_NOFOLLOW, 0)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}
