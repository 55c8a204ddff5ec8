package blobcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/pugmark/pugfs/layout"
)

// blobPassMode says whether a verify pass also decodes.
type blobPassMode struct {
	decode blobSpace // decode in the same stream with this encoding
	sniff  bool      // or with the one the head announces (§15)
}

// blobPassResult is what a verify pass proved, and what it decoded.
type blobPassResult struct {
	meta     *blobMeta
	decSpace blobSpace // blobRaw: nothing was decoded
	dec      *blobDecodeResult
	decErr   error
}

// blobMismatch is data that contradicts the digest (or the size). Whether
// that is corruption of the blob or of a local copy is the caller's call.
type blobMismatch struct{ detail string }

func (m *blobMismatch) Error() string { return "mismatch: " + m.detail }

func (c *Cache) numChunks(size int64) int64 { return (size + c.cs - 1) / c.cs }

func (c *Cache) sizeMismatch(d layout.Digest, claimed, actual int64) error {
	return fmt.Errorf("%s: %w: descriptor size %d, but the verified blob is %d bytes", layout.BlobKey(d), layout.ErrCorrupt, claimed, actual)
}

// verified returns the proof for the body (d, size), running or joining its
// verify pass when there is none. The pass result is returned only to
// callers that waited for a pass.
func (c *Cache) verified(ctx context.Context, d layout.Digest, size int64, mode blobPassMode, want int64) (*blobMeta, *blobPassResult, error) {
	c.mu.Lock()
	m, ok := c.metas.Get(d)
	c.mu.Unlock()
	if ok {
		if m.size != size {
			return nil, nil, c.sizeMismatch(d, size, m.size)
		}
		return m, nil, nil
	}
	if err := c.badErr(d, size, blobRaw); err != nil {
		return nil, nil, err
	}
	res, err := blobDo(c, c.passes, blobSizedKey{d, size}, ctx, func(ctx context.Context) (*blobPassResult, error) {
		c.mu.Lock()
		m, ok := c.metas.Get(d)
		c.mu.Unlock()
		if ok {
			return &blobPassResult{meta: m}, nil
		}
		return c.runPass(ctx, d, size, mode, want)
	})
	if err != nil {
		return nil, nil, err
	}
	if res.meta.size != size {
		return nil, nil, c.sizeMismatch(d, size, res.meta.size)
	}
	return res.meta, res, nil
}

// runPass verifies the whole body: from the disk cache if it has a copy
// (hashed whole: a file is trusted only after that), else from the
// backend, teeing the bytes into a new disk cache entry.
func (c *Cache) runPass(ctx context.Context, d layout.Digest, size int64, mode blobPassMode, want int64) (*blobPassResult, error) {
	c.st.passes.Add(1)
	if c.disk != nil && c.disk.enabled() {
		if f, ok := c.disk.openEntry(d, size); ok {
			res, err := c.consume(ctx, d, size, mode, want, &blobFileIter{c: c, f: f, size: size}, nil, true)
			f.Close()
			if err == nil {
				return res, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.log.Warn("cache: disk cache copy failed verification; removing it", "key", layout.BlobKey(d), "err", err)
			c.disk.drop(diskData, d)
		}
	}
	var tmp *diskTemp
	if c.disk != nil && c.disk.enabled() && size <= c.disk.maxEntry() {
		tmp, _ = c.disk.create()
	}
	res, err := c.consume(ctx, d, size, mode, want, c.backendIter(ctx, d, size), tmp, false)
	if err != nil {
		var mm *blobMismatch
		if errors.As(err, &mm) {
			return nil, c.corrupt(d, size, blobRaw, mm.detail)
		}
		return nil, err
	}
	return res, nil
}

// blobChunkIter yields a body's chunks in order, each with its SHA-256.
type blobChunkIter interface {
	next() (buf []byte, sum [32]byte, err error)
	stop()
}

// consume runs a verify pass over it: per-chunk hashes, the whole digest in
// order, the head for sniffing, staging, an optional disk copy (tmp) and
// optional decoding in the same stream. Nothing is published unless the
// digest matched.
func (c *Cache) consume(ctx context.Context, d layout.Digest, size int64, mode blobPassMode, want int64,
	it blobChunkIter, tmp *diskTemp, fromDisk bool) (res *blobPassResult, err error) {
	defer it.stop()
	n := c.numChunks(size)
	hashes := make([][32]byte, n)
	h := sha256.New()
	var head []byte
	var job *blobDecodeJob
	stage := c.newStager(want)
	defer func() {
		if err != nil {
			stage.abort()
			if job != nil {
				job.abort(err)
			}
			tmp.abort()
		}
	}()
	for i := int64(0); i < n; i++ {
		buf, sum, err := it.next()
		if err != nil {
			return nil, err
		}
		hashes[i] = sum
		h.Write(buf)
		if i == 0 {
			head = bytes.Clone(buf[:min(4, len(buf))])
			space := mode.decode
			if mode.sniff {
				space = blobSpaceOf(layout.Sniff(head))
			}
			if space != blobRaw {
				job = c.startDecodeJob(ctx, d, space, want)
			}
		}
		if job != nil {
			job.feed(buf)
		}
		if tmp != nil {
			if tmp.write(buf) != nil {
				tmp.abort()
				tmp = nil
			}
		}
		// Decoding passes stage decoded chunks, not raw ones: the raw view
		// is rarely read when a decoded one exists.
		if job != nil || !stage.offer(blobChunkKey{d, blobRaw, i}, buf) {
			c.putBuf(buf)
		}
	}
	if n == 0 && mode.decode != blobRaw {
		job = c.startDecodeJob(ctx, d, mode.decode, want)
	}
	var got layout.Digest
	h.Sum(got[:0])
	if got != d {
		return nil, &blobMismatch{detail: "digest mismatch: the stored body hashes to sha256:" + got.Hex()}
	}
	meta := &blobMeta{size: size, hashes: hashes, head: head}
	meta.onDisk.Store(fromDisk)
	if tmp != nil {
		if tmp.commit(d) {
			meta.onDisk.Store(true)
		}
		tmp.f.Close()
		tmp = nil
	}
	c.mu.Lock()
	c.metas.Remove(d)
	c.metas.Add(d, meta)
	c.metaHashes += n
	for c.metaHashes > blobMetaHashes && c.metas.Len() > 1 {
		c.metas.RemoveOldest()
	}
	stage.publishLocked(-1)
	c.mu.Unlock()
	c.recordSniff(d, head, mode.sniff)
	res = &blobPassResult{meta: meta}
	if job != nil {
		res.decSpace = job.space
		res.dec, res.decErr = job.finish()
		job = nil
	}
	return res, nil
}

type blobChunkResult struct {
	buf []byte
	sum [32]byte
	err error
}

// blobBackendIter fetches the chunks of a body with ranged reads, up to
// Parallel in flight, hashing each in its own goroutine, delivered in order.
type blobBackendIter struct {
	ctx     context.Context
	cancel  context.CancelFunc
	futures chan chan blobChunkResult
	wg      sync.WaitGroup
}

func (c *Cache) backendIter(ctx context.Context, d layout.Digest, size int64) *blobBackendIter {
	ctx, cancel := context.WithCancel(ctx)
	// The consumer holds one future, the channel buffers Parallel-1 more:
	// at most Parallel reads run at once.
	it := &blobBackendIter{ctx: ctx, cancel: cancel, futures: make(chan chan blobChunkResult, c.opts.Parallel-1)}
	n := c.numChunks(size)
	go func() {
		defer close(it.futures)
		for i := int64(0); i < n; i++ {
			ch := make(chan blobChunkResult, 1)
			select {
			case it.futures <- ch:
			case <-ctx.Done():
				return
			}
			it.wg.Add(1)
			go func() {
				defer it.wg.Done()
				off := i * c.cs
				buf, err := c.fetchRange(ctx, d, size, off, min(c.cs, size-off))
				r := blobChunkResult{buf: buf, err: err}
				if err == nil {
					r.sum = sha256.Sum256(buf)
				}
				ch <- r
			}()
		}
	}()
	return it
}

func (it *blobBackendIter) next() ([]byte, [32]byte, error) {
	ch, ok := <-it.futures
	if !ok {
		if err := it.ctx.Err(); err != nil {
			return nil, [32]byte{}, err
		}
		return nil, [32]byte{}, errors.New("cache: chunk stream ended early")
	}
	r := <-ch
	return r.buf, r.sum, r.err
}

// stop cancels outstanding reads and waits for them. The launcher's
// wg.Add calls all happen before it closes futures, so waiting for that
// close first makes the Wait safe.
func (it *blobBackendIter) stop() {
	it.cancel()
	for range it.futures {
	}
	it.wg.Wait()
}

// blobFileIter reads a body's chunks from a local file.
type blobFileIter struct {
	c    *Cache
	f    *os.File
	size int64
	off  int64
}

func (it *blobFileIter) next() ([]byte, [32]byte, error) {
	n := min(it.c.cs, it.size-it.off)
	buf := it.c.getBuf(n)
	if _, err := io.ReadFull(it.f, buf); err != nil {
		return nil, [32]byte{}, fmt.Errorf("cache: read %s at %d: %w", it.f.Name(), it.off, err)
	}
	it.off += n
	return buf, sha256.Sum256(buf), nil
}

func (it *blobFileIter) stop() {}

// fetchRange reads [off, off+n) of the stored body with one ranged read.
// The read of the last chunk asks for everything to the end, so that a
// stored body longer than size is noticed.
func (c *Cache) fetchRange(ctx context.Context, d layout.Digest, size, off, n int64) ([]byte, error) {
	last := off+n == size
	length := n
	if last {
		length = -1
	}
	select {
	case c.fetchSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.fetchSem }()
	c.st.backendReads.Add(1)
	c.st.inFlight.Add(1)
	defer c.st.inFlight.Add(-1)
	rc, err := c.src.OpenBlob(ctx, d, off, length)
	if err != nil {
		return nil, fmt.Errorf("cache: fetch %s at %d: %w", layout.BlobKey(d), off, err)
	}
	defer rc.Close()
	buf := c.getBuf(n)
	k, err := io.ReadFull(rc, buf)
	c.st.bytesFetched.Add(int64(k))
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, &blobMismatch{detail: fmt.Sprintf("stored body ends at byte %d, descriptor size is %d", off+int64(k), size)}
	}
	if err != nil {
		return nil, fmt.Errorf("cache: fetch %s at %d: %w", layout.BlobKey(d), off, err)
	}
	if last {
		var one [1]byte
		if k, _ := io.ReadFull(rc, one[:]); k > 0 {
			return nil, &blobMismatch{detail: fmt.Sprintf("stored body is longer than the descriptor size %d", size)}
		}
	}
	return buf, nil
}

// rawChunk returns chunk idx of the stored body (d, size), verified.
func (c *Cache) rawChunk(ctx context.Context, d layout.Digest, size, idx int64) ([]byte, error) {
	k := blobChunkKey{d, blobRaw, idx}
	c.mu.Lock()
	buf, ok := c.chunks.Get(k)
	m, known := c.metas.Peek(d)
	c.mu.Unlock()
	if known && m.size != size {
		return nil, c.sizeMismatch(d, size, m.size)
	}
	if ok {
		c.st.hits.Add(1)
		return buf, nil
	}
	c.st.misses.Add(1)
	meta, _, err := c.verified(ctx, d, size, blobPassMode{}, idx)
	if err != nil {
		return nil, err
	}
	return c.rawChunkFlight(ctx, d, meta, idx)
}

// rawChunkFlight fetches one chunk of a verified body, coalescing
// concurrent requests for it.
func (c *Cache) rawChunkFlight(ctx context.Context, d layout.Digest, meta *blobMeta, idx int64) ([]byte, error) {
	k := blobChunkKey{d, blobRaw, idx}
	if buf, ok := c.peek(k); ok {
		return buf, nil
	}
	return blobDo(c, c.fetches, k, ctx, func(ctx context.Context) ([]byte, error) {
		if buf, ok := c.peek(k); ok {
			return buf, nil
		}
		return c.fetchRawChunk(ctx, d, meta, idx)
	})
}

// fetchRawChunk re-reads one chunk of a verified body, from the disk cache
// or the backend, and checks it against the hash its verify pass recorded.
func (c *Cache) fetchRawChunk(ctx context.Context, d layout.Digest, meta *blobMeta, idx int64) ([]byte, error) {
	k := blobChunkKey{d, blobRaw, idx}
	off := idx * c.cs
	n := min(c.cs, meta.size-off)
	if meta.onDisk.Load() && c.disk != nil {
		if buf, ok := c.diskChunk(d, meta, idx); ok {
			c.st.diskHits.Add(1)
			c.mu.Lock()
			c.addChunkLocked(k, buf)
			c.mu.Unlock()
			return buf, nil
		}
	}
	if err := c.badErr(d, meta.size, blobRaw); err != nil {
		return nil, err
	}
	buf, err := c.fetchRange(ctx, d, meta.size, off, n)
	if err != nil {
		var mm *blobMismatch
		if errors.As(err, &mm) {
			return nil, c.corrupt(d, meta.size, blobRaw, fmt.Sprintf("chunk %d: %s", idx, mm.detail))
		}
		return nil, err
	}
	if sha256.Sum256(buf) != meta.hashes[idx] {
		return nil, c.corrupt(d, meta.size, blobRaw,
			fmt.Sprintf("chunk %d (bytes %d-%d) differs from the content verified earlier", idx, off, off+n-1))
	}
	c.mu.Lock()
	c.addChunkLocked(k, buf)
	c.mu.Unlock()
	return buf, nil
}

// diskChunk reads one chunk of a verified body from its disk copy.
func (c *Cache) diskChunk(d layout.Digest, meta *blobMeta, idx int64) ([]byte, bool) {
	f, ok := c.disk.openEntry(d, meta.size)
	if !ok {
		meta.onDisk.Store(false)
		return nil, false
	}
	defer f.Close()
	off := idx * c.cs
	buf := make([]byte, min(c.cs, meta.size-off))
	if _, err := f.ReadAt(buf, off); err != nil {
		c.disk.warn("read", f.Name(), err)
		return nil, false
	}
	if sha256.Sum256(buf) != meta.hashes[idx] {
		c.log.Warn("cache: disk cache copy is damaged; removing it", "key", layout.BlobKey(d), "chunk", idx)
		c.disk.drop(diskData, d)
		meta.onDisk.Store(false)
		return nil, false
	}
	return buf, true
}

// readRaw serves [off, off+len(p)) of the stored body, with read-ahead on
// sequential access.
func (c *Cache) readRaw(ctx context.Context, d layout.Digest, size int64, p []byte, off int64) (int, error) {
	key := blobBodyKey{d, blobRaw}
	seq := c.sequential(key, off, off+int64(len(p)))
	first := true
	return c.readChunks(d, size, p, off, func(idx int64) ([]byte, error) {
		buf, err := c.rawChunk(ctx, d, size, idx)
		if err == nil && seq && first {
			first = false
			c.readAheadRaw(d, size, idx)
		}
		return buf, err
	})
}

func (c *Cache) readAheadRaw(d layout.Digest, size, idx int64) {
	c.mu.Lock()
	meta, ok := c.metas.Peek(d)
	c.mu.Unlock()
	if !ok || meta.size != size {
		return
	}
	c.readAhead(blobBodyKey{d, blobRaw}, idx, c.numChunks(size), func(ctx context.Context, j int64) {
		_, _ = c.rawChunkFlight(ctx, d, meta, j)
	})
}

// blobRawReader reads a verified stored body sequentially (input of a
// decoder), chunk by chunk, with read-ahead.
type blobRawReader struct {
	c    *Cache
	ctx  context.Context
	d    layout.Digest
	size int64
	off  int64
	cur  []byte
}

func (r *blobRawReader) Read(p []byte) (int, error) {
	if len(r.cur) == 0 {
		if r.off >= r.size {
			return 0, io.EOF
		}
		idx := r.off / r.c.cs
		buf, err := r.c.rawChunk(r.ctx, r.d, r.size, idx)
		if err != nil {
			return 0, err
		}
		r.c.readAheadRaw(r.d, r.size, idx)
		r.cur = buf[r.off-idx*r.c.cs:]
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.off += int64(n)
	return n, nil
}
