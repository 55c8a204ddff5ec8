package fs

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestBufferedContentIsBounded: a memory record or ref open for writing
// is held whole in memory, and its size is the caller's to choose
// (truncate -s 1T, a write far past the end): each was one allocation of
// that size, which killed the daemon (and a size of 2^63 or more a
// panic). Past maxBuffered the call is EFBIG and the content is left as
// it was; up to it, it is kept.
func TestBufferedContentIsBounded(t *testing.T) {
	ctx := context.Background()
	write := func(off int64, n int) func(*bufHandle) error {
		return func(h *bufHandle) error {
			if _, errno := h.Write(ctx, bytes.Repeat([]byte("x"), n), off); errno != 0 {
				return errno
			}
			return nil
		}
	}
	for _, c := range []struct {
		name string
		do   func(*bufHandle) error
	}{
		{"truncate to 1 TiB", func(h *bufHandle) error { return h.truncate(1<<40, true) }},
		{"truncate past 2^63", func(h *bufHandle) error { return h.truncate(1<<63+5, true) }},
		{"truncate of every open handle, to one byte past the bound", func(h *bufHandle) error {
			o := openBufs[*bufHandle]{hs: map[*bufHandle]bool{h: true}}
			_, err := o.truncate(maxBuffered + 1)
			return err
		}},
		{"write at 1 TiB", write(1<<40, 1)},
		{"write ending one byte past the bound", write(maxBuffered-1, 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &bufHandle{buf: []byte("kept")}
			if err := c.do(h); !errors.Is(err, syscall.EFBIG) {
				t.Fatalf("got %v, want EFBIG", err)
			}
			if string(h.buf) != "kept" || h.dirty {
				t.Fatalf("content %d bytes (dirty %v) after a refused call, want %q untouched", len(h.buf), h.dirty, "kept")
			}
		})
	}
	h := &bufHandle{}
	if err := write(maxBuffered-1, 1)(h); err != nil || len(h.buf) != maxBuffered {
		t.Fatalf("write ending at the bound: %v, %d bytes; want %d", err, len(h.buf), maxBuffered)
	}
}

// TestBufferedRecordReadIsBounded: a memory record opened on a writable
// mount is read whole into its handle; one the bucket holds larger than
// maxBuffered is refused with EFBIG, not read into memory.
func TestBufferedRecordReadIsBounded(t *testing.T) {
	r := newFSRig(t)
	ctx := context.Background()
	body := bytes.Repeat([]byte{'r'}, maxBuffered+2<<20)
	info, err := r.f.store.PutBlobBytes(ctx, body, layout.BlobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := layout.Descriptor{Name: "big", Digest: info.Digest, Size: int64(len(body))}
	got, err := readAll(ctx, r.f, &d)
	if !errors.Is(err, syscall.EFBIG) || got != nil {
		t.Fatalf("readAll of %d bytes: %d bytes, %v; want EFBIG", len(body), len(got), err)
	}
	if errno := r.f.errnoOf("open memory", err); errno != syscall.EFBIG {
		t.Fatalf("errno %v, want EFBIG", errno)
	}
}
