package blobcache

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pugmark/pugfs/layout"
)

// TestDecodeBoundFollowsStoredBytes: the bound on what a gzip or
// zstd body decodes to (decodedLimit: 1,024 times what it stores past
// 256 MiB) is taken from the bytes stored, not from the size its
// descriptor declares, which any producer writes (§15). The verify pass
// started its decoder with the declared size: a 64 KiB bomb whose
// descriptor says 64 MiB decoded to all of its 640 MiB (up to
// Options.MaxDecoded, 64 GiB by default) before the pass found the body
// shorter than declared, where the same bomb declared truthfully stops at
// 256 MiB.
func TestDecodeBoundFollowsStoredBytes(t *testing.T) {
	ctx := context.Background()
	const chunk = 64 << 10
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	frame := enc.EncodeAll(make([]byte, 64<<20), nil)
	enc.Close()
	var bomb []byte
	for range 10 { // 640 MiB decoded
		bomb = append(bomb, frame...)
	}
	if len(bomb)+8 > chunk {
		t.Fatalf("the bomb takes %d bytes, more than a chunk", len(bomb))
	}
	// A skippable frame fills the one chunk.
	pad := make([]byte, chunk-len(bomb))
	binary.LittleEndian.PutUint32(pad, 0x184D2A50)
	binary.LittleEndian.PutUint32(pad[4:], uint32(len(pad)-8))
	bomb = append(bomb, pad...)
	for _, tc := range []struct {
		name     string
		declared int64
	}{
		{"declared truthfully", chunk},
		{"declared larger", 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeBlobSource()
			dg := src.put(bomb)
			c := newTestBlobCache(t, src, Options{ChunkSize: chunk, MaxDecoded: 4 << 30, SpillDir: t.TempDir()})
			d := &layout.Descriptor{Digest: dg, Size: tc.declared, ContentEncoding: "zstd"}
			if _, err := c.Size(ctx, d); !errors.Is(err, layout.ErrTooLarge) && !errors.Is(err, layout.ErrCorrupt) {
				t.Fatalf("Size: %v, want ErrTooLarge or ErrCorrupt", err)
			}
			// What was decoded is hashed (Stats.BytesHashed): at most
			// the bound of what is stored, 256 MiB, and its last chunk.
			if h := c.Stats().BytesHashed; h > 256<<20+4*chunk {
				t.Errorf("%d MiB decoded from %d KiB stored, past the 256 MiB its stored size allows", h>>20, chunk>>10)
			}
		})
	}
}
