//go:build !unix

package blobcache

import (
	"errors"
	"io/fs"
	"syscall"
)

// diskNoFollow is 0 where O_NOFOLLOW does not exist; os.Root still keeps
// every access inside the cache directory.
const diskNoFollow = 0

// diskFatal reports errors after which the disk tier cannot work.
func diskFatal(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, fs.ErrPermission)
}

// diskSpace is not known here: the cache keeps to its bound alone.
func diskSpace(dir string) (avail, size int64, err error) {
	return 0, 0, errors.ErrUnsupported
}
