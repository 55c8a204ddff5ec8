package layout

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/klauspost/compress/zstd"
)

// Content encodings (§15).
const (
	EncodingNone = ""
	EncodingGzip = "gzip"
	EncodingZstd = "zstd"
)

// DefaultMaxDecoded bounds the decoded size of a snapshot or memory file:
// a small object that expands past it is ErrTooLarge, not an OOM.
const DefaultMaxDecoded = 256 << 20

var (
	zstdEncOnce sync.Once
	zstdEnc     *zstd.Encoder
)

func encoder() *zstd.Encoder {
	zstdEncOnce.Do(func() {
		// EncodeAll on a shared encoder is safe for concurrent use.
		zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	})
	return zstdEnc
}

// Sniff returns the encoding that body's first bytes announce (§15): gzip
// (1F 8B) or zstd (28 B5 2F FD, or a skippable frame's 5? 2A 4D 18,
// which a conformant zstd stream may start with, RFC 8878 §3.1.2), else
// EncodingNone. No JSON text starts with either.
func Sniff(head []byte) string {
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return EncodingGzip
	case len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
		return EncodingZstd
	case len(head) >= 4 && head[0]&0xf0 == 0x50 && head[1] == 0x2a && head[2] == 0x4d && head[3] == 0x18:
		return EncodingZstd
	}
	return EncodingNone
}

// NewDecoder wraps r so that it yields the decoded body for encoding enc
// (gzip, zstd or none). Unknown encodings are an error. The returned
// closer releases decoder resources.
func NewDecoder(r io.Reader, enc string) (io.ReadCloser, error) {
	switch enc {
	case EncodingNone, "identity":
		return io.NopCloser(r), nil
	case EncodingGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
		}
		return zr, nil
	case EncodingZstd:
		br := bufio.NewReader(r)
		head, _ := br.Peek(zstd.HeaderMaxSize)
		return newZstdReader(br, maxZstdWindow, head)
	}
	return nil, fmt.Errorf("%w: unknown content-encoding %q", ErrCorrupt, truncate(enc))
}

// maxZstdWindow bounds the window a zstd stream decoded as it is read may
// ask for: libzstd's default limit (window log 27), so that what its
// zstd -d decodes without --memory decodes here too (zstd --long writes
// such frames; §6.2: encoder options do not affect interoperability). The
// decoder keeps that much history, allocated as the first block is
// decoded, so an 11-byte frame can claim it: decoders that did are not
// pooled (zstdPoolWindow). A body decoded whole (openBody) needs no
// window at all.
const maxZstdWindow = 128 << 20

// zstdPoolWindow is the largest window a pooled decoder may have decoded
// a frame with: its history ring stays that large while it idles. 8 MiB
// is what encoders use for streams of unknown size.
const zstdPoolWindow = 8 << 20

// newZstdReader decodes r with a decoder from the pool of window (the
// largest window a frame may declare). head is the start of r, when the
// caller has it: a frame that declares a window past zstdPoolWindow
// leaves its decoder out of the pool.
func newZstdReader(r io.Reader, window uint64, head []byte) (io.ReadCloser, error) {
	p, ok := zstdPools.Load(window)
	if !ok {
		p, _ = zstdPools.LoadOrStore(window, &sync.Pool{})
	}
	pool := p.(*sync.Pool)
	zr, _ := pool.Get().(*zstd.Decoder)
	if zr == nil {
		var err error
		zr, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30),
			zstd.WithDecoderMaxWindow(window))
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
	}
	if err := zr.Reset(r); err != nil {
		zr.Close()
		return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	c := &zstdCloser{d: zr, pool: pool}
	var h zstd.Header
	if h.Decode(head) == nil && h.WindowSize > zstdPoolWindow {
		c.pool = nil
	}
	return c, nil
}

// zstdPools keeps idle streaming decoders, one pool per window bound: a
// decoder allocates about 700 KiB of tables and buffers when it starts,
// which for a snapshot of a few kilobytes was most of the cost of
// decoding it.
var zstdPools sync.Map // window (uint64) -> *sync.Pool of *zstd.Decoder

// zstdPoolMax is the most a decoder may have produced and still go back to
// its pool: its buffers grow with what it decoded, and an idle pool should
// not hold a large blob's.
const zstdPoolMax = 1 << 20

// zstdCloser is a pooled decoder's stream; Close returns the decoder to
// pool, or closes it when pool is nil.
type zstdCloser struct {
	d    *zstd.Decoder
	pool *sync.Pool
	n    int64 // bytes produced
}

func (z *zstdCloser) Read(p []byte) (int, error) {
	if z.d == nil {
		return 0, errors.New("zstd: read after close")
	}
	n, err := z.d.Read(p)
	z.n += int64(n)
	return n, err
}

func (z *zstdCloser) Close() error {
	if z.d == nil {
		return nil
	}
	if z.pool != nil && z.n <= zstdPoolMax && z.d.Reset(nil) == nil {
		z.pool.Put(z.d)
	} else {
		z.d.Close()
	}
	z.d = nil
	return nil
}

// zstdWindowFor is the window bound for a body whose decoded size is
// bounded by limit: decoding allocates the window up front, so it follows
// the bound (but never below 8 MiB, the window common encoders use for
// streams of unknown size).
func zstdWindowFor(limit int64) uint64 {
	return uint64(min(maxZstdWindow, max(limit, 8<<20)))
}

// DecodeBody decodes a whole body per enc, or by sniffing when enc is empty
// (pugmark's own JSON files always start with '[' or '{' when plain, so
// sniffing cannot misread them). The output is bounded by max.
func DecodeBody(body []byte, enc string, max int64) ([]byte, error) {
	if (enc == EncodingNone && Sniff(body) == EncodingNone) || enc == "identity" {
		if int64(len(body)) > max {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), max)
		}
		return body, nil
	}
	r, err := openBody(body, enc, max)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// openBody returns a reader of body decoded per enc (sniffed when empty)
// that fails with ErrTooLarge past max decoded bytes and with ErrCorrupt
// when the encoding is broken.
func openBody(body []byte, enc string, max int64) (io.ReadCloser, error) {
	if enc == EncodingNone {
		enc = Sniff(body)
	}
	if enc == EncodingNone || enc == "identity" {
		if int64(len(body)) > max {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), max)
		}
		return io.NopCloser(bytes.NewReader(body)), nil
	}
	var dr io.ReadCloser
	var err error
	if enc == EncodingZstd {
		// A frame that declares more content than the bound is refused
		// before anything is allocated for it.
		var h zstd.Header
		parsed := h.Decode(body) == nil
		if parsed && h.HasFCS && h.FrameContentSize > uint64(max) {
			return nil, fmt.Errorf("%w: zstd frame declares %d bytes, limit %d", ErrTooLarge, h.FrameContentSize, max)
		}
		if parsed && h.WindowSize > zstdWindowFor(max) {
			// More window than a body of this bound needs (zstd --long
			// declares 128 MiB for any body): decoded whole, into its
			// output, which needs no window.
			out, err := decodeZstdAll(body, max, h.WindowSize)
			if err != nil {
				return nil, err
			}
			return io.NopCloser(bytes.NewReader(out)), nil
		}
		dr, err = newZstdReader(bytes.NewReader(body), zstdWindowFor(max), body)
	} else {
		dr, err = NewDecoder(bytes.NewReader(body), enc)
	}
	if err != nil {
		return nil, err
	}
	return &boundedBody{r: dr, enc: enc, left: max}, nil
}

// decodeZstdAll decodes a zstd body whole, into at most limit bytes, when
// its first frame declares window: the output is the decoder's history,
// so the window costs no more than the output. The decoder refuses a
// window past the output it may make, so the bound it is given is at
// least the window (up to maxZstdWindow); a small limit is kept by the
// capacity of the output instead, so that a frame declaring a large
// window cannot make a large output before it is refused.
func decodeZstdAll(body []byte, limit int64, window uint64) ([]byte, error) {
	opts := []zstd.DOption{zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstd.MaxWindowSize),
		zstd.WithDecoderMaxMemory(max(uint64(limit), min(window, maxZstdWindow)))}
	var dst []byte
	if limit < zstdCapLimit {
		dst = make([]byte, 0, limit+1)
		opts = append(opts, zstd.WithDecodeAllCapLimit(true))
	}
	d, err := zstd.NewReader(nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	defer d.Close()
	out, err := d.DecodeAll(body, dst)
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded):
		return nil, fmt.Errorf("%w: zstd body: %v", ErrTooLarge, err)
	case err != nil:
		return nil, fmt.Errorf("%w: zstd body: %v", ErrCorrupt, err)
	case int64(len(out)) > limit:
		return nil, fmt.Errorf("%w: zstd body decodes past %d bytes", ErrTooLarge, limit)
	}
	return out, nil
}

// zstdCapLimit: a body bounded below it is decoded whole into an output
// of that capacity (decodeZstdAll).
const zstdCapLimit = 16 << 20

// boundedBody is a decoder's output, bounded and with classified errors.
type boundedBody struct {
	r    io.ReadCloser
	enc  string
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	// One byte past the limit is enough to tell that it was passed.
	if rem := b.left + 1; rem >= 0 && int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, fmt.Errorf("%w: %s body decodes past the limit", ErrTooLarge, b.enc)
	}
	if err != nil && err != io.EOF {
		if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return n, fmt.Errorf("%w: %s body: %v", ErrTooLarge, b.enc, err)
		}
		return n, fmt.Errorf("%w: %s body: %v", ErrCorrupt, b.enc, err)
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.r.Close() }

// EncodeDescriptors returns the zstd-compressed JSON array of ds, the body
// of a snapshot or memory file (§6.2, §8.2).
func EncodeDescriptors(ds []Descriptor) ([]byte, error) {
	if ds == nil {
		ds = []Descriptor{}
	}
	if len(ds) > streamFrom {
		return encodeStream(ds)
	}
	js, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	return encoder().EncodeAll(js, nil), nil
}

// streamFrom is the number of descriptors past which EncodeDescriptors
// compresses the JSON as it is written (encodeStream).
const streamFrom = 1024

// encodeStream is EncodeDescriptors for many descriptors: the same JSON,
// written a descriptor at a time into the compressor, so that it is never
// held whole. A commit of 20,000 files held its JSON (10-30 MB with the
// inline data of small files) and the copies of its growing buffer beside
// the compressed body. The window is 1 MiB: what the compressor holds.
func encodeStream(ds []Descriptor) ([]byte, error) {
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(zw, 64<<10)
	w.WriteByte('[')
	for i := range ds {
		if i > 0 {
			w.WriteByte(',')
		}
		js, err := json.Marshal(&ds[i])
		if err != nil {
			zw.Close()
			return nil, err
		}
		w.Write(js)
	}
	w.WriteByte(']')
	if err := w.Flush(); err != nil {
		zw.Close()
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// DecodeDescriptors parses a snapshot or memory file body: encoded per enc
// (sniffed when empty), a JSON array of descriptors.
func DecodeDescriptors(body []byte, enc string, max int64) ([]Descriptor, error) {
	return guardDecode("descriptor array", func() ([]Descriptor, error) { return decodeDescriptors(body, enc, max) })
}

// guardDecode runs decode, the decoding of one object, and makes a panic
// in it that object's ErrCorrupt: a decoder's bug must cost the object
// it met, not the mount. A panic in a goroutine that reads snapshots
// ends the process, and a torn snapshot did so (review R4: every path of
// the mount then failed with ENOTCONN).
func guardDecode[T any](what string, decode func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, fmt.Errorf("%w: %s: the decoder failed on it (%v); please report this", ErrCorrupt, what, p)
		}
	}()
	return decode()
}

func decodeDescriptors(body []byte, enc string, max int64) ([]Descriptor, error) {
	max = decodedBound(max, len(body))
	r, err := openBody(body, enc, max)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Decoded as a stream, element by element: the JSON text is never
	// held whole (a whitespace bomb costs nothing), and the descriptors
	// in memory are bounded by max too, because a few bytes of JSON
	// ("{}") are a whole Descriptor and a snapshot of 60 million of them
	// compresses to kilobytes.
	limit := max / descriptorCost
	cr := &errReader{r: r}
	dec := jsontext.NewDecoder(&squeezeSpace{r: cr}, jsonOptions...)
	fail := func(err error) error {
		if cr.err != nil {
			return cr.err // ErrTooLarge or ErrCorrupt from the body
		}
		if isSyntax(err) {
			return fmt.Errorf("%w: descriptor array: %v", ErrCorrupt, err)
		}
		return err
	}
	if k := dec.PeekKind(); k != '[' {
		if k == 0 {
			_, err := dec.ReadToken()
			return nil, fail(err)
		}
		return nil, fmt.Errorf("%w: descriptor array: not an array", ErrCorrupt)
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, fail(err)
	}
	ds := make([]Descriptor, 0, descriptorsHint(body, enc, limit))
	for dec.PeekKind() != ']' {
		if int64(len(ds)) >= limit {
			return nil, fmt.Errorf("%w: more than %d descriptors (limit %d bytes decoded)", ErrTooLarge, limit, max)
		}
		ds = append(ds, Descriptor{})
		if err := readDescriptor(dec, &ds[len(ds)-1]); err != nil {
			return nil, fail(err)
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, fail(err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			return nil, fmt.Errorf("%w: descriptor array: data after the array", ErrCorrupt)
		}
		return nil, fail(err)
	}
	if cap(ds)-len(ds) > len(ds)/2+8 {
		// The hint was high (large descriptors): the slice lives as
		// long as the session state does, so it is not kept oversized.
		ds = append([]Descriptor(nil), ds...)
	}
	return ds, nil
}

// jsonPerDescriptor is about the JSON text of a descriptor with a name,
// digest, size, time, content type and sequence number: what
// descriptorsHint divides a decoded size by.
const jsonPerDescriptor = 192

// descriptorsHint guesses how many descriptors body holds, so that the
// slice they are decoded into is allocated once instead of doubling its
// way up (half the bytes a snapshot's decoding allocated went to the
// copies). The decoded size comes from a zstd frame's header when it
// says, else from the body's length. The guess never passes limit, nor
// 16 times the body's length: a header is the writer's word, and a few
// bytes declaring 60 MiB must not buy a 30 MiB slice.
func descriptorsHint(body []byte, enc string, limit int64) int {
	size := int64(len(body))
	if enc == EncodingNone {
		enc = Sniff(body)
	}
	switch enc {
	case EncodingNone, "identity":
	case EncodingZstd:
		var h zstd.Header
		if h.Decode(body) == nil && h.HasFCS {
			size = int64(min(h.FrameContentSize, uint64(16*len(body))))
		} else {
			size *= 4
		}
	default:
		size *= 4
	}
	return int(min(size/jsonPerDescriptor, limit))
}

// errReader remembers the first error other than EOF of its reader.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// squeezeSpace collapses each run of JSON whitespace outside strings to
// its first byte. encoding/json's Decoder keeps all the whitespace it has
// looked past in its buffer until the next token, so a snapshot of
// "[", 200 MiB of spaces and "]" would be buffered whole.
type squeezeSpace struct {
	r                       io.Reader
	inString, escaped, gone bool
}

func (s *squeezeSpace) Read(p []byte) (int, error) {
	for {
		n, err := s.r.Read(p)
		out := s.squeeze(p[:n])
		if out > 0 || err != nil || n == 0 {
			return out, err
		}
	}
}

// squeeze compacts b in place and returns its new length. The inside of
// a string is copied in runs up to its next quote or backslash, found
// with IndexByte: most of a snapshot's bytes are in strings. Each is
// looked for again only once passed, so that b is scanned for each at
// most once (a string of a million escapes must not cost a scan of the
// rest of b per escape).
func (s *squeezeSpace) squeeze(b []byte) int {
	out := 0
	nextQuote, nextEscape := -1, -1 // at or after i; len(b) when none
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case s.escaped:
			s.escaped = false
		case s.inString:
			if nextQuote < i {
				nextQuote = indexFrom(b, i, '"')
			}
			if nextEscape < i {
				nextEscape = indexFrom(b, i, '\\')
			}
			if end := min(nextQuote, nextEscape); end > i {
				out += copy(b[out:], b[i:end])
				i = end
				continue
			}
			// c is the quote or backslash that ends the run.
			s.escaped = c == '\\'
			s.inString = c != '"'
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			if s.gone {
				continue
			}
			s.gone = true
			b[out] = c
			out++
			continue
		default:
			s.gone = false
			s.inString = c == '"'
		}
		b[out] = c
		out++
		i++
	}
	return out
}

// indexFrom is the index of the first c in b at or after i, or len(b).
func indexFrom(b []byte, i int, c byte) int {
	if k := bytes.IndexByte(b[i:], c); k >= 0 {
		return i + k
	}
	return len(b)
}

// decodedPerStored is how many bytes of JSON text, and of descriptors at
// descriptorCost each, one stored byte of a snapshot or memory file may
// decode to past the caller's bound (decodedBound), and
// decodedCeiling the most any one may: 1,048,576 descriptors.
//
// A fixed bound made a large snapshot unreadable: pugfs's own commit of
// 70,000 files (one fsync, one pugfs exec run) wrote a snapshot that no
// mount could read again (more than 65,536 descriptors), and so did a
// memory namespace past 65,536 records, which only grows (§8.3). pugfs's
// own zstd stores a descriptor in as little as 1.4 bytes (100,000
// tombstones of one rm -r, or files of one content, under sequential
// names: review C3), about 370 times less than it costs decoded, so the
// ratio is 1,024; a decompression bomb of a few kilobytes stays within
// the caller's bound, and a large one within the ceiling.
const (
	decodedPerStored = 1024
	decodedCeiling   = 1 << 20 * descriptorCost
)

// decodedBound is the bound on what a stored snapshot or memory file of
// stored bytes decodes to: floor, or decodedPerStored times what it
// stores, up to decodedCeiling.
func decodedBound(floor int64, stored int) int64 {
	return max(floor, min(int64(stored)*decodedPerStored, decodedCeiling))
}

// descriptorCost is what one decoded Descriptor costs in memory: 240
// bytes of struct, the strings it holds, and the garbage of decoding it.
// DecodeDescriptors holds at most max/descriptorCost of them (a real
// descriptor's JSON is a few hundred bytes, so this rarely binds first).
const descriptorCost = 512
