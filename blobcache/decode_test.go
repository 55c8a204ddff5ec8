package blobcache

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
)

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstdOf(t testing.TB, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// blobTestText is compressible content with some variety.
func blobTestText(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString(`{"line":`)
		b.WriteString(strings.Repeat("x", i%37))
		b.WriteString("}\n")
	}
	return b.Bytes()[:n]
}

func encodeAs(t testing.TB, enc string, b []byte) []byte {
	if enc == "gzip" {
		return gzipOf(t, b)
	}
	return zstdOf(t, b)
}

func TestBlobDecoded(t *testing.T) {
	ctx := context.Background()
	const cs = 16 << 10
	for _, enc := range []string{"gzip", "zstd"} {
		for _, size := range []int{0, 2000, 300 << 10} {
			t.Run(enc+"/"+strconv.Itoa(size), func(t *testing.T) {
				plain := blobTestText(size)
				stored := encodeAs(t, enc, plain)
				store, ds := storeWith(t, stored)
				spill := t.TempDir()
				c := newTestBlobCache(t, store, Options{ChunkSize: cs, MemBytes: 1 << 20, SpillDir: spill})
				d := &layout.Descriptor{Digest: ds[0], Size: int64(len(stored)), ContentEncoding: strings.ToUpper(enc), ContentType: "application/json"}
				if got, err := c.Size(ctx, d); err != nil || got != int64(len(plain)) {
					t.Fatalf("Size = %d, %v; want %d", got, err, len(plain))
				}
				passes := c.Stats().VerifyPasses
				for _, step := range []int{4096, 7777} {
					got, err := readAll(ctx, c, d, step)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("read in steps of %d: %d bytes, %v", step, len(got), err)
					}
				}
				if size > 0 {
					p := make([]byte, 333)
					off := int64(size / 3)
					n, err := c.ReadAt(ctx, d, p, off)
					if (err != nil && err != io.EOF) || !bytes.Equal(p[:n], plain[off:min(int(off)+333, size)]) {
						t.Fatalf("odd read: %d %v", n, err)
					}
				}
				// With the decoded body closed, chunks still in memory are
				// served without decoding again.
				c.mu.Lock()
				c.decs.Purge()
				c.unlock()
				reads := c.Stats().BackendReads
				if got, err := readAll(ctx, c, d, 5000); err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("after closing the decoded body: %d bytes, %v", len(got), err)
				}
				c.mu.Lock()
				open := c.decs.Len()
				c.mu.Unlock()
				if c.Stats().BackendReads != reads || open != 0 {
					t.Fatalf("cached decoded chunks were decoded again (reads %d -> %d, open %d)", reads, c.Stats().BackendReads, open)
				}
				// Evicted decoded chunks come back: from the spill file, or by
				// decoding again.
				c.dropMemory()
				if got, err := readAll(ctx, c, d, 5000); err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("after eviction: %d bytes, %v", len(got), err)
				}
				if st := c.Stats(); st.VerifyPasses != passes || st.VerifyPasses != 1 {
					t.Fatalf("verify passes %d (after Size %d); want exactly one", st.VerifyPasses, passes)
				}
				// The stored bytes stay readable as they are.
				raw := make([]byte, len(stored))
				if n, err := c.ReadRawAt(ctx, ds[0], int64(len(stored)), raw, 0); n != len(stored) || !bytes.Equal(raw, stored) {
					t.Fatalf("raw view: %d %v", n, err)
				}
				if ents, _ := os.ReadDir(spill); len(ents) != 0 {
					t.Fatalf("spill files left visible: %v", ents)
				}
			})
		}
	}
}

func TestBlobDecodedConcurrent(t *testing.T) {
	ctx := context.Background()
	plain := blobTestText(200 << 10)
	stored := gzipOf(t, plain)
	src := newFakeBlobSource()
	dg := src.put(stored)
	c := newTestBlobCache(t, src, Options{ChunkSize: 8 << 10, MemBytes: 128 << 10, SpillDir: t.TempDir()})
	d := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentEncoding: "gzip"}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := readAll(ctx, c, d, 1000+i*777)
			if err == nil && !bytes.Equal(got, plain) {
				err = errors.New("wrong content")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.VerifyPasses != 1 || st.MemPeak > 128<<10 {
		t.Fatalf("want one pass within the budget: %+v", st)
	}
}

func TestBlobSniff(t *testing.T) {
	ctx := context.Background()
	plain := blobTestText(50 << 10)
	gz, zs := gzipOf(t, plain), zstdOf(t, plain)
	small := []byte(`{"small":true}`)
	smallGz := gzipOf(t, small)
	notGzip := append([]byte{0x1f, 0x8b}, []byte("just text that starts oddly")...)
	cases := []struct {
		name, ct string
		stored   []byte
		inline   bool
		want     []byte
	}{
		{"a.json", "application/json", gz, false, plain},
		{"a.txt", "", zs, false, plain},
		{"a.txt", "text/plain; charset=utf-8", zs, false, plain},
		{"a", "application/vnd.pugmark+json", gz, false, plain},
		{"a.ndjson", "application/x-ndjson", gz, false, plain},
		{"small.json", "application/json", smallGz, true, small},
		{"a.json.gz", "application/json", gz, false, gz},
		{"a.bin", "application/octet-stream", gz, false, gz},
		{"odd.txt", "text/plain", notGzip, false, notGzip},
		{"plain.json", "application/json", plain, false, plain},
	}
	for _, tc := range cases {
		for _, sniffing := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s %s sniff=%v", tc.name, tc.ct, sniffing), func(t *testing.T) {
				src := newFakeBlobSource()
				dg := src.put(tc.stored)
				c := newTestBlobCache(t, src, Options{ChunkSize: 4096, SniffEncoding: sniffing})
				d := &layout.Descriptor{Digest: dg, Size: int64(len(tc.stored)), Name: tc.name, ContentType: tc.ct}
				if tc.inline {
					d.Data = bytes.Clone(tc.stored)
				}
				want := tc.want
				if !sniffing {
					want = tc.stored // no declaration: shown as stored
				}
				if !sniffing && !c.SizeKnown(d) {
					t.Fatal("SizeKnown = false without sniffing")
				}
				if got, err := c.Size(ctx, d); err != nil || got != int64(len(want)) {
					t.Fatalf("Size = %d, %v; want %d", got, err, len(want))
				}
				if st := c.Stats(); !sniffing && st.BackendReads != 0 {
					t.Fatalf("Size without sniffing read the blob: %+v", st)
				}
				got, err := readAll(ctx, c, d, 3000)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(want))
				}
				st := c.Stats()
				if tc.inline && st.BackendReads != 0 {
					t.Fatalf("inline body fetched: %+v", st)
				}
				if !tc.inline && st.VerifyPasses != 1 {
					t.Fatalf("verify passes = %d, want 1", st.VerifyPasses)
				}
			})
		}
	}
}

func TestBlobDecompressionBomb(t *testing.T) {
	ctx := context.Background()
	zeros := make([]byte, 4<<20)
	for _, enc := range []string{"gzip", "zstd"} {
		for _, declared := range []bool{true, false} {
			name := enc + "/declared"
			if !declared {
				name = enc + "/sniffed"
			}
			t.Run(name, func(t *testing.T) {
				stored := encodeAs(t, enc, zeros)
				src := newFakeBlobSource()
				dg := src.put(stored)
				c := newTestBlobCache(t, src, Options{ChunkSize: 64 << 10, MaxDecoded: 1 << 20, SpillDir: t.TempDir(), SniffEncoding: !declared})
				d := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentType: "application/json"}
				if declared {
					d.ContentEncoding = enc
				}
				if _, err := c.Size(ctx, d); !errors.Is(err, layout.ErrTooLarge) {
					t.Fatalf("Size: %v, want ErrTooLarge", err)
				}
				if n, err := c.ReadAt(ctx, d, make([]byte, 10), 0); !errors.Is(err, layout.ErrTooLarge) || n != 0 {
					t.Fatalf("ReadAt: %d, %v, want ErrTooLarge", n, err)
				}
				if st := c.Stats(); st.VerifyPasses != 1 {
					t.Fatalf("the bomb was fetched %d times", st.VerifyPasses)
				}
			})
		}
	}
}

func TestBlobDeclaredEncodingWrong(t *testing.T) {
	ctx := context.Background()
	body := []byte("this is not gzip at all, though the descriptor says so")
	src := newFakeBlobSource()
	dg := src.put(body)
	c := newTestBlobCache(t, src, Options{})
	for _, enc := range []string{"gzip", "zstd", "br"} {
		d := &layout.Descriptor{Digest: dg, Size: int64(len(body)), ContentEncoding: enc}
		_, err := c.ReadAt(ctx, d, make([]byte, 10), 0)
		if !errors.Is(err, layout.ErrCorrupt) || !strings.Contains(err.Error(), "objects/sha256:"+dg.Hex()) {
			t.Fatalf("%s: %v; want ErrCorrupt naming the key", enc, err)
		}
	}
	raw := make([]byte, len(body))
	if n, err := c.ReadRawAt(ctx, dg, int64(len(body)), raw, 0); n != len(body) || err != nil || !bytes.Equal(raw, body) {
		t.Fatalf("raw view of a body that does not decode: %d %v", n, err)
	}
}

func TestBlobDecodedCorruptRaw(t *testing.T) {
	ctx := context.Background()
	stored := gzipOf(t, blobTestText(20<<10))
	src := newFakeBlobSource()
	dg := layout.DigestOf(stored)
	bad := bytes.Clone(stored)
	bad[len(bad)/2] ^= 0xff
	src.putAs(dg, bad)
	c := newTestBlobCache(t, src, Options{ChunkSize: 4096})
	d := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentEncoding: "gzip"}
	if _, err := c.Size(ctx, d); !errors.Is(err, layout.ErrCorrupt) || !strings.Contains(err.Error(), dg.Hex()) {
		t.Fatalf("Size: %v", err)
	}
	if n, err := c.ReadAt(ctx, d, make([]byte, 10), 0); !errors.Is(err, layout.ErrCorrupt) || n != 0 {
		t.Fatalf("ReadAt: %d %v", n, err)
	}
	// The same corrupt blob, sniffed: still an error, not the raw bytes.
	d2 := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentType: "application/json"}
	if n, err := c.ReadAt(ctx, d2, make([]byte, 10), 0); !errors.Is(err, layout.ErrCorrupt) || n != 0 {
		t.Fatalf("sniffed ReadAt: %d %v", n, err)
	}
}

func TestBlobSizeMismatch(t *testing.T) {
	ctx := context.Background()
	body := blobTestBody(3000, 8)
	src := newFakeBlobSource()
	dg := src.put(body)
	c := newTestBlobCache(t, src, Options{ChunkSize: 1024})
	d := &layout.Descriptor{Digest: dg, Size: int64(len(body)), ContentType: "image/png"}
	if _, err := readAll(ctx, c, d, 1000); err != nil {
		t.Fatal(err)
	}
	wrong := &layout.Descriptor{Digest: dg, Size: int64(len(body)) + 1, ContentType: "image/png"}
	if _, err := c.ReadAt(ctx, wrong, make([]byte, 10), 0); !errors.Is(err, layout.ErrCorrupt) || !strings.Contains(err.Error(), "descriptor size") {
		t.Fatalf("wrong size: %v", err)
	}
	// The right descriptor is not affected.
	if got, err := readAll(ctx, c, d, 1000); err != nil || !bytes.Equal(got, body) {
		t.Fatal(err)
	}
}

func TestBlobSpillBound(t *testing.T) {
	ctx := context.Background()
	src := newFakeBlobSource()
	var ds []*layout.Descriptor
	var plains [][]byte
	for i := range 4 {
		p := blobTestText(80<<10 + i)
		s := gzipOf(t, p)
		ds = append(ds, &layout.Descriptor{Digest: src.put(s), Size: int64(len(s)), ContentEncoding: "gzip"})
		plains = append(plains, p)
	}
	// Without a disk cache, DiskBytes bounds the spill files held open.
	c := newTestBlobCache(t, src, Options{ChunkSize: 8 << 10, MemBytes: 64 << 10, DiskBytes: 200 << 10, SpillDir: t.TempDir()})
	for round := range 2 {
		for i, d := range ds {
			got, err := readAll(ctx, c, d, 3000)
			if err != nil || !bytes.Equal(got, plains[i]) {
				t.Fatalf("round %d body %d: %v", round, i, err)
			}
			c.mu.Lock()
			spill := c.spillBytes
			c.mu.Unlock()
			if spill > 200<<10 {
				t.Fatalf("spill bytes %d past the bound", spill)
			}
		}
	}
}

func TestBlobDecodedCopyDamaged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	plain := blobTestText(300 << 10)
	stored := gzipOf(t, plain)
	src := newFakeBlobSource()
	dg := src.put(stored)
	var log syncbuf.Buffer
	opts := diskOpts(dir)
	opts.Logger = log.Logger(slog.LevelWarn)
	c := newTestBlobCache(t, src, opts)
	d := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentEncoding: "gzip"}
	if got, err := readAll(ctx, c, d, 10000); err != nil || !bytes.Equal(got, plain) {
		t.Fatal(err)
	}
	sum := layout.DigestOf(plain).Hex()
	p := filepath.Join(dir, diskSubdir, diskData, sum[:2], sum)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("decoded body not in the disk cache: %v", err)
	}
	// Damage the decoded copy in place (the open descriptor sees it too).
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[100] ^ 1}, 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	c.dropMemory()
	if got, err := readAll(ctx, c, d, 10000); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("after damage: %v", err)
	}
	if log.Count("damaged") == 0 {
		t.Fatalf("damage not reported:\n%s", log.String())
	}
}

// TestBlobAnswerCutShort: an answer that stops before its length (a
// connection closed early: net/http's io.ErrUnexpectedEOF) is read
// again, not taken for a blob shorter than its descriptor. Taken so, a
// healthy blob was held bad, and every read of it failed with EIO for a
// while without asking the bucket again. A cut that keeps happening
// fails the read, as a backend error, and holds nothing bad.
func TestBlobAnswerCutShort(t *testing.T) {
	ctx := context.Background()
	body := blobTestBody(5000, 3)
	for _, c := range []struct {
		name   string
		cuts   int64 // answers cut before the bucket answers whole
		failed bool  // the first read fails
	}{
		{"cut once", 1, false},
		{"cut every time", 1 << 30, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := newFakeBlobSource()
			dg := src.put(body)
			var cuts atomic.Int64
			src.set(func(f *fakeBlobSource) { f.cut = func(int64) bool { return cuts.Add(1) <= c.cuts } })
			bc := newTestBlobCache(t, src, Options{ChunkSize: 1024})
			d := &layout.Descriptor{Digest: dg, Size: int64(len(body))}
			got, err := readAll(ctx, bc, d, 1000)
			switch {
			case c.failed && (err == nil || errors.Is(err, layout.ErrCorrupt)):
				t.Fatalf("answers always cut: %v, want a backend error, not corruption", err)
			case !c.failed && (err != nil || !bytes.Equal(got, body)):
				t.Fatalf("one answer cut: %d bytes, %v; want the body", len(got), err)
			}
			if bc.Stats().VerifyFailures != 0 {
				t.Errorf("%d verify failures, want none: the blob is whole", bc.Stats().VerifyFailures)
			}
			src.set(func(f *fakeBlobSource) { f.cut = nil })
			if got, err := readAll(ctx, bc, d, 1000); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("once the bucket answers whole: %d bytes, %v", len(got), err)
			}
		})
	}
}

// TestBlobSizeFromTheBucketIsBounded: a size from the bucket near 2^63
// is refused as corrupt, on every path in. It overflowed the count of
// chunks, and with the empty body's digest the verify pass over nothing
// recorded a verified blob of 8 EiB.
func TestBlobSizeFromTheBucketIsBounded(t *testing.T) {
	ctx := context.Background()
	src := newFakeBlobSource()
	src.put(nil)
	c := newTestBlobCache(t, src, Options{ChunkSize: 16 << 10, MemBytes: 1 << 20})
	const huge = int64(^uint64(0) >> 1)
	d := &layout.Descriptor{Name: "f", Digest: emptyDigest, Size: huge}
	for _, p := range []struct {
		name string
		do   func() error
	}{
		{"verify", func() error { _, _, err := c.verified(ctx, emptyDigest, huge, blobPassMode{}, 0); return err }},
		{"size", func() error { _, err := c.Size(ctx, d); return err }},
		{"read", func() error { _, err := c.ReadAt(ctx, d, make([]byte, 1), 0); return err }},
		{"raw read", func() error { _, err := c.ReadRawAt(ctx, emptyDigest, huge, make([]byte, 1), 0); return err }},
	} {
		if err := p.do(); err == nil {
			t.Errorf("%s of a %d-byte empty body: no error", p.name, huge)
		}
	}
}

// TestBlobWrongSizeAfterItsMetaLeft: a descriptor whose size is smaller
// than its blob's is refused also once the blob's meta (the proof of
// its size) has left the cache while its chunks stay: the chunks' keys
// hold no size, and a size that is a multiple of the chunk size read
// the blob's first chunks as the whole file, with no error.
func TestBlobWrongSizeAfterItsMetaLeft(t *testing.T) {
	ctx := context.Background()
	src := newFakeBlobSource()
	body := blobTestBody(4*(16<<10), 5) // four chunks
	dg := src.put(body)
	c := newTestBlobCache(t, src, Options{ChunkSize: 16 << 10, MemBytes: 1 << 20})
	good := &layout.Descriptor{Name: "f", Digest: dg, Size: int64(len(body))}
	if got, err := readAll(ctx, c, good, 16<<10); err != nil || !bytes.Equal(got, body) {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.metas.Remove(dg) // as blobMaxMetas or blobMetaHashes do
	c.mu.Unlock()
	bad := &layout.Descriptor{Name: "g", Digest: dg, Size: 2 * (16 << 10)}
	if n, err := c.ReadAt(ctx, bad, make([]byte, len(body)), 0); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a descriptor of %d bytes for a %d-byte blob read %d bytes, %v", bad.Size, len(body), n, err)
	}
	if got, err := readAll(ctx, c, good, 16<<10); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the right size after the wrong one: %d bytes, %v", len(got), err)
	}
}
