package blobcache

import (
	"bytes"
	"context"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestBlobSmallBodiesStayCached: the verify pass of a small body sets
// aside the memory that body needs, not a whole window of parts. A
// traversal prefetches the next small files, then reads them: with a
// pass reserving its full window (here the whole budget), every prefetch
// pushed the bodies fetched before it out of memory, and each read
// fetched its body a second time, one round trip on the reader's path.
func TestBlobSmallBodiesStayCached(t *testing.T) {
	const cs, part, mem, files = 64 << 10, 512 << 10, 512 << 10, 100
	src := newFakeBlobSource()
	ds := make([]*layout.Descriptor, files)
	bodies := make([][]byte, files)
	for i := range ds {
		bodies[i] = blobTestBody(1024+37*i, uint64(i))
		ds[i] = &layout.Descriptor{Digest: src.put(bodies[i]), Size: int64(len(bodies[i])), ContentType: "application/octet-stream"}
	}
	c := newTestBlobCache(t, src, Options{ChunkSize: cs, PartSize: part, MemBytes: mem, ReadAhead: -1})
	ctx := context.Background()
	for i, d := range ds {
		if ok, err := c.Prefetch(ctx, d); !ok || err != nil {
			t.Fatalf("prefetch %d: %v, %v", i, ok, err)
		}
	}
	fetched := c.Stats().BackendReads
	for i, d := range ds {
		got, err := readAll(ctx, c, d, 4096)
		if err != nil || !bytes.Equal(got, bodies[i]) {
			t.Fatalf("read %d: %v (%d bytes)", i, err, len(got))
		}
	}
	st := c.Stats()
	if fetched != files || st.BackendReads != fetched {
		t.Errorf("%d small bodies: %d backend reads to prefetch, %d more to read them (evictions %d), want %d and 0",
			files, fetched, st.BackendReads-fetched, st.Evictions, files)
	}
	if st.MemPeak > mem {
		t.Errorf("memory peak %d over the budget %d", st.MemPeak, mem)
	}
}
