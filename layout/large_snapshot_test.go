package layout

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/blob"
)

// TestLargeSnapshotReads: a snapshot of more descriptors than the
// mount's fixed bound (MaxDecoded 32 MiB, 65,536 descriptors) reads back
// when what it stores is what such descriptors take, and so does a
// memory namespace of as many records. A commit of 100,000 files (one
// fsync, one pugfs exec run) wrote a snapshot no mount could read again:
// the whole session was EIO ("more than 65536 descriptors"). A bomb of
// as many empty descriptors is still refused (TestDecodeBound).
func TestLargeSnapshotReads(t *testing.T) {
	const n = 100_000
	ds := make([]Descriptor, n)
	at := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	for i := range ds {
		d := Digest(sha256.Sum256(fmt.Appendf(nil, "file %d", i)))
		ds[i] = Descriptor{Name: fmt.Sprintf("out/dir%03d/file%06d.txt", i%100, i), Digest: d, Size: int64(100 + i%4000),
			CreatedAt: at.Add(time.Duration(i) * time.Millisecond), ContentType: "text/plain"}
	}
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, &Options{MaxDecoded: 32 << 20})
		id := newSession(t, s)
		if _, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadSnapshot(bg, id, 1)
		if err != nil {
			t.Fatalf("a snapshot of %d descriptors: %v", n, err)
		}
		if len(got) != n || got[n-1].Name != ds[n-1].Name {
			t.Fatalf("read %d descriptors, want %d", len(got), n)
		}
	})
}

// TestDecodeBound: decodedBound lets a large stored object decode to
// what its descriptors take, not past decodedCeiling, and a bomb of
// empty descriptors that compresses to a few kilobytes stays refused at
// the caller's bound.
func TestDecodeBound(t *testing.T) {
	const floor = 32 << 20
	for _, tc := range []struct {
		stored int
		want   int64
	}{
		{0, floor},
		{16 << 10, floor},
		{100 << 10, 100 << 20},
		{1 << 20, decodedCeiling},
		{32 << 20, decodedCeiling},
	} {
		if got := decodedBound(floor, tc.stored); got != tc.want {
			t.Errorf("decodedBound(%d, %d) = %d, want %d", floor, tc.stored, got, tc.want)
		}
	}
	// 2,000,000 empty descriptors, 6 MB of JSON, compressed.
	js := append(append([]byte("["), bytes.Repeat([]byte("{},"), 2_000_000)...), "{}]"...)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	bomb := enc.EncodeAll(js, nil)
	t.Logf("the bomb stores %d bytes", len(bomb))
	_, err = DecodeDescriptors(bomb, "", floor)
	wantErrIs(t, err, ErrTooLarge)
}
