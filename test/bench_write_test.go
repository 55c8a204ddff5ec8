package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// Write benchmarks on a local bucket:
//
//	go test ./test/ -run '^$' -bench 'Write' -benchtime 2s
//
// BenchmarkWriteCommits reports commits (1 KiB files created, written and
// closed) per second with 1 and 8 concurrent writers: group commit lets
// the 8 share snapshots. BenchmarkWriteLargeFile compares cp of a large
// file into a session (durable when cp's close returns) with cp to the
// disk the bucket is on, with and without a sync of the copy.

// benchMount mounts bk for a benchmark; it is unmounted at cleanup.
func benchMount(b *testing.B, bk *Bucket, args ...string) string {
	b.Helper()
	dir := b.TempDir()
	full := append([]string{"mount", "--cache-size", "64MiB"}, args...)
	cmd := exec.Command(pugfsBinary(b), append(full, bk.URL, dir)...)
	cmd.Env = append(os.Environ(), bk.Env...)
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(dir) {
		select {
		case <-done:
			b.Fatalf("pugfs exited early\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("pugfs did not mount\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return dir
}

func benchBucket(b *testing.B) *Bucket {
	b.Helper()
	bb := testbucket.Open(b, testbucket.Local)
	u, env := testbucket.URL(b, bb)
	return &Bucket{Kind: testbucket.Local, B: bb, Store: layout.New(bb, nil), URL: u, Env: env}
}

func BenchmarkWriteCommits(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("1KiB/writers=%d", writers), func(b *testing.B) {
			bk := benchBucket(b)
			id := newSession(b, bk)
			dir := filepath.Join(benchMount(b, bk), "sessions", id.String())
			body := make([]byte, 1024)
			rand.Read(body)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			b.ResetTimer()
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := writeFile(filepath.Join(dir, fmt.Sprintf("f%07d", i)), body, createFlags); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "files/s")
			b.ReportMetric(float64(b.N)/float64(latest(b, bk, id)), "files/snapshot")
		})
	}
}

func BenchmarkWriteLargeFile(b *testing.B) {
	const size = 64 << 20
	src := filepath.Join(b.TempDir(), "src.bin")
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	cp := func(b *testing.B, dir string, syncToo bool) {
		b.Helper()
		b.SetBytes(size)
		b.ResetTimer()
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			// A new name each time: same content, and the blob upload
			// would be skipped, so vary one byte.
			data[0] = byte(i)
			if err := os.WriteFile(src, data, 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			dst := filepath.Join(dir, fmt.Sprintf("big%d.bin", i))
			if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v\n%s", err, out)
			}
			if syncToo {
				if out, err := exec.Command("sync", dst).CombinedOutput(); err != nil {
					b.Fatalf("sync: %v\n%s", err, out)
				}
			}
			b.StopTimer()
		}
	}
	b.Run("pugfs", func(b *testing.B) {
		bk := benchBucket(b)
		id := newSession(b, bk)
		cp(b, filepath.Join(benchMount(b, bk), "sessions", id.String()), false)
	})
	// cp to the disk the local bucket is on: into the page cache only,
	// and durable (cp, then sync FILE), as a pugfs close is.
	b.Run("native", func(b *testing.B) {
		cp(b, b.TempDir(), false)
	})
	b.Run("native+sync", func(b *testing.B) {
		cp(b, b.TempDir(), true)
	})
}
