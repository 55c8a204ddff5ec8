package blobcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

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

// maxBlobSize bounds the size of a blob the cache takes from a
// descriptor, far above what any store holds (S3's limit is 5 TiB): a
// size from the bucket near 2^63 overflowed numChunks, a pass over
// nothing, and with the empty body's digest a "verified" blob of 8 EiB.
// Below it, a size the stored body does not have fails its pass.
const maxBlobSize = 1 << 62

func (c *Cache) sizeMismatch(d layout.Digest, claimed, actual int64) error {
	return fmt.Errorf("%s: %w: descriptor size %d, but the verified blob is %d bytes", layout.BlobKey(d), layout.ErrCorrupt, claimed, actual)
}

// verified returns the proof for the body (d, size), running or joining its
// verify pass when there is none. The pass result is returned only to
// callers that waited for a pass.
func (c *Cache) verified(ctx context.Context, d layout.Digest, size int64, mode blobPassMode, want int64) (*blobMeta, *blobPassResult, error) {
	if size < 0 || size > maxBlobSize {
		return nil, nil, fmt.Errorf("%s: %w: size %d", layout.BlobKey(d), layout.ErrCorrupt, size)
	}
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
// backend, writing the bytes into a new disk cache entry as they pass.
func (c *Cache) runPass(ctx context.Context, d layout.Digest, size int64, mode blobPassMode, want int64) (*blobPassResult, error) {
	c.st.passes.Add(1)
	// Only where a pass would have written a copy: under DiskMinBytes
	// the lookup is a failed stat per body (a cold grep -r of a local
	// bucket's small files spent 4% of its CPU there).
	if c.diskKeeps(size) {
		if f, ok := c.disk.openEntry(d, size); ok {
			res, err := c.consume(ctx, d, size, mode, want, c.fileIter(ctx, f, size), nil, f)
			if err == nil {
				return res, nil
			}
			f.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.log.Warn("cache: disk cache copy failed verification; removing it", "key", layout.BlobKey(d), "err", err)
			c.disk.drop(diskData, d)
		}
	}
	var tmp *diskTemp
	if c.diskKeeps(size) {
		tmp = c.disk.createReserved(diskData, d.Hex(), size)
	}
	res, err := c.consume(ctx, d, size, mode, want, c.backendIter(ctx, d, size), tmp, nil)
	if err != nil {
		var mm *blobMismatch
		if errors.As(err, &mm) {
			return nil, c.corrupt(d, size, blobRaw, mm.detail)
		}
		return nil, err
	}
	return res, nil
}

// blobChunkIter yields a body's chunks in order. done tells it the pass
// is through with a chunk, and gives the buffer back for reuse (nil: the
// pass kept it); the chunk's share of the pass's window of memory is then
// free for the next read.
type blobChunkIter interface {
	next() ([]byte, error)
	done(buf []byte)
	stop()
}

// passStageChunks is how large a blob a pass that writes a disk copy
// still stages in memory: small ones are read from memory afterwards,
// larger ones from the verified copy.
const passStageChunks = 4

// consume runs a verify pass over it: one SHA-256 over the body, with the
// chunk proofs taken from it (chain.go), the head for sniffing, staging,
// an optional disk copy (tmp) and optional decoding in the same stream.
// Hashing runs on this goroutine while the iterator reads ahead on its
// own, and a second goroutine writes the disk copy and stages chunks, so
// the two cores fetch, hash and write at once. Nothing is published
// unless the digest matched. disk is the verified copy being read when
// the pass reads one (it becomes the blob's verified file).
func (c *Cache) consume(ctx context.Context, d layout.Digest, size int64, mode blobPassMode, want int64,
	it blobChunkIter, tmp *diskTemp, disk *os.File) (res *blobPassResult, err error) {
	defer it.stop()
	n := c.numChunks(size)
	chain := c.newChain(n)
	var head []byte
	var job *blobDecodeJob
	stage := c.newStager(want)
	if (tmp != nil || disk != nil) && n > passStageChunks {
		stage = nil // read from the verified copy
	}
	w := c.startPassWriter(d, tmp, stage, it)
	defer func() {
		if err != nil {
			w.finish()
			stage.abort()
			if job != nil {
				job.abort(err)
			}
			w.tmp.abort()
		}
	}()
	for i := int64(0); i < n; i++ {
		buf, err := it.next()
		if err != nil {
			return nil, err
		}
		chain.add(buf)
		if i == 0 {
			head = bytes.Clone(buf[:min(4, len(buf))])
			space := mode.decode
			if mode.sniff {
				space = blobSpaceOf(layout.Sniff(head))
			}
			if space != blobRaw {
				job = c.startDecodeJob(ctx, d, size, space, want)
				w.noStage()
			}
		}
		if job != nil {
			job.feed(buf)
		}
		if err := w.put(ctx, i, buf); err != nil {
			return nil, err
		}
	}
	if n == 0 && mode.decode != blobRaw {
		job = c.startDecodeJob(ctx, d, size, mode.decode, want)
	}
	got, err := chain.sum()
	if err != nil {
		return nil, err
	}
	if got != d {
		return nil, &blobMismatch{detail: "digest mismatch: the stored body hashes to sha256:" + got.Hex()}
	}
	tmp = w.finish()
	meta := &blobMeta{size: size, hashes: chain.cvs, head: head}
	var verified *os.File
	switch {
	case disk != nil:
		meta.onDisk.Store(true)
		verified = disk
	case tmp != nil:
		if tmp.commit(d) {
			meta.onDisk.Store(true)
			verified = tmp.f
		} else {
			tmp.f.Close()
		}
	}
	c.mu.Lock()
	c.metas.Remove(d)
	c.metas.Add(d, meta)
	c.metaHashes += int64(len(meta.hashes))
	for c.metaHashes > blobMetaHashes && c.metas.Len() > 1 {
		c.metas.RemoveOldest()
	}
	stage.publishLocked(-1)
	if verified != nil {
		c.addVerifiedLocked(d, size, verified)
	}
	c.unlock()
	c.recordSniff(d, head, mode.sniff)
	res = &blobPassResult{meta: meta}
	if job != nil {
		res.decSpace = job.space
		res.dec, res.decErr = job.finish()
		job = nil
	}
	return res, nil
}

// blobPassWriter is the second goroutine of a pass: it writes each chunk
// to the disk copy, then stages it or gives its buffer back, in order.
type blobPassWriter struct {
	c     *Cache
	d     layout.Digest
	tmp   *diskTemp
	stage *blobStager
	it    blobChunkIter
	ch    chan blobPassChunk
	wg    sync.WaitGroup
	// staging is cleared (noStage) before the writer sees a chunk the
	// hasher decided not to stage.
	staging atomic.Bool
}

// passWriterQueue is how many chunks the hasher may be ahead of the
// writer.
const passWriterQueue = 4

type blobPassChunk struct {
	idx int64
	buf []byte
}

func (c *Cache) startPassWriter(d layout.Digest, tmp *diskTemp, stage *blobStager, it blobChunkIter) *blobPassWriter {
	w := &blobPassWriter{c: c, d: d, tmp: tmp, stage: stage, it: it, ch: make(chan blobPassChunk, passWriterQueue)}
	w.staging.Store(stage != nil)
	w.wg.Add(1)
	ch := w.ch
	go func() {
		defer w.wg.Done()
		for pc := range ch {
			if w.tmp != nil && w.tmp.write(pc.buf) != nil {
				w.tmp.abort()
				w.tmp = nil
			}
			// Decoding passes stage decoded chunks, not raw ones: the raw
			// view is rarely read when a decoded one exists.
			if w.staging.Load() && w.stage.offer(blobChunkKey{w.d, blobRaw, pc.idx}, pc.buf) {
				w.it.done(nil)
			} else {
				w.it.done(pc.buf)
			}
		}
	}()
	return w
}

func (w *blobPassWriter) noStage() { w.staging.Store(false) }

func (w *blobPassWriter) put(ctx context.Context, idx int64, buf []byte) error {
	select {
	case w.ch <- blobPassChunk{idx, buf}:
		return nil
	case <-ctx.Done():
		w.it.done(buf)
		return ctx.Err()
	}
}

// finish waits for the writer and returns the disk copy it wrote (nil if
// writing it failed). It may be called twice.
func (w *blobPassWriter) finish() *diskTemp {
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.wg.Wait()
	return w.tmp
}

type blobChunkResult struct {
	buf []byte
	err error
}

// blobBackendIter fetches a body with ranged reads of PartSize, several
// at once, and yields its chunks in order. The parts in flight and the
// chunks the pass still holds share a window of memory reserved from the
// budget: a read starts only when its chunks fit in it.
type blobBackendIter struct {
	c       *Cache
	ctx     context.Context
	cancel  context.CancelFunc
	futures chan chan blobChunkResult
	cur     chan blobChunkResult
	left    int // chunks still to take from cur
	window  chan struct{}
	held    int64 // bytes reserved from the budget
	ring    *blobRing
	wg      sync.WaitGroup
}

// passWindow returns how many chunks of memory a pass over a body of
// size bytes may hold, and reserves their bytes from the budget:
// PassParts parts, at most a quarter of the budget (a few passes at once
// leave room for cached chunks), at least one part (the budget gives way
// for that one), and never more than the body itself. A small body sets
// aside its own few bytes, not a window of parts: a traversal's
// prefetches of small files, each a pass, would otherwise reserve the
// budget many times over and push out the bodies fetched just before,
// their own included (each then fetched again when read).
func (c *Cache) passWindow(size int64) (chunks int64, held int64) {
	pc := c.partChunks()
	need := max(1, c.numChunks(size))
	chunks = min(need, max(pc, min(int64(c.opts.PassParts)*pc, c.opts.MemBytes/4/c.cs)))
	bytes := func(n int64) int64 { return min(n*c.cs, max(size, 1)) }
	c.mu.Lock()
	defer c.unlock()
	for chunks > pc && !c.reserveLocked(bytes(chunks)) {
		// Never below one part: the launcher takes a part's slots
		// before it reads, and waited for good for slots a window
		// cut from a size not a multiple of parts did not have
		// (review 29).
		chunks = max(pc, chunks-pc)
	}
	if chunks > pc || c.reserveLocked(bytes(chunks)) {
		return chunks, bytes(chunks)
	}
	return chunks, 0
}

// partChunks is the number of chunks one ranged read of a pass covers.
func (c *Cache) partChunks() int64 { return max(1, int64(c.opts.PartSize)/c.cs) }

func (c *Cache) backendIter(ctx context.Context, d layout.Digest, size int64) *blobBackendIter {
	ctx, cancel := context.WithCancel(ctx)
	window, held := c.passWindow(size)
	pc := c.partChunks()
	it := &blobBackendIter{c: c, ctx: ctx, cancel: cancel, held: held, ring: c.newRing(window),
		futures: make(chan chan blobChunkResult, window/pc+1), window: make(chan struct{}, window)}
	n := c.numChunks(size)
	go func() {
		defer close(it.futures)
		for first := int64(0); first < n; first += pc {
			k := min(pc, n-first)
			for j := int64(0); j < k; j++ {
				select {
				case it.window <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
			ch := make(chan blobChunkResult, k)
			select {
			case it.futures <- ch:
			case <-ctx.Done():
				return
			}
			it.wg.Add(1)
			go func() {
				defer it.wg.Done()
				c.fetchPart(ctx, d, size, first, k, ch, it.ring)
			}()
		}
	}()
	return it
}

func (it *blobBackendIter) next() ([]byte, error) {
	if it.left == 0 {
		ch, ok := <-it.futures
		if !ok {
			if err := it.ctx.Err(); err != nil {
				return nil, err
			}
			return nil, errors.New("cache: chunk stream ended early")
		}
		it.cur, it.left = ch, cap(ch)
	}
	r := <-it.cur
	it.left--
	return r.buf, r.err
}

func (it *blobBackendIter) done(buf []byte) {
	it.ring.put(buf)
	<-it.window
}

// stop cancels outstanding reads, waits for them and gives back their
// buffers and the reserved window. The launcher's wg.Add calls all happen
// before it closes futures, so waiting for that close first makes the
// Wait safe.
func (it *blobBackendIter) stop() {
	it.cancel()
	var left []chan blobChunkResult
	for ch := range it.futures {
		left = append(left, ch)
	}
	it.wg.Wait()
	for _, ch := range append(left, it.cur) {
		for len(ch) > 0 {
			it.ring.put((<-ch).buf)
		}
	}
	it.ring.close()
	if it.held > 0 {
		it.c.mu.Lock()
		it.c.reserved -= it.held
		it.c.mu.Unlock()
		it.held = 0
	}
}

// fetchPart reads chunks [first, first+k) of the stored body with one
// ranged read, sending each chunk as it arrives. The read of the last part
// asks for everything to the end, so that a stored body longer than size
// is noticed.
func (c *Cache) fetchPart(ctx context.Context, d layout.Digest, size, first, k int64, out chan<- blobChunkResult, ring *blobRing) {
	off := first * c.cs
	n := min(k*c.cs, size-off)
	// At most k results go out: an error takes the place of a chunk, and
	// the pass stops at the first one.
	fail := func(err error) { out <- blobChunkResult{err: err} }
	last := off+n == size
	length := n
	if last {
		length = -1
	}
	select {
	case c.fetchSem <- struct{}{}:
	case <-ctx.Done():
		fail(ctx.Err())
		return
	}
	defer func() { <-c.fetchSem }()
	c.st.inFlight.Add(1)
	defer c.st.inFlight.Add(-1)
	var rc *endSeen
	open := func(from int64) error {
		c.st.backendReads.Add(1)
		l := length
		if l >= 0 {
			l = off + n - from
		}
		r, err := c.src.OpenBlob(ctx, d, from, l)
		if err != nil {
			return fmt.Errorf("cache: fetch %s at %d: %w", layout.BlobKey(d), from, err)
		}
		rc = &endSeen{r: r}
		return nil
	}
	if err := open(off); err != nil {
		fail(err)
		return
	}
	defer func() { rc.r.Close() }()
	cuts := 0
	for j := int64(0); j < k; j++ {
		at := off + j*c.cs
		buf := ring.get(min(c.cs, size-at))
		got, err := io.ReadFull(rc, buf)
		c.st.bytesFetched.Add(int64(got))
		if (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && !rc.end {
			// The body stopped before the stored body's end said so:
			// the connection was cut (net/http's unexpected EOF), not
			// a short blob. Held for corrupt, a healthy blob failed
			// every read for a while. The chunk is read again.
			ring.put(buf)
			rc.r.Close()
			if cuts++; cuts > maxFetchCuts {
				rc.r = io.NopCloser(nil)
				fail(fmt.Errorf("cache: fetch %s at %d: the answer was cut short %d times: %w", layout.BlobKey(d), at+int64(got), cuts, err))
				return
			}
			if err := open(at); err != nil {
				rc.r = io.NopCloser(nil)
				fail(err)
				return
			}
			j--
			continue
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			ring.put(buf)
			fail(&blobMismatch{detail: fmt.Sprintf("stored body ends at byte %d, descriptor size is %d", at+int64(got), size)})
			return
		}
		if err != nil {
			ring.put(buf)
			fail(fmt.Errorf("cache: fetch %s at %d: %w", layout.BlobKey(d), at, err))
			return
		}
		if last && j == k-1 {
			var one [1]byte
			if m, _ := io.ReadFull(rc, one[:]); m > 0 {
				ring.put(buf)
				fail(&blobMismatch{detail: fmt.Sprintf("stored body is longer than the descriptor size %d", size)})
				return
			}
		}
		out <- blobChunkResult{buf: buf}
	}
}

// maxFetchCuts is how often fetchPart opens a read again after an answer
// cut short, for one part.
const maxFetchCuts = 2

// endSeen reads r and records whether it ended cleanly (io.EOF): a body
// that stops with another error (io.ErrUnexpectedEOF from net/http when
// the connection closes before Content-Length) did not reach the stored
// body's end.
type endSeen struct {
	r   io.ReadCloser
	end bool
}

func (e *endSeen) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) { // not io.ErrUnexpectedEOF, another value
		e.end = true
	}
	return n, err
}

// fetchRange reads [off, off+n) of the stored body with one ranged read
// (a chunk read again after its pass).
func (c *Cache) fetchRange(ctx context.Context, d layout.Digest, size, off, n int64) ([]byte, error) {
	out := make(chan blobChunkResult, 1)
	if n != min(c.cs, size-off) || off%c.cs != 0 {
		return nil, fmt.Errorf("cache: fetch %s: %w: range %d+%d is not a chunk", layout.BlobKey(d), layout.ErrInvalid, off, n)
	}
	c.fetchPart(ctx, d, size, off/c.cs, 1, out, c.newRing(0))
	r := <-out
	return r.buf, r.err
}

// blobFileIter reads a body's chunks from a local file, a few ahead on a
// goroutine of its own.
type blobFileIter struct {
	ring   *blobRing
	ch     chan blobChunkResult
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const fileIterAhead = 8

func (c *Cache) fileIter(ctx context.Context, f *os.File, size int64) *blobFileIter {
	ctx, cancel := context.WithCancel(ctx)
	it := &blobFileIter{ring: c.newRing(fileIterAhead + passWriterQueue + 2), ch: make(chan blobChunkResult, fileIterAhead), cancel: cancel}
	it.wg.Add(1)
	go func() {
		defer it.wg.Done()
		defer close(it.ch)
		for off := int64(0); off < size; off += c.cs {
			buf := it.ring.get(min(c.cs, size-off))
			r := blobChunkResult{buf: buf}
			if _, err := f.ReadAt(buf, off); err != nil {
				it.ring.put(buf)
				r = blobChunkResult{err: fmt.Errorf("cache: read %s at %d: %w", f.Name(), off, err)}
			}
			select {
			case it.ch <- r:
			case <-ctx.Done():
				it.ring.put(r.buf)
				return
			}
			if r.err != nil {
				return
			}
		}
	}()
	return it
}

func (it *blobFileIter) next() ([]byte, error) {
	r, ok := <-it.ch
	if !ok {
		return nil, errors.New("cache: chunk stream ended early")
	}
	return r.buf, r.err
}

func (it *blobFileIter) done(buf []byte) { it.ring.put(buf) }

func (it *blobFileIter) stop() {
	it.cancel()
	for r := range it.ch {
		it.ring.put(r.buf)
	}
	it.wg.Wait()
	it.ring.close()
}

// rawChunk returns chunk idx of the stored body (d, size), verified.
func (c *Cache) rawChunk(ctx context.Context, d layout.Digest, size, idx int64) ([]byte, error) {
	k := blobChunkKey{d, blobRaw, idx}
	c.mu.Lock()
	buf, ok := c.chunks.Get(k)
	// Get, not Peek: the meta is the proof of the size that the chunks'
	// key does not hold, so a blob being read keeps it.
	m, known := c.metas.Get(d)
	c.mu.Unlock()
	if known && m.size != size {
		return nil, c.sizeMismatch(d, size, m.size)
	}
	if ok && known {
		c.st.hits.Add(1)
		return buf, nil
	}
	// A chunk whose blob's meta was evicted is served only once a pass
	// proved the size again: a descriptor of the same digest with a
	// smaller size read the blob's first chunks as the whole file.
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

// fetchRawChunk re-reads one chunk of a verified body, from its verified
// file, the disk cache or the backend; what does not come from the
// verified file is checked against the chunk proofs of its pass.
func (c *Cache) fetchRawChunk(ctx context.Context, d layout.Digest, meta *blobMeta, idx int64) ([]byte, error) {
	k := blobChunkKey{d, blobRaw, idx}
	off := idx * c.cs
	n := min(c.cs, meta.size-off)
	if buf, ok := c.verifiedChunk(d, meta, idx); ok {
		c.mu.Lock()
		c.addChunkLocked(k, buf)
		c.mu.Unlock()
		return buf, nil
	}
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
	if !c.proven(meta.hashes, d, idx, buf) {
		return nil, c.corrupt(d, meta.size, blobRaw,
			fmt.Sprintf("chunk %d (bytes %d-%d) differs from the content verified earlier", idx, off, off+n-1))
	}
	c.mu.Lock()
	c.addChunkLocked(k, buf)
	c.mu.Unlock()
	return buf, nil
}

// diskChunk reads one chunk of a verified body from a disk copy this
// process has not hashed whole, checking it against the chunk proofs.
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
	if !c.proven(meta.hashes, d, idx, buf) {
		c.log.Warn("cache: disk cache copy is damaged; removing it", "key", layout.BlobKey(d), "chunk", idx)
		c.disk.drop(diskData, d)
		meta.onDisk.Store(false)
		return nil, false
	}
	return buf, true
}

// readRaw serves [off, off+len(p)) of the stored body: from memory, else
// straight from the verified file, else chunk by chunk with read-ahead on
// sequential access.
func (c *Cache) readRaw(ctx context.Context, d layout.Digest, size int64, p []byte, off int64) (int, error) {
	if off >= size {
		return 0, io.EOF
	}
	if _, ok := c.peek(blobChunkKey{d, blobRaw, off / c.cs}); !ok {
		meta, _, err := c.verified(ctx, d, size, blobPassMode{}, off/c.cs)
		if err != nil {
			return 0, err
		}
		if n, ok := c.readVerified(d, meta, p, off); ok {
			if n < len(p) {
				return n, io.EOF
			}
			return n, nil
		}
	}
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
	_, file := c.files.Peek(d)
	c.mu.Unlock()
	if !ok || meta.size != size || file {
		return // nothing to fetch ahead from the verified file
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
