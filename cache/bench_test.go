package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// benchSession writes a session of n versions (one descriptor each)
// straight into bucket (no commit protocol: the benchmark is about
// reading).
func benchSession(b *testing.B, bucket *blob.Bucket, n int) layout.SessionID {
	b.Helper()
	s := layout.New(bucket, nil)
	m := s.NewRootManifest()
	if _, _, err := s.CreateSession(bg, m); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for v := 1; v <= n; v++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d := textDesc(fmt.Sprintf("dir%d/file%d.txt", v%100, v), fmt.Sprintf("version %d", v), epoch.Add(time.Duration(v)*time.Second))
			d.SequenceNumber = int64(v)
			body, err := layout.EncodeDescriptors([]layout.Descriptor{d})
			if err == nil {
				key, _ := layout.SnapshotKey(m.Session, uint32(v))
				err = bucket.WriteAll(bg, key, body, &blob.WriterOptions{ContentType: "application/json", ContentEncoding: layout.EncodingZstd})
			}
			if err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	return m.Session
}

// BenchmarkColdStateBuild is the first State of a 10,000-version session
// over a backend that takes 5 ms per request. The floor is versions x 5 ms
// / Parallel (one GET per snapshot, Parallel in flight); ratio is the
// measured time over that floor (goal: <= 1.5 at the default Parallel).
//
//	go test -run '^$' -bench ColdStateBuild -benchtime 1x ./cache/
func BenchmarkColdStateBuild(b *testing.B) {
	const versions, latency = 10000, 5 * time.Millisecond
	raw := memblob.OpenBucket(nil)
	id := benchSession(b, raw, versions)
	inj := faultblob.NewInjector(faultblob.Options{})
	inj.Add(faultblob.Rule{Latency: latency})
	store := layout.New(faultblob.Wrap(raw, inj), nil)
	for _, par := range []int{0, 64} {
		name := "parallel=default"
		if par > 0 {
			name = fmt.Sprintf("parallel=%d", par)
		}
		b.Run(name, func(b *testing.B) {
			var elapsed time.Duration
			var effective int
			inj.ResetStats()
			for b.Loop() {
				c := newCache(b, store, Options{Parallel: par, MetadataTTL: time.Hour})
				effective = c.opts.Parallel
				start := time.Now()
				st, err := c.State(bg, id)
				elapsed += time.Since(start)
				if err != nil || st.Version != versions || len(st.Slots()) != versions {
					b.Fatalf("state: %v", err)
				}
			}
			floor := time.Duration(versions) * latency / time.Duration(effective)
			b.ReportMetric(elapsed.Seconds()/float64(b.N)/floor.Seconds(), "ratio")
			b.ReportMetric(floor.Seconds(), "floor-s")
			b.ReportMetric(float64(inj.Stats().Requests())/float64(b.N)/versions, "requests/version")
		})
	}
}

// BenchmarkWarmState is State lookups of cached, fresh sessions from many
// goroutines: the path every FUSE lookup and getattr takes.
//
//	go test -run '^$' -bench WarmState ./cache/
func BenchmarkWarmState(b *testing.B) {
	store := layout.New(memblob.OpenBucket(nil), nil)
	c := newCache(b, store, Options{MetadataTTL: time.Hour})
	var sessions []layout.SessionID
	for range 64 {
		m := store.NewRootManifest()
		if _, _, err := store.CreateSession(bg, m); err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, m.Session)
		mustState(b, c, m.Session)
	}
	b.SetParallelism(8) // 8 x GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(sessions))
		for pb.Next() {
			if _, err := c.State(bg, sessions[i%len(sessions)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	if st := c.Stats(); st.Loads != int64(len(sessions)) {
		b.Fatalf("warm lookups loaded: %+v", st)
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
//	go test -run '^$' -bench BlobReadStorm -benchtime 2000x ./cache/
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
			bi, err := store.PutBlobBytes(bg, body, layout.BlobOptions{})
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
	c := newTestBlobCache(b, store, BlobOptions{MemBytes: budget, ChunkSize: chunk})
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
