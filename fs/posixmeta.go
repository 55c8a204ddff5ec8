package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// descAttr sets the mode and times a committed descriptor shows
// (posix-mode and posix-mtime, decisions.md "POSIX metadata in
// descriptors"). A read-only view (history, a --read-only mount) shows no
// write bits: nothing there can be written, and access(2) then says so.
// born is the time shown when the descriptor has neither (descMtime).
func (f *FS) descAttr(a *fuse.Attr, d *layout.Descriptor, readOnly bool, born time.Time) {
	m := layout.PosixMode(d.Metadata, layout.DefaultFileMode)
	if readOnly {
		m &^= 0o222
	}
	a.Mode = syscall.S_IFREG | m
	setTimes(a, descMtime(d, born))
}

// descMtime is a descriptor's mtime (layout.ShownMtime); born is its
// session's hour, or zero outside a session (the mount's start shows).
func descMtime(d *layout.Descriptor, born time.Time) time.Time {
	return layout.ShownMtime(d.Metadata, d.CreatedAt, born)
}

// attrChangeOf reads the metadata part of a setattr; ok is false when it
// asks for none (a truncate, chown or atime alone).
func attrChangeOf(in *fuse.SetAttrIn) (c staging.AttrChange, ok bool) {
	if m, has := in.GetMode(); has {
		m &= layout.KeptModeBits
		c.Mode, ok = &m, true
	}
	if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		c.MtimeNow, ok = true, true
	} else if t, has := in.GetMTime(); has {
		c.Mtime, ok = &t, true
	}
	return c, ok
}

// chownErrno decides a chown: to the mount's own owner and group it
// succeeds and changes nothing (rsync -a and cp -p as that user chown
// every file); any other owner cannot be kept and is EPERM (tree.md).
func (f *FS) chownErrno(in *fuse.SetAttrIn) syscall.Errno {
	if uid, ok := in.GetUID(); ok && uid != f.cfg.UID {
		return syscall.EPERM
	}
	if gid, ok := in.GetGID(); ok && gid != f.cfg.GID {
		return syscall.EPERM
	}
	return 0
}

// recordMode is the mode writable refs show, and memory records without
// a posix-mode.
const recordMode = 0o644

// refAttrErrno decides a chmod, chown or utimes of a ref: the layout
// keeps no mode, owner or time for one (§9: its object holds its target
// alone), so a change is EPERM, as vfat answers a mode it cannot store.
// What changes nothing succeeds: the mode refs show, the mount's own
// owner, a touch to now (touch(1) of a new ref sets the times it was just
// created with). A memory record keeps mode and times (memFile.setAttrs).
func (f *FS) refAttrErrno(in *fuse.SetAttrIn) syscall.Errno {
	if e := f.chownErrno(in); e != 0 {
		return e
	}
	if m, ok := in.GetMode(); ok && m&0o7777 != recordMode {
		return syscall.EPERM
	}
	if _, ok := in.GetMTime(); ok && in.Valid&fuse.FATTR_MTIME_NOW == 0 {
		return syscall.EPERM
	}
	if _, ok := in.GetATime(); ok && in.Valid&fuse.FATTR_ATIME_NOW == 0 {
		return syscall.EPERM
	}
	return 0
}

// metaDir is a writable directory of memories/ or refs/ (a namespace, a
// prefix of refs): it is no object and keeps no mode, owner, times or
// attributes.
type metaDir struct {
	dirNode
	refuseXattrs // a namespace or refs/ directory is no object
}

var (
	_ = (gofs.NodeLinker)((*metaDir)(nil))
	_ = (gofs.NodeSetattrer)((*metaDir)(nil))
	_ = (gofs.NodeSetxattrer)((*metaDir)(nil))
)

// Link is EPERM, as a symlink there is: a record or a ref is no file
// that a second name could share.
func (d *metaDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Setattr takes a chmod or utimes and changes nothing, as a session's
// directory does (no descriptor holds a directory's mode or times):
// cp -a, tar x and rsync -a of a tree set them on every directory, and
// EPERM failed them. chown to another owner is EPERM. It was EROFS on a
// writable mount, and mv of a directory of refs/ reported a read-only
// file system.
func (d *metaDir) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok {
		return syscall.EISDIR
	}
	if e := d.f.chownErrno(in); e != 0 {
		return e
	}
	return d.Getattr(ctx, nil, out)
}

var _ = (gofs.NodeSymlinker)((*metaDir)(nil))

// Symlink refuses: a record or a ref holds bytes or a target, never a
// link. EPERM is symlink(2)'s "this file system makes no symbolic
// links"; the read-only directory's EROFS, on a writable mount, said the
// mount was read-only (the memories/refs audit).
func (d *metaDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
