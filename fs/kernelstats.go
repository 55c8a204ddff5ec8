package fs

import (
	"fmt"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// KernelStats counts the requests the kernel sent for the file operations
// that the kernel's fast paths remove (noopen.go, xattroff.go,
// passthrough.go): what a warm grep -r or ls -l costs shows here, and the
// tests assert on it.
type KernelStats struct {
	Lookups, Getattrs, Opens, Releases, Flushes, Reads, Getxattrs, Listxattrs int64
}

// String is one line naming each count.
func (k KernelStats) String() string {
	return fmt.Sprintf("kernel requests: lookup %d, getattr %d, open %d, release %d, flush %d, read %d, getxattr %d, listxattr %d",
		k.Lookups, k.Getattrs, k.Opens, k.Releases, k.Flushes, k.Reads, k.Getxattrs, k.Listxattrs)
}

type kernelCounts struct {
	lookups, getattrs, opens, releases, flushes, reads, getxattrs, listxattrs atomic.Int64
	// handles counts the files and directories the kernel holds open:
	// opens, creates and opendirs that succeeded, less their releases.
	handles atomic.Int64
}

// OpenHandles returns how many files and directories the kernel holds
// open on the mount now (each open file description once).
func (f *FS) OpenHandles() int64 { return f.kreq.handles.Load() }

// KernelStats returns the request counts so far.
func (f *FS) KernelStats() KernelStats {
	c := &f.kreq
	return KernelStats{Lookups: c.lookups.Load(), Getattrs: c.getattrs.Load(), Opens: c.opens.Load(),
		Releases: c.releases.Load(), Flushes: c.flushes.Load(), Reads: c.reads.Load(),
		Getxattrs: c.getxattrs.Load(), Listxattrs: c.listxattrs.Load()}
}

// counted is the outermost layer of a mount's node tree: it counts, and
// passes every request on.
type counted struct {
	fuse.RawFileSystem
	c *kernelCounts
}

func (w counted) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	w.c.lookups.Add(1)
	return w.RawFileSystem.Lookup(cancel, h, name, out)
}

func (w counted) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	w.c.getattrs.Add(1)
	return w.RawFileSystem.GetAttr(cancel, in, out)
}

func (w counted) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	w.c.opens.Add(1)
	st := w.RawFileSystem.Open(cancel, in, out)
	if st.Ok() {
		w.c.handles.Add(1) // a RELEASE follows, handle or not
	}
	return st
}

func (w counted) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := w.RawFileSystem.Create(cancel, in, name, out)
	if st.Ok() {
		w.c.handles.Add(1)
	}
	return st
}

func (w counted) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := w.RawFileSystem.OpenDir(cancel, in, out)
	if st.Ok() {
		w.c.handles.Add(1)
	}
	return st
}

func (w counted) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	w.c.releases.Add(1)
	w.RawFileSystem.Release(cancel, in)
	w.c.handles.Add(-1)
}

func (w counted) ReleaseDir(in *fuse.ReleaseIn) {
	w.RawFileSystem.ReleaseDir(in)
	w.c.handles.Add(-1)
}

func (w counted) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	w.c.flushes.Add(1)
	return w.RawFileSystem.Flush(cancel, in)
}

func (w counted) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	w.c.reads.Add(1)
	return w.RawFileSystem.Read(cancel, in, buf)
}

func (w counted) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	w.c.getxattrs.Add(1)
	return w.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (w counted) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	w.c.listxattrs.Add(1)
	return w.RawFileSystem.ListXAttr(cancel, h, dest)
}
