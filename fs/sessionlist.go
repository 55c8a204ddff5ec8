package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// namesOnlyDir is the handle of a directory whose READDIRPLUS replies carry
// names only: the kernel looks an entry up on its own when (and if) it
// needs the attributes. sessions/ uses it, because the attributes of a
// session directory need that session's state: answering READDIRPLUS with
// them loads every session in the bucket to list sessions/, so `ls
// sessions` costs one load per session and waits for the slowest, and a
// backend stall in one session blocks a plain listing (consistency.md §3:
// a stall in one session must not block another).
type namesOnlyDir struct {
	d  *dirNode
	ds gofs.DirStream
}

var (
	_ = (gofs.FileReaddirenter)((*namesOnlyDir)(nil))
	_ = (gofs.FileSeekdirer)((*namesOnlyDir)(nil))
	_ = (gofs.FileReleasedirer)((*namesOnlyDir)(nil))
	_ = (gofs.FileLookuper)((*namesOnlyDir)(nil))
)

func (h *namesOnlyDir) stream(ctx context.Context) syscall.Errno {
	if h.ds != nil {
		return 0
	}
	ds, errno := h.d.Readdir(ctx)
	if errno != 0 {
		return errno
	}
	h.ds = ds
	return 0
}

func (h *namesOnlyDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if errno := h.stream(ctx); errno != 0 {
		return nil, errno
	}
	if !h.ds.HasNext() {
		return nil, 0
	}
	e, errno := h.ds.Next()
	return &e, errno
}

func (h *namesOnlyDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if errno := h.stream(ctx); errno != 0 {
		return errno
	}
	if sd, ok := h.ds.(gofs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (h *namesOnlyDir) Releasedir(ctx context.Context, flags uint32) {
	if h.ds != nil {
		h.ds.Close()
	}
}

// Lookup answers READDIRPLUS for one entry: an error leaves the entry
// without attributes (node ID 0), which the kernel takes as "look it up
// later", not as ENOENT.
func (h *namesOnlyDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EAGAIN
}

// sessionsROnode is sessions/ on a read-only mount.
type sessionsROnode struct{ dirNode }

var (
	_ = (gofs.NodeOpendirHandler)((*sessionsROnode)(nil))
	_ = (gofs.NodeOpendirHandler)((*sessionsNode)(nil))
)

// OpendirHandle lists sessions/ without loading every session.
func (n *sessionsROnode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &namesOnlyDir{d: &n.dirNode}, 0, 0
}

// OpendirHandle lists sessions/ without loading every session.
func (n *sessionsNode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &namesOnlyDir{d: &n.dirNode}, 0, 0
}
