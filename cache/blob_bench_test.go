package cache

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob/memblob"
)

const blobBenchSize = 32 << 20

// blobBenchStore holds one blobBenchSize blob behind a fault injector that
// adds latency to every ranged read, like a remote object store.
func blobBenchStore(b *testing.B, latency time.Duration, body []byte) (*layout.Store, layout.Digest) {
	b.Helper()
	inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
	if latency > 0 {
		inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Latency: latency})
	}
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
	bi, err := store.PutBlobBytes(context.Background(), body, layout.BlobOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return store, bi.Digest
}

// blobBenchRead reads the whole file in FUSE-sized (128 KiB) requests.
func blobBenchRead(b *testing.B, c *BlobCache, d *layout.Descriptor, size int64) {
	buf := make([]byte, 128<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := c.ReadAt(context.Background(), d, buf, off); err != nil && off+int64(len(buf)) < size {
			b.Fatal(err)
		}
	}
}

// BenchmarkBlobSequentialRead is the first read of a blob: verify pass
// (chunked ranged reads, Parallel in flight), then serving the reads.
func BenchmarkBlobSequentialRead(b *testing.B) {
	body := blobTestBody(blobBenchSize, 99)
	for _, bc := range []struct {
		name    string
		latency time.Duration
		mem     int64
	}{
		{"latency=0", 0, 0},
		{"latency=2ms", 2 * time.Millisecond, 0},
		{"latency=2ms/budget=8MiB", 2 * time.Millisecond, 8 << 20},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store, dg := blobBenchStore(b, bc.latency, body)
			d := &layout.Descriptor{Digest: dg, Size: blobBenchSize, ContentType: "application/octet-stream"}
			b.SetBytes(blobBenchSize)
			var fetched int64
			for b.Loop() {
				c, err := NewBlobCache(store, BlobOptions{MemBytes: bc.mem, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				blobBenchRead(b, c, d, blobBenchSize)
				fetched += c.Stats().BytesFetched
				c.Close()
			}
			b.ReportMetric(float64(fetched)/float64(b.N)/blobBenchSize, "fetched/size")
		})
	}
}

// BenchmarkBlobCachedRead reads a blob that is already verified and in
// memory, as stored and decoded.
func BenchmarkBlobCachedRead(b *testing.B) {
	plain := blobTestText(blobBenchSize)
	for _, enc := range []string{"", "gzip"} {
		name := "plain"
		stored := plain
		if enc != "" {
			name, stored = enc, gzipOf(b, plain)
		}
		b.Run(name, func(b *testing.B) {
			store, dg := blobBenchStore(b, 0, stored)
			d := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentEncoding: enc, ContentType: "application/octet-stream"}
			c := newTestBlobCache(b, store, BlobOptions{})
			blobBenchRead(b, c, d, blobBenchSize)
			b.SetBytes(blobBenchSize)
			for b.Loop() {
				blobBenchRead(b, c, d, blobBenchSize)
			}
			if st := c.Stats(); st.VerifyPasses != 1 {
				b.Fatalf("cached reads went to the backend: %+v", st)
			}
		})
	}
}
