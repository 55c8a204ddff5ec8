package fs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/blobcache"
	"golang.org/x/sys/unix"
)

// Reads of a blob that has a verified local copy (blobcache.Pin: the disk
// cache's file, hashed whole by this process) skip pugfs's own copying:
//
//   - A READ that reaches pugfs is answered with the file itself
//     (pinnedResult): go-fuse splices it from the page cache into
//     /dev/fuse, so serving a large blob costs no copy in the daemon.
//   - With passthrough (Config.Passthrough, kernel >= 6.9 and
//     CAP_SYS_ADMIN), OPEN hands the kernel a descriptor of the copy and
//     reads never reach pugfs: a warm read runs at the speed of the disk
//     cache's file system. OPEN of a never-read blob runs its verify pass
//     first (the time to the first byte is that pass, as for a READ).
//     Reads through the kernel are not checked again: the copy is the
//     one verified when it was filled (blobcache/files.go).
//
// The kernel's rules for passthrough (fs/fuse/iomode.c) shape the rest.
// An inode in passthrough mode refuses (EIO) every open that is not
// passthrough, and one in cached mode refuses a passthrough open; one
// backing file per inode. So a file decides its mode at its first open
// (ptState) and keeps it: a passthrough file whose copy is gone later is
// opened DIRECT_IO (compatible with both), never cached; a live file that
// is being read through passthrough refuses an open that would change it
// (writing, or reading staged bytes) with ETXTBSY, as a running program's
// file does, instead of the kernel's EIO. go-fuse registers the backing
// file once per inode and drops it at the last release.

// PassthroughMin is the smallest file read through passthrough: below
// it, the page cache (FOPEN_KEEP_CACHE) serves warm reads as well, and an
// OPEN costs no registration of a backing file. Smaller bodies need no
// verified disk copy for it.
const PassthroughMin = 1 << 20

// pinnable is content whose bytes a verified local copy may serve.
type pinnable interface {
	content
	canPin() bool
	// pin returns the verified copy, fetching and verifying the blob
	// first if need be; off is where the read it serves starts (an open
	// is 0), for the traversal read-ahead.
	pin(ctx context.Context, off int64) (*blobcache.Pinned, error)
}

func (b *blobContent) canPin() bool { return b.f.blobs.CanPin(b.d) }
func (b *blobContent) pin(ctx context.Context, off int64) (*blobcache.Pinned, error) {
	b.started(ctx, off)
	return b.f.blobs.Pin(ctx, b.d)
}

func (r *rawContent) canPin() bool { return r.f.blobs.CanPinRaw(r.n) }
func (r *rawContent) pin(ctx context.Context, off int64) (*blobcache.Pinned, error) {
	r.started(off)
	return r.f.blobs.PinRaw(ctx, r.d, r.n)
}

// readContent answers a READ of c: from its verified copy without a copy
// in the daemon when it has one, else through c.readAt.
func (f *FS) readContent(ctx context.Context, c content, dest []byte, off int64) (fuse.ReadResult, error) {
	if p, ok := c.(pinnable); ok && p.canPin() {
		pd, err := p.pin(ctx, off)
		if err != nil {
			return nil, err
		}
		if pd != nil {
			if off >= pd.Size {
				pd.Release()
				return fuse.ReadResultData(nil), nil
			}
			return &pinnedResult{f: f, p: pd, off: off, sz: int(min(int64(len(dest)), pd.Size-off))}, nil
		}
	}
	k, err := c.readAt(ctx, dest, off)
	if err != nil {
		return nil, err
	}
	return fuse.ReadResultData(dest[:k]), nil
}

// pinnedResult is a READ reply read from a pinned copy: go-fuse splices
// it (Seekable) or, failing that, reads it into its buffer (Bytes); Done
// unpins it once the reply is written.
type pinnedResult struct {
	f   *FS
	p   *blobcache.Pinned
	off int64
	sz  int
}

var _ fuse.ReadResult = (*pinnedResult)(nil)

func (r *pinnedResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	n, err := r.p.F.ReadAt(buf[:min(len(buf), r.sz)], r.off)
	if err != nil && !errors.Is(err, io.EOF) {
		// Through errnoOf, which logs it: the disk copy failed, and a
		// bare EIO left nothing to go on.
		return nil, fuse.Status(r.f.errnoOf("read the verified disk copy "+r.p.F.Name(), err))
	}
	return buf[:n], fuse.OK
}

func (r *pinnedResult) Size() int { return r.sz }
func (r *pinnedResult) Done()     { r.p.Release() }

// Seekable makes go-fuse splice the reply from the file (its
// seekableResult).
func (r *pinnedResult) Seekable() (fd uintptr, off int64, sz int) {
	return r.p.F.Fd(), r.off, r.sz
}

// ptState is a file's passthrough mode, decided at its first open.
type ptState struct {
	mode atomic.Int32 // ptUndecided, ptOn, ptOff
	// open counts the handles of this file that are (or may be) in
	// passthrough mode. Changed under mu; read without it.
	open atomic.Int32

	mu sync.Mutex
	// closed is closed when open drops to zero; nil while nobody waits
	// for that. GUARDED_BY(mu).
	closed chan struct{}
}

// releaseWait bounds how long an open that the passthrough readers of a
// file would refuse waits for them to go. The kernel forgets a reader at
// its close(2) and tells pugfs with a RELEASE sent in the background, so
// an open right after the last reader's close can arrive first; that
// RELEASE is one request away, a reader still reading never goes.
const releaseWait = time.Second

// opened counts a passthrough handle.
func (st *ptState) opened() {
	st.mu.Lock()
	st.open.Add(1)
	st.mu.Unlock()
}

// released uncounts a passthrough handle and wakes the opens waiting for
// the last one.
func (st *ptState) released() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.open.Add(-1) == 0 && st.closed != nil {
		close(st.closed)
		st.closed = nil
	}
}

// busy reports whether the file still has passthrough readers after
// waiting up to releaseWait (or until ctx ends, an interrupted open) for
// the RELEASEs of readers that already closed.
func (st *ptState) busy(ctx context.Context) bool {
	if st.open.Load() == 0 {
		return false
	}
	timer := time.NewTimer(releaseWait)
	defer timer.Stop()
	for {
		st.mu.Lock()
		if st.open.Load() == 0 {
			st.mu.Unlock()
			return false
		}
		if st.closed == nil {
			st.closed = make(chan struct{})
		}
		ch := st.closed
		st.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return st.open.Load() > 0
		case <-ctx.Done():
			return st.open.Load() > 0
		}
	}
}

const (
	ptUndecided = iota
	ptOn
	ptOff
)

// openPassthrough opens content c of a file with state st for reading
// through passthrough, if the mount and c allow it. ok false: open the
// file as if passthrough did not exist (the file is in cached mode).
func (f *FS) openPassthrough(ctx context.Context, st *ptState, c content) (fh gofs.FileHandle, flags uint32, ok bool, errno syscall.Errno) {
	p, isPinnable := c.(pinnable)
	if !f.passthrough.Load() || !isPinnable || st.mode.Load() == ptOff {
		return nil, 0, false, 0
	}
	if sz, err := c.size(ctx); err != nil || sz < PassthroughMin || !p.canPin() {
		st.mode.CompareAndSwap(ptUndecided, ptOff)
		if st.mode.Load() == ptOff {
			return nil, 0, false, 0
		}
	}
	pd, err := p.pin(ctx, 0)
	if err != nil {
		return nil, 0, false, f.errnoOf("open", err)
	}
	h := &ptHandle{st: st}
	if pd == nil {
		if st.mode.CompareAndSwap(ptUndecided, ptOff) || st.mode.Load() == ptOff {
			return nil, 0, false, 0
		}
		// A passthrough file without a copy now (the disk cache gave
		// up, say): DIRECT_IO suits the inode whatever mode it is in.
		st.opened()
		return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NOFLUSH, true, 0
	}
	fd, err := unix.FcntlInt(pd.F.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	pd.Release()
	if err != nil {
		return nil, 0, false, f.errnoOf("open", err)
	}
	h.fd = os.NewFile(uintptr(fd), pd.F.Name())
	if !st.mode.CompareAndSwap(ptUndecided, ptOn) && st.mode.Load() != ptOn {
		h.close()
		return nil, 0, false, 0
	}
	st.opened()
	return h, fuse.FOPEN_NOFLUSH, true, 0
}

// ptHandle is an open file that may read through passthrough. go-fuse
// asks for its descriptor when the inode has no backing file yet, and
// adds FOPEN_PASSTHROUGH (dropping KEEP_CACHE) when it has one.
type ptHandle struct {
	st       *ptState
	fd       *os.File // a descriptor of the verified copy; nil: none
	released atomic.Bool
}

var (
	_ = (gofs.FilePassthroughFder)((*ptHandle)(nil))
	_ = (gofs.FileReleaser)((*ptHandle)(nil))
)

func (h *ptHandle) PassthroughFd() (int, bool) {
	if h.fd == nil {
		return 0, false
	}
	return int(h.fd.Fd()), true
}

func (h *ptHandle) close() {
	if h.fd != nil {
		h.fd.Close()
	}
}

func (h *ptHandle) Release(ctx context.Context) syscall.Errno {
	if !h.released.Swap(true) {
		h.close()
		h.st.released()
	}
	return 0
}

// probePassthrough registers a backing file with the kernel once and
// reports whether that works (the kernel has FUSE passthrough, it was
// negotiated, and pugfs may register: CAP_SYS_ADMIN). The file is a
// scratch file beside the staging files, on the file system of the disk
// cache, whose files passthrough would hand over.
func probePassthrough(srv *fuse.Server, dir string) error {
	tmp, err := os.CreateTemp(dir, ".passthrough-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(tmp.Fd())})
	if errno != 0 {
		return &os.PathError{Op: "register backing file", Path: filepath.Join(dir, filepath.Base(tmp.Name())), Err: errno}
	}
	srv.UnregisterBackingFd(id)
	return nil
}
