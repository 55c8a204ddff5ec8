package fs

import (
	"context"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// refuseXattrs refuses setxattr and removexattr for a node with nowhere to
// keep attributes; embedded in it, it makes the node a NodeSetxattrer and
// a NodeRemovexattrer. ENOTSUP, not go-fuse's default ENODATA ("no such
// attribute"): cp -a, cp -p, tar x, rsync -X and mv set attributes (an
// ACL from the mode on every directory they make) and take ENOTSUP as
// "no attributes here", but report anything else as a failure.
type refuseXattrs struct{}

// Setxattr implements gofs.NodeSetxattrer.
func (refuseXattrs) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

// Removexattr implements gofs.NodeRemovexattrer.
func (refuseXattrs) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

// unsupportedXattrs answers getxattr of a security label or a POSIX ACL
// with EOPNOTSUPP for every node: pugfs keeps neither, and that is what a
// file system without them says. ls -l asks every entry for
// security.selinux and system.posix_acl_access (and directories for
// system.posix_acl_default), and the kernel forwards each request;
// answered ENODATA ("this file has none"), they cost three or four round
// trips an entry, most of a warm `ls -lR`. GNU ls remembers EOPNOTSUPP
// for the whole device instead, so one `ls -lR` asks once. Unlike
// --xattrs=off (ENOSYS, which the kernel remembers for every name),
// user.pugmark.* stay readable.
type unsupportedXattrs struct{ fuse.RawFileSystem }

// unsupportedXattr reports whether pugfs has no such attribute on any
// file, ever.
func unsupportedXattr(name string) bool {
	return strings.HasPrefix(name, "security.") || strings.HasPrefix(name, "system.posix_acl_")
}

func (u unsupportedXattrs) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if unsupportedXattr(attr) {
		return 0, fuse.ENOTSUP
	}
	return u.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}
