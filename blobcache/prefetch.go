package blobcache

import (
	"context"
	"errors"
	"io"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// Prefetching: the entry points of read-ahead across files (package fs
// knows which files a traversal reads next; the cache knows how to fetch
// and verify one). A prefetch is a speculative read of the first byte of
// a small body: it runs the body's verify pass (and decoding) exactly as
// the reader's first read would, so the bytes it leaves in memory are
// verified ones, and the reader's read then joins it or finds it done.
// Its requests are marked schedblob.Speculative, so a program's own reads
// go first, and a reader that comes to wait for a prefetch still under
// way promotes it (blobDo).

// Warm reports whether reading the start of d needs no backend request:
// no body (inline data, empty), its first chunk in memory, or a verified
// copy in the disk cache. It never blocks on I/O.
func (c *Cache) Warm(d *layout.Descriptor) bool {
	if c.checkDescriptor(d) != nil || d.Size == 0 || d.InlineOK() {
		return true
	}
	space, sniff, err := c.viewOf(d)
	if err != nil {
		return true // a read fails at once
	}
	if sniff {
		s, ok := c.knownSniff(d.Digest)
		if !ok {
			return false
		}
		space = s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chunks.Contains(blobChunkKey{d.Digest, space, 0}) {
		return true
	}
	if sh, ok := c.shapes.Peek(d.Digest); ok && space != blobRaw && sh.dec[space].known && sh.dec[space].size == 0 {
		return true // decodes to nothing: no chunk to find (review 29)
	}
	m, ok := c.metas.Peek(d.Digest)
	return space == blobRaw && ok && m.onDisk.Load()
}

// Prefetchable reports whether Prefetch would fetch d: a body that is
// not warm and small enough to come in one request (at most one chunk
// stored); larger bodies are left to the chunk read-ahead of their own
// reader.
func (c *Cache) Prefetchable(d *layout.Descriptor) bool {
	return d != nil && d.Size <= c.cs && !c.Warm(d)
}

// PrefetchLimits are the bounds a caller of Prefetch keeps: at most
// bytes of prefetched bodies that nobody has read yet (a quarter of the
// memory budget, so that read-ahead never pushes the whole working set
// out), and at most inFlight prefetches at once (with the chunk
// read-ahead's Parallel, three quarters of the cache's backend reads:
// speculative reads never hold all of them, so a program's read always
// finds one, as in the request scheduler).
func (c *Cache) PrefetchLimits() (bytes int64, inFlight int) {
	return c.opts.MemBytes / 4, max(1, c.opts.MaxInFlight*3/4-c.opts.Parallel)
}

// Prefetch fetches and verifies the body of d ahead of its reader when
// Prefetchable, and reports whether it did. ctx should be speculative
// (schedblob.Speculative); a context without a mark gets one.
func (c *Cache) Prefetch(ctx context.Context, d *layout.Descriptor) (bool, error) {
	c.busy()
	if !c.Prefetchable(d) {
		return false, nil
	}
	if !schedblob.IsSpeculative(ctx) {
		ctx = schedblob.Speculative(ctx)
	}
	var one [1]byte
	_, err := c.ReadAt(ctx, d, one[:], 0)
	if errors.Is(err, io.EOF) {
		err = nil // an empty decoded body
	}
	return err == nil, err
}
