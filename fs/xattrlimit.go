package fs

import (
	"strings"
	"syscall"
)

// Bounds on the metadata a user sets through setxattr. It lands in the
// descriptor of every later snapshot of the session and in the memory of
// every mount that reads it, so one user of a shared mount must not be
// able to make a file's metadata, or listxattr's reply, unbounded.
const (
	// maxXattrValue is the kernel's own bound on one value
	// (XATTR_SIZE_MAX); checked here too, as the kernel is not the only
	// possible FUSE client.
	maxXattrValue = 64 << 10
	// maxXattrTotal bounds the names and values of all settable metadata
	// of one file.
	maxXattrTotal = 256 << 10
	// maxXattrKeys bounds the user.pugmark.meta.* keys of one file: at
	// most 255 bytes a name, listxattr's reply stays well under the
	// kernel's 64 KiB (XATTR_LIST_MAX), past which no tool could list it.
	maxXattrKeys = 128
)

// settableXattr reports the attributes a user may set (changeXattr).
func settableXattr(name string) bool {
	return strings.HasPrefix(name, "user.pugmark.meta.") || name == "user.pugmark.content-type" || name == "user.pugmark.schema-url"
}

// xattrBound says whether setting attr to val on a file whose attributes
// are cur keeps its metadata within bounds: 0, E2BIG for a value over
// maxXattrValue (what the kernel answers for one), or ENOSPC when the
// file's metadata would pass maxXattrTotal or maxXattrKeys (setxattr(2):
// "insufficient space remaining to store the extended attribute").
func xattrBound(cur map[string]string, attr, val string) syscall.Errno {
	if len(val) > maxXattrValue {
		return syscall.E2BIG
	}
	total, keys := len(attr)+len(val), 0
	if strings.HasPrefix(attr, "user.pugmark.meta.") {
		keys++
	}
	for k, v := range cur {
		if k == attr || !settableXattr(k) {
			continue
		}
		total += len(k) + len(v)
		if strings.HasPrefix(k, "user.pugmark.meta.") {
			keys++
		}
	}
	if total > maxXattrTotal || keys > maxXattrKeys {
		return syscall.ENOSPC
	}
	return 0
}
