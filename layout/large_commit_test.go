package layout

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"
)

// TestLargeCommitOfSmallDescriptorsReads: a snapshot of pugfs's own
// writing reads back at the mount's bound (32 MiB) whatever its
// descriptors are: one that deletes a large tree (rm -rf of 100,000
// files: tombstones, a name and a time each), or one of 100,000 files of
// the same content (empty files, copies of one LICENSE: one digest).
// Sequential names compress to a byte or two a descriptor; at 64 times
// what it stored (decodedPerStored, review C3) such a snapshot was
// refused as a bomb, the whole session EIO.
func TestLargeCommitOfSmallDescriptorsReads(t *testing.T) {
	const n = 100_000
	at := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	empty := Digest(sha256.Sum256(nil))
	for _, tc := range []struct {
		name string
		desc func(i int) Descriptor
	}{
		{"tombstones", func(i int) Descriptor {
			return Descriptor{Name: fmt.Sprintf("out/dir%03d/file%06d.txt", i/2000, i), Deleted: true, CreatedAt: at, SequenceNumber: 7}
		}},
		{"tombstones of an unlink each", func(i int) Descriptor {
			// rm -rf: one unlink, and one time (staging's Now()), each,
			// some 20 µs apart.
			t := at.Add(time.Duration(i)*20*time.Microsecond + time.Duration(i*7919%1000))
			return Descriptor{Name: fmt.Sprintf("out/dir%03d/file%06d.txt", i/2000, i), Deleted: true, CreatedAt: t, SequenceNumber: 7}
		}},
		{"files of one content", func(i int) Descriptor {
			return Descriptor{Name: fmt.Sprintf("out/dir%03d/file%06d.txt", i/2000, i), Digest: empty, CreatedAt: at, ContentType: "text/plain"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := make([]Descriptor, n)
			for i := range ds {
				ds[i] = tc.desc(i)
			}
			body, err := EncodeDescriptors(ds)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d descriptors stored in %d bytes (%.1f each)", n, len(body), float64(len(body))/n)
			got, err := DecodeDescriptors(body, "", 32<<20)
			if err != nil {
				t.Fatalf("a snapshot of %d %s, as pugfs writes it: %v", n, tc.name, err)
			}
			if len(got) != n {
				t.Fatalf("read %d descriptors, want %d", len(got), n)
			}
		})
	}
}
