package cache

import (
	"fmt"
	"math/rand/v2"
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
