package localblob

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/internal/beneath"
)

// Thin, fd-relative wrappers over the syscalls the driver needs. Every path
// is resolved relative to a directory fd the driver opened itself, never by
// re-walking an absolute path, so a rename of the root or a symlink planted
// inside the bucket cannot redirect an operation outside it.

// dirReads counts directory reads; tests use it to check that List reads
// only the directories a prefix needs.
var dirReads atomic.Int64

// retryEINTR and openBeneath are the shared implementations: see
// internal/beneath for what they guarantee.
var (
	retryEINTR  = beneath.RetryEINTR
	openBeneath = beneath.Open
)

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
