package layout

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

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
// (1F 8B) or zstd (28 B5 2F FD), else EncodingNone.
func Sniff(head []byte) string {
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return EncodingGzip
	case len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
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
		return newZstdReader(r, maxZstdWindow)
	}
	return nil, fmt.Errorf("%w: unknown content-encoding %q", ErrCorrupt, truncate(enc))
}

// maxZstdWindow bounds the window a zstd stream may ask for; the decoder
// allocates it up front, so an 11-byte frame can claim it.
const maxZstdWindow = 64 << 20

func newZstdReader(r io.Reader, window uint64) (io.ReadCloser, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30),
		zstd.WithDecoderMaxWindow(window))
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	return zstdCloser{zr}, nil
}

// zstdWindowFor is the window bound for a body whose decoded size is
// bounded by limit: decoding allocates the window up front, so it follows
// the bound (but never below 8 MiB, the window common encoders use for
// streams of unknown size).
func zstdWindowFor(limit int64) uint64 {
	return uint64(min(maxZstdWindow, max(limit, 8<<20)))
}

type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error { z.Decoder.Close(); return nil }

// DecodeBody decodes a whole body per enc, or by sniffing when enc is empty
// (pugmark's own JSON files always start with '[' or '{' when plain, so
// sniffing cannot misread them). The output is bounded by max.
func DecodeBody(body []byte, enc string, max int64) ([]byte, error) {
	if enc == EncodingNone {
		enc = Sniff(body)
	}
	if enc == EncodingNone || enc == "identity" {
		if int64(len(body)) > max {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), max)
		}
		return body, nil
	}
	var dr io.ReadCloser
	var err error
	if enc == EncodingZstd {
		// A frame that declares more content than the bound is refused
		// before anything is allocated for it.
		var h zstd.Header
		if h.Decode(body) == nil && h.HasFCS && h.FrameContentSize > uint64(max) {
			return nil, fmt.Errorf("%w: zstd frame declares %d bytes, limit %d", ErrTooLarge, h.FrameContentSize, max)
		}
		dr, err = newZstdReader(bytes.NewReader(body), zstdWindowFor(max))
	} else {
		dr, err = NewDecoder(bytes.NewReader(body), enc)
	}
	if err != nil {
		return nil, err
	}
	defer dr.Close()
	out, err := io.ReadAll(io.LimitReader(dr, max+1))
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return nil, fmt.Errorf("%w: %s body: %v", ErrTooLarge, enc, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s body: %v", ErrCorrupt, enc, err)
	}
	if int64(len(out)) > max {
		return nil, fmt.Errorf("%w: decodes past %d bytes", ErrTooLarge, max)
	}
	return out, nil
}

// EncodeDescriptors returns the zstd-compressed JSON array of ds, the body
// of a snapshot or memory file (§6.2, §8.2).
func EncodeDescriptors(ds []Descriptor) ([]byte, error) {
	if ds == nil {
		ds = []Descriptor{}
	}
	js, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	return encoder().EncodeAll(js, nil), nil
}

// DecodeDescriptors parses a snapshot or memory file body: encoded per enc
// (sniffed when empty), a JSON array of descriptors.
func DecodeDescriptors(body []byte, enc string, max int64) ([]Descriptor, error) {
	js, err := DecodeBody(body, enc, max)
	if err != nil {
		return nil, err
	}
	var ds []Descriptor
	if err := json.Unmarshal(js, &ds); err != nil {
		return nil, fmt.Errorf("%w: descriptor array: %v", ErrCorrupt, err)
	}
	if ds == nil {
		// "null" is not an array.
		if !bytes.Equal(bytes.TrimSpace(js), []byte("[]")) {
			return nil, fmt.Errorf("%w: descriptor array: not an array", ErrCorrupt)
		}
		ds = []Descriptor{}
	}
	return ds, nil
}
