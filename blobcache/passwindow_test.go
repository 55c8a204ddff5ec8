package blobcache

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// gatedSource is a Source over a fakeBlobSource whose reads of some
// digests wait for a gate.
type gatedSource struct {
	*fakeBlobSource
	mu    sync.Mutex
	gated map[layout.Digest]chan struct{}
	opens map[layout.Digest]int
}

func (s *gatedSource) OpenBlob(ctx context.Context, d layout.Digest, off, length int64) (io.ReadCloser, error) {
	s.mu.Lock()
	g := s.gated[d]
	if s.opens != nil {
		s.opens[d]++
	}
	s.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.fakeBlobSource.OpenBlob(ctx, d, off, length)
}

// TestBlobPassWindowUnderPressure: a pass whose window the budget held by
// other passes shrinks keeps at least one part: it went down by whole
// parts from a size that is not a multiple of one (5 chunks, parts of 4:
// 1), and the launcher, which takes a part's slots before it reads,
// waited for good, and every reader of the blob with it (review 29).
func TestBlobPassWindowUnderPressure(t *testing.T) {
	const cs = 1024
	src := &gatedSource{fakeBlobSource: newFakeBlobSource(), gated: map[layout.Digest]chan struct{}{}, opens: map[layout.Digest]int{}}
	gate := make(chan struct{})
	var large []*layout.Descriptor
	for i := range 4 {
		b := blobTestBody(40*cs, uint64(100+i))
		dg := src.put(b)
		src.gated[dg] = gate
		large = append(large, &layout.Descriptor{Digest: dg, Size: int64(len(b)), ContentType: "application/octet-stream"})
	}
	small := blobTestBody(5*cs, 7)
	sd := src.put(small)
	c := newTestBlobCache(t, src, Options{ChunkSize: cs, PartSize: 4 * cs, PassParts: 4, MemBytes: 20 * cs})
	// Four readers of large blobs, each pass stalled with its window (5
	// chunks, a quarter of the budget) reserved.
	var wg sync.WaitGroup
	for _, d := range large {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.ReadAt(context.Background(), d, make([]byte, 10), 0)
		}()
	}
	waitFor(t, "the large passes to reserve the budget", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.reserved == 20*cs
	})
	done := make(chan error, 1)
	got := make([]byte, len(small))
	go func() {
		_, err := c.ReadAt(context.Background(), &layout.Descriptor{Digest: sd, Size: int64(len(small)), ContentType: "application/octet-stream"}, got, 0)
		done <- err
	}()
	// Its pass starts reading while the others hold the budget.
	waitFor(t, "the read of the 5-chunk blob to send its first part while the budget is held", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.opens[sd] > 0
	})
	close(gate)
	wg.Wait()
	select {
	case err := <-done:
		if err != nil || !bytes.Equal(got, small) {
			t.Fatalf("read of the 5-chunk blob: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read of the 5-chunk blob still waits 10 s after its first part was sent")
	}
}
