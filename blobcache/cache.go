package blobcache

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// Source is what the cache needs from the layout store: ranged reads of
// stored blob bodies (length < 0: to the end). *layout.Store implements it.
// Nothing it returns is trusted until the cache has checked it.
type Source interface {
	OpenBlob(ctx context.Context, d layout.Digest, offset, length int64) (io.ReadCloser, error)
}

var _ Source = (*layout.Store)(nil)

// Defaults of Options. A zero or negative field takes its default,
// except ReadAhead, where a negative value turns read-ahead off.
const (
	DefaultMemBytes   = 256 << 20 // Options.MemBytes: 256 MiB of chunks in memory
	DefaultChunkSize  = 1 << 20   // Options.ChunkSize: 1 MiB
	DefaultReadAhead  = 4         // Options.ReadAhead: chunks fetched ahead
	DefaultParallel   = 8         // Options.Parallel: read-ahead reads
	DefaultPartSize   = 4 << 20   // Options.PartSize: 4 MiB per ranged read of a verify pass
	DefaultPassParts  = 16        // Options.PassParts: ranged reads in flight per verify pass
	DefaultDiskBytes  = 10 << 30  // Options.DiskBytes: 10 GiB on disk
	DefaultMaxDecoded = 64 << 30  // Options.MaxDecoded: 64 GiB decoded
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

// Options configure a Cache. The zero value is usable.
type Options struct {
	// MemBytes bounds the bytes of cached and staged chunks held in memory
	// (default 256 MiB). In-flight backend reads hold further chunk
	// buffers on top of it, at most MaxInFlight.
	MemBytes int64
	// ChunkSize is the unit of caching and of the chunk proofs that check
	// bytes read again (default 1 MiB; rounded up to a multiple of
	// SHA-256's 64-byte block, which the proofs need: chain.go).
	ChunkSize int
	// PartSize is the size of one ranged read of a verify pass (default
	// 4 MiB; rounded down to whole chunks, at least one).
	PartSize int
	// PassParts bounds the ranged reads one verify pass keeps in flight
	// (default 16: 64 MiB, enough to keep a hash pass busy 20 ms from the
	// bucket). Their buffers and the chunks the pass has not written yet
	// share a window of the memory budget: at most a quarter of MemBytes,
	// at least one part.
	PassParts int
	// ReadAhead is how many chunks are fetched ahead in the background when
	// reads come at increasing offsets (default 4; negative disables it).
	ReadAhead int
	// Parallel is the maximum number of background read-ahead reads in
	// all (default 8).
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
	// DiskMinBytes: a stored body smaller than this is cached in memory
	// only, never copied into DiskDir (default 0: every body that fits).
	// For a bucket on a local disk, where reading a body again costs what
	// reading the copy would, and the copy is a file created and renamed
	// per blob.
	DiskMinBytes int64
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

// Stats are the cache's counters. The counts are cumulative since
// New; InFlight, MemBytes and DiskBytes are current values.
type Stats struct {
	// Hits and Misses count chunk lookups that found / did not find the
	// chunk in memory.
	Hits, Misses int64
	// DiskHits counts chunks served from the disk cache after a memory miss.
	DiskHits int64
	// FileReads counts reads served straight from a verified disk copy
	// (files.go).
	FileReads int64
	// InlineReads counts reads served from a descriptor's inline data.
	InlineReads int64
	// BackendReads counts ranged reads issued to the Source;
	// BytesFetched the bytes they delivered.
	BackendReads, BytesFetched int64
	// VerifyPasses counts whole-blob verify passes (from the backend or a
	// disk copy); VerifyFailures counts digest or chunk-hash mismatches of
	// backend data.
	VerifyPasses, VerifyFailures int64
	// BytesHashed counts the bytes run through SHA-256: verify passes,
	// decoding, and chunks checked when read again. Reading a blob once
	// with the disk cache on hashes its size once.
	BytesHashed int64
	// ReadAheads counts background chunk fetches started by read-ahead.
	ReadAheads int64
	// Evictions counts chunks dropped from memory to stay within MemBytes;
	// DiskEvictions counts files removed from the disk cache.
	Evictions, DiskEvictions int64
	// InFlight is the number of backend reads open right now.
	InFlight int64
	// MemBytes is the bytes of cached plus staged chunks; MemPeak is its
	// high-water mark. Both stay within Options.MemBytes.
	MemBytes, MemPeak int64
	// DiskBytes is the size of the disk cache entries this process knows
	// of; DiskEnabled reports whether the disk tier is in use.
	DiskBytes   int64
	DiskEnabled bool
	// KeptWrites counts the snapshot and manifest bodies written to the
	// disk tier (kept.go), KeptHits those read back from it.
	KeptWrites, KeptHits int64
	// Adopted counts the bodies this process stored whose staged copy
	// went into the disk tier (AdoptStored).
	Adopted int64
}

// Cache serves blob content to the mounted tree: verified against the
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
type Cache struct {
	src         Source
	opts        Options
	log         *slog.Logger
	now         func() time.Time
	cs          int64 // chunk size
	spillAt     int64 // decoded bodies larger than this go to a file
	stageChunks int64 // chunks a pass may stage from the wanted one on
	spillMax    int64 // bound on spill file bytes held open
	endFrom     int64 // endProbeFrom (storedend.go); tests lower it

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	raSem  chan struct{}
	// fetchSem bounds backend reads in flight (MaxInFlight); a slot is
	// held only for one ranged read, never while waiting for anything
	// else, so it cannot deadlock.
	fetchSem chan struct{}
	free     chan []byte // reusable chunk buffers (memory.go)
	disk     *diskCache

	// mu guards the fields from closed to fetches (GUARDED_BY(mu)), the
	// shapes they point to and each flight's waiters; see the package doc
	// for the lock order. It is never held across backend or disk I/O;
	// release it with c.unlock when an eviction may have queued files in
	// closeQ. The fields above are set by New and not changed after, and
	// st is atomics.
	mu         sync.Mutex
	closed     bool
	chunks     *simplelru.LRU[blobChunkKey, []byte]
	memBytes   int64 // bytes in chunks
	reserved   int64 // bytes staged by passes and not yet published
	metas      *simplelru.LRU[layout.Digest, *blobMeta]
	metaHashes int64
	shapes     *simplelru.LRU[layout.Digest, *blobShape]
	decs       *simplelru.LRU[blobBodyKey, *blobDecoded]
	files      *simplelru.LRU[layout.Digest, *blobFile] // files.go
	spillBytes int64
	closeQ     []*os.File // files to close once c.mu is released
	seq        *simplelru.LRU[blobBodyKey, blobSeq]
	bad        map[blobBadKey]blobBad
	passes     map[blobSizedKey]*blobCall[*blobPassResult]
	decodes    map[blobBadKey]*blobCall[*blobDecodeResult]
	fetches    map[blobChunkKey]*blobCall[[]byte]

	st blobCounters
	// kept holds the snapshot and manifest copies not yet on disk
	// (kept.go); it has locks of its own, never held with mu.
	kept keptQueue
	// active is when the cache last served something (Unix nanoseconds;
	// busy), which holds the kept copies back.
	active atomic.Int64
}

// blobCounters are the cumulative counters behind Stats; atomics, so no
// lock is needed to count or to read them.
type blobCounters struct {
	hits, misses, diskHits, inline     atomic.Int64
	backendReads, bytesFetched         atomic.Int64
	passes, verifyFailures, readAheads atomic.Int64
	evictions, inFlight                atomic.Int64
	memPeak, fileReads, hashed         atomic.Int64
	keptHits, keptWrites               atomic.Int64
	adopted                            atomic.Int64
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

// blobMeta is what a verify pass proved about a stored body. It is not
// changed once in c.metas, except onDisk (atomic).
type blobMeta struct {
	size   int64
	hashes [][32]byte // chunk proofs: the SHA-256 state after each chunk but the last (chain.go)
	head   []byte     // the first bytes, for sniffing (§15)
	onDisk atomic.Bool
}

type blobSeq struct{ off, end int64 }

var errBlobClosed = fmt.Errorf("cache: blob cache: %w", os.ErrClosed)

// New returns a cache reading from src. A DiskDir that cannot be
// used is not an error: the cache logs one warning and runs memory-only.
func New(src Source, opts Options) (*Cache, error) {
	if src == nil {
		return nil, fmt.Errorf("cache: New: %w: nil Source", layout.ErrInvalid)
	}
	if opts.MemBytes <= 0 {
		opts.MemBytes = DefaultMemBytes
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	opts.ChunkSize = (opts.ChunkSize + sha256.BlockSize - 1) / sha256.BlockSize * sha256.BlockSize
	if opts.PartSize <= 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.PassParts <= 0 {
		opts.PassParts = DefaultPassParts
	}
	if opts.ReadAhead < 0 {
		opts.ReadAhead = 0
	} else if opts.ReadAhead == 0 {
		opts.ReadAhead = DefaultReadAhead
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4 * opts.Parallel
	}
	if opts.DiskBytes <= 0 {
		opts.DiskBytes = DefaultDiskBytes
	}
	if opts.MaxDecoded <= 0 {
		opts.MaxDecoded = DefaultMaxDecoded
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
	c := &Cache{
		src:      src,
		opts:     opts,
		log:      opts.Logger,
		now:      opts.now,
		cs:       int64(opts.ChunkSize),
		spillMax: opts.DiskBytes,
		raSem:    make(chan struct{}, opts.Parallel),
		fetchSem: make(chan struct{}, opts.MaxInFlight),
		free:     make(chan []byte, blobFreeBufs),
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
	c.endFrom = endProbeFrom
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
	c.files, _ = simplelru.NewLRU(blobMaxOpenFiles, func(_ layout.Digest, bf *blobFile) {
		c.evictFileLocked(bf)
	})
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
func (c *Cache) Close() error {
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
	c.files.Purge()
	c.chunks.Purge()
	c.memBytes = 0
	c.unlock()
	if c.disk != nil {
		c.closeKept()
		c.disk.root.Close()
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	mem := c.memBytes + c.reserved
	c.mu.Unlock()
	s := Stats{
		Hits: c.st.hits.Load(), Misses: c.st.misses.Load(), DiskHits: c.st.diskHits.Load(),
		InlineReads: c.st.inline.Load(), FileReads: c.st.fileReads.Load(),
		BackendReads: c.st.backendReads.Load(), BytesFetched: c.st.bytesFetched.Load(),
		VerifyPasses: c.st.passes.Load(), VerifyFailures: c.st.verifyFailures.Load(), BytesHashed: c.st.hashed.Load(),
		ReadAheads: c.st.readAheads.Load(), Evictions: c.st.evictions.Load(),
		InFlight: c.st.inFlight.Load(), MemBytes: mem, MemPeak: c.st.memPeak.Load(),
		KeptWrites: c.st.keptWrites.Load(), KeptHits: c.st.keptHits.Load(),
		Adopted: c.st.adopted.Load(),
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
func (c *Cache) ClearDisk() error {
	if c.disk == nil {
		return nil
	}
	return c.disk.clear()
}

// GiveBack removes at least n bytes of the disk tier's copies, least
// recently used first, when it holds them, and returns how many it
// removed. Every copy can be fetched again: a write that found its file
// system full (the staged files share it with the cache directory) gets
// the room back. The tier keeps 5% of the file system free, and copies up
// to that point still made a staged write larger than the rest ENOSPC
// (audit 37).
func (c *Cache) GiveBack(n int64) int64 {
	if c.disk == nil || !c.disk.enabled() {
		return 0
	}
	// The verified files held open keep their blocks when their names
	// go: those nobody has pinned are let go, so that what is evicted is
	// freed (the chunks of their bodies are checked again when read).
	c.mu.Lock()
	c.files.Purge()
	c.unlock()
	return c.disk.giveBack(n)
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
func (c *Cache) Size(ctx context.Context, d *layout.Descriptor) (int64, error) {
	c.busy()
	if err := c.checkDescriptor(d); err != nil {
		return 0, err
	}
	space, sniff, err := c.viewOf(d)
	if err != nil {
		return 0, err
	}
	if space == blobRaw && !sniff {
		return d.Size, c.storedEnd(ctx, d)
	}
	if sniff {
		if c.probeRaw(ctx, d) {
			return d.Size, c.storedEnd(ctx, d)
		}
		if space, err = c.resolveSniff(ctx, d, 0); err != nil {
			return 0, err
		}
		if space == blobRaw {
			return d.Size, c.storedEnd(ctx, d)
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
func (c *Cache) ReadAt(ctx context.Context, d *layout.Descriptor, p []byte, off int64) (int, error) {
	c.busy()
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
func (c *Cache) ReadRawAt(ctx context.Context, digest layout.Digest, size int64, p []byte, off int64) (int, error) {
	c.busy()
	if c.isClosed() {
		return 0, errBlobClosed
	}
	if digest.IsZero() || size < 0 || size > maxBlobSize || off < 0 {
		return 0, fmt.Errorf("cache: read blob %s size %d at %d: %w", digest, size, off, layout.ErrInvalid)
	}
	if len(p) == 0 {
		return 0, nil
	}
	return c.readRaw(ctx, digest, size, p, off)
}

func (c *Cache) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// emptyDigest is the digest of the empty body.
var emptyDigest = layout.DigestOf(nil)

func (c *Cache) checkDescriptor(d *layout.Descriptor) error {
	if c.isClosed() {
		return errBlobClosed
	}
	if d == nil {
		return fmt.Errorf("cache: %w: nil descriptor", layout.ErrInvalid)
	}
	// A descriptor whose digest, size or encoding could not be read has
	// no body to serve: damaged data (EIO, logged), never a guess.
	if d.Damage != nil && d.Damage.Body {
		return fmt.Errorf("cache: %w", d.Damage)
	}
	// A tombstone has no body to read (the caller's mistake); a live
	// descriptor from the bucket that names no blob is damaged data (EIO,
	// logged), not a bad argument.
	if d.Digest.IsZero() && d.Deleted {
		return fmt.Errorf("cache: descriptor %q: %w: a tombstone has no body", d.Name, layout.ErrInvalid)
	}
	if d.Digest.IsZero() {
		return fmt.Errorf("cache: descriptor %q: %w: a live file with no blob (zero digest)", d.Name, layout.ErrCorrupt)
	}
	if d.Size < 0 || d.Size > maxBlobSize {
		return fmt.Errorf("cache: descriptor %q of %s: %w: size %d", d.Name, layout.BlobKey(d.Digest), layout.ErrCorrupt, d.Size)
	}
	// An empty file is never fetched (the kernel reads nothing past a
	// size of 0), so its digest is the only check there is: a size left
	// out of a descriptor of a longer body would read as an empty file.
	if d.Size == 0 && d.Digest != emptyDigest {
		return fmt.Errorf("cache: descriptor %q: %w: size 0, but %s is not the digest of an empty body", d.Name, layout.ErrCorrupt, d.Digest)
	}
	return nil
}

// SizeKnown reports whether Size of d is answered without a backend read:
// a plain body (unless it is still to be sniffed, or its stored length
// checked: storedEnd), inline data, or a decoded size remembered in
// memory or in the disk cache. Listings use it to fetch only the sizes
// that need a request, in parallel.
func (c *Cache) SizeKnown(d *layout.Descriptor) bool {
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
		return d.Size < c.endFrom || d.InlineOK() || c.storedLen(d) >= d.Size
	}
	_, ok := c.decInfo(d.Digest, space)
	return ok
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
func (c *Cache) body(ctx context.Context, d *layout.Descriptor, want int64) (blobBody, error) {
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

// readChunks copies [off, off+len(p)) of a body of the given size out of
// its chunks.
func (c *Cache) readChunks(d layout.Digest, size int64, p []byte, off int64, get func(idx int64) ([]byte, error)) (int, error) {
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
func (c *Cache) sequential(key blobBodyKey, off, end int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.seq.Get(key)
	c.seq.Add(key, blobSeq{off: off, end: end})
	return ok && off > prev.off && off <= prev.end+c.cs
}

// readAhead starts background fetches of the ReadAhead chunks after idx
// that are neither cached nor in flight. It never blocks: when all
// read-ahead slots are busy the rest is skipped.
func (c *Cache) readAhead(key blobBodyKey, idx, nchunks int64, fetch func(ctx context.Context, idx int64)) {
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
			// Speculative: a program's reads go first (schedblob).
			fetch(schedblob.Speculative(c.ctx), j)
		}(j)
	}
}
