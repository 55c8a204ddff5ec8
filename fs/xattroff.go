package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// noXattrs is the node tree of a mount with --xattrs=off: every extended
// attribute request is answered ENOSYS. The kernel remembers ENOSYS per
// request kind for the whole connection (fc->no_getxattr and friends) and
// then answers EOPNOTSUPP itself, so ls -l stops costing the getxattr
// round trips of security.selinux and the POSIX ACLs on every entry
// (engineering.md: "ENODATA" is not remembered, and declaring ACL support
// does not stop them). The price: user.pugmark.* are neither shown nor
// settable on such a mount, and cp -a / rsync -X see a file system
// without extended attributes.
type noXattrs struct{ fuse.RawFileSystem }

func (noXattrs) GetXAttr(_ <-chan struct{}, _ *fuse.InHeader, _ string, _ []byte) (uint32, fuse.Status) {
	return 0, fuse.ENOSYS
}

func (noXattrs) ListXAttr(_ <-chan struct{}, _ *fuse.InHeader, _ []byte) (uint32, fuse.Status) {
	return 0, fuse.ENOSYS
}

func (noXattrs) SetXAttr(_ <-chan struct{}, _ *fuse.SetXAttrIn, _ string, _ []byte) fuse.Status {
	return fuse.ENOSYS
}

func (noXattrs) RemoveXAttr(_ <-chan struct{}, _ *fuse.InHeader, _ string) fuse.Status {
	return fuse.ENOSYS
}
