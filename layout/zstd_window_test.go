package layout

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

// zstdFrame is a zstd frame holding content in one raw block, declaring
// a window of 2^windowLog bytes and no content size: what zstd --long
// writes for a body of unknown size, however small.
func zstdFrame(windowLog int, content []byte) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	hdr := 1 | len(content)<<3 // last block, raw, its size
	return append(f, append([]byte{byte(hdr), byte(hdr >> 8), byte(hdr >> 16)}, content...)...)
}

// TestZstdWindows: §6.2 says any conformant zstd stream is read, whatever
// the encoder's options; zstd --long declares a window of 64 or 128 MiB
// (window log 26 or 27), which libzstd's zstd -d decodes by default. A
// body decoded whole (a snapshot, a memory file) is decoded into its
// output and takes any window; a stream (a blob) up to libzstd's default
// limit, 128 MiB, and a decoder that held such a window is not pooled.
// Snapshots were refused from a 64 MiB window and blobs from 128 MiB, as
// corrupt.
func TestZstdWindows(t *testing.T) {
	body := []byte(`[{"name":"a","sequence-number":1}]`)
	for _, c := range []struct {
		windowLog int
		small     bool // read whole under a bound of 1 MiB
		streamed  bool // NewDecoder's stream reads it
		pooled    bool // its decoder goes back to the pool
	}{
		{23, true, true, true},
		{26, true, true, false},
		{27, true, true, false},
		// Past libzstd's default: only where the bound allows that much.
		{28, false, false, false},
	} {
		frame := zstdFrame(c.windowLog, body)
		got, err := DecodeBody(frame, EncodingZstd, DefaultMaxDecoded)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("window log %d, decoded whole: %q, %v; want the body", c.windowLog, got, err)
		}
		ds, err := DecodeDescriptors(frame, "", 1<<20)
		switch {
		case c.small && (err != nil || len(ds) != 1 || ds[0].Name != "a"):
			t.Errorf("window log %d, as a snapshot of at most 1 MiB: %+v, %v; want one descriptor", c.windowLog, ds, err)
		case !c.small && !errors.Is(err, ErrTooLarge):
			t.Errorf("window log %d, as a snapshot of at most 1 MiB: %+v, %v; want ErrTooLarge", c.windowLog, ds, err)
		}
		r, err := NewDecoder(bytes.NewReader(frame), EncodingZstd)
		if err != nil {
			t.Fatalf("window log %d: NewDecoder: %v", c.windowLog, err)
		}
		got, err = io.ReadAll(r)
		switch {
		case c.streamed && (err != nil || !bytes.Equal(got, body)):
			t.Errorf("window log %d, streamed: %q, %v; want the body", c.windowLog, got, err)
		case !c.streamed && err == nil:
			t.Errorf("window log %d, streamed: decoded past the 128 MiB limit", c.windowLog)
		}
		if z, ok := r.(*zstdCloser); !ok || (z.pool != nil) != c.pooled {
			t.Errorf("window log %d: pooled %v, want %v", c.windowLog, ok && z.pool != nil, c.pooled)
		}
		r.Close()
	}
	// Past the bound, a whole body is refused as too large, not corrupt.
	big := zstdFrame(27, bytes.Repeat([]byte{' '}, 2000))
	if _, err := DecodeBody(big, EncodingZstd, 1000); !errors.Is(err, ErrTooLarge) {
		t.Errorf("2,000 bytes under a bound of 1,000: %v, want ErrTooLarge", err)
	}
}

// TestZstdLargeWindowBomb: a frame that declares a 128 MiB window and
// decodes past a small bound is refused as too large before it makes
// much more than the bound.
func TestZstdLargeWindowBomb(t *testing.T) {
	var frame []byte
	content := bytes.Repeat([]byte{' '}, 100<<10)
	frame = zstdFrame(27, content)
	// More raw blocks, 10 MiB in all: the first block was the last one,
	// so rebuild with the last-block bit on the final block only.
	frame = frame[:6]
	for i := 0; i < 100; i++ {
		hdr := len(content) << 3
		if i == 99 {
			hdr |= 1
		}
		frame = append(frame, byte(hdr), byte(hdr>>8), byte(hdr>>16))
		frame = append(frame, content...)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := DecodeBody(frame, EncodingZstd, 1<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("10 MiB under a bound of 1 MiB: %v, want ErrTooLarge", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("refusing it allocated %d MiB", alloc>>20)
	}
}
