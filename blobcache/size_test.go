package blobcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// zstdRawFrame is a zstd frame holding b in one raw block, with no
// Frame_Content_Size: its header does not say how large it decodes.
func zstdRawFrame(b []byte) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58} // no FCS, 2 MiB window
	hdr := uint32(len(b))<<3 | 1                      // raw block, last
	out = append(out, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(out, b...)
}

// zstdSkippable is a skippable frame with n bytes of user data.
func zstdSkippable(n int) []byte {
	out := binary.LittleEndian.AppendUint32([]byte{0x50, 0x2a, 0x4d, 0x18}, uint32(n))
	return append(out, make([]byte, n)...)
}

// TestBlobSizeDeclared: a declared encoding's size is the decoded size,
// never what a header or trailer claims, also where those claims are wrong
// (several zstd frames, several gzip members), learnt with one read for a
// body of one chunk, remembered on disk so that a second cache on the same
// directory answers with no read; a body that does not decode is an
// error, never a crash or a made-up size.
func TestBlobSizeDeclared(t *testing.T) {
	ctx := context.Background()
	a, b := blobTestText(10<<10), blobTestText(3<<10)
	ab := append(bytes.Clone(a), b...)
	big := blobTestText(600 << 10)
	trunc := gzipOf(t, a)
	trunc = trunc[:len(trunc)-5]
	lying := gzipOf(t, a)
	binary.LittleEndian.PutUint32(lying[len(lying)-4:], 5) // ISIZE says 5
	cases := []struct {
		name, enc string
		stored    []byte
		want      []byte // nil: Size fails with ErrCorrupt
		reads     int64  // backend reads of the first Size
	}{
		{"zstd single frame with FCS", "zstd", zstdOf(t, a), a, 1},
		{"zstd frame without FCS", "zstd", zstdRawFrame(a), a, 1},
		{"zstd two frames (FCS is the first one's)", "zstd", append(zstdOf(t, a), zstdOf(t, b)...), ab, 1},
		{"zstd skippable frame then frame", "zstd", append(zstdSkippable(16), zstdOf(t, a)...), a, 1},
		{"zstd frame then skippable frame", "zstd", append(zstdOf(t, a), zstdSkippable(16)...), a, 1},
		{"zstd larger than a chunk", "zstd", zstdOf(t, big), big, -1},
		{"zstd truncated", "zstd", zstdOf(t, a)[:20], nil, 1},
		{"zstd magic only", "zstd", []byte{0x28, 0xb5, 0x2f, 0xfd}, nil, 1},
		{"gzip single member", "gzip", gzipOf(t, a), a, 1},
		{"gzip two members (ISIZE is the last one's)", "gzip", append(gzipOf(t, a), gzipOf(t, b)...), ab, 1},
		{"gzip larger than a chunk", "gzip", gzipOf(t, big), big, -1},
		{"gzip truncated trailer", "gzip", trunc, nil, 1},
		{"gzip trailer that lies", "gzip", lying, nil, 1},
		{"gzip header only", "gzip", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}, nil, 1},
		{"gzip not gzip at all", "gzip", []byte("plain text"), nil, 1},
		{"gzip empty body", "gzip", []byte{}, []byte{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeBlobSource()
			dg := src.put(tc.stored)
			dir := t.TempDir()
			opts := Options{ChunkSize: 64 << 10, DiskDir: dir, SpillDir: t.TempDir()}
			d := &layout.Descriptor{Name: "f.txt", Digest: dg, Size: int64(len(tc.stored)), ContentEncoding: tc.enc, ContentType: "text/plain"}
			c := newTestBlobCache(t, src, opts)
			if c.SizeKnown(d) != (len(tc.stored) == 0) {
				t.Fatalf("SizeKnown before any read = %v", !(len(tc.stored) == 0))
			}
			got, err := c.Size(ctx, d)
			if tc.want == nil {
				if !errors.Is(err, layout.ErrCorrupt) {
					t.Fatalf("Size = %d, %v; want ErrCorrupt", got, err)
				}
				return
			}
			if err != nil || got != int64(len(tc.want)) {
				t.Fatalf("Size = %d, %v; want %d", got, err, len(tc.want))
			}
			if st := c.Stats(); tc.reads >= 0 && st.BackendReads != tc.reads {
				t.Fatalf("Size took %d backend reads, want %d", st.BackendReads, tc.reads)
			}
			if !c.SizeKnown(d) {
				t.Fatal("SizeKnown after Size = false")
			}
			// The read needs no further request for a one-chunk body.
			before := c.Stats().BackendReads
			body, err := readAll(ctx, c, d, 4096)
			if err != nil || !bytes.Equal(body, tc.want) {
				t.Fatalf("read %d bytes, %v; want %d", len(body), err, len(tc.want))
			}
			if after := c.Stats().BackendReads; tc.reads == 1 && after != before {
				t.Fatalf("reading after Size took %d more backend reads", after-before)
			}
			// Remembered across a restart: a new cache on the directory.
			c.Close()
			c2 := newTestBlobCache(t, src, opts)
			if !c2.SizeKnown(d) {
				t.Fatal("SizeKnown after a restart = false")
			}
			if got, err := c2.Size(ctx, d); err != nil || got != int64(len(tc.want)) {
				t.Fatalf("Size after a restart = %d, %v; want %d", got, err, len(tc.want))
			}
			if st := c2.Stats(); st.BackendReads != 0 {
				t.Fatalf("Size after a restart took %d backend reads", st.BackendReads)
			}
		})
	}
}

// TestBlobSizeStoredEnd: a plain body's size is its descriptor's, checked
// from endProbeFrom bytes on against the stored body's length, once, with
// one small read: another writer's descriptor claiming 2^62 bytes for a
// 5-byte blob showed that size, and `tar c` of the mount padded the failed
// read with zeros up to it for ever (audit 24). Below the threshold, and
// for a body verified at its size, Size reads nothing.
func TestBlobSizeStoredEnd(t *testing.T) {
	ctx := context.Background()
	body := []byte("hello")
	s, dgs := storeWith(t, body, blobTestText(100))
	cases := []struct {
		name    string
		d       layout.Descriptor
		endFrom int64
		corrupt bool  // Size fails with ErrCorrupt
		missing bool  // Size fails with ErrBlobMissing
		reads   int64 // backend reads of the first Size; the second reads nothing
	}{
		{"claims 2^62 bytes", layout.Descriptor{Name: "huge", Digest: dgs[0], Size: 1 << 62}, endProbeFrom, true, false, 1},
		{"claims 1 GiB", layout.Descriptor{Name: "g", Digest: dgs[0], Size: endProbeFrom}, endProbeFrom, true, false, 1},
		{"below the threshold", layout.Descriptor{Name: "small", Digest: dgs[0], Size: endProbeFrom - 1}, endProbeFrom, false, false, 0},
		{"as long as it says", layout.Descriptor{Name: "t", Digest: dgs[1], Size: 100}, 50, false, false, 1},
		{"missing", layout.Descriptor{Name: "m", Digest: layout.DigestOf([]byte("none")), Size: 1 << 40}, endProbeFrom, false, true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestBlobCache(t, s, Options{})
			c.endFrom = tc.endFrom
			d := tc.d
			if c.SizeKnown(&d) != (tc.reads == 0) {
				t.Errorf("SizeKnown = %v before any read, want %v", !(tc.reads == 0), tc.reads == 0)
			}
			for i := range 2 {
				before := c.Stats().BackendReads
				got, err := c.Size(ctx, &d)
				switch {
				case tc.corrupt && !errors.Is(err, layout.ErrCorrupt):
					t.Fatalf("Size = %d, %v; want ErrCorrupt", got, err)
				case tc.missing && !errors.Is(err, layout.ErrBlobMissing):
					t.Fatalf("Size = %d, %v; want ErrBlobMissing", got, err)
				case !tc.corrupt && !tc.missing && (err != nil || got != d.Size):
					t.Fatalf("Size = %d, %v; want %d", got, err, d.Size)
				}
				reads := c.Stats().BackendReads - before
				if want := tc.reads; (i == 0 && reads != want) || (i == 1 && reads != 0 && !tc.missing) {
					t.Errorf("Size %d read the bucket %d times", i+1, reads)
				}
			}
		})
	}
	t.Run("verified at its size", func(t *testing.T) {
		c := newTestBlobCache(t, s, Options{})
		c.endFrom = 50
		d := layout.Descriptor{Name: "t", Digest: dgs[1], Size: 100}
		if _, err := readAll(ctx, c, &d, 10); err != nil {
			t.Fatal(err)
		}
		before := c.Stats().BackendReads
		if got, err := c.Size(ctx, &d); err != nil || got != 100 || c.Stats().BackendReads != before || !c.SizeKnown(&d) {
			t.Fatalf("Size of a verified body = %d, %v, after %d reads", got, err, c.Stats().BackendReads-before)
		}
	})
}
