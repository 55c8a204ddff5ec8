package blobcache

import (
	"bytes"
	"context"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestBlobOnePass: a blob four times the memory budget is fetched once,
// in ranged reads of PartSize, and hashed once, when a disk cache holds
// its verified copy: reading it twice (memory dropped in between) costs
// no second fetch and no second hash. A second process sharing the disk
// cache hashes the copy once and fetches nothing. Without a disk cache
// the second read fetches again, and each chunk fetched again is checked
// against its proof.
func TestBlobOnePass(t *testing.T) {
	const cs, part, mem = 4 << 10, 64 << 10, 256 << 10
	body := blobTestBody(1<<20+3*cs+17, 77)
	size := int64(len(body))
	parts := (size + part - 1) / part
	src := newFakeBlobSource()
	d := &layout.Descriptor{Digest: src.put(body), Size: size, ContentType: "application/octet-stream"}
	dir := t.TempDir()
	opts := Options{ChunkSize: cs, PartSize: part, MemBytes: mem, DiskDir: dir, DiskBytes: 64 << 20, ReadAhead: -1}
	ctx := context.Background()
	read := func(c *Cache) {
		t.Helper()
		got, err := readAll(ctx, c, d, 128<<10)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read: %v (%d bytes)", err, len(got))
		}
	}

	c := newTestBlobCache(t, src, opts)
	read(c)
	c.dropMemory()
	read(c)
	st := c.Stats()
	if st.BytesFetched != size || st.BackendReads != parts || src.reads.Load() != parts {
		t.Errorf("two reads with a disk cache: fetched %d bytes in %d reads (source saw %d), want %d bytes in %d",
			st.BytesFetched, st.BackendReads, src.reads.Load(), size, parts)
	}
	if st.BytesHashed != size || st.VerifyPasses != 1 {
		t.Errorf("two reads with a disk cache: hashed %d bytes in %d passes, want %d in 1", st.BytesHashed, st.VerifyPasses, size)
	}
	if st.MemPeak > mem {
		t.Errorf("memory peak %d over the budget %d", st.MemPeak, mem)
	}

	c2 := newTestBlobCache(t, src, opts)
	read(c2)
	read(c2)
	if st := c2.Stats(); st.BytesFetched != 0 || st.BytesHashed != size {
		t.Errorf("second process: fetched %d, hashed %d, want 0 and %d", st.BytesFetched, st.BytesHashed, size)
	}

	noDisk := opts
	noDisk.DiskDir = ""
	c3 := newTestBlobCache(t, src, noDisk)
	read(c3)
	c3.dropMemory()
	read(c3)
	st = c3.Stats()
	if st.BytesFetched <= size || st.BytesHashed != st.BytesFetched {
		t.Errorf("without a disk cache: fetched %d, hashed %d; want a second fetch, each byte fetched hashed once", st.BytesFetched, st.BytesHashed)
	}
}
