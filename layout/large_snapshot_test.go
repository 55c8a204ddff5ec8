package layout

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

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
// empty descriptors ("{}", some 170 times what it stores in memory
// uncompressed, thousands compressed) stays refused.
func TestDecodeBound(t *testing.T) {
	const floor = 32 << 20
	for _, tc := range []struct {
		stored int
		want   int64
	}{
		{0, floor},
		{100 << 10, floor},
		{1 << 20, 64 << 20},
		{32 << 20, decodedCeiling},
	} {
		if got := decodedBound(floor, tc.stored); got != tc.want {
			t.Errorf("decodedBound(%d, %d) = %d, want %d", floor, tc.stored, got, tc.want)
		}
	}
	// 1 MiB of "{}," uncompressed: 350,000 descriptors in 1 MiB, past
	// 64 MiB / 512 = 131,072.
	bomb := make([]byte, 0, 1<<20+2)
	bomb = append(bomb, '[')
	for len(bomb) < 1<<20-3 {
		bomb = append(bomb, "{},"...)
	}
	bomb = append(bomb, "{}]"...)
	_, err := DecodeDescriptors(bomb, "", floor)
	wantErrIs(t, err, ErrTooLarge)
}
