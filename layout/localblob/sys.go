package localblob

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Thin, fd-relative wrappers over the syscalls the driver needs. Every path
// is resolved relative to a directory fd the driver opened itself, never by
// re-walking an absolute path, so a rename of the root or a symlink planted
// inside the bucket cannot redirect an operation outside it.

// openat2Missing is set once the kernel reports ENOSYS for openat2 (before
// Linux 5.6); from then on opens fall back to openat with O_NOFOLLOW, which
// still refuses a symlink as the final component but not in the middle.
var openat2Missing atomic.Bool

// dirReads counts directory reads; tests use it to check that List reads
// only the directories a prefix needs.
var dirReads atomic.Int64

func retryEINTR(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// openBeneath opens path relative to dirfd without following symlinks or
// leaving dirfd's subtree.
func openBeneath(dirfd int, path string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	var fd int
	err := retryEINTR(func() error {
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

// openDir opens a directory for reading, locking and fsync.
func openDir(dirfd int, path string) (int, error) {
	return openBeneath(dirfd, path, unix.O_RDONLY|unix.O_DIRECTORY)
}

func fsyncFD(fd int) error {
	return retryEINTR(func() error { return unix.Fsync(fd) })
}

func fstatat(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := retryEINTR(func() error { return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	return st, err
}

func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := retryEINTR(func() error { return unix.Fstat(fd, &st) })
	return st, err
}

// lockDir takes an exclusive flock(2) on a directory fd. flock locks
// belong to the open file description, so every caller must open its own
// fd (two goroutines sharing one fd would not exclude each other), and the
// kernel drops the lock when the holder dies, so a crashed writer never
// wedges a key.
func lockDir(fd int) error {
	return retryEINTR(func() error { return unix.Flock(fd, unix.LOCK_EX) })
}

func unlockDir(fd int) {
	_ = unix.Flock(fd, unix.LOCK_UN)
}

func closeFD(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

func isReg(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG }
func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
