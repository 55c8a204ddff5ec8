package layout

import (
	"fmt"
	"testing"
	"time"
)

// benchSnapshot is a snapshot as an agent writes one: a thousand files
// with a digest, size, time and content type each.
func benchSnapshot(b *testing.B, n int) []byte {
	b.Helper()
	ds := make([]Descriptor, n)
	at := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	for i := range ds {
		ds[i] = Descriptor{
			Name:           fmt.Sprintf("d%03d/file-%05d.txt", i/100, i),
			Digest:         DigestOf([]byte(fmt.Sprint(i))),
			Size:           int64(1024 + i),
			CreatedAt:      at.Add(time.Duration(i) * time.Second),
			ContentType:    "text/plain",
			SequenceNumber: int64(i),
		}
	}
	body, err := EncodeDescriptors(ds)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecodeDescriptors is the decoding of one snapshot: what the
// first listing of a session costs in CPU per snapshot, beside its GET.
func BenchmarkDecodeDescriptors(b *testing.B) {
	body := benchSnapshot(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		ds, err := DecodeDescriptors(body, EncodingZstd, 64<<20)
		if err != nil || len(ds) != 1000 {
			b.Fatal(len(ds), err)
		}
	}
}
