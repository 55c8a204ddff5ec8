package layout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
)

// BlobInfo describes a stored blob.
type BlobInfo struct {
	Digest Digest
	Size   int64
	// Existed is set when the upload was skipped because the blob was
	// already there (content addressing makes the skip safe).
	Existed bool
	// Linked is set when the backend published the file given to
	// PutBlobFile itself instead of a copy (the local driver links it):
	// the file is the object's body now and must never be written again.
	Linked bool
}

// BlobOptions are the object headers of a blob write.
type BlobOptions struct {
	ContentType     string
	ContentEncoding string
}

// PutBody stores body as a blob and returns the descriptor that names it
// name, as every writer of this project builds one: digest, size, the
// options' type and encoding, created-at now (the Store's clock), and the
// body inline when it is small enough (§3.1). The caller adds metadata.
func (s *Store) PutBody(ctx context.Context, name string, body []byte, o BlobOptions) (Descriptor, error) {
	bi, err := s.PutBlobBytes(ctx, body, o)
	if err != nil {
		return Descriptor{}, err
	}
	d := Descriptor{Name: name, Digest: bi.Digest, Size: bi.Size, ContentType: o.ContentType,
		ContentEncoding: o.ContentEncoding, CreatedAt: s.opts.Now().UTC()}
	if len(body) <= InlineLimit {
		d.Data = body
	}
	return d, nil
}

// PutBlobBytes stores body at objects/sha256:<hex> (§3).
func (s *Store) PutBlobBytes(ctx context.Context, body []byte, o BlobOptions) (BlobInfo, error) {
	d := DigestOf(body)
	md5 := lazyMD5(func() io.Reader { return bytes.NewReader(body) })
	return s.putBlob(ctx, d, Conditions{SHA256: d, MD5: md5, Size: int64(len(body))}, func(ctx context.Context, wo *blob.WriterOptions) error {
		return s.put(ctx, BlobKey(d), body, wo)
	}, o)
}

// PutBlobFile stores the contents of f, whose digest and size the caller
// computed while writing it (the staging file of a mount). The upload
// streams from the file; nothing is held whole in memory. A backend that
// can publish the file itself does (the local driver links it into the
// bucket when f is linkable, an O_TMPFILE, on the bucket's file system):
// no copy, and BlobInfo.Linked tells the caller that f is the object now.
// The backend then trusts d for f's content (the caller hashed it).
func (s *Store) PutBlobFile(ctx context.Context, f *os.File, d Digest, size int64, o BlobOptions) (BlobInfo, error) {
	md5 := lazyMD5(func() io.Reader { return io.NewSectionReader(f, 0, size) })
	var took atomic.Bool
	c := Conditions{SHA256: d, MD5: md5, Size: size, File: f, TookFile: func() { took.Store(true) }}
	info, err := s.putBlob(ctx, d, c, func(ctx context.Context, wo *blob.WriterOptions) error {
		return s.retry(ctx, func() error {
			s.st.puts.Add(1)
			took.Store(false)
			w, err := s.b.NewWriter(ctx, BlobKey(d), wo)
			if err != nil {
				return err
			}
			var n int64
			if !took.Load() {
				n, err = io.Copy(w, io.NewSectionReader(f, 0, size))
				if err != nil {
					cerr := w.Close()
					return errors.Join(err, cerr)
				}
			}
			if err := w.Close(); err != nil {
				return err
			}
			if took.Load() {
				n = size
			}
			s.st.bytesWritten.Add(n)
			return nil
		})
	}, o)
	info.Linked = err == nil && !info.Existed && took.Load()
	if info.Linked {
		s.st.blobsLinked.Add(1)
	}
	return info, err
}

// putBlob skips the upload when the blob exists (asked for blobs of at
// least Options.PutBlindBelow bytes), otherwise writes it with the
// immutable Cache-Control and, where the backend takes one, a
// backend-side check of the body: SHA-256 (S3, local) or the MD5 that md5
// computes (GCS, Azure). It never uses If-None-Match (§3).
func (s *Store) putBlob(ctx context.Context, d Digest, c Conditions, write func(context.Context, *blob.WriterOptions) error, o BlobOptions) (BlobInfo, error) {
	size := c.Size
	info := BlobInfo{Digest: d, Size: size}
	key := BlobKey(d)
	if size >= s.opts.PutBlindBelow {
		if a, err := s.head(ctx, key); err == nil && a.Size == size {
			info.Existed = true
			return info, nil
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			return info, fmt.Errorf("store blob %s: %w", d, err)
		}
	}
	ct := o.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	var ap applied
	wo := conditionalOptions(blob.WriterOptions{
		ContentType:     ct,
		ContentEncoding: o.ContentEncoding,
		CacheControl:    CacheImmutable,
	}, c, &ap)
	smallBuffer(wo, size)
	if err := write(ctx, wo); err != nil {
		return info, fmt.Errorf("store blob %s: %w", key, err)
	}
	return info, nil
}

// smallBuffer makes a backend's writer of a body of size bytes, under 16
// MiB, buffer no more than the body (wo.BufferSize, unless set): GCS's
// buffers 16 MiB and Azure's 8 MiB of every upload by default, and 16
// uploads of small files in flight held 256 MiB (pugfs exec of 2,000
// files to fake-gcs-server peaked at 338 MB, to S3 at 85 MB). GCS still
// sends such a body in one request. The S3 SDK reads a body under 16 MiB
// whole whatever its part size; from 16 MiB it uploads parts, and a body
// that large keeps every backend's default.
func smallBuffer(wo *blob.WriterOptions, size int64) {
	const chunk = 256 << 10 // GCS rounds a chunk size up to this
	if wo.BufferSize == 0 && size >= 0 && size < 16<<20 {
		wo.BufferSize = int((size/chunk + 1) * chunk)
	}
}

// HashFile returns the digest and size of f's contents.
func HashFile(f *os.File) (Digest, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return Digest{}, 0, err
	}
	var d Digest
	copy(d[:], h.Sum(nil))
	return d, n, nil
}

// BlobAttributes returns the stored blob's attributes (one HEAD).
func (s *Store) BlobAttributes(ctx context.Context, d Digest) (*blob.Attributes, error) {
	return s.head(ctx, BlobKey(d))
}

// OpenBlob opens length bytes of the stored blob at offset (length < 0:
// to the end). The bytes are the stored body, not decoded and not yet
// verified: callers verify against the digest (cache/ does). The reader
// has a Size method: the length of the whole stored body.
func (s *Store) OpenBlob(ctx context.Context, d Digest, offset, length int64) (io.ReadCloser, error) {
	var r *blob.Reader
	key := BlobKey(d)
	err := s.retry(ctx, func() error {
		s.st.gets.Add(1)
		var err error
		r, err = s.b.NewRangeReader(ctx, key, offset, length, nil)
		return err
	})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("open blob %s: %w", key, ErrBlobMissing)
		}
		return nil, fmt.Errorf("open blob %s: %w", key, err)
	}
	return &storedReader{countingReader: countingReader{r: r, n: &s.st.bytesRead}, br: r}, nil
}

// storedReader is a ranged read of a blob that also says how long the
// stored body is (blob.Reader.Size: the bucket's answer says it), so that
// a reader can check a descriptor's size against it without another
// request (blobcache's storedEnd).
type storedReader struct {
	countingReader
	br *blob.Reader
}

// Size returns the length of the whole stored body. Asked for only
// when needed: the local driver reads the object's attributes for it.
func (r *storedReader) Size() int64 { return r.br.Size() }

type countingReader struct {
	r interface {
		io.Reader
		io.Closer
	}
	n interface{ Add(int64) int64 }
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
func (c *countingReader) Close() error { return c.r.Close() }

// ReadBlob reads a whole blob and checks it against its digest.
func (s *Store) ReadBlob(ctx context.Context, d Digest, max int64) ([]byte, error) {
	body, err := s.getAll(ctx, BlobKey(d), max)
	if err != nil {
		return nil, err
	}
	if DigestOf(body) != d {
		return nil, fmt.Errorf("read blob %s: %w: digest mismatch", BlobKey(d), ErrCorrupt)
	}
	return body, nil
}

// BucketOpener opens a bucket URL; blob.OpenBucket by default.
type BucketOpener func(ctx context.Context, url string) (*blob.Bucket, error)

// Ingest fetches the object at a remote URI (scheme://bucket/key, any
// scheme the URL mux knows), streams it through a temporary file while
// hashing, and stores it as a blob (§3.2). It returns a descriptor with
// digest, size, content type and created-at filled in; the caller names
// and commits it. tmpDir holds the spill file ("" = os.TempDir()).
func (s *Store) Ingest(ctx context.Context, uri string, open BucketOpener, tmpDir string) (Descriptor, error) {
	bucketURL, key, err := SplitObjectURL(uri)
	if err != nil {
		return Descriptor{}, err
	}
	if open == nil {
		open = blob.OpenBucket
	}
	src, err := open(ctx, bucketURL)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ingest %s: open bucket: %w", uri, err)
	}
	defer src.Close()
	// The encoding is no reader's attribute: one HEAD.
	a, err := src.Attributes(ctx, key)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ingest %s: %w", uri, err)
	}
	r, err := src.NewReader(ctx, key, nil)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ingest %s: %w", uri, err)
	}
	defer r.Close()
	return s.IngestReader(ctx, uri, r, BlobOptions{ContentType: r.ContentType(), ContentEncoding: a.ContentEncoding}, tmpDir)
}

// IngestReader is Ingest for a body the caller opened itself (a local file
// opened on behalf of a less privileged user, say): r is streamed through
// a temporary file in tmpDir while hashed, and stored as a blob with o's
// type and encoding, the source's (§3.2 stores the body as it is, and
// §15 has every PUT and descriptor declare its encoding). An encoding
// §2.3 does not allow is refused; one the body does not begin as (a
// transport or the service decoded it on the way, as GCS does for gzip)
// is dropped. name says where the body came from in errors; it is shown
// as given, so callers pass it with credentials removed.
func (s *Store) IngestReader(ctx context.Context, name string, r io.Reader, o BlobOptions, tmpDir string) (Descriptor, error) {
	switch o.ContentEncoding {
	case "identity":
		o.ContentEncoding = ""
	case "", EncodingGzip, EncodingZstd:
	default:
		return Descriptor{}, fmt.Errorf("ingest %s: %w: content-encoding %q (a blob is stored as it is, and only gzip and zstd are allowed, §2.3)", name, ErrInvalid, truncate(o.ContentEncoding))
	}
	f, err := os.CreateTemp(tmpDir, "pugfs-ingest-*")
	if err != nil {
		return Descriptor{}, fmt.Errorf("ingest %s: spill file: %w", name, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ingest %s: fetch: %w", name, err)
	}
	var d Digest
	copy(d[:], h.Sum(nil))
	if o.ContentEncoding != "" {
		head := make([]byte, 4)
		k, _ := f.ReadAt(head, 0)
		if Sniff(head[:k]) != o.ContentEncoding {
			o.ContentEncoding = ""
		}
	}
	if _, err := s.PutBlobFile(ctx, f, d, n, o); err != nil {
		return Descriptor{}, fmt.Errorf("ingest %s: %w", name, err)
	}
	desc := Descriptor{Digest: d, Size: n, ContentType: o.ContentType, ContentEncoding: o.ContentEncoding, CreatedAt: s.opts.Now().UTC()}
	if n <= InlineLimit {
		if desc.Data, err = io.ReadAll(io.NewSectionReader(f, 0, n)); err != nil {
			return Descriptor{}, fmt.Errorf("ingest %s: %w", name, err)
		}
	}
	return desc, nil
}

// SplitObjectURL splits scheme://bucket/path/key?query into the bucket URL
// (scheme://bucket?query) and the key. For file:///dir/key the last path
// element is the key and its directory the bucket.
func SplitObjectURL(uri string) (bucketURL, key string, err error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return "", "", fmt.Errorf("%w: object URL %q: want scheme://bucket/key", ErrInvalid, truncate(uri))
	}
	p := strings.TrimPrefix(u.Path, "/")
	if u.Scheme == "file" || strings.HasSuffix(u.Scheme, "+file") {
		i := strings.LastIndexByte(u.Path, '/')
		if i < 0 || i == len(u.Path)-1 {
			return "", "", fmt.Errorf("%w: object URL %q: no file name", ErrInvalid, truncate(uri))
		}
		key = u.Path[i+1:]
		u.Path = u.Path[:i]
		if u.Path == "" {
			u.Path = "/"
		}
		return u.String(), key, nil
	}
	if u.Host == "" || p == "" {
		return "", "", fmt.Errorf("%w: object URL %q: want scheme://bucket/key", ErrInvalid, truncate(uri))
	}
	u.Path = ""
	u.RawPath = ""
	return u.String(), p, nil
}

// now is the store's clock.
func (s *Store) now() time.Time { return s.opts.Now().UTC() }
