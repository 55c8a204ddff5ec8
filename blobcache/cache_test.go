package blobcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/pugmark/pugfs/internal/goroutines"
	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// blobTestBody returns n deterministic pseudo-random bytes.
func blobTestBody(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fakeBlobSource is a Source over a map that counts reads and can
// block or tamper with them.
type fakeBlobSource struct {
	mu     sync.Mutex
	blobs  map[layout.Digest][]byte
	gate   chan struct{}               // reads wait for it to be closed (nil: no wait)
	blocks func(off int64) bool        // which reads wait for gate (nil: all)
	tamper func(off int64, b []byte)   // changes the bytes a read returns
	fail   func(d layout.Digest) error // makes a read fail
	// cut, if it says so for a read, ends its body half way with
	// io.ErrUnexpectedEOF, as net/http does for a connection closed
	// before Content-Length.
	cut   func(off int64) bool
	reads atomic.Int64
	open  atomic.Int64 // readers not closed yet
	peak  atomic.Int64 // most readers open at once
}

type fakeBlobReader struct {
	io.Reader
	f    *fakeBlobSource
	once sync.Once
}

func (r *fakeBlobReader) Close() error {
	r.once.Do(func() { r.f.open.Add(-1) })
	return nil
}

func newFakeBlobSource() *fakeBlobSource {
	return &fakeBlobSource{blobs: make(map[layout.Digest][]byte)}
}

func (f *fakeBlobSource) put(body []byte) layout.Digest {
	d := layout.DigestOf(body)
	f.mu.Lock()
	f.blobs[d] = bytes.Clone(body)
	f.mu.Unlock()
	return d
}

// putAs stores body under digest d (a blob whose stored bytes are wrong).
func (f *fakeBlobSource) putAs(d layout.Digest, body []byte) {
	f.mu.Lock()
	f.blobs[d] = bytes.Clone(body)
	f.mu.Unlock()
}

func (f *fakeBlobSource) set(fn func(f *fakeBlobSource)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

func (f *fakeBlobSource) OpenBlob(ctx context.Context, d layout.Digest, off, length int64) (io.ReadCloser, error) {
	f.reads.Add(1)
	f.mu.Lock()
	gate, blocks, tamper, fail, cut := f.gate, f.blocks, f.tamper, f.fail, f.cut
	body, ok := f.blobs[d]
	f.mu.Unlock()
	if gate != nil && (blocks == nil || blocks(off)) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(d); err != nil {
			return nil, err
		}
	}
	if !ok {
		return nil, fmt.Errorf("open blob %s: %w", layout.BlobKey(d), layout.ErrNotFound)
	}
	if off > int64(len(body)) {
		return nil, fmt.Errorf("open blob %s: offset %d past the end", layout.BlobKey(d), off)
	}
	end := int64(len(body))
	if length >= 0 && off+length < end {
		end = off + length
	}
	b := bytes.Clone(body[off:end])
	if tamper != nil {
		tamper(off, b)
	}
	for n := f.open.Add(1); ; {
		if p := f.peak.Load(); n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var r io.Reader = bytes.NewReader(b)
	if cut != nil && cut(off) {
		r = io.MultiReader(bytes.NewReader(b[:len(b)/2]), iotest.ErrReader(io.ErrUnexpectedEOF))
	}
	return &fakeBlobReader{Reader: r, f: f}, nil
}

func newTestBlobCache(t testing.TB, src Source, opts Options) *Cache {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dropMemory empties the chunk LRU, as memory pressure would.
func (c *Cache) dropMemory() {
	c.mu.Lock()
	c.chunks.Purge()
	c.memBytes = 0
	c.mu.Unlock()
}

// dropFiles closes the verified files, as evictions would.
func (c *Cache) dropFiles() {
	c.mu.Lock()
	c.files.Purge()
	c.unlock()
}

// waitFor polls cond until it holds (a state the test cannot be told of
// otherwise, such as a number of flight waiters), failing after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// readAll reads d through ReadAt in pieces of step bytes.
func readAll(ctx context.Context, c *Cache, d *layout.Descriptor, step int) ([]byte, error) {
	var out []byte
	buf := make([]byte, step)
	for off := int64(0); ; {
		n, err := c.ReadAt(ctx, d, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func storeWith(t testing.TB, bodies ...[]byte) (*layout.Store, []layout.Digest) {
	t.Helper()
	s := layout.New(memblob.OpenBucket(nil), nil)
	var ds []layout.Digest
	for _, b := range bodies {
		bi, err := s.PutBlobBytes(context.Background(), b, layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, bi.Digest)
	}
	return s, ds
}

func TestBlobReadPlain(t *testing.T) {
	ctx := context.Background()
	const cs = 4096
	body := blobTestBody(12*cs+123, 1)
	size := int64(len(body))
	store, ds := storeWith(t, body)
	c := newTestBlobCache(t, store, Options{ChunkSize: cs, MemBytes: 1 << 20})
	d := &layout.Descriptor{Digest: ds[0], Size: size, Name: "a.bin", ContentType: "application/octet-stream"}

	cases := []struct {
		name    string
		off     int64
		n       int
		want    int
		wantEOF bool
	}{
		{"start", 0, 10, 10, false},
		{"across a chunk boundary", cs - 1, 2, 2, false},
		{"several chunks, odd", 3*cs + 7, 9000, 9000, false},
		{"last chunk exactly", 12 * cs, 123, 123, false},
		{"past the end", size - 5, 10, 5, true},
		{"at the end", size, 1, 0, true},
		{"far past the end", size + 100, 1, 0, true},
		{"whole", 0, int(size), int(size), false},
		{"whole and more", 0, int(size) + 1, int(size), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for view, read := range map[string]func([]byte, int64) (int, error){
				"file":   func(p []byte, off int64) (int, error) { return c.ReadAt(ctx, d, p, off) },
				"object": func(p []byte, off int64) (int, error) { return c.ReadRawAt(ctx, d.Digest, size, p, off) },
			} {
				p := make([]byte, tc.n)
				n, err := read(p, tc.off)
				if n != tc.want || (err == io.EOF) != tc.wantEOF || (err != nil && err != io.EOF) {
					t.Fatalf("%s: ReadAt(%d, %d) = %d, %v; want %d, eof %v", view, tc.off, tc.n, n, err, tc.want, tc.wantEOF)
				}
				if tc.want > 0 && !bytes.Equal(p[:n], body[tc.off:tc.off+int64(n)]) {
					t.Fatalf("%s: wrong bytes at %d", view, tc.off)
				}
			}
		})
	}
	if got, err := c.Size(ctx, d); err != nil || got != size {
		t.Fatalf("Size = %d, %v", got, err)
	}
	st := c.Stats()
	if st.VerifyPasses != 1 || st.BytesFetched != size || st.Hits == 0 {
		t.Fatalf("one verify pass of %d bytes expected, then hits: %+v", size, st)
	}
	if _, err := c.ReadAt(ctx, d, make([]byte, 1), -1); !errors.Is(err, layout.ErrInvalid) {
		t.Fatalf("negative offset: %v", err)
	}
	if _, err := c.ReadAt(ctx, &layout.Descriptor{Name: "tomb", Deleted: true}, make([]byte, 1), 0); !errors.Is(err, layout.ErrInvalid) {
		t.Fatalf("zero digest: %v", err)
	}
	// A live descriptor naming no blob is damaged bucket data.
	if _, err := c.ReadAt(ctx, &layout.Descriptor{Name: "live"}, make([]byte, 1), 0); !errors.Is(err, layout.ErrCorrupt) {
		t.Fatalf("live zero digest: %v", err)
	}
	if _, err := c.Size(ctx, &layout.Descriptor{Name: "live"}); !errors.Is(err, layout.ErrCorrupt) {
		t.Fatalf("size of a live zero digest: %v", err)
	}
}

func TestBlobEmpty(t *testing.T) {
	ctx := context.Background()
	store, ds := storeWith(t, []byte{})
	c := newTestBlobCache(t, store, Options{})
	for _, enc := range []string{"", "gzip"} {
		d := &layout.Descriptor{Digest: ds[0], ContentEncoding: enc}
		if n, err := c.ReadAt(ctx, d, make([]byte, 4), 0); n != 0 || err != io.EOF {
			t.Fatalf("%q: ReadAt = %d, %v", enc, n, err)
		}
		if sz, err := c.Size(ctx, d); sz != 0 || err != nil {
			t.Fatalf("%q: Size = %d, %v", enc, sz, err)
		}
	}
}

func TestBlobInline(t *testing.T) {
	ctx := context.Background()
	body := []byte("the blob's own bytes")
	src := newFakeBlobSource()
	dg := src.put(body)
	cases := []struct {
		name      string
		data      []byte
		wantReads bool
	}{
		{"matching inline data is used", bytes.Clone(body), false},
		{"corrupted inline data is ignored", []byte("the blob's 0wn bytes"), true},
		{"truncated inline data is ignored", body[:5], true},
		{"no inline data", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestBlobCache(t, src, Options{})
			d := &layout.Descriptor{Digest: dg, Size: int64(len(body)), Data: tc.data, ContentType: "text/plain"}
			got, err := readAll(ctx, c, d, 7)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("read %q, %v; want the blob's bytes", got, err)
			}
			if reads := c.Stats().BackendReads; (reads > 0) != tc.wantReads {
				t.Fatalf("backend reads = %d, want reads: %v", reads, tc.wantReads)
			}
		})
	}
}

func TestBlobCorrupt(t *testing.T) {
	ctx := context.Background()
	const cs = 1024
	body := blobTestBody(5*cs+17, 2)
	flip := func(off int64, b []byte) {
		if off <= 3*cs && off+int64(len(b)) > 3*cs {
			b[3*cs-off] ^= 0x40
		}
	}
	cases := []struct {
		name   string
		stored []byte
		tamper func(int64, []byte)
		size   int64
	}{
		{"a flipped byte", body, flip, int64(len(body))},
		{"stored body shorter", body[:len(body)-1], nil, int64(len(body))},
		{"stored body longer", append(bytes.Clone(body), 'x'), nil, int64(len(body))},
		{"descriptor size too small", body, nil, int64(len(body)) - 1},
		// A state a chunk allocated up front for the claimed size was
		// 32 PiB here: the mount died of it.
		{"descriptor size absurd", body, nil, 1 << 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeBlobSource()
			dg := layout.DigestOf(body)
			src.putAs(dg, tc.stored)
			src.set(func(f *fakeBlobSource) { f.tamper = tc.tamper })
			var log syncbuf.Buffer
			now := time.Unix(1_700_000_000, 0)
			var clock atomic.Int64
			clock.Store(now.UnixNano())
			c := newTestBlobCache(t, src, Options{ChunkSize: cs, Logger: log.Logger(slog.LevelWarn),
				now: func() time.Time { return time.Unix(0, clock.Load()) }})
			d := &layout.Descriptor{Digest: dg, Size: tc.size, ContentType: "application/octet-stream"}
			key := "objects/sha256:" + dg.Hex()
			p := make([]byte, 100)
			for i := range 2 {
				n, err := c.ReadAt(ctx, d, p, 0)
				if !errors.Is(err, layout.ErrCorrupt) || !strings.Contains(err.Error(), key) || n != 0 {
					t.Fatalf("read %d: n=%d err=%v; want ErrCorrupt naming %s and no bytes", i, n, err, key)
				}
			}
			reads := src.reads.Load()
			if _, err := c.ReadRawAt(ctx, dg, tc.size, p, 0); !errors.Is(err, layout.ErrCorrupt) {
				t.Fatalf("objects/ view: %v", err)
			}
			if src.reads.Load() != reads {
				t.Fatal("a blob known to be bad was fetched again within the bad window")
			}
			if st := c.Stats(); st.VerifyFailures != 1 {
				t.Fatalf("VerifyFailures = %d", st.VerifyFailures)
			}
			if n := log.Count("failed verification"); n != 1 {
				t.Fatalf("logged %d times, want once:\n%s", n, log.String())
			}
			// After the window, a repaired backend is used again.
			src.putAs(dg, body)
			src.set(func(f *fakeBlobSource) { f.tamper = nil })
			clock.Add(int64(2 * blobBadTTL))
			d.Size = int64(len(body))
			if got, err := readAll(ctx, c, d, 333); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("after repair: %v", err)
			}
		})
	}
}

func TestBlobChangedAfterVerification(t *testing.T) {
	ctx := context.Background()
	const cs = 1024
	body := blobTestBody(6*cs, 3)
	src := newFakeBlobSource()
	dg := src.put(body)
	c := newTestBlobCache(t, src, Options{ChunkSize: cs, ReadAhead: -1})
	d := &layout.Descriptor{Digest: dg, Size: int64(len(body)), ContentType: "application/octet-stream"}
	if got, err := readAll(ctx, c, d, 500); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("first read: %v", err)
	}
	// Memory loses everything but chunk 0; then the backend starts serving
	// different bytes for chunk 2.
	c.dropMemory()
	p := make([]byte, 100)
	if n, err := c.ReadAt(ctx, d, p, 0); err != nil || n != len(p) || !bytes.Equal(p, body[:100]) {
		t.Fatalf("chunk 0: %d %v", n, err)
	}
	src.set(func(f *fakeBlobSource) {
		f.tamper = func(off int64, b []byte) {
			if off == 2*cs {
				b[10] ^= 1
			}
		}
	})
	n, err := c.ReadAt(ctx, d, p, 2*cs+50)
	if !errors.Is(err, layout.ErrCorrupt) || n != 0 || !strings.Contains(err.Error(), dg.Hex()) {
		t.Fatalf("changed chunk: n=%d err=%v; want ErrCorrupt and no bytes", n, err)
	}
	// Verified chunks in memory are still served; others wait out the bad
	// window without backend reads.
	if n, err := c.ReadAt(ctx, d, p, 0); err != nil || n != len(p) || !bytes.Equal(p, body[:100]) {
		t.Fatalf("cached chunk 0: %d %v", n, err)
	}
	reads := src.reads.Load()
	if _, err := c.ReadAt(ctx, d, p, 4*cs); !errors.Is(err, layout.ErrCorrupt) {
		t.Fatalf("chunk 4 in the bad window: %v", err)
	}
	if src.reads.Load() != reads {
		t.Fatal("backend read during the bad window")
	}
}

func TestBlobCoalesce(t *testing.T) {
	ctx := context.Background()
	const cs = 4096
	body := blobTestBody(cs, 4)
	src := newFakeBlobSource()
	dg := src.put(body)
	c := newTestBlobCache(t, src, Options{ChunkSize: cs})
	d := &layout.Descriptor{Digest: dg, Size: cs, ContentType: "application/octet-stream"}
	const readers = 8

	run := func(phase string, waiters func() int) {
		gate := make(chan struct{})
		src.set(func(f *fakeBlobSource) { f.gate = gate })
		before := src.reads.Load()
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		for i := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := make([]byte, 100)
				off := int64(i * 100)
				n, err := c.ReadAt(ctx, d, p, off)
				if err == nil && (n != 100 || !bytes.Equal(p, body[off:off+100])) {
					err = fmt.Errorf("reader %d: wrong bytes", i)
				}
				errs <- err
			}()
		}
		waitFor(t, phase+": all readers waiting on one flight", func() bool { return waiters() == readers })
		close(gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", phase, err)
			}
		}
		if got := src.reads.Load() - before; got != 1 {
			t.Fatalf("%s: %d backend reads for one chunk, want 1", phase, got)
		}
	}
	run("verify pass", func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		if call := c.passes[blobSizedKey{dg, cs}]; call != nil {
			return call.waiters
		}
		return 0
	})
	c.dropMemory()
	run("chunk re-fetch", func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		if call := c.fetches[blobChunkKey{dg, blobRaw, 0}]; call != nil {
			return call.waiters
		}
		return 0
	})
}

func TestBlobParallelBound(t *testing.T) {
	const cs = 1024
	body := blobTestBody(40*cs, 9)
	src := newFakeBlobSource()
	dg := src.put(body)
	// Every read waits until a few are open at once, so the pass has to
	// overlap its ranged reads (parts of 4 chunks) to make progress; none
	// may exceed PassParts.
	gate := make(chan struct{})
	var opened atomic.Int64
	src.set(func(f *fakeBlobSource) {
		f.gate = gate
		f.blocks = func(int64) bool {
			if opened.Add(1) == 3 {
				close(gate)
			}
			return true
		}
	})
	c := newTestBlobCache(t, src, Options{ChunkSize: cs, PartSize: 4 * cs, PassParts: 3})
	d := &layout.Descriptor{Digest: dg, Size: int64(len(body)), ContentType: "application/octet-stream"}
	if got, err := readAll(context.Background(), c, d, 4096); err != nil || !bytes.Equal(got, body) {
		t.Fatal(err)
	}
	if p := src.peak.Load(); p > 3 {
		t.Fatalf("%d backend reads open at once, PassParts is 3", p)
	}
	if r := src.reads.Load(); r != 10 {
		t.Fatalf("%d ranged reads for 40 chunks in parts of 4", r)
	}
	if src.open.Load() != 0 {
		t.Fatalf("%d readers never closed", src.open.Load())
	}
}

func TestBlobCancelledWaiter(t *testing.T) {
	const cs = 4096
	body := blobTestBody(cs, 5)
	src := newFakeBlobSource()
	dg := src.put(body)
	gate := make(chan struct{})
	src.set(func(f *fakeBlobSource) { f.gate = gate })
	c := newTestBlobCache(t, src, Options{ChunkSize: cs})
	d := &layout.Descriptor{Digest: dg, Size: cs, ContentType: "application/octet-stream"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ReadAt(ctx, d, make([]byte, 10), 0)
		done <- err
	}()
	waitFor(t, "the read to reach the backend", func() bool { return src.reads.Load() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	// The abandoned flight is gone; a new reader starts afresh and succeeds.
	close(gate)
	p := make([]byte, 10)
	if n, err := c.ReadAt(context.Background(), d, p, 0); err != nil || n != 10 || !bytes.Equal(p, body[:10]) {
		t.Fatalf("read after cancel: %d %v", n, err)
	}
}

func TestBlobMemoryBound(t *testing.T) {
	ctx := context.Background()
	const (
		cs     = 8 << 10
		budget = 64 << 10
	)
	src := newFakeBlobSource()
	var ds []*layout.Descriptor
	var bodies [][]byte
	for i := range 6 {
		b := blobTestBody(200<<10+i, uint64(10+i))
		ds = append(ds, &layout.Descriptor{Digest: src.put(b), Size: int64(len(b)), ContentType: "application/octet-stream"})
		bodies = append(bodies, b)
	}
	c := newTestBlobCache(t, src, Options{ChunkSize: cs, MemBytes: budget, ReadAhead: 2, Parallel: 3})
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(ds))
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ds {
				i := (i + r) % len(ds)
				got, err := readAll(ctx, c, ds[i], 3000)
				if err == nil && !bytes.Equal(got, bodies[i]) {
					err = fmt.Errorf("blob %d: wrong content", i)
				}
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if st.MemPeak > budget || st.MemBytes > budget {
		t.Fatalf("memory %d (peak %d) exceeds the budget %d", st.MemBytes, st.MemPeak, budget)
	}
	if st.Evictions == 0 || st.ReadAheads == 0 {
		t.Fatalf("expected evictions and read-ahead: %+v", st)
	}
}

func TestBlobReadAheadStopsOnClose(t *testing.T) {
	const cs = 1024
	body := blobTestBody(20*cs, 6)
	src := newFakeBlobSource()
	dg := src.put(body)
	c, err := New(src, Options{ChunkSize: cs, ReadAhead: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := &layout.Descriptor{Digest: dg, Size: int64(len(body)), ContentType: "application/octet-stream"}
	if _, err := c.ReadAt(ctx, d, make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
	c.dropMemory()
	// Chunk 0 is served; everything after it hangs in the backend.
	src.set(func(f *fakeBlobSource) {
		f.gate = make(chan struct{})
		f.blocks = func(off int64) bool { return off > 0 }
	})
	p := make([]byte, 100)
	for _, off := range []int64{0, 100, 200} {
		if _, err := c.ReadAt(ctx, d, p, off); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "read-ahead in the backend", func() bool { return c.Stats().InFlight > 0 })
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not cancel read-ahead")
	}
	if _, err := c.ReadAt(ctx, d, p, 0); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

func TestBlobBackendErrorsAreNotRemembered(t *testing.T) {
	ctx := context.Background()
	inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), &layout.Options{Retries: -1})
	body := blobTestBody(10<<10, 7)
	bi, err := store.PutBlobBytes(ctx, body, layout.BlobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, FailFirst: 1, Err: faultblob.PermanentError(gcerrors.Internal)})
	c := newTestBlobCache(t, store, Options{ChunkSize: 4096})
	d := &layout.Descriptor{Digest: bi.Digest, Size: bi.Size, ContentType: "application/octet-stream"}
	p := make([]byte, 64)
	_, err = c.ReadAt(ctx, d, p, 0)
	if err == nil || errors.Is(err, layout.ErrCorrupt) || !strings.Contains(err.Error(), bi.Digest.Hex()) {
		t.Fatalf("first read: %v; want a backend error naming the key", err)
	}
	if _, ok := faultblob.IsInjected(err); !ok {
		t.Fatalf("the injected error is lost: %v", err)
	}
	if got, err := readAll(ctx, c, d, 1000); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("second read: %v", err)
	}
}

func TestBlobSniffCandidate(t *testing.T) {
	cases := []struct {
		name, ct string
		want     bool
	}{
		{"a.txt", "", true},
		{"a.txt", "text/plain; charset=utf-8", true},
		{"a.json", "application/json", true},
		{"a.ndjson", "application/x-ndjson", true},
		{"a", "application/vnd.api+json", true},
		{"a.svg", "image/svg+xml", true},
		{"a.json.gz", "application/json", false},
		{"a.tgz", "", false},
		{"a.ZST", "text/plain", false},
		{"a.zstd", "", false},
		{"a.bin", "application/octet-stream", false},
		{"a.png", "image/png", false},
	}
	for _, tc := range cases {
		d := &layout.Descriptor{Name: tc.name, ContentType: tc.ct}
		if got := blobSniffCandidate(d); got != tc.want {
			t.Errorf("%s (%s): sniff = %v, want %v", tc.name, tc.ct, got, tc.want)
		}
	}
}

// A read storm over many unverified blobs (one verify pass each) keeps at
// most MaxInFlight backend reads open cache-wide; the waiting reads
// proceed as slots free up.
func TestBlobInFlightBound(t *testing.T) {
	src := newFakeBlobSource()
	gate := make(chan struct{})
	src.set(func(f *fakeBlobSource) { f.gate = gate })
	const blobs, limit = 12, 6
	opts := Options{ChunkSize: 16 << 10, Parallel: 4, MaxInFlight: limit, ReadAhead: -1}
	c := newTestBlobCache(t, src, opts)
	var ds []*layout.Descriptor
	var bodies [][]byte
	for i := range blobs {
		b := blobTestBody(64<<10, uint64(500+i))
		bodies = append(bodies, b)
		ds = append(ds, &layout.Descriptor{Digest: src.put(b), Size: int64(len(b)), ContentType: "application/octet-stream"})
	}
	var wg sync.WaitGroup
	errc := make(chan error, blobs)
	for i := range blobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := readAll(context.Background(), c, ds[i], 10000)
			if err == nil && !bytes.Equal(got, bodies[i]) {
				err = fmt.Errorf("blob %d: wrong bytes", i)
			}
			if err != nil {
				errc <- err
			}
		}()
	}
	waitFor(t, "reads to queue for a slot", func() bool {
		return src.reads.Load() > limit || goroutines.Waiting("[select", "(*Cache).fetchPart") >= blobs
	})
	if n := src.reads.Load(); n != limit {
		t.Fatalf("%d backend reads open at once, MaxInFlight %d", n, limit)
	}
	close(gate)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if st := c.Stats(); st.InFlight != 0 || st.VerifyPasses != blobs {
		t.Fatalf("stats after the storm: %+v", st)
	}
}

// An empty file is never fetched, so a descriptor of size 0 must name the
// empty body: one that left its size out for a longer body is damaged,
// not an empty file.
func TestBlobSizeZero(t *testing.T) {
	ctx := context.Background()
	src := newFakeBlobSource()
	body := []byte("fourteen bytes")
	c := newTestBlobCache(t, src, Options{})
	for _, tc := range []struct {
		name string
		d    layout.Descriptor
		ok   bool
	}{
		{"the empty body", layout.Descriptor{Digest: src.put(nil)}, true},
		{"a 14-byte body", layout.Descriptor{Digest: src.put(body)}, false},
	} {
		size, err := c.Size(ctx, &tc.d)
		n, rerr := c.ReadAt(ctx, &tc.d, make([]byte, 16), 0)
		if tc.ok && (err != nil || size != 0 || n != 0 || rerr != io.EOF) {
			t.Errorf("%s: size %d, %v; read %d, %v; want 0 bytes and EOF", tc.name, size, err, n, rerr)
		}
		if !tc.ok && (!errors.Is(err, layout.ErrCorrupt) || !errors.Is(rerr, layout.ErrCorrupt)) {
			t.Errorf("%s: size %d, %v; read %d, %v; want ErrCorrupt from both", tc.name, size, err, n, rerr)
		}
	}
}
