// Package beneath opens paths relative to a directory fd without leaving
// that directory's subtree and without following symbolic links, so that
// a rename of the directory or a link planted inside it cannot redirect
// an open elsewhere. The local bucket driver and URL ingestion of file://
// sources share it.
package beneath

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openat2Missing is set once the kernel reports ENOSYS for openat2 (before
// Linux 5.6, or a seccomp profile that refuses it); from then on opens
// walk the path one component at a time with openat and O_NOFOLLOW.
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
// with ELOOP, a ".." or an absolute path with EXDEV. On kernels without
// openat2 the path is walked one component at a time, each opened with
// O_NOFOLLOW, with the same answers (a single openat with O_NOFOLLOW
// followed a link planted in the middle: objects -> /etc). O_CLOEXEC is
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
		fd, err = walk(dirfd, path, flags)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// walk opens path below dirfd one component at a time, none of them
// followed if it is a symbolic link, and none of them "..": Open without
// openat2.
func walk(dirfd int, path string, flags int) (int, error) {
	if strings.HasPrefix(path, "/") {
		return -1, unix.EXDEV
	}
	var parts []string
	for _, p := range strings.Split(path, "/") {
		switch p {
		case "", ".":
		case "..":
			return -1, unix.EXDEV
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		parts = []string{"."}
	}
	cur := dirfd
	defer func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		fd, err := unix.Openat(cur, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		var st unix.Stat_t
		if errors.Is(err, unix.ENOTDIR) && unix.Fstatat(cur, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = unix.ELOOP // as openat2 answers a link on the way
		}
		if err != nil {
			return -1, err
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		cur = fd
	}
	return unix.Openat(cur, parts[len(parts)-1], flags|unix.O_NOFOLLOW, 0)
}
