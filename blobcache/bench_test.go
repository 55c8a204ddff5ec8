package blobcache

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
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
func blobBenchRead(b *testing.B, c *Cache, d *layout.Descriptor, size int64) {
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
				c, err := New(store, Options{MemBytes: bc.mem, Logger: slog.New(slog.DiscardHandler)})
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
			c := newTestBlobCache(b, store, Options{})
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

// BenchmarkBlobReadStorm reads random 128 KiB ranges of 48 MiB of blobs
// through a blob cache with an 8 MiB budget, from 64 goroutines, over a
// backend without and with latency. It reports the cache's memory
// high-water mark against the budget (mempeak/budget), the peak Go heap
// above what it was before the storm (heap-MiB, with GOGC=2 so that it
// tracks what is held rather than garbage awaiting collection), and the
// most backend reads in flight at once.
//
//	go test -run '^$' -bench BlobReadStorm -benchtime 2000x ./blobcache/
func BenchmarkBlobReadStorm(b *testing.B) {
	const blobs, size = 48, 1 << 20
	var bodies [][]byte
	for i := range blobs {
		bodies = append(bodies, blobTestBody(size, uint64(1000+i)))
	}
	for _, latency := range []time.Duration{0, 2 * time.Millisecond} {
		inj := faultblob.NewInjector(faultblob.Options{})
		store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
		ds := make([]layout.Descriptor, blobs)
		for i, body := range bodies {
			bi, err := store.PutBlobBytes(context.Background(), body, layout.BlobOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ds[i] = layout.Descriptor{Digest: bi.Digest, Size: size, ContentType: "application/octet-stream"}
		}
		if latency > 0 {
			inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Latency: latency})
		}
		b.Run(fmt.Sprintf("latency=%v", latency), func(b *testing.B) {
			blobReadStorm(b, store, ds, bodies)
		})
	}
}

func blobReadStorm(b *testing.B, store *layout.Store, ds []layout.Descriptor, bodies [][]byte) {
	const (
		budget   = 8 << 20
		chunk    = 256 << 10
		readSize = 128 << 10
	)
	c := newTestBlobCache(b, store, Options{MemBytes: budget, ChunkSize: chunk})
	defer debug.SetGCPercent(debug.SetGCPercent(2))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var heapPeak uint64
	var inFlightPeak int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			heapPeak = max(heapPeak, ms.HeapInuse)
			inFlightPeak = max(inFlightPeak, c.Stats().InFlight)
		}
	}()
	b.SetBytes(readSize)
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		buf := make([]byte, readSize)
		for pb.Next() {
			i := r.IntN(len(ds))
			off := r.Int64N(ds[i].Size - readSize)
			if _, err := c.ReadAt(context.Background(), &ds[i], buf, off); err != nil {
				b.Error(err)
				return
			}
			if buf[0] != bodies[i][off] || buf[readSize-1] != bodies[i][off+readSize-1] {
				b.Error("wrong bytes")
				return
			}
		}
	})
	b.StopTimer()
	close(stop)
	<-sampled
	st := c.Stats()
	if st.MemPeak > budget {
		b.Errorf("MemPeak %d over the budget %d", st.MemPeak, budget)
	}
	b.ReportMetric(float64(st.MemPeak)/budget, "mempeak/budget")
	b.ReportMetric(float64(heapPeak-min(heapPeak, base))/(1<<20), "heap-MiB")
	b.ReportMetric(float64(inFlightPeak), "inflight-peak")
	b.ReportMetric(float64(st.Hits)/float64(max(1, st.Hits+st.Misses))*100, "hit-%")
}
