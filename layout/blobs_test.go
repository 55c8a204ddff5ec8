package layout

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout/blobwrap"
)

// §3: blobs live at objects/sha256:<hex>, stored as-is with the immutable
// Cache-Control; rewriting a key is allowed (no If-None-Match) and an
// existing blob is not uploaded again.
func TestSection3_BlobWrites(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		body := []byte("some blob body")
		bi, err := s.PutBlobBytes(bg, body, BlobOptions{ContentType: "text/x-test"})
		if err != nil || bi.Existed || bi.Digest != DigestOf(body) || bi.Size != int64(len(body)) {
			t.Fatalf("%+v %v", bi, err)
		}
		key := BlobKey(bi.Digest)
		raw, err := b.ReadAll(bg, key)
		if err != nil || !bytes.Equal(raw, body) {
			t.Fatalf("stored %q %v", raw, err)
		}
		a, _ := b.Attributes(bg, key)
		if a.CacheControl != CacheImmutable || a.ContentType != "text/x-test" {
			t.Fatalf("attributes %q %q", a.CacheControl, a.ContentType)
		}
		bi2, err := s.PutBlobBytes(bg, body, BlobOptions{})
		if err != nil || !bi2.Existed {
			t.Fatalf("second put %+v %v", bi2, err)
		}
		// A truncated object at the key is replaced (no If-None-Match).
		other := []byte("another body")
		okey := BlobKey(DigestOf(other))
		putRaw(t, b, okey, other[:3], nil)
		if bi3, err := s.PutBlobBytes(bg, other, BlobOptions{}); err != nil || bi3.Existed {
			t.Fatalf("repair %+v %v", bi3, err)
		}
		if raw, _ := b.ReadAll(bg, okey); !bytes.Equal(raw, other) {
			t.Fatalf("not repaired: %q", raw)
		}
		if a, _ := b.Attributes(bg, okey); a.ContentType != "application/octet-stream" {
			t.Fatalf("default type %q", a.ContentType)
		}
		got, err := s.ReadBlob(bg, bi.Digest, 1<<20)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read %q %v", got, err)
		}
		_, err = s.ReadBlob(bg, bi.Digest, 4)
		wantErrIs(t, err, ErrTooLarge)
		_, err = s.ReadBlob(bg, DigestOf([]byte("missing")), 1<<20)
		wantErrIs(t, err, ErrNotFound)
		// Same size, different bytes: the digest check catches it.
		bad := []byte("xxxx blob body")
		putRaw(t, b, key, bad, nil)
		_, err = s.ReadBlob(bg, bi.Digest, 1<<20)
		wantErrIs(t, err, ErrCorrupt)
		putRaw(t, b, key, body, nil)
		rc, err := s.OpenBlob(bg, bi.Digest, 5, 4)
		if err != nil {
			t.Fatal(err)
		}
		part, _ := io.ReadAll(rc)
		rc.Close()
		if string(part) != "blob" {
			t.Fatalf("range %q", part)
		}
		_, err = s.OpenBlob(bg, DigestOf([]byte("missing")), 0, -1)
		wantErrIs(t, err, ErrBlobMissing)
		wantErrIs(t, err, ErrNotFound)
		if a, err := s.BlobAttributes(bg, bi.Digest); err != nil || a.Size != int64(len(body)) {
			t.Fatalf("%+v %v", a, err)
		}
		// Streaming upload from a staging file.
		f, err := os.CreateTemp(t.TempDir(), "stage")
		if err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("0123456789"), 200000)
		f.Write(big)
		d, n, err := HashFile(f)
		if err != nil || d != DigestOf(big) || n != int64(len(big)) {
			t.Fatalf("HashFile %v %d %v", d, n, err)
		}
		if _, err := s.PutBlobFile(bg, f, d, n, BlobOptions{ContentType: "application/x-big"}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got, err := s.ReadBlob(bg, d, 1<<30); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("big blob: %d bytes, %v", len(got), err)
		}
	})
}

// TestPutBlindBelow: a blob smaller than Options.PutBlindBelow is written
// without a HEAD (on a remote bucket the HEAD is a round trip as dear as
// the upload), again when written again; a larger one is asked about
// first and not sent again. The PUT that replaces a stored body is still
// checked by the backend where it checks bodies.
func TestPutBlindBelow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, &Options{PutBlindBelow: 64})
		small, large := []byte("a small body"), bytes.Repeat([]byte("large "), 20)
		for i, tc := range []struct {
			body        []byte
			heads, puts int64
			existed     bool
		}{
			{small, 0, 1, false},
			{small, 0, 1, false},
			{large, 1, 1, false},
			{large, 1, 0, true},
		} {
			before := s.Stats()
			bi, err := s.PutBlobBytes(bg, tc.body, BlobOptions{})
			after := s.Stats()
			if err != nil || bi.Existed != tc.existed {
				t.Fatalf("put %d: %+v %v", i, bi, err)
			}
			if h, p := after.Heads-before.Heads, after.Puts-before.Puts; h != tc.heads || p != tc.puts {
				t.Errorf("put %d (%d bytes): %d HEADs and %d PUTs, want %d and %d", i, len(tc.body), h, p, tc.heads, tc.puts)
			}
			if raw, err := b.ReadAll(bg, BlobKey(DigestOf(tc.body))); err != nil || !bytes.Equal(raw, tc.body) {
				t.Fatalf("put %d stored %q %v", i, raw, err)
			}
		}
	})
}

// §3.2: remote-URI ingestion stores the body as a local blob and returns
// the descriptor (inline data when at most 1024 bytes, §3.1).
func TestSection3_2_Ingest(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		src := memBucket()
		small, large := []byte("small remote"), bytes.Repeat([]byte("L"), InlineLimit+1)
		src.WriteAll(bg, "path/to/small", small, &blob.WriterOptions{ContentType: "text/plain"})
		src.WriteAll(bg, "path/to/large", large, &blob.WriterOptions{ContentType: "application/x-l"})
		var opened []string
		open := func(ctx context.Context, u string) (*blob.Bucket, error) {
			opened = append(opened, u)
			return blob.PrefixedBucket(src, ""), nil
		}
		d, err := s.Ingest(bg, "s3://other-bucket/path/to/small?region=x", open, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if opened[0] != "s3://other-bucket?region=x" || d.Digest != DigestOf(small) || d.Size != int64(len(small)) ||
			d.ContentType != "text/plain" || !bytes.Equal(d.Data, small) || d.CreatedAt.IsZero() {
			t.Fatalf("opened %v, descriptor %+v", opened, d)
		}
		if got, err := s.ReadBlob(bg, d.Digest, 1<<20); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("%q %v", got, err)
		}
		d, err = s.Ingest(bg, "s3://other-bucket/path/to/large", open, t.TempDir())
		if err != nil || d.Data != nil || d.Size != int64(len(large)) {
			t.Fatalf("%+v %v", d, err)
		}
		if _, err := s.Ingest(bg, "s3://other-bucket/path/to/missing", open, t.TempDir()); err == nil {
			t.Fatal("ingested a missing object")
		}

		// §15: the body is stored as it is, so its encoding is kept on
		// the blob and in the descriptor (a gzip object showed its
		// compressed bytes: review 4); one the body does not begin as
		// was decoded on the way (GCS serves gzip decoded) and is
		// dropped; one §2.3 does not allow is refused.
		plain := bytes.Repeat([]byte(`{"k":"v"}`+"\n"), 200)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(plain)
		zw.Close()
		cases := []struct {
			key, enc string
			body     []byte
			want     string // the encoding kept; "refused" for an error
		}{
			{"gz", EncodingGzip, gz.Bytes(), EncodingGzip},
			{"decoded-on-the-way", EncodingGzip, plain, ""},
			{"identity", "identity", plain, ""},
			{"brotli", "br", plain, "refused"},
		}
		encSrc := memBucket()
		for _, tc := range cases {
			if err := encSrc.WriteAll(bg, "enc/"+tc.key, tc.body, &blob.WriterOptions{ContentType: "application/json", ContentEncoding: tc.enc}); err != nil {
				t.Fatal(err)
			}
		}
		open = func(ctx context.Context, u string) (*blob.Bucket, error) { return blob.PrefixedBucket(encSrc, ""), nil }
		for _, tc := range cases {
			d, err := s.Ingest(bg, "s3://other-bucket/enc/"+tc.key, open, t.TempDir())
			if tc.want == "refused" {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("%s: ingest: %v, want ErrInvalid", tc.key, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.key, err)
			}
			a, err := s.BlobAttributes(bg, d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if d.Digest != DigestOf(tc.body) || d.ContentEncoding != tc.want || a.ContentEncoding != tc.want {
				t.Fatalf("%s: descriptor encoding %q, blob's %q, want %q (digest of the stored bytes: %v)", tc.key, d.ContentEncoding, a.ContentEncoding, tc.want, d.Digest == DigestOf(tc.body))
			}
		}
	})
}

func TestSection3_2_SplitObjectURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, key string }{
		{"s3://bkt/a/b/c?region=eu", "s3://bkt?region=eu", "a/b/c"},
		{"gs://bkt/k", "gs://bkt", "k"},
		{"file:///tmp/dir/key.bin", "file:///tmp/dir", "key.bin"},
		{"file:///key", "file:///", "key"},
	} {
		b, k, err := SplitObjectURL(tc.in)
		if err != nil || b != tc.bucket || k != tc.key {
			t.Errorf("SplitObjectURL(%q) = %q %q %v", tc.in, b, k, err)
		}
	}
	for _, in := range []string{"", "no-scheme", "s3://bkt", "s3://bkt/", "s3:///key", "file:///dir/", "%zz://x/y"} {
		if _, _, err := SplitObjectURL(in); err == nil {
			t.Errorf("SplitObjectURL(%q) succeeded", in)
		}
	}
}

// §16 / decisions.md §16: Cache-Control per object class.
func TestSection16_CacheControl(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		m, _, err := s.CreateNamedSession(bg, "cc", nil)
		if err != nil {
			t.Fatal(err)
		}
		bi, _ := s.PutBlobBytes(bg, []byte("x"), BlobOptions{})
		commit(t, s, m.Session, Checkpoint, desc("a", "x"))
		writeMem(t, s, "ns", MemoryWrite{Put: descs("r")})
		mk, _ := ManifestKey(m.Session)
		sk, _ := SnapshotKey(m.Session, 1)
		memk, _ := MemoryKey("ns", 1)
		for key, want := range map[string]string{
			BlobKey(bi.Digest): CacheImmutable,
			mk:                 CacheImmutable,
			sk:                 CacheImmutable,
			memk:               CacheImmutable,
			"refs/sessions/cc": CacheNoCache,
		} {
			a, err := b.Attributes(bg, key)
			if err != nil || a.CacheControl != want {
				t.Errorf("%s: Cache-Control %q, want %q (%v)", key, a.CacheControl, want, err)
			}
		}
		// §1: nothing outside the four prefixes is written.
		it := b.List(nil)
		for {
			o, err := it.Next(bg)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			ok := false
			for _, p := range []string{ObjectsPrefix, SessionsPrefix, MemoriesPrefix, RefsPrefix} {
				ok = ok || strings.HasPrefix(o.Key, p)
			}
			if !ok {
				t.Errorf("key %q outside pugmark's prefixes", o.Key)
			}
		}
	})
}

// recordedConditions collects what a test write hook was asked to apply.
var (
	recordMu   sync.Mutex
	recordOn   bool
	recordedCs []Conditions
)

func init() {
	RegisterWriteHook(func(as func(any) bool, c Conditions) (bool, bool, error) {
		recordMu.Lock()
		if recordOn {
			recordedCs = append(recordedCs, c)
		}
		recordMu.Unlock()
		return false, false, nil // applies nothing, like a hook for another driver
	})
}

// §2.2 / §3: blob writes ask the driver for a server-side SHA-256 check of
// the digest in the key; ref renames ask for If-Match on the prior ETag.
func TestSection3_ChecksumCondition(t *testing.T) {
	s := newStore(t, memBucket(), nil)
	recordMu.Lock()
	recordOn, recordedCs = true, nil
	recordMu.Unlock()
	defer func() {
		recordMu.Lock()
		recordOn = false
		recordMu.Unlock()
	}()
	body := []byte("checksummed")
	if _, err := s.PutBlobBytes(bg, body, BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Link(bg, "r", "a"); err != nil {
		t.Fatal(err)
	}
	prev, _ := s.ReadRef(bg, "r")
	if err := s.RenameRef(bg, "r", prev, "b"); !errors.Is(err, ErrWeakCAS) {
		t.Fatalf("rename: %v", err)
	}
	recordMu.Lock()
	defer recordMu.Unlock()
	var sha, ifMatch bool
	for _, c := range recordedCs {
		sha = sha || c.SHA256 == DigestOf(body)
		ifMatch = ifMatch || (c.IfMatch != "" && c.IfMatch == prev.ETag)
	}
	if !sha || !ifMatch {
		t.Fatalf("conditions %+v: sha %v ifMatch %v (etag %q)", recordedCs, sha, ifMatch, prev.ETag)
	}
}

// bufferSizes records the BufferSize each writer was opened with, by key.
type bufferSizes struct {
	driver.Bucket
	mu    sync.Mutex
	sizes map[string]int
}

func (b *bufferSizes) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	b.mu.Lock()
	b.sizes[key] = opts.BufferSize
	b.mu.Unlock()
	return b.Bucket.NewTypedWriter(ctx, key, contentType, opts)
}

// TestSmallBodiesSmallBuffers: a body under 16 MiB is written with a
// buffer of its size (rounded up to GCS's 256 KiB chunks), a larger one
// with the backend's default: GCS's writer buffered 16 MiB of every
// upload, and a pugfs exec of 2,000 small files to fake-gcs-server peaked
// at 338 MB.
func TestSmallBodiesSmallBuffers(t *testing.T) {
	rec := &bufferSizes{Bucket: blobwrap.Portable(memblob.OpenBucket(nil)), sizes: map[string]int{}}
	s := newStore(t, blob.NewBucket(rec), nil)
	for _, c := range []struct{ size, want int }{
		{0, 256 << 10}, {1000, 256 << 10}, {256 << 10, 512 << 10}, {4<<20 - 1, 4 << 20}, {16<<20 - 1, 16 << 20}, {16 << 20, 0},
	} {
		bi, err := s.PutBlobBytes(bg, bytes.Repeat([]byte{'b'}, c.size), BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.sizes[BlobKey(bi.Digest)]; got != c.want {
			t.Errorf("a blob of %d bytes written with a buffer of %d, want %d", c.size, got, c.want)
		}
	}
	f, err := os.CreateTemp(t.TempDir(), "body")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("a staged file")
	d, n, err := HashFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBlobFile(bg, f, d, n, BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.sizes[BlobKey(d)]; got != 256<<10 {
		t.Errorf("a staged file of %d bytes written with a buffer of %d, want 256 KiB", n, got)
	}
	if err := s.put(bg, "x/snapshot.json", []byte("{}"), &blob.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.sizes["x/snapshot.json"]; got != 256<<10 {
		t.Errorf("a snapshot written with a buffer of %d, want 256 KiB", got)
	}
}
