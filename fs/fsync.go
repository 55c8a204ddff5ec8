package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// fsync(2) and fdatasync(2) of what holds nothing unwritten.
//
// A session's files and directories commit at fsync (slots.go); an open
// ref or memory record writes itself (its handle's Fsync). Everything
// else is durable when the call that changed it returned (mkdir of a
// session, a record's or ref's close) or is never written through the
// mount (history, objects/, .pugmark/), so fsync has nothing to do and
// succeeds, as it does on a read-only file of a disk file system.
// go-fuse answers ENOTSUP for a node without Fsync, and that failed
// programs that fsync a directory after a change in it (the careful
// write-rename-fsync-directory pattern in memories/ and refs/) and
// `sync FILE` of anything outside a session.

var (
	_ = (gofs.NodeFsyncer)((*dirNode)(nil))
	_ = (gofs.NodeFsyncer)((*fileNode)(nil))
	_ = (gofs.NodeFsyncer)((*memFile)(nil))
)

// Fsync of a directory other than a session's (sessDirNode overrides it)
// succeeds: what was made or removed in it is in the bucket already.
func (n *dirNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return fsyncHandle(ctx, fh, flags)
}

// Fsync of a read-only file succeeds; a ref open for writing writes
// itself (refHandle.Fsync).
func (n *fileNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return fsyncHandle(ctx, fh, flags)
}

// Fsync of a memory record open for writing commits it
// (memHandle.Fsync); opened read-only, or without a handle, it succeeds.
func (n *memFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return fsyncHandle(ctx, fh, flags)
}

// fsyncHandle hands fsync to an open handle that has something to
// write, since go-fuse asks the node first and would not ask the handle.
func fsyncHandle(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if s, ok := fh.(gofs.FileFsyncer); ok {
		return s.Fsync(ctx, flags)
	}
	return 0
}
