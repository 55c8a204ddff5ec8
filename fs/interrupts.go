package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// uninterrupted is the filesystem as the kernel sees it, with FUSE
// INTERRUPT ignored: every operation runs to its end, as gcsfuse does by
// default. The kernel sends INTERRUPT for any signal that reaches a
// caller blocked on the mount, and Go programs get SIGURG all the time
// (goroutine preemption): go-fuse then cancels the request's context, a
// bucket call under it fails, and an unlink or a lookup returned EINTR to
// a program that does not retry it (the property test saw it at random).
// Nothing can hang for it: every bucket request has a deadline
// (--request-timeout) and bounded retries, and SIGKILL still ends the
// caller once its request returns. SetLkw, a blocking lock wait, stays
// interruptible.
//
// A nil channel never closes, so the request contexts of the node tree
// are never cancelled.
type uninterrupted struct{ fuse.RawFileSystem }

func (u uninterrupted) Lookup(_ <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return u.RawFileSystem.Lookup(nil, header, name, out)
}

func (u uninterrupted) GetAttr(_ <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	return u.RawFileSystem.GetAttr(nil, input, out)
}

func (u uninterrupted) SetAttr(_ <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return u.RawFileSystem.SetAttr(nil, input, out)
}

func (u uninterrupted) Mknod(_ <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return u.RawFileSystem.Mknod(nil, input, name, out)
}

func (u uninterrupted) Mkdir(_ <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return u.RawFileSystem.Mkdir(nil, input, name, out)
}

func (u uninterrupted) Unlink(_ <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	return u.RawFileSystem.Unlink(nil, header, name)
}

func (u uninterrupted) Rmdir(_ <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	return u.RawFileSystem.Rmdir(nil, header, name)
}

func (u uninterrupted) Rename(_ <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	return u.RawFileSystem.Rename(nil, input, oldName, newName)
}

func (u uninterrupted) Link(_ <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	return u.RawFileSystem.Link(nil, input, filename, out)
}

func (u uninterrupted) Symlink(_ <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	return u.RawFileSystem.Symlink(nil, header, pointedTo, linkName, out)
}

func (u uninterrupted) Readlink(_ <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	return u.RawFileSystem.Readlink(nil, header)
}

func (u uninterrupted) Access(_ <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	return u.RawFileSystem.Access(nil, input)
}

func (u uninterrupted) GetXAttr(_ <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	return u.RawFileSystem.GetXAttr(nil, header, attr, dest)
}

func (u uninterrupted) ListXAttr(_ <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	return u.RawFileSystem.ListXAttr(nil, header, dest)
}

func (u uninterrupted) SetXAttr(_ <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return u.RawFileSystem.SetXAttr(nil, input, attr, data)
}

func (u uninterrupted) RemoveXAttr(_ <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	return u.RawFileSystem.RemoveXAttr(nil, header, attr)
}

func (u uninterrupted) Create(_ <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return u.RawFileSystem.Create(nil, input, name, out)
}

func (u uninterrupted) Tmpfile(_ <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return u.RawFileSystem.Tmpfile(nil, input, out)
}

func (u uninterrupted) Open(_ <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return u.RawFileSystem.Open(nil, input, out)
}

func (u uninterrupted) Read(_ <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	return u.RawFileSystem.Read(nil, input, buf)
}

func (u uninterrupted) Lseek(_ <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	return u.RawFileSystem.Lseek(nil, in, out)
}

func (u uninterrupted) GetLk(_ <-chan struct{}, input *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	return u.RawFileSystem.GetLk(nil, input, out)
}

func (u uninterrupted) SetLk(_ <-chan struct{}, input *fuse.LkIn) fuse.Status {
	return u.RawFileSystem.SetLk(nil, input)
}

func (u uninterrupted) Release(_ <-chan struct{}, input *fuse.ReleaseIn) {
	u.RawFileSystem.Release(nil, input)
}

func (u uninterrupted) Write(_ <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return u.RawFileSystem.Write(nil, input, data)
}

func (u uninterrupted) Writev(_ <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	return u.RawFileSystem.Writev(nil, input, data)
}

func (u uninterrupted) CopyFileRange(_ <-chan struct{}, input *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return u.RawFileSystem.CopyFileRange(nil, input)
}

func (u uninterrupted) Flush(_ <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	return u.RawFileSystem.Flush(nil, input)
}

func (u uninterrupted) Fsync(_ <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	return u.RawFileSystem.Fsync(nil, input)
}

func (u uninterrupted) Fallocate(_ <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	return u.RawFileSystem.Fallocate(nil, input)
}

func (u uninterrupted) OpenDir(_ <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return u.RawFileSystem.OpenDir(nil, input, out)
}

func (u uninterrupted) ReadDir(_ <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return u.RawFileSystem.ReadDir(nil, input, out)
}

func (u uninterrupted) ReadDirPlus(_ <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return u.RawFileSystem.ReadDirPlus(nil, input, out)
}

func (u uninterrupted) FsyncDir(_ <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	return u.RawFileSystem.FsyncDir(nil, input)
}

func (u uninterrupted) StatFs(_ <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return u.RawFileSystem.StatFs(nil, input, out)
}

func (u uninterrupted) Statx(_ <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	return u.RawFileSystem.Statx(nil, input, out)
}
