package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// openBufs are the write handles open on a memory record or ref file: a
// truncate(2) of the path must reach them. (open(O_TRUNC) comes as one
// OPEN with O_TRUNC: the mount asks for ATOMIC_O_TRUNC.)
type openBufs struct {
	mu sync.Mutex
	hs map[*bufHandle]bool
}

func (o *openBufs) add(h *bufHandle) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hs == nil {
		o.hs = map[*bufHandle]bool{}
	}
	o.hs[h] = true
}

func (o *openBufs) remove(h *bufHandle) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.hs, h)
}

// size returns the length of the largest content of the open handles,
// and false when there is none.
func (o *openBufs) size() (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n uint64
	for h := range o.hs {
		h.mu.Lock()
		n = max(n, uint64(len(h.buf)))
		h.mu.Unlock()
	}
	return n, len(o.hs) > 0
}

// empty reports whether no handle is open.
func (o *openBufs) empty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.hs) == 0
}

// truncate sets every open handle's content to sz bytes; it reports
// whether there was any.
func (o *openBufs) truncate(sz uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for h := range o.hs {
		h.truncate(sz, false)
	}
	return len(o.hs) > 0
}

// bufHandle is an open handle whose content is held whole in memory:
// memory records and refs, which are small. Embedders commit it on Flush.
//
// LOCK ORDERING: commitMu, then mu; a memory handle's commit takes the
// memFile's mu briefly with neither held across a backend call.
type bufHandle struct {
	// commitMu serialises the commits of the handle (the closes of dup'd
	// descriptors flush it at once) and guards what embedders keep
	// between commits (refHandle.prev, existed). It is held across the
	// backend calls, which mu must never be: a stat or a read of the
	// open file goes on while its commit runs.
	commitMu sync.Mutex
	// mu guards the fields below.
	mu  sync.Mutex
	buf []byte
	// gen counts changes of buf, so that a commit knows whether what it
	// stored is still the content.
	gen   uint64
	dirty bool
	// touched is set once content was written (or truncated) through
	// this handle. Flush commits only touched content: shells dup and
	// close a new descriptor before writing to it, and committing that
	// empty file would add a version (or, for a ref, fail).
	touched bool
	// failed is set when the commit of the current content failed and
	// the error went back to close(2); the release does not retry it.
	failed bool
}

var (
	_ = (gofs.FileReader)((*bufHandle)(nil))
	_ = (gofs.FileWriter)((*bufHandle)(nil))
)

// take returns a copy of the content to commit and its generation; ok is
// false when there is nothing to commit. The caller holds commitMu.
func (h *bufHandle) take() (body []byte, gen uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty || !h.touched {
		return nil, 0, false
	}
	return bytes.Clone(h.buf), h.gen, true
}

// settle records the outcome of committing generation gen: the content is
// clean if it is still what was committed, failed if its commit failed.
func (h *bufHandle) settle(gen uint64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen {
		return // changed meanwhile: still dirty, and not what failed
	}
	if err != nil {
		h.failed = true
	} else {
		h.dirty = false
	}
}

func (h *bufHandle) truncate(sz uint64, touch bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if int(sz) <= len(h.buf) {
		h.buf = h.buf[:sz]
	} else {
		h.buf = append(h.buf, make([]byte, int(sz)-len(h.buf))...)
	}
	h.dirty, h.failed = true, false
	h.gen++
	h.touched = h.touched || touch
}

func (h *bufHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off >= int64(len(h.buf)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(append([]byte(nil), h.buf[off:min(int64(len(h.buf)), off+int64(len(dest)))]...)), 0
}

func (h *bufHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if end := off + int64(len(data)); end > int64(len(h.buf)) {
		h.buf = append(h.buf, make([]byte, end-int64(len(h.buf)))...)
	}
	copy(h.buf[off:], data)
	h.dirty, h.touched, h.failed = true, true, false
	h.gen++
	return uint32(len(data)), 0
}
