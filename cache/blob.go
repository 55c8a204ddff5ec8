package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/layout"
)

// BlobSource is what the cache needs from the layout store: ranged reads of
// stored blob bodies (length < 0: to the end). *layout.Store implements it.
// Nothing it returns is trusted until the cache has checked it.
type BlobSource interface {
	OpenBlob(ctx context.Context, d layout.Digest, offset, length int64) (io.ReadCloser, error)
}

var _ BlobSource = (*layout.Store)(nil)

// Defaults of BlobOptions. A zero or negative field takes its default,
// except ReadAhead, where a negative value turns read-ahead off.
const (
	DefaultBlobMemBytes   = 256 << 20
	DefaultBlobChunkSize  = 1 << 20
	DefaultBlobReadAhead  = 4
	DefaultBlobParallel   = 8
	DefaultBlobDiskBytes  = 10 << 30
	DefaultBlobMaxDecoded = 64 << 30
)

const (
	// blobBadTTL is how long a blob that failed verification is answered
	// from memory with its error, so that a reader retrying in a loop does
	// not re-download a corrupt object each time.
	blobBadTTL = 30 * time.Second
	// blobMaxBad bounds the remembered failures.
	blobMaxBad = 4096
	// blobMetaHashes bounds the per-chunk hashes kept for verified blobs
	// (32 bytes each: 32 MiB, 1 TiB of blobs at 1 MiB chunks).
	blobMetaHashes = 1 << 20
	// blobMaxMetas bounds the number of verified blobs remembered.
	blobMaxMetas = 1 << 18
	// blobMaxShapes bounds the remembered decoded sizes and sniff results.
	// They are immutable facts about content-addressed bodies, so the bound
	// only exists to keep memory finite; 256 Ki entries is ~40 MiB at worst.
	blobMaxShapes = 1 << 18
	// blobMaxOpenDecoded bounds the decoded bodies kept open (each may hold
	// a spill file descriptor).
	blobMaxOpenDecoded = 64
	// blobSeqStreams is how many (blob, view) read positions are tracked
	// to detect sequential access.
	blobSeqStreams = 1024
)

// BlobOptions configure a BlobCache. The zero value is usable.
type BlobOptions struct {
	// MemBytes bounds the bytes of cached and staged chunks held in memory
	// (default 256 MiB). In-flight backend reads hold further chunk
	// buffers on top of it, at most MaxInFlight.
	MemBytes int64
	// ChunkSize is the unit of fetching, caching and verification
	// (default 1 MiB).
	ChunkSize int
	// ReadAhead is how many chunks are fetched ahead in the background when
	// reads come at increasing offsets (default 4; negative disables it).
	ReadAhead int
	// Parallel is the maximum number of concurrent backend reads of one blob
	// during its verify pass, and of background read-ahead reads in all
	// (default 8).
	Parallel int
	// MaxInFlight bounds the backend reads in flight across the whole
	// cache (default 4 x Parallel). Each holds at most one chunk buffer
	// beyond MemBytes, so a read storm over many blobs holds at most
	// MemBytes + MaxInFlight x ChunkSize of chunk data.
	MaxInFlight int
	// DiskDir is an optional on-disk cache directory ("" = none). The cache
	// keeps its files under DiskDir/blobs; several processes may share it.
	DiskDir string
	// DiskBytes bounds the on-disk cache (default 10 GiB). Without DiskDir
	// it bounds the spill files of large decoded bodies instead.
	DiskBytes int64
	// SpillDir is where large decoded bodies spill when there is no usable
	// DiskDir ("" = os.TempDir()). Spill files are unlinked on creation, so
	// they vanish with the process.
	SpillDir string
	// MaxDecoded bounds the decoded size of a gzip or zstd body (default
	// 64 GiB): a body that expands past it is layout.ErrTooLarge, so a
	// decompression bomb cannot fill the disk.
	MaxDecoded int64
	// SniffEncoding turns on §15 sniffing of lost encodings: a text-like
	// body whose descriptor declares no content-encoding but whose head
	// is gzip or zstd magic is shown decoded. Off (the default), such a
	// body is shown as stored with the descriptor's size, so that stat
	// never needs a blob read (decisions.md, "Encodings without a
	// declaration"); on, stat of a body not sniffed before costs a small
	// ranged read of its head.
	SniffEncoding bool
	// Logger receives corruption reports and disk cache warnings
	// (default slog.Default()).
	Logger *slog.Logger

	// now is the clock of the bad-blob window; tests pin it.
	now func() time.Time
}

// BlobStats are the cache's counters. The counts are cumulative since
// NewBlobCache; InFlight, MemBytes and DiskBytes are current values.
type BlobStats struct {
	// Hits and Misses count chunk lookups that found / did not find the
	// chunk in memory.
	Hits, Misses int64
	// DiskHits counts chunks served from the disk cache after a memory miss.
	DiskHits int64
	// InlineReads counts reads served from a descriptor's inline data.
	InlineReads int64
	// BackendReads counts ranged reads issued to the BlobSource;
	// BytesFetched the bytes they delivered.
	BackendReads, BytesFetched int64
	// VerifyPasses counts whole-blob verify passes (from the backend or a
	// disk copy); VerifyFailures counts digest or chunk-hash mismatches of
	// backend data.
	VerifyPasses, VerifyFailures int64
	// ReadAheads counts background chunk fetches started by read-ahead.
	ReadAheads int64
	// Evictions counts chunks dropped from memory to stay within MemBytes;
	// DiskEvictions counts files removed from the disk cache.
	Evictions, DiskEvictions int64
	// InFlight is the number of backend reads open right now.
	InFlight int64
	// MemBytes is the bytes of cached plus staged chunks; MemPeak is its
	// high-water mark. Both stay within BlobOptions.MemBytes.
	MemBytes, MemPeak int64
	// DiskBytes is the size of the disk cache entries this process knows
	// of; DiskEnabled reports whether the disk tier is in use.
	DiskBytes   int64
	DiskEnabled bool
}

// BlobCache serves blob content to the mounted tree: verified against the
// digest, decoded per content-encoding, cached in memory and optionally on
// disk. It is safe for concurrent use.
//
// # Verification
//
// No byte reaches a caller before it is proven to belong to the blob. On
// first use of a blob, a single-flight verify pass streams the whole stored
// body (ranged chunk reads, up to Parallel in flight, hashed in order),
// compares the SHA-256 with the digest and records the SHA-256 of every
// chunk (32 bytes per chunk, kept for many blobs in a bounded map). Chunks
// of that pass are staged, within the memory budget, and published to the
// memory LRU only once the whole digest matched. Later misses re-fetch one
// chunk with a ranged read and check it against its recorded hash, so a
// backend that changes bytes after verification yields an error, never the
// new bytes. A whole-body or chunk mismatch is an error wrapping
// layout.ErrCorrupt that names objects/sha256:<hex>; it is logged once and
// the blob answers with that error for blobBadTTL without backend reads.
// Inline descriptor data is used only when Descriptor.InlineOK.
//
// # Decoding
//
// gzip and zstd bodies are decoded from verified raw bytes only; when a
// verify pass is needed anyway, decoding runs alongside it and its output is
// published only if the digest matched. Decoded content is chunked under
// its own key space, with per-chunk hashes computed while decoding. Small
// decoded bodies live in memory only and are re-decoded if a chunk was
// evicted; larger ones are written to a file (the disk cache, else an
// unlinked spill file in SpillDir) from which evicted chunks are re-read
// and checked against their hashes. Decoded sizes are remembered per
// digest (and persisted in the disk cache), so Size is cheap after the
// first time.
//
// # Locks
//
// One mutex guards the maps and LRUs; it is never held across backend or
// disk I/O. Concurrent requests for the same chunk, verify pass or decode
// share one flight. Flights and read-ahead run under the cache's context,
// cancelled by Close; a flight is also cancelled when every caller waiting
// for it has given up.
type BlobCache struct {
	src         BlobSource
	opts        BlobOptions
	log         *slog.Logger
	now         func() time.Time
	cs          int64 // chunk size
	spillAt     int64 // decoded bodies larger than this go to a file
	stageChunks int64 // chunks a pass may stage from the wanted one on
	spillMax    int64 // bound on spill file bytes held open

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	raSem  chan struct{}
	// fetchSem bounds backend reads in flight (MaxInFlight); a slot is
	// held only for one ranged read, never while waiting for anything
	// else, so it cannot deadlock.
	fetchSem chan struct{}
	bufs     sync.Pool
	disk     *diskCache

	mu         sync.Mutex
	closed     bool
	chunks     *simplelru.LRU[blobChunkKey, []byte]
	memBytes   int64 // bytes in chunks
	reserved   int64 // bytes staged by passes and not yet published
	metas      *simplelru.LRU[layout.Digest, *blobMeta]
	metaHashes int64
	shapes     *simplelru.LRU[layout.Digest, *blobShape]
	decs       *simplelru.LRU[blobBodyKey, *blobDecoded]
	spillBytes int64
	closeQ     []*os.File // files to close once c.mu is released
	seq        *simplelru.LRU[blobBodyKey, blobSeq]
	bad        map[blobBadKey]blobBad
	passes     map[blobSizedKey]*blobCall[*blobPassResult]
	decodes    map[blobBadKey]*blobCall[*blobDecodeResult]
	fetches    map[blobChunkKey]*blobCall[[]byte]

	st blobCounters
}

type blobCounters struct {
	hits, misses, diskHits, inline     atomic.Int64
	backendReads, bytesFetched         atomic.Int64
	passes, verifyFailures, readAheads atomic.Int64
	evictions, inFlight                atomic.Int64
	memPeak                            atomic.Int64
}

// blobSpace names a key space of chunks: the stored bytes, or the body
// decoded with one encoding.
type blobSpace uint8

const (
	blobRaw blobSpace = iota
	blobGzip
	blobZstd
	blobSpaces
)

func (s blobSpace) encoding() string {
	switch s {
	case blobGzip:
		return layout.EncodingGzip
	case blobZstd:
		return layout.EncodingZstd
	}
	return layout.EncodingNone
}

func blobSpaceOf(enc string) blobSpace {
	switch enc {
	case layout.EncodingGzip:
		return blobGzip
	case layout.EncodingZstd:
		return blobZstd
	}
	return blobRaw
}

type blobChunkKey struct {
	d     layout.Digest
	space blobSpace
	idx   int64
}

type blobBodyKey struct {
	d     layout.Digest
	space blobSpace
}

// blobSizedKey identifies a stored body together with the size a caller
// claims for it: a descriptor with a wrong size must not poison the blob
// for descriptors with the right one.
type blobSizedKey struct {
	d    layout.Digest
	size int64
}

// blobBadKey identifies a body of a claimed size in one view: the key of
// remembered failures (blobRaw: the stored bytes are bad; else the
// decoding failed) and of decode flights.
type blobBadKey struct {
	d     layout.Digest
	size  int64
	space blobSpace
}

type blobBad struct {
	until time.Time
	err   error
}

// blobMeta is what a verify pass proved about a stored body.
type blobMeta struct {
	size   int64
	hashes [][32]byte // SHA-256 of each chunk
	head   []byte     // the first bytes, for sniffing (§15)
	onDisk atomic.Bool
}

// blobShape holds the immutable facts learned about a digest's content.
type blobShape struct {
	sniffed  bool
	sniff    blobSpace // the encoding the head announces
	sniffBad bool      // it announced one the body does not decode with
	// probed says probeRaw read the (unverified) head; probeRaw that it
	// had no magic number. Only Size uses them.
	probed, probeRaw bool
	dec              [blobSpaces]blobDecInfo
}

type blobDecInfo struct {
	known bool
	size  int64
	sum   layout.Digest // SHA-256 of the decoded body
}

type blobSeq struct{ off, end int64 }

var errBlobClosed = fmt.Errorf("cache: blob cache: %w", os.ErrClosed)

// NewBlobCache returns a cache reading from src. A DiskDir that cannot be
// used is not an error: the cache logs one warning and runs memory-only.
func NewBlobCache(src BlobSource, opts BlobOptions) (*BlobCache, error) {
	if src == nil {
		return nil, fmt.Errorf("cache: NewBlobCache: %w: nil BlobSource", layout.ErrInvalid)
	}
	if opts.MemBytes <= 0 {
		opts.MemBytes = DefaultBlobMemBytes
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultBlobChunkSize
	}
	if opts.ReadAhead < 0 {
		opts.ReadAhead = 0
	} else if opts.ReadAhead == 0 {
		opts.ReadAhead = DefaultBlobReadAhead
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultBlobParallel
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4 * opts.Parallel
	}
	if opts.DiskBytes <= 0 {
		opts.DiskBytes = DefaultBlobDiskBytes
	}
	if opts.MaxDecoded <= 0 {
		opts.MaxDecoded = DefaultBlobMaxDecoded
	}
	if opts.SpillDir == "" {
		opts.SpillDir = os.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	c := &BlobCache{
		src:      src,
		opts:     opts,
		log:      opts.Logger,
		now:      opts.now,
		cs:       int64(opts.ChunkSize),
		spillMax: opts.DiskBytes,
		raSem:    make(chan struct{}, opts.Parallel),
		fetchSem: make(chan struct{}, opts.MaxInFlight),
		bad:      make(map[blobBadKey]blobBad),
		passes:   make(map[blobSizedKey]*blobCall[*blobPassResult]),
		decodes:  make(map[blobBadKey]*blobCall[*blobDecodeResult]),
		fetches:  make(map[blobChunkKey]*blobCall[[]byte]),
	}
	// A decoded body stays memory-only while it is a few chunks and a small
	// share of the budget; re-decoding it after an eviction is cheap.
	c.spillAt = min(4*c.cs, opts.MemBytes/8)
	// A pass may stage up to half the budget: enough that a blob of that
	// size is fetched once, not once to verify and again to read.
	c.stageChunks = max(1, opts.MemBytes/2/c.cs)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.chunks, _ = simplelru.NewLRU[blobChunkKey, []byte](math.MaxInt, nil)
	c.metas, _ = simplelru.NewLRU(blobMaxMetas, func(_ layout.Digest, m *blobMeta) {
		c.metaHashes -= int64(len(m.hashes))
	})
	c.shapes, _ = simplelru.NewLRU[layout.Digest, *blobShape](blobMaxShapes, nil)
	c.decs, _ = simplelru.NewLRU(blobMaxOpenDecoded, func(_ blobBodyKey, dec *blobDecoded) {
		c.releaseDecodedLocked(dec)
	})
	c.seq, _ = simplelru.NewLRU[blobBodyKey, blobSeq](blobSeqStreams, nil)
	if opts.DiskDir != "" {
		dc, err := newDiskCache(opts.DiskDir, opts.DiskBytes, c.log, c.now)
		if err != nil {
			c.log.Warn("cache: disk cache unusable, continuing memory-only", "dir", opts.DiskDir, "err", err)
		} else {
			c.disk = dc
		}
	}
	return c, nil
}

// Close stops read-ahead and flights, waits for them and releases spill
// files. Reads after Close fail; Close is idempotent.
func (c *BlobCache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	c.decs.Purge()
	c.chunks.Purge()
	c.memBytes = 0
	c.unlock()
	if c.disk != nil {
		c.disk.root.Close()
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (c *BlobCache) Stats() BlobStats {
	c.mu.Lock()
	mem := c.memBytes + c.reserved
	c.mu.Unlock()
	s := BlobStats{
		Hits: c.st.hits.Load(), Misses: c.st.misses.Load(), DiskHits: c.st.diskHits.Load(),
		InlineReads:  c.st.inline.Load(),
		BackendReads: c.st.backendReads.Load(), BytesFetched: c.st.bytesFetched.Load(),
		VerifyPasses: c.st.passes.Load(), VerifyFailures: c.st.verifyFailures.Load(),
		ReadAheads: c.st.readAheads.Load(), Evictions: c.st.evictions.Load(),
		InFlight: c.st.inFlight.Load(), MemBytes: mem, MemPeak: c.st.memPeak.Load(),
	}
	if c.disk != nil {
		s.DiskBytes, s.DiskEvictions = c.disk.usage()
		s.DiskEnabled = c.disk.enabled()
	}
	return s
}

// ClearDisk removes every entry of the disk cache (consistency.md §5:
// read-only entries too, never through a symbolic link). Memory contents
// stay valid and are kept.
func (c *BlobCache) ClearDisk() error {
	if c.disk == nil {
		return nil
	}
	return c.disk.clear()
}

// Size is the size a file shows for d: d.Size for plain bodies, the decoded
// size for gzip/zstd ones (and, with SniffEncoding, for bodies whose lost
// encoding sniffing finds, §15).
//
// A plain body costs nothing: its size is the descriptor's. A declared
// gzip or zstd body shows only a size proven by decoding it: a verify and
// decode pass the first time (one ranged read for a body of at most one
// chunk, which is also what a later read needs), remembered per digest in
// memory and in the disk cache's info record, so a remount knows it
// without a request. The frame header of zstd (Frame_Content_Size) and
// the trailer of gzip (ISIZE) are not trusted as a size: both describe
// only the first frame, respectively the last member, of a body that may
// hold several (concatenated files, bgzip), and ISIZE is modulo 2^32, so
// either may be smaller than the real content, and a size too small makes
// the kernel cut reads (cp, mmap) short. Nothing short of decoding tells a
// single-frame body from a multi-frame one, so a header-derived size
// would be a guess; see README, "What things cost".
func (c *BlobCache) Size(ctx context.Context, d *layout.Descriptor) (int64, error) {
	if err := c.checkDescriptor(d); err != nil {
		return 0, err
	}
	space, sniff, err := c.viewOf(d)
	if err != nil {
		return 0, err
	}
	if space == blobRaw && !sniff {
		return d.Size, nil
	}
	if sniff {
		if c.probeRaw(ctx, d) {
			return d.Size, nil
		}
		if space, err = c.resolveSniff(ctx, d, 0); err != nil {
			return 0, err
		}
		if space == blobRaw {
			return d.Size, nil
		}
	}
	if info, ok := c.decInfo(d.Digest, space); ok {
		return info.size, nil
	}
	b, err := c.body(ctx, d, 0)
	if err != nil {
		return 0, err
	}
	return b.size, nil
}

// ReadAt reads the file content for d (decoded per its content-encoding) at
// off, with io.ReaderAt semantics: fewer than len(p) bytes only with an
// error, io.EOF at the end.
func (c *BlobCache) ReadAt(ctx context.Context, d *layout.Descriptor, p []byte, off int64) (int, error) {
	if err := c.checkDescriptor(d); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("cache: read %s: %w: negative offset", layout.BlobKey(d.Digest), layout.ErrInvalid)
	}
	if len(p) == 0 {
		return 0, nil
	}
	b, err := c.body(ctx, d, off/c.cs)
	if err != nil {
		return 0, err
	}
	if b.space == blobRaw {
		if d.InlineOK() {
			c.st.inline.Add(1)
			if off >= int64(len(d.Data)) {
				return 0, io.EOF
			}
			n := copy(p, d.Data[off:])
			if n < len(p) {
				return n, io.EOF
			}
			return n, nil
		}
		return c.readRaw(ctx, d.Digest, d.Size, p, off)
	}
	return c.readDecoded(ctx, d, b, p, off)
}

// ReadRawAt reads the stored bytes of a blob (the objects/ view): verified
// against the digest, never decoded. size is the blob's stored size.
func (c *BlobCache) ReadRawAt(ctx context.Context, digest layout.Digest, size int64, p []byte, off int64) (int, error) {
	if c.isClosed() {
		return 0, errBlobClosed
	}
	if digest.IsZero() || size < 0 || off < 0 {
		return 0, fmt.Errorf("cache: read blob %s size %d at %d: %w", digest, size, off, layout.ErrInvalid)
	}
	if len(p) == 0 {
		return 0, nil
	}
	return c.readRaw(ctx, digest, size, p, off)
}

func (c *BlobCache) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *BlobCache) checkDescriptor(d *layout.Descriptor) error {
	if c.isClosed() {
		return errBlobClosed
	}
	if d == nil {
		return fmt.Errorf("cache: %w: nil descriptor", layout.ErrInvalid)
	}
	if d.Digest.IsZero() {
		return fmt.Errorf("cache: descriptor %q: %w: no blob (zero digest)", d.Name, layout.ErrInvalid)
	}
	if d.Size < 0 {
		return fmt.Errorf("cache: descriptor %q: %w: negative size", d.Name, layout.ErrInvalid)
	}
	return nil
}

// SizeKnown reports whether Size of d is answered without a backend read:
// a plain body (unless it is still to be sniffed), inline data, or a
// decoded size remembered in memory or in the disk cache. Listings use it
// to fetch only the sizes that need a request, in parallel.
func (c *BlobCache) SizeKnown(d *layout.Descriptor) bool {
	if c.checkDescriptor(d) != nil || d.Size == 0 || d.InlineOK() {
		return true
	}
	space, sniff, err := c.viewOf(d)
	if err != nil {
		return true // Size fails at once
	}
	if sniff {
		if s, ok := c.knownSniff(d.Digest); ok {
			space = s
		} else if c.loadShape(d.Digest) {
			if space, ok = c.knownSniff(d.Digest); !ok {
				return false
			}
		} else {
			return false
		}
	}
	if space == blobRaw {
		return true
	}
	_, ok := c.decInfo(d.Digest, space)
	return ok
}

// viewOf is blobViewOf under the cache's sniffing option.
func (c *BlobCache) viewOf(d *layout.Descriptor) (blobSpace, bool, error) {
	return blobViewOf(d, c.opts.SniffEncoding)
}

// blobViewOf says how d's body is shown: decoded with its declared
// content-encoding, or as stored, after sniffing for a lost encoding
// (§15) only when sniffing is on.
func blobViewOf(d *layout.Descriptor, sniffing bool) (space blobSpace, sniff bool, err error) {
	switch enc := strings.ToLower(strings.TrimSpace(d.ContentEncoding)); enc {
	case "":
		return blobRaw, sniffing && blobSniffCandidate(d), nil
	case "identity":
		return blobRaw, false, nil
	case "gzip", "x-gzip":
		return blobGzip, false, nil
	case "zstd":
		return blobZstd, false, nil
	default:
		return 0, false, fmt.Errorf("%s: %w: unsupported content-encoding %q", layout.BlobKey(d.Digest), layout.ErrCorrupt, enc)
	}
}

// blobSniffCandidate reports whether a body without content-encoding should
// be sniffed: only bodies that ought to be text, so that binary formats
// starting with the magic bytes by chance, and files that are meant to be
// compressed archives (.gz, .zst), are shown as stored.
func blobSniffCandidate(d *layout.Descriptor) bool {
	name := strings.ToLower(d.Name)
	for _, ext := range []string{".gz", ".tgz", ".zst", ".zstd"} {
		if strings.HasSuffix(name, ext) {
			return false
		}
	}
	ct := strings.ToLower(strings.TrimSpace(d.ContentType))
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	switch {
	case ct == "", strings.HasPrefix(ct, "text/"), ct == "application/json", ct == "application/x-ndjson",
		strings.HasSuffix(ct, "+json"), strings.HasSuffix(ct, "+xml"):
		return true
	}
	return false
}

// blobBody is how one read is served: which key space, its size, and the
// decoded body when it is not the stored bytes (nil until needed when the
// decoded size is already known).
type blobBody struct {
	space blobSpace
	size  int64
	dec   *blobDecoded
}

// body resolves the view of d, decoding if needed; want is the chunk the
// caller is about to read, so that a pass stages the chunks around it.
func (c *BlobCache) body(ctx context.Context, d *layout.Descriptor, want int64) (blobBody, error) {
	space, sniff, err := c.viewOf(d)
	if err != nil {
		return blobBody{}, err
	}
	c.mu.Lock()
	m, known := c.metas.Peek(d.Digest)
	c.mu.Unlock()
	if known && m.size != d.Size {
		return blobBody{}, c.sizeMismatch(d.Digest, d.Size, m.size)
	}
	if sniff {
		if space, err = c.resolveSniff(ctx, d, want); err != nil {
			return blobBody{}, err
		}
	}
	if space == blobRaw {
		return blobBody{space: blobRaw, size: d.Size}, nil
	}
	c.mu.Lock()
	dec, ok := c.decs.Get(blobBodyKey{d.Digest, space})
	c.mu.Unlock()
	if ok {
		return blobBody{space: space, size: dec.size, dec: dec}, nil
	}
	if info, ok := c.decInfo(d.Digest, space); ok {
		// Decoded before: reads of chunks still in memory need no decoding;
		// readDecoded decodes on the first miss.
		return blobBody{space: space, size: info.size}, nil
	}
	dec, err = c.ensureDecoded(ctx, d, space, want, sniff)
	if err != nil {
		var de *blobDecodeError
		if sniff && errors.As(err, &de) {
			// The head only looked like gzip/zstd: show the body as stored.
			c.mu.Lock()
			sh := c.shapeLocked(d.Digest)
			sh.sniffBad = true
			c.mu.Unlock()
			c.persistShape(d.Digest)
			return blobBody{space: blobRaw, size: d.Size}, nil
		}
		return blobBody{}, err
	}
	return blobBody{space: space, size: dec.size, dec: dec}, nil
}

// resolveSniff decides whether a sniff candidate is shown decoded: from
// what is already known, from inline data for free, else from the head of
// a verify pass (which then decodes in the same stream).
func (c *BlobCache) resolveSniff(ctx context.Context, d *layout.Descriptor, want int64) (blobSpace, error) {
	if s, ok := c.knownSniff(d.Digest); ok {
		return s, nil
	}
	if d.InlineOK() {
		s := blobSpaceOf(layout.Sniff(d.Data))
		c.recordSniff(d.Digest, d.Data, false)
		return s, nil
	}
	if c.loadShape(d.Digest) {
		if s, ok := c.knownSniff(d.Digest); ok {
			return s, nil
		}
	}
	meta, pass, err := c.verified(ctx, d.Digest, d.Size, blobPassMode{sniff: true}, want)
	if err != nil {
		return 0, err
	}
	c.recordSniff(d.Digest, meta.head, true)
	if pass != nil && pass.decSpace != blobRaw && pass.decErr != nil {
		// The pass decoded what the head announced and failed: settle it
		// now rather than fetch the body again to fail again.
		var de *blobDecodeError
		switch {
		case errors.As(pass.decErr, &de):
			c.mu.Lock()
			c.shapeLocked(d.Digest).sniffBad = true
			c.mu.Unlock()
			c.persistShape(d.Digest)
		case errors.Is(pass.decErr, layout.ErrTooLarge):
			c.markBad(d.Digest, d.Size, pass.decSpace, pass.decErr)
		}
	}
	s, _ := c.knownSniff(d.Digest)
	return s, nil
}

// blobProbeLen is how many head bytes probeRaw reads: enough for every
// magic number Sniff knows.
const blobProbeLen = 4

// probeRaw reports, for Size, whether a body not sniffed yet starts with
// no magic number, so that it is shown as stored and its size is the
// descriptor's. It reads the first bytes with one small ranged read and
// does not verify them: stat(2) of a large text file must not download
// the whole body. Reads still verify everything, so a body that does not
// match its digest is an error then, never bytes. When the answer is not
// "as stored" (a magic number, an error) the caller takes the verified
// way, which a decoded size needs anyway.
func (c *BlobCache) probeRaw(ctx context.Context, d *layout.Descriptor) bool {
	if d.Size == 0 {
		return true // nothing to sniff (and a 0-byte range cannot be asked for)
	}
	if d.InlineOK() {
		return false // resolveSniff sniffs the inline bytes, verified
	}
	if _, ok := c.knownSniff(d.Digest); ok {
		return false
	}
	c.mu.Lock()
	sh, ok := c.shapes.Get(d.Digest)
	probed, raw := ok && sh.probed, ok && sh.probeRaw
	c.mu.Unlock()
	if probed {
		return raw
	}
	if c.loadShape(d.Digest) {
		if _, ok := c.knownSniff(d.Digest); ok {
			return false
		}
	}
	n := min(int64(blobProbeLen), d.Size)
	c.st.backendReads.Add(1)
	c.st.inFlight.Add(1)
	rc, err := c.src.OpenBlob(ctx, d.Digest, 0, n)
	var head []byte
	if err == nil {
		head = make([]byte, n)
		var k int
		k, err = io.ReadFull(rc, head)
		c.st.bytesFetched.Add(int64(k))
		rc.Close()
	}
	c.st.inFlight.Add(-1)
	if err != nil {
		return false
	}
	raw = layout.Sniff(head) == layout.EncodingNone
	c.mu.Lock()
	sh = c.shapeLocked(d.Digest)
	sh.probed, sh.probeRaw = true, raw
	c.mu.Unlock()
	return raw
}

func (c *BlobCache) knownSniff(d layout.Digest) (blobSpace, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sh, ok := c.shapes.Get(d)
	if !ok || !sh.sniffed {
		return 0, false
	}
	if sh.sniffBad {
		return blobRaw, true
	}
	return sh.sniff, true
}

// recordSniff remembers what head announces; persist writes it to the disk
// cache too, so that a remount can show sizes without a fetch.
func (c *BlobCache) recordSniff(d layout.Digest, head []byte, persist bool) {
	c.mu.Lock()
	sh := c.shapeLocked(d)
	changed := !sh.sniffed
	sh.sniffed = true
	sh.sniff = blobSpaceOf(layout.Sniff(head))
	c.mu.Unlock()
	if persist && changed {
		c.persistShape(d)
	}
}

// shapeLocked returns d's shape, creating it.
func (c *BlobCache) shapeLocked(d layout.Digest) *blobShape {
	sh, ok := c.shapes.Get(d)
	if !ok {
		sh = &blobShape{}
		c.shapes.Add(d, sh)
	}
	return sh
}

func (c *BlobCache) decInfo(d layout.Digest, space blobSpace) (blobDecInfo, bool) {
	c.mu.Lock()
	sh, ok := c.shapes.Get(d)
	var info blobDecInfo
	if ok {
		info = sh.dec[space]
	}
	c.mu.Unlock()
	if info.known {
		return info, true
	}
	if !ok && c.loadShape(d) {
		return c.decInfo(d, space)
	}
	return blobDecInfo{}, false
}

// loadShape fills d's shape from the disk cache's info record, if there is
// one; it reports whether it found one.
func (c *BlobCache) loadShape(d layout.Digest) bool {
	if c.disk == nil || !c.disk.enabled() {
		return false
	}
	rec, ok := c.disk.readInfo(d)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sh := c.shapeLocked(d)
	if !sh.sniffed && rec.sniffed {
		sh.sniffed, sh.sniff, sh.sniffBad = true, rec.sniff, rec.sniffBad
	}
	for s := blobGzip; s < blobSpaces; s++ {
		if !sh.dec[s].known && rec.dec[s].known {
			sh.dec[s] = rec.dec[s]
		}
	}
	return true
}

// persistShape writes d's shape to the disk cache.
func (c *BlobCache) persistShape(d layout.Digest) {
	if c.disk == nil || !c.disk.enabled() {
		return
	}
	c.mu.Lock()
	sh, ok := c.shapes.Peek(d)
	var rec blobShape
	if ok {
		rec = *sh
	}
	c.mu.Unlock()
	if ok {
		c.disk.writeInfo(d, rec)
	}
}

// readChunks copies [off, off+len(p)) of a body of the given size out of
// its chunks.
func (c *BlobCache) readChunks(d layout.Digest, size int64, p []byte, off int64, get func(idx int64) ([]byte, error)) (int, error) {
	if off >= size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off < size {
		idx := off / c.cs
		buf, err := get(idx)
		if err != nil {
			return n, err
		}
		if want := min(c.cs, size-idx*c.cs); int64(len(buf)) != want {
			// Only a descriptor whose size disagrees with the body gets here.
			return n, fmt.Errorf("%s: %w: chunk %d is %d bytes, the size %d implies %d", layout.BlobKey(d), layout.ErrCorrupt, idx, len(buf), size, want)
		}
		k := copy(p[n:], buf[off-idx*c.cs:])
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// sequential records a read of [off, end) in the stream key and reports
// whether it continues an earlier one at increasing offsets.
func (c *BlobCache) sequential(key blobBodyKey, off, end int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.seq.Get(key)
	c.seq.Add(key, blobSeq{off: off, end: end})
	return ok && off > prev.off && off <= prev.end+c.cs
}

// readAhead starts background fetches of the ReadAhead chunks after idx
// that are neither cached nor in flight. It never blocks: when all
// read-ahead slots are busy the rest is skipped.
func (c *BlobCache) readAhead(key blobBodyKey, idx, nchunks int64, fetch func(ctx context.Context, idx int64)) {
	for j := idx + 1; j <= idx+int64(c.opts.ReadAhead) && j < nchunks; j++ {
		ck := blobChunkKey{key.d, key.space, j}
		c.mu.Lock()
		if c.closed || c.chunks.Contains(ck) || c.fetches[ck] != nil {
			c.mu.Unlock()
			continue
		}
		select {
		case c.raSem <- struct{}{}:
		default:
			c.mu.Unlock()
			return
		}
		c.wg.Add(1)
		c.mu.Unlock()
		c.st.readAheads.Add(1)
		go func(j int64) {
			defer c.wg.Done()
			defer func() { <-c.raSem }()
			fetch(c.ctx, j)
		}(j)
	}
}

// lookup returns a cached chunk, counting the hit or miss.
func (c *BlobCache) lookup(k blobChunkKey) ([]byte, bool) {
	c.mu.Lock()
	buf, ok := c.chunks.Get(k)
	c.mu.Unlock()
	if ok {
		c.st.hits.Add(1)
	} else {
		c.st.misses.Add(1)
	}
	return buf, ok
}

// peek returns a cached chunk without counting (re-checks inside flights).
func (c *BlobCache) peek(k blobChunkKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chunks.Get(k)
}

// addChunkLocked caches buf (taking ownership), evicting the least recently
// used chunks to stay within the budget. A chunk that cannot fit is not
// cached; its caller still gets it.
func (c *BlobCache) addChunkLocked(k blobChunkKey, buf []byte) {
	n := int64(len(buf))
	if c.closed || c.chunks.Contains(k) || !c.makeRoomLocked(n) {
		return
	}
	c.chunks.Add(k, buf)
	c.memBytes += n
	c.notePeakLocked()
}

// makeRoomLocked evicts until n more bytes fit in the budget.
func (c *BlobCache) makeRoomLocked(n int64) bool {
	for c.memBytes+c.reserved+n > c.opts.MemBytes {
		_, old, ok := c.chunks.RemoveOldest()
		if !ok {
			return false
		}
		c.memBytes -= int64(len(old))
		c.st.evictions.Add(1)
	}
	return true
}

// reserveLocked sets n bytes of the budget aside for a staged chunk.
func (c *BlobCache) reserveLocked(n int64) bool {
	if c.closed || !c.makeRoomLocked(n) {
		return false
	}
	c.reserved += n
	c.notePeakLocked()
	return true
}

func (c *BlobCache) notePeakLocked() {
	if cur := c.memBytes + c.reserved; cur > c.st.memPeak.Load() {
		c.st.memPeak.Store(cur)
	}
}

// getBuf returns a buffer of n bytes, pooled when it is a whole chunk.
func (c *BlobCache) getBuf(n int64) []byte {
	if n == c.cs {
		if p, ok := c.bufs.Get().(*[]byte); ok {
			return (*p)[:n]
		}
	}
	return make([]byte, n)
}

// putBuf returns a buffer that nobody references any more to the pool.
func (c *BlobCache) putBuf(b []byte) {
	if int64(cap(b)) == c.cs {
		b = b[:c.cs]
		c.bufs.Put(&b)
	}
}

// blobStager holds chunks of a pass, with their share of the budget
// reserved, until the pass proved them good.
type blobStager struct {
	c      *BlobCache
	lo, hi int64 // chunk indexes [lo, hi) are wanted
	keys   []blobChunkKey
	bufs   [][]byte
	bytes  int64
}

func (c *BlobCache) newStager(want int64) *blobStager {
	return &blobStager{c: c, lo: want, hi: want + c.stageChunks}
}

func (s *blobStager) wants(idx int64) bool { return idx >= s.lo && idx < s.hi }

// offer stages buf if its chunk is wanted and the budget allows; it reports
// whether it took ownership of buf.
func (s *blobStager) offer(k blobChunkKey, buf []byte) bool {
	if !s.wants(k.idx) {
		return false
	}
	return s.take(k, buf)
}

// take stages buf regardless of the wanted window.
func (s *blobStager) take(k blobChunkKey, buf []byte) bool {
	s.c.mu.Lock()
	ok := s.c.reserveLocked(int64(len(buf)))
	s.c.mu.Unlock()
	if !ok {
		return false
	}
	s.keys = append(s.keys, k)
	s.bufs = append(s.bufs, buf)
	s.bytes += int64(len(buf))
	return true
}

// publishLocked moves the staged chunks into the LRU and returns the one
// with index want, if staged.
func (s *blobStager) publishLocked(want int64) []byte {
	var got []byte
	s.c.reserved -= s.bytes
	for i, k := range s.keys {
		if k.idx == want {
			got = s.bufs[i]
		}
		s.c.addChunkLocked(k, s.bufs[i])
	}
	s.keys, s.bufs, s.bytes = nil, nil, 0
	return got
}

// abort releases the reservations of whatever is still staged.
func (s *blobStager) abort() {
	if s == nil || s.bytes == 0 {
		return
	}
	s.c.mu.Lock()
	s.c.reserved -= s.bytes
	s.c.mu.Unlock()
	s.keys, s.bufs, s.bytes = nil, nil, 0
}

// corrupt reports a mismatch in backend data for the body (d, size): the
// error names the key, is logged once per bad window, and is remembered so
// that readers do not hammer the backend.
func (c *BlobCache) corrupt(d layout.Digest, size int64, space blobSpace, detail string) error {
	err := fmt.Errorf("%s: %w: %s", layout.BlobKey(d), layout.ErrCorrupt, detail)
	c.markBad(d, size, space, err)
	return err
}

func (c *BlobCache) markBad(d layout.Digest, size int64, space blobSpace, err error) {
	if space == blobRaw {
		c.st.verifyFailures.Add(1)
	}
	k := blobBadKey{d, size, space}
	now := c.now()
	c.mu.Lock()
	old, had := c.bad[k]
	fresh := !had || !now.Before(old.until)
	if len(c.bad) >= blobMaxBad {
		for bk, b := range c.bad {
			if !now.Before(b.until) || len(c.bad) >= blobMaxBad {
				delete(c.bad, bk)
			}
		}
	}
	c.bad[k] = blobBad{until: now.Add(blobBadTTL), err: err}
	c.mu.Unlock()
	if fresh {
		msg := "cache: blob failed verification; reads fail with EIO"
		if space != blobRaw {
			msg = "cache: blob does not decode; reads fail with EIO"
		}
		c.log.Error(msg, "key", layout.BlobKey(d), "encoding", space.encoding(), "err", err)
	}
}

// badErr returns the remembered failure of (d, size) in space, if any.
func (c *BlobCache) badErr(d layout.Digest, size int64, space blobSpace) error {
	k := blobBadKey{d, size, space}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.bad[k]
	if !ok {
		return nil
	}
	if !c.now().Before(b.until) {
		delete(c.bad, k)
		return nil
	}
	return b.err
}
