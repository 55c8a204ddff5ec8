package fs

import (
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

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
