package fs

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/splice"
	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// TestMountUnmountLeaks mounts and unmounts in this process, reading,
// listing and writing in between, and checks that every cycle gives back
// its goroutines and file descriptors: a mount that leaks them cannot be
// embedded or remounted by a long-running process.
func TestMountUnmountLeaks(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse is missing: %v", err)
	}
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	id := leakSession(t, ctx, store)

	cycle := func() {
		t.Helper()
		mountCycle(t, store, id)
	}
	// The first cycle warms up what lives for the process (zstd
	// decoders, pools, the runtime's own helpers).
	cycle()
	g0, fd0 := settle(t, -1, -1)
	before := fds()
	for i := 0; i < 4; i++ {
		cycle()
	}
	g1, fd1 := settle(t, g0, fd0)
	if g1 > g0 {
		var buf bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&buf, 1)
		t.Errorf("goroutines: %d before four mount cycles, %d after\n%s", g0, g1, buf.String())
	}
	if fd1 > fd0 {
		t.Errorf("open file descriptors: %d before four mount cycles, %d after:\nbefore %v\nafter  %v", fd0, fd1, before, fds())
	}
}

// leakSession makes a session with a small inline file, a large file, a
// gzip file and history.
func leakSession(t *testing.T, ctx context.Context, store *layout.Store) layout.SessionID {
	t.Helper()
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("compressible line of text\n"), 20000))
	zw.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: several chunks, read-ahead
	var ds []layout.Descriptor
	for _, f := range []struct {
		name, enc string
		body      []byte
	}{{"small.txt", "", []byte("small\n")}, {"big.bin", "", big}, {"text.txt", layout.EncodingGzip, gz.Bytes()}} {
		bi, err := store.PutBlobBytes(ctx, f.body, layout.BlobOptions{ContentEncoding: f.enc})
		if err != nil {
			t.Fatal(err)
		}
		d := layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: f.name, ContentEncoding: f.enc, CreatedAt: time.Now()}
		if len(f.body) <= layout.InlineLimit {
			d.Data = f.body
		}
		ds = append(ds, d)
	}
	for _, d := range ds {
		if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	return m.Session
}

// mountCycle mounts a fresh filesystem over store, uses it from a shell,
// and unmounts it, closing everything the mount opened.
func mountCycle(t *testing.T, store *layout.Store, id layout.SessionID) {
	t.Helper()
	dir, unmount := mountFS(t, store, func(_ *Config, co *cache.Options) { co.MetadataTTL = time.Second },
		blobcache.Options{MemBytes: 16 << 20, SpillDir: t.TempDir()})
	s := "sessions/" + id.String()
	sh(t, dir, "ls -lR sessions names memories refs objects .pugmark > /dev/null && "+
		"cat "+s+"/small.txt "+s+"/big.bin "+s+"/text.txt > /dev/null && "+
		"cat "+s+"/.pugmark/log.jsonl "+s+"/.pugmark/snapshots/1.json "+s+"/.pugmark/at/2/big.bin > /dev/null && "+
		"getfattr -d "+s+"/small.txt > /dev/null && "+
		"cat objects/* > /dev/null && "+
		"echo written > "+s+"/new-$RANDOM.txt && cat "+s+"/.pugmark/version > /dev/null")
	if err := unmount(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
}

// settle waits until the goroutine and fd counts stop falling to at most
// the given bounds (negative: until they are stable), polling, and returns
// them.
func settle(t *testing.T, maxG, maxFD int) (int, int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	prevG, prevFD, stable := -1, -1, 0
	for {
		runtime.GC() // finalizers close what was dropped
		// go-fuse keeps a process-wide pool of pipe pairs for splice
		// that grows with read concurrency; it is not the mount's.
		splice.ClearSplicePool()
		g, fd := runtime.NumGoroutine(), len(fds())
		if maxG >= 0 && g <= maxG && fd <= maxFD {
			return g, fd
		}
		if maxG < 0 {
			if g == prevG && fd == prevFD {
				stable++
			} else {
				stable = 0
			}
			if stable >= 20 {
				return g, fd
			}
		}
		prevG, prevFD = g, fd
		if time.Now().After(deadline) {
			return g, fd
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// fds lists this process's open file descriptors with their targets.
func fds() []string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the descriptor ReadDir listed /proc/self/fd with
		}
		out = append(out, e.Name()+" -> "+target)
	}
	return out
}
