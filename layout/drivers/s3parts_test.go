package drivers_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/s3test"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/drivers"
)

// TestS3BlobAtThePartBoundary: blobs of one byte less than, exactly, and
// one byte more than the size from which the SDK uploads in parts are
// stored and read back, from bytes and from a file. A body of exactly
// 16 MiB went in parts with the whole body's SHA-256 declared, which S3
// refuses (BadDigest): such a file could never be written to an S3
// bucket (found by the test of a full staging disk).
func TestS3BlobAtThePartBoundary(t *testing.T) {
	srv := s3test.Shared(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	_, u := srv.NewBucket(t)
	ctx := context.Background()
	b, err := drivers.OpenURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := newStore(b)
	for _, size := range []int{16<<20 - 1, 16 << 20, 16<<20 + 1} {
		for _, from := range []string{"bytes", "file"} {
			body := bytes.Repeat([]byte{byte(size), byte(size >> 8), 'x', 'y'}, size/4+1)[:size]
			body[0] = from[0] // each case its own blob
			var d layout.Digest
			if from == "bytes" {
				bi, err := s.PutBlobBytes(ctx, body, layout.BlobOptions{})
				if err != nil {
					t.Fatalf("%d bytes from %s: %v", size, from, err)
				}
				d = bi.Digest
			} else {
				p := filepath.Join(t.TempDir(), "body")
				if err := os.WriteFile(p, body, 0o600); err != nil {
					t.Fatal(err)
				}
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				d = layout.DigestOf(body)
				_, err = s.PutBlobFile(ctx, f, d, int64(size), layout.BlobOptions{})
				f.Close()
				if err != nil {
					t.Fatalf("%d bytes from %s: %v", size, from, err)
				}
			}
			got, err := b.ReadAll(ctx, layout.BlobKey(d))
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes from %s read back as %d bytes: %v", size, from, len(got), err)
			}
		}
	}
}
