package blobcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync/atomic"

	"github.com/pugmark/pugfs/layout"
)

// blobDecoded is a decoded body: its size, digest and chunk proofs,
// and the file holding all of it when it is too large to live in memory
// only (nil: its chunks are in the LRU, or re-decoded when evicted). It
// is not changed once published in c.decs; f is closed only after it left
// c.decs (releaseDecodedLocked, then Cache.unlock).
type blobDecoded struct {
	size   int64
	sum    layout.Digest
	hashes [][32]byte // chunk proofs (chain.go)
	f      *os.File
	spill  bool // f is not a disk cache entry: its bytes count in spillBytes
}

// blobDecodeResult is a decoded body and, when it was just decoded, the
// chunk the decoding caller wanted (so it need not race the LRU for it).
type blobDecodeResult struct {
	dec  *blobDecoded
	want int64
	buf  []byte
}

// blobDecodeError is a body that does not decode with its encoding. For a
// sniffed encoding that means the sniff was wrong and the body is shown as
// stored; for a declared one it is corruption.
type blobDecodeError struct{ err error }

func (e *blobDecodeError) Error() string { return e.err.Error() }
func (e *blobDecodeError) Unwrap() error { return e.err }

// errBlobStale says a decoded body's file is gone or damaged: decode again.
var errBlobStale = errors.New("cache: decoded copy unusable")

// errBlobDecodeDone unblocks a pass still feeding a decoder that finished.
var errBlobDecodeDone = errors.New("cache: decoder finished")

// errBlobDecodeStopped ends a decoder whose pass failed (blobDecodeJob.abort).
var errBlobDecodeStopped = errors.New("cache: decoding stopped: its pass failed")

// ensureDecoded returns the decoded body of d in space; sniffed says the
// encoding was only sniffed (a decode failure is then not an error worth
// remembering: the body is shown as stored).
func (c *Cache) ensureDecoded(ctx context.Context, d *layout.Descriptor, space blobSpace, want int64, sniffed bool) (*blobDecoded, error) {
	res, err := c.decoded(ctx, d, space, want, sniffed)
	if err != nil {
		return nil, err
	}
	return res.dec, nil
}

func (c *Cache) decoded(ctx context.Context, d *layout.Descriptor, space blobSpace, want int64, sniffed bool) (*blobDecodeResult, error) {
	key := blobBodyKey{d.Digest, space}
	c.mu.Lock()
	dec, ok := c.decs.Get(key)
	c.mu.Unlock()
	if ok {
		return &blobDecodeResult{dec: dec, want: -1}, nil
	}
	if err := c.badErr(d.Digest, d.Size, space); err != nil {
		return nil, err
	}
	return blobDo(c, c.decodes, blobBadKey{d.Digest, d.Size, space}, ctx, func(ctx context.Context) (*blobDecodeResult, error) {
		c.mu.Lock()
		dec, ok := c.decs.Get(key)
		c.mu.Unlock()
		if ok {
			return &blobDecodeResult{dec: dec, want: -1}, nil
		}
		res, err := c.decode(ctx, d, space, want)
		if err != nil {
			var de *blobDecodeError
			if errors.Is(err, layout.ErrTooLarge) || (!sniffed && errors.As(err, &de)) {
				c.markBad(d.Digest, d.Size, space, err)
			}
			return nil, err
		}
		return res, nil
	})
}

// decode produces the decoded body from the cheapest proven source: a
// decoded copy in the disk cache, inline data, a verify pass that decodes
// as it goes, or the verified stored body re-read chunk by chunk.
func (c *Cache) decode(ctx context.Context, d *layout.Descriptor, space blobSpace, want int64) (*blobDecodeResult, error) {
	if info, ok := c.decInfo(d.Digest, space); ok && c.disk != nil {
		if f, ok := c.disk.openEntry(info.sum, info.size); ok {
			res, err := c.loadDecodedFile(ctx, d.Digest, space, f, info, want)
			if err == nil {
				return res, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.log.Warn("cache: disk cache copy of a decoded body failed verification; removing it",
				"key", layout.BlobKey(d.Digest), "encoding", space.encoding(), "err", err)
			c.disk.drop(diskData, info.sum)
		}
	}
	if d.InlineOK() {
		return c.decodeFrom(ctx, d.Digest, int64(len(d.Data)), space, bytes.NewReader(d.Data), want)
	}
	meta, pass, err := c.verified(ctx, d.Digest, d.Size, blobPassMode{decode: space}, want)
	if err != nil {
		return nil, err
	}
	if pass != nil && pass.decSpace == space {
		return pass.dec, pass.decErr
	}
	return c.decodeFrom(ctx, d.Digest, meta.size, space, &blobRawReader{c: c, ctx: ctx, d: d.Digest, size: meta.size}, want)
}

// maxDecodeRatio and decodeRatioFloor bound a gzip or zstd body past
// decodeRatioFloor bytes decoded to maxDecodeRatio times what it stores
// (decodedLimit). A body's decoded size is learnt by decoding it (Size),
// for the stat of a listing too: 210 KB of zstd that decode to 4 GiB held
// `ls` of their session for half a minute, and 16 GiB for over a minute,
// with the caller unable to stop it (review R2). Gzip cannot pass 1,032
// times; zstd passes it only on runs of one byte, which no session's files
// are (a sparse disk image's zeros would be); the stored bytes stay
// readable under objects/.
const (
	maxDecodeRatio   = 1024
	decodeRatioFloor = 256 << 20
)

// decodedLimit is the most a body stored in stored bytes may decode to:
// Options.MaxDecoded, and past decodeRatioFloor maxDecodeRatio times
// stored.
func (c *Cache) decodedLimit(stored int64) int64 {
	return min(c.opts.MaxDecoded, max(decodeRatioFloor, stored*maxDecodeRatio))
}

func (c *Cache) decodeFrom(ctx context.Context, d layout.Digest, stored int64, space blobSpace, r io.Reader, want int64) (*blobDecodeResult, error) {
	s := c.newDecSink(d, stored, space, want)
	if err := s.run(ctx, r); err != nil {
		s.abort()
		return nil, err
	}
	return s.publish()
}

// loadDecodedFile verifies a decoded body's disk copy whole (on first use
// in this process) against the digest its info record names, recording
// the chunk hashes later re-reads are checked against.
func (c *Cache) loadDecodedFile(ctx context.Context, d layout.Digest, space blobSpace, f *os.File, info blobDecInfo, want int64) (res *blobDecodeResult, err error) {
	stage := c.newStager(want)
	defer func() {
		if err != nil {
			stage.abort()
			f.Close()
		}
	}()
	it := c.fileIter(ctx, f, info.size)
	defer it.stop()
	n := c.numChunks(info.size)
	chain := c.newChain(n)
	for i := int64(0); i < n; i++ {
		buf, err := it.next()
		if err != nil {
			return nil, err
		}
		chain.add(buf)
		if !stage.offer(blobChunkKey{d, space, i}, buf) {
			c.putBuf(buf)
		}
	}
	got, err := chain.sum()
	if err != nil {
		return nil, err
	}
	if got != info.sum {
		return nil, &blobMismatch{detail: "decoded copy hashes to sha256:" + got.Hex()}
	}
	c.st.diskHits.Add(1)
	dec := &blobDecoded{size: info.size, sum: got, hashes: chain.cvs, f: f}
	return c.publishDecoded(d, space, dec, want, stage), nil
}

// publishDecoded makes dec the decoded body of (d, space), publishes the
// staged chunks and returns the wanted one.
func (c *Cache) publishDecoded(d layout.Digest, space blobSpace, dec *blobDecoded, want int64, stagers ...*blobStager) *blobDecodeResult {
	res := &blobDecodeResult{dec: dec, want: want}
	c.mu.Lock()
	sh := c.shapeLocked(d)
	prev := sh.dec[space]
	cur := blobDecInfo{known: true, size: dec.size, sum: dec.sum}
	sh.dec[space] = cur
	key := blobBodyKey{d, space}
	c.decs.Remove(key)
	c.decs.Add(key, dec)
	if dec.spill {
		c.spillBytes += dec.size
		for c.spillBytes > c.spillMax && c.decs.Len() > 1 {
			c.decs.RemoveOldest()
		}
	}
	for _, s := range stagers {
		if buf := s.publishLocked(want); buf != nil {
			res.buf = buf
		}
	}
	c.unlock()
	if prev.known && prev != cur {
		c.log.Warn("cache: decoded body differs from the one recorded before; using the new one",
			"key", layout.BlobKey(d), "encoding", space.encoding(), "size", dec.size, "recorded_size", prev.size)
	}
	if prev != cur {
		c.persistShape(d)
	}
	return res
}

// releaseDecodedLocked is the eviction callback of decs. Files are closed
// after c.mu is released (c.unlock): closing a large unlinked spill file
// frees its blocks, which is disk work.
func (c *Cache) releaseDecodedLocked(dec *blobDecoded) {
	if dec.spill {
		c.spillBytes -= dec.size
	}
	if dec.f != nil {
		c.closeQ = append(c.closeQ, dec.f)
	}
}

// unlock releases c.mu, then closes the files evictions queued. A reader
// still using such a file gets os.ErrClosed and decodes again.
func (c *Cache) unlock() {
	q := c.closeQ
	c.closeQ = nil
	c.mu.Unlock()
	for _, f := range q {
		f.Close()
	}
}

// dropDecoded forgets dec as the decoded body of key (it is stale).
func (c *Cache) dropDecoded(key blobBodyKey, dec *blobDecoded) {
	c.mu.Lock()
	if cur, ok := c.decs.Peek(key); ok && cur == dec {
		c.decs.Remove(key)
	}
	c.unlock()
}

// decodedChunk returns chunk idx of the decoded body, from memory, its
// file (checked against the chunk hash) or by decoding again. dec may be
// nil (not needed if the chunk is in memory); the decoded body used is
// returned for the caller's next chunks.
func (c *Cache) decodedChunk(ctx context.Context, d *layout.Descriptor, space blobSpace, dec *blobDecoded, size, idx int64) ([]byte, *blobDecoded, error) {
	k := blobChunkKey{d.Digest, space, idx}
	if buf, ok := c.lookup(k); ok {
		return buf, dec, nil
	}
	// Each round either finds the chunk or decodes again; a few rounds
	// cover chunks evicted by concurrent readers right after publication.
	for range 4 {
		if buf, ok := c.peek(k); ok {
			return buf, dec, nil
		}
		if dec != nil && dec.f != nil {
			buf, err := c.decodedFileChunk(ctx, d.Digest, space, dec, idx)
			if err == nil {
				return buf, dec, nil
			}
			if !errors.Is(err, errBlobStale) {
				return nil, dec, err
			}
		}
		if dec != nil {
			c.dropDecoded(blobBodyKey{d.Digest, space}, dec)
		}
		res, err := c.decoded(ctx, d, space, idx, false)
		if err != nil {
			return nil, dec, err
		}
		dec = res.dec
		if dec.size != size {
			return nil, dec, fmt.Errorf("%s: %w: decoded size changed from %d to %d", layout.BlobKey(d.Digest), layout.ErrCorrupt, size, dec.size)
		}
		if res.want == idx && res.buf != nil {
			return res.buf, dec, nil
		}
		if dec.f == nil {
			// Just published from memory: the chunk is in the LRU unless a
			// concurrent reader evicted it already.
			continue
		}
	}
	return nil, dec, fmt.Errorf("cache: %s: decoded chunk %d evicted before it could be read; memory budget too small", layout.BlobKey(d.Digest), idx)
}

// decodedFileChunk reads one chunk of a decoded body from its file,
// coalescing concurrent requests.
func (c *Cache) decodedFileChunk(ctx context.Context, d layout.Digest, space blobSpace, dec *blobDecoded, idx int64) ([]byte, error) {
	k := blobChunkKey{d, space, idx}
	return blobDo(c, c.fetches, k, ctx, func(context.Context) ([]byte, error) {
		if buf, ok := c.peek(k); ok {
			return buf, nil
		}
		off := idx * c.cs
		buf := make([]byte, min(c.cs, dec.size-off))
		if _, err := dec.f.ReadAt(buf, off); err != nil {
			if !errors.Is(err, os.ErrClosed) {
				c.log.Warn("cache: reading a decoded copy failed; decoding again", "key", layout.BlobKey(d), "err", err)
			}
			return nil, errBlobStale
		}
		if !c.proven(dec.hashes, dec.sum, idx, buf) {
			c.log.Warn("cache: decoded copy is damaged; decoding again", "key", layout.BlobKey(d), "chunk", idx)
			if !dec.spill && c.disk != nil {
				c.disk.drop(diskData, dec.sum)
			}
			return nil, errBlobStale
		}
		c.mu.Lock()
		c.addChunkLocked(k, buf)
		c.mu.Unlock()
		return buf, nil
	})
}

// readDecoded serves [off, off+len(p)) of a decoded body.
func (c *Cache) readDecoded(ctx context.Context, d *layout.Descriptor, b blobBody, p []byte, off int64) (int, error) {
	key := blobBodyKey{d.Digest, b.space}
	seq := c.sequential(key, off, off+int64(len(p)))
	first := true
	dec := b.dec
	return c.readChunks(d.Digest, b.size, p, off, func(idx int64) ([]byte, error) {
		buf, used, err := c.decodedChunk(ctx, d, b.space, dec, b.size, idx)
		dec = used
		if err == nil && seq && first && dec != nil && dec.f != nil {
			first = false
			ra := dec
			c.readAhead(key, idx, c.numChunks(ra.size), func(ctx context.Context, j int64) {
				_, _ = c.decodedFileChunk(ctx, d.Digest, b.space, ra, j)
			})
		}
		return buf, err
	})
}

// blobDecSink receives a decoded body chunk by chunk: hashes it, bounds
// it, keeps it in memory while it is small and spills it to a file when
// it is not.
type blobDecSink struct {
	c     *Cache
	d     layout.Digest
	space blobSpace
	want  int64
	limit int64 // the most the body may decode to (decodedLimit)
	// stop is set when the pass that feeds the decoder failed (a body
	// shorter than its descriptor says, a digest mismatch): the decoder
	// stops at its next chunk instead of decoding what it has whole.
	stop atomic.Bool
	// fed, when set, counts the stored bytes fed to the decoder so far
	// (blobDecodeJob): the bound follows them, not the size the
	// descriptor declares, which a producer may make as large as it
	// likes (review C2: 64 KiB declared as 64 MiB decoded to 640 MiB).
	fed     *atomic.Int64
	chain   *blobChain // the digest of the decoded body and its chunk proofs
	total   int64
	mem     *blobStager // every chunk, while the body may stay memory-only
	stage   *blobStager // the wanted chunks, once it spilled
	f       *os.File
	tmp     *diskTemp // f is a disk cache entry being written
	spill   bool      // f is an anonymous spill file
	scratch []byte
}

// newDecSink returns the sink of the decoding of blob d, stored in
// stored bytes.
func (c *Cache) newDecSink(d layout.Digest, stored int64, space blobSpace, want int64) *blobDecSink {
	return &blobDecSink{
		c: c, d: d, space: space, want: want, limit: c.decodedLimit(stored), chain: c.newChain(0),
		mem:   &blobStager{c: c, lo: 0, hi: math.MaxInt64},
		stage: c.newStager(want),
	}
}

func (s *blobDecSink) key() string { return layout.BlobKey(s.d) }

// run decodes r into the sink. Errors of the input (a failed or corrupt
// raw read, cancellation) come back as they are; errors of the decoder are
// blobDecodeErrors.
func (s *blobDecSink) run(ctx context.Context, r io.Reader) error {
	cr := &blobCountReader{r: r}
	dr, err := layout.NewDecoder(cr, s.space.encoding())
	if err != nil {
		if cr.err != nil {
			return cr.err
		}
		if cr.n == 0 && cr.eof {
			return nil // an empty body decodes to an empty body
		}
		return s.decodeErr(err)
	}
	defer dr.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf := s.scratch
		if buf == nil {
			buf = make([]byte, s.c.cs)
		}
		k, rerr := blobFill(dr, buf)
		if k > 0 {
			kept, err := s.add(buf[:k])
			if err != nil {
				return err
			}
			if kept {
				s.scratch = nil
			} else {
				s.scratch = buf
			}
		}
		switch {
		case rerr == io.EOF:
			return nil
		case rerr == nil:
		case cr.err != nil:
			return cr.err
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return s.decodeErr(rerr)
		}
	}
}

func (s *blobDecSink) decodeErr(err error) error {
	if errors.Is(err, layout.ErrCorrupt) {
		return &blobDecodeError{fmt.Errorf("%s: %s body: %w", s.key(), s.space.encoding(), err)}
	}
	return &blobDecodeError{fmt.Errorf("%s: %w: %s body: %v", s.key(), layout.ErrCorrupt, s.space.encoding(), err)}
}

// add takes one decoded chunk; it reports whether it kept buf.
func (s *blobDecSink) add(buf []byte) (bool, error) {
	idx := s.total / s.c.cs
	if s.stop.Load() {
		return false, errBlobDecodeStopped
	}
	s.chain.add(buf)
	s.total += int64(len(buf))
	limit := s.limit
	if s.fed != nil {
		limit = min(limit, s.c.decodedLimit(s.fed.Load()))
	}
	if s.total > limit {
		return false, fmt.Errorf("%s: %w: %s body decodes past %d bytes (at most %d times what is stored past %d MiB, and %d in all)",
			s.key(), layout.ErrTooLarge, s.space.encoding(), limit, maxDecodeRatio, decodeRatioFloor>>20, s.c.opts.MaxDecoded)
	}
	k := blobChunkKey{s.d, s.space, idx}
	if s.f == nil {
		if s.total <= s.c.spillAt && s.mem.take(k, buf) {
			return true, nil
		}
		if err := s.openFile(); err != nil {
			return false, err
		}
		for _, b := range s.mem.bufs {
			if err := s.write(b); err != nil {
				return false, err
			}
		}
		// Keep the wanted chunks staged, release the others.
		s.c.mu.Lock()
		for i, mk := range s.mem.keys {
			b := s.mem.bufs[i]
			if s.stage.wants(mk.idx) {
				s.stage.keys = append(s.stage.keys, mk)
				s.stage.bufs = append(s.stage.bufs, b)
				s.stage.bytes += int64(len(b))
			} else {
				s.c.reserved -= int64(len(b))
			}
		}
		s.c.mu.Unlock()
		s.mem.keys, s.mem.bufs, s.mem.bytes = nil, nil, 0
	}
	if err := s.write(buf); err != nil {
		return false, err
	}
	return s.stage.offer(k, buf), nil
}

// openFile starts the file of a body too large for memory: a disk cache
// entry if there is a disk cache, else an anonymous spill file.
func (s *blobDecSink) openFile() error {
	if dc := s.c.disk; dc != nil && dc.enabled() {
		if t, err := dc.create(); err == nil {
			s.tmp, s.f = t, t.f
			return nil
		}
	}
	f, err := os.CreateTemp(s.c.opts.SpillDir, "pugfs-spill-*")
	if err != nil {
		return fmt.Errorf("cache: %s: spill file for the decoded body: %w", s.key(), err)
	}
	// Unlinked at once: the space goes when the file is closed, even if
	// the process dies.
	_ = os.Remove(f.Name())
	s.f, s.spill = f, true
	return nil
}

func (s *blobDecSink) write(b []byte) error {
	if s.tmp != nil {
		return s.tmp.write(b)
	}
	if _, err := s.f.Write(b); err != nil {
		return fmt.Errorf("cache: %s: spill file: %w", s.key(), err)
	}
	return nil
}

// publish installs the decoded body.
func (s *blobDecSink) publish() (*blobDecodeResult, error) {
	sum, err := s.chain.sum()
	if err != nil {
		return nil, err
	}
	dec := &blobDecoded{size: s.total, sum: sum, hashes: s.chain.cvs, f: s.f, spill: s.spill}
	if s.tmp != nil {
		if !s.tmp.commit(dec.sum) {
			// Not kept in the disk cache (too big, or the disk failed); the
			// open file still serves this process.
			dec.spill = true
		}
		s.tmp = nil
	}
	return s.c.publishDecoded(s.d, s.space, dec, s.want, s.mem, s.stage), nil
}

// abort releases everything the sink holds.
func (s *blobDecSink) abort() {
	s.mem.abort()
	s.stage.abort()
	if s.tmp != nil {
		s.tmp.abort()
		s.tmp = nil
	} else if s.f != nil {
		s.f.Close()
	}
	s.f = nil
}

// blobCountReader remembers how much was read and how the input ended, so
// that input failures are told apart from decoding failures.
type blobCountReader struct {
	r   io.Reader
	n   int64
	eof bool
	err error
}

func (r *blobCountReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	if err == io.EOF {
		r.eof = true
	} else if err != nil {
		r.err = err
	}
	return n, err
}

// blobFill reads until buf is full; unlike io.ReadFull it passes the
// reader's own errors through (a decoder's io.ErrUnexpectedEOF is a
// truncated stream, not a short last chunk) and returns io.EOF only at the
// real end.
func blobFill(r io.Reader, buf []byte) (int, error) {
	n, idle := 0, 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
		if k == 0 {
			if idle++; idle > 100 {
				return n, io.ErrNoProgress
			}
		}
	}
	return n, nil
}

// blobDecodeJob decodes alongside a verify pass: the pass feeds each raw
// chunk through a pipe, and the result is published only once the pass
// has proven the raw bytes.
type blobDecodeJob struct {
	space blobSpace
	pw    *io.PipeWriter
	done  chan struct{}
	sink  *blobDecSink
	err   error
	dead  bool         // the decoder stopped reading
	fed   atomic.Int64 // stored bytes fed so far (blobDecSink.fed)
}

func (c *Cache) startDecodeJob(ctx context.Context, d layout.Digest, stored int64, space blobSpace, want int64) *blobDecodeJob {
	pr, pw := io.Pipe()
	j := &blobDecodeJob{space: space, pw: pw, done: make(chan struct{}), sink: c.newDecSink(d, stored, space, want)}
	j.sink.fed = &j.fed
	go func() {
		defer close(j.done)
		j.err = j.sink.run(ctx, pr)
		pr.CloseWithError(errBlobDecodeDone)
	}()
	return j
}

// feed hands buf to the decoder; buf may be reused once feed returns.
func (j *blobDecodeJob) feed(buf []byte) {
	if j.dead {
		return
	}
	j.fed.Add(int64(len(buf)))
	if _, err := j.pw.Write(buf); err != nil {
		j.dead = true
	}
}

// finish ends the input and publishes the decoded body (the raw bytes are
// proven by now).
func (j *blobDecodeJob) finish() (*blobDecodeResult, error) {
	j.pw.Close()
	<-j.done
	if j.err != nil {
		j.sink.abort()
		return nil, j.err
	}
	return j.sink.publish()
}

// abort stops the decoder and discards its output.
//
// The decoder stops at its next chunk: a few KiB of one zstd frame decode
// to gigabytes without another read of the pipe, and a descriptor that
// declares a larger size than its body has gave the bomb the bound of
// that size, decoded whole before the pass found the body short (review
// C2).
func (j *blobDecodeJob) abort(err error) {
	j.sink.stop.Store(true)
	j.pw.CloseWithError(err)
	<-j.done
	j.sink.abort()
}
