package blobcache

import (
	"context"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestBlobEmptyDecodedIsWarm: a gzip body that decodes to nothing has
// no decoded chunk 0, and Warm never held for it: after a Prefetch
// verified and decoded it, each further Prefetch reported it fetched
// (read-ahead reserved its bytes, counted it in "bodies fetched" and
// handed it to the Sink again) with no request made (review 29).
func TestBlobEmptyDecodedIsWarm(t *testing.T) {
	ctx := context.Background()
	src := newFakeBlobSource()
	stored := gzipOf(t, nil)
	dg := src.put(stored)
	c := newTestBlobCache(t, src, Options{ChunkSize: 4096})
	d := &layout.Descriptor{Digest: dg, Size: int64(len(stored)), ContentEncoding: "gzip"}
	if ok, err := c.Prefetch(ctx, d); !ok || err != nil {
		t.Fatalf("first prefetch: %v %v", ok, err)
	}
	reads := src.reads.Load()
	if sz, err := c.Size(ctx, d); err != nil || sz != 0 {
		t.Fatalf("size %d %v", sz, err)
	}
	ok, err := c.Prefetch(ctx, d)
	if c.Prefetchable(d) || ok || err != nil {
		t.Errorf("after a prefetch that read and decoded it (%d backend reads), the body is still Prefetchable=%v, and a second Prefetch reports fetched=%v (%v) with %d new backend reads",
			reads, c.Prefetchable(d), ok, err, src.reads.Load()-reads)
	}
}
