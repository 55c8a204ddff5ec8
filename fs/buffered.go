package fs

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// openBufs are the write handles open on a memory record or ref file: a
// truncate(2) of the path must reach them (open(O_TRUNC) comes as one
// OPEN with O_TRUNC: the mount asks for ATOMIC_O_TRUNC), and so must an
// unlink or a rename over the name, which drop what they hold. H is the
// handle type, so that a ref's rename can move its handles' compare-and-
// swap base along.
//
// LOCK ORDERING: mu, then each handle's mu.
type openBufs[H buffered] struct {
	mu sync.Mutex
	hs map[H]bool // GUARDED_BY(mu)
}

// buffered is a handle whose content is a bufHandle.
type buffered interface {
	comparable
	buffer() *bufHandle
}

func (h *bufHandle) buffer() *bufHandle { return h }

func (o *openBufs[H]) add(h H) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hs == nil {
		o.hs = map[H]bool{}
	}
	o.hs[h] = true
}

func (o *openBufs[H]) remove(h H) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.hs, h)
}

// all returns the open handles.
func (o *openBufs[H]) all() []H {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]H, 0, len(o.hs))
	for h := range o.hs {
		out = append(out, h)
	}
	return out
}

// content returns a copy of the content of the open handle written last
// (of any, if none was written), and false when none is open or every
// one was dropped: what a second descriptor opened on a file that exists
// only in its creator's buffer reads.
func (o *openBufs[H]) content() ([]byte, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []byte
	var last uint64
	found := false
	for h := range o.hs {
		b := h.buffer()
		b.mu.Lock()
		if !b.dropped && (!found || b.written > last) {
			out, last, found = bytes.Clone(b.buf), b.written, true
		}
		b.mu.Unlock()
	}
	return out, found
}

// unsaved reports whether an open handle holds writes not committed yet
// (and not dropped).
func (o *openBufs[H]) unsaved() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for h := range o.hs {
		b := h.buffer()
		b.mu.Lock()
		u := b.dirty && b.touched && !b.dropped
		b.mu.Unlock()
		if u {
			return true
		}
	}
	return false
}

// empty reports whether no handle is open.
func (o *openBufs[H]) empty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.hs) == 0
}

// truncate sets every open handle's content to sz bytes; it reports
// whether there was any. A size past maxBuffered changes none.
func (o *openBufs[H]) truncate(sz uint64) (bool, error) {
	if sz > maxBuffered {
		return false, errTooLargeToBuffer
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for h := range o.hs {
		if err := h.buffer().truncate(sz, false); err != nil {
			return false, err
		}
	}
	return len(o.hs) > 0, nil
}

// drop marks every handle open now dropped (bufHandle.dropped): the
// file's name was removed, or renamed over.
func (o *openBufs[H]) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for h := range o.hs {
		b := h.buffer()
		b.mu.Lock()
		b.dropped = true
		b.mu.Unlock()
	}
}

// writeSeq orders the writes of all buffered handles (bufHandle.written).
var writeSeq atomic.Uint64

// maxBuffered bounds the content of a buffered handle. Memory records
// and refs are small, but the size is the caller's (truncate -s 1T, a
// write far past the end) or the bucket's (a record read whole at open):
// unbounded, one call made the daemon allocate it, and die with every
// write of the mount staged in it.
const maxBuffered = 64 << 20

// errTooLargeToBuffer refuses a buffered content past maxBuffered.
var errTooLargeToBuffer = fmt.Errorf("memory records and refs are edited in memory, up to %d MiB: %w", maxBuffered>>20, syscall.EFBIG)

// bufHandle is an open handle whose content is held whole in memory:
// memory records and refs, which are small. Embedders commit it on Flush.
//
// LOCK ORDERING: commitMu, then mu; a memory handle's commit takes the
// memFile's mu briefly with neither held across a backend call.
type bufHandle struct {
	// commitMu serialises the commits of the handle (the closes of dup'd
	// descriptors flush it at once) and guards what embedders keep
	// between commits (refHandle.prev, existed, together with the ref's
	// commits: see there). It is held across the
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
	// dropped is set when the file's name was unlinked, or renamed over,
	// while this handle was open: what it holds is committed nowhere, as
	// the data of an unlinked file is. Per handle, not per file: a
	// descriptor opened after the unlink (the name written again) is not.
	dropped bool
	// written is writeSeq at this handle's last write (openBufs.content).
	written uint64
	// meta is the POSIX metadata (posix-mode, posix-mtime) a memory
	// record's descriptor is committed with: the record's, changed by
	// chmod and utimes through the mount; a content write clears
	// posix-mtime (decisions.md). Unused by refs, which keep none.
	meta map[string]string
	// appending is set for a descriptor opened with O_APPEND: its writes
	// go at the end of its own content. The kernel gives an appending
	// write the file's size as its offset, which counts what other
	// descriptors of the file wrote and this one does not hold: the gap
	// was committed as NUL bytes (the memories audit).
	appending bool
	// appendedFrom is, for an appending descriptor that has only
	// appended, the length of the content it was opened on (or last
	// committed); -1 once it truncated (memHandle.Flush).
	appendedFrom int
}

var (
	_ = (gofs.FileReader)((*bufHandle)(nil))
	_ = (gofs.FileWriter)((*bufHandle)(nil))
)

// appendOnly returns the length of the content an appending descriptor
// was opened on (or last committed) when all it did since was append;
// else -1.
func (h *bufHandle) appendOnly() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.appending {
		return -1
	}
	return h.appendedFrom
}

// committedAs records that content body (taken from the handle) was
// committed as merged: the same bytes, or, for an appending descriptor,
// its appended bytes on the record another writer left meanwhile. The
// content becomes merged, what was appended since following it.
func (h *bufHandle) committedAs(body, merged []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.appendedFrom < 0 || len(h.buf) < len(body) {
		return // truncated meanwhile: what it holds is its own
	}
	if !bytes.Equal(body, merged) {
		h.buf = append(bytes.Clone(merged), h.buf[len(body):]...)
	}
	h.appendedFrom = len(merged)
}

// take returns a copy of the content to commit and its generation; ok is
// false when there is nothing to commit. The caller holds commitMu.
func (h *bufHandle) take() (body []byte, gen uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty || !h.touched || h.dropped {
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

func (h *bufHandle) truncate(sz uint64, touch bool) error {
	if sz > maxBuffered {
		return errTooLargeToBuffer
	}
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
	h.appendedFrom = -1
	delete(h.meta, layout.MetaPosixMtime)
	h.written = writeSeq.Add(1)
	return nil
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
	if h.appending {
		off = int64(len(h.buf))
	}
	if off > maxBuffered-int64(len(data)) {
		return 0, syscall.EFBIG // errTooLargeToBuffer
	}
	if end := off + int64(len(data)); end > int64(len(h.buf)) {
		h.buf = append(h.buf, make([]byte, end-int64(len(h.buf)))...)
	}
	copy(h.buf[off:], data)
	delete(h.meta, layout.MetaPosixMtime)
	h.dirty, h.touched, h.failed = true, true, false
	h.gen++
	h.written = writeSeq.Add(1)
	return uint32(len(data)), 0
}

// setAttrs makes a chmod or utimes in the metadata the content is
// committed with, and marks the handle for a commit when it changed it.
// keep is the modification time the content shows now, which a chmod
// records so that it does not move (zero: the content is being
// written, and its commit is its time).
func (h *bufHandle) setAttrs(c staging.AttrChange, keep time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	before := maps.Clone(h.meta)
	h.meta = c.Apply(maps.Clone(h.meta), keep)
	if c.MtimeNow || !maps.Equal(before, h.meta) {
		h.dirty, h.touched, h.failed = true, true, false
		h.gen++
	}
}

// metadata returns a copy of bufHandle.meta.
func (h *bufHandle) metadata() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.meta)
}

// isDropped reports bufHandle.dropped.
func (h *bufHandle) isDropped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dropped
}
