//go:build unix

package blobcache

import (
	"errors"
	"io/fs"
	"syscall"
)

// diskNoFollow makes opening an entry fail on a symbolic link instead of
// following it.
const diskNoFollow = syscall.O_NOFOLLOW

// diskFatal reports errors after which the disk tier cannot work: a full
// disk or quota, a read-only file system, missing permission.
func diskFatal(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)
}

// diskSpace returns the bytes of dir's file system available to an
// unprivileged user, and its size.
func diskSpace(dir string) (avail, size int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
