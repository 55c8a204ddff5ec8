package blobcache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/blobwrap"
)

// attrCountingBucket is a driver whose readers count the calls of
// Attributes: localblob loads an object's metadata (fgetxattr and a JSON
// decode, or a sidecar file read) only then (blobwrap/portable.go).
type attrCountingBucket struct {
	driver.Bucket
	attrs atomic.Int64
}

func (b *attrCountingBucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	r, err := b.Bucket.NewRangeReader(ctx, key, offset, length, opts)
	if err != nil {
		return nil, err
	}
	return &attrCountingReader{Reader: r, n: &b.attrs}, nil
}

type attrCountingReader struct {
	driver.Reader
	n *atomic.Int64
}

func (r *attrCountingReader) Attributes() *driver.ReaderAttributes {
	r.n.Add(1)
	return r.Reader.Attributes()
}

// TestBlobOpenReadsNoAttributes: a blob read asks its reader for the
// stored length only when storedEnd needs it. On the local driver a
// reader's attributes are loaded only when asked (an fgetxattr and a
// JSON decode, or a sidecar file read), and asking at every open made
// each chunk fetch and each small blob of a cold grep -r pay for
// metadata nobody read (review 28).
func TestBlobOpenReadsNoAttributes(t *testing.T) {
	ctx := context.Background()
	drv := &attrCountingBucket{Bucket: blobwrap.Portable(memblob.OpenBucket(nil))}
	s := layout.New(blob.NewBucket(drv), nil)
	var ds []*layout.Descriptor
	for i := range 20 {
		body := blobTestBody(3000+i, uint64(i+1))
		bi, err := s.PutBlobBytes(ctx, body, layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, &layout.Descriptor{Name: "f", Digest: bi.Digest, Size: int64(len(body))})
	}
	c := newTestBlobCache(t, s, Options{})
	before := drv.attrs.Load()
	for _, d := range ds {
		if _, err := readAll(ctx, c, d, 4096); err != nil {
			t.Fatal(err)
		}
	}
	if n := drv.attrs.Load() - before; n != 0 {
		t.Fatalf("reading %d small blobs (below endProbeFrom: no size check) loaded the readers' attributes %d times; want 0", len(ds), n)
	}
}

// TestBlobSizeStoredEndSniffOneRead: with --sniff-encoding, the first
// stat of a large text-declared plain body reads the bucket once: the
// sniff probe's answer carries the stored length, and storedEnd asked
// again (review 28).
func TestBlobSizeStoredEndSniffOneRead(t *testing.T) {
	ctx := context.Background()
	s, dgs := storeWith(t, blobTestText(300))
	c := newTestBlobCache(t, s, Options{SniffEncoding: true})
	c.endFrom = 100
	d := layout.Descriptor{Name: "log.txt", Digest: dgs[0], Size: 300, ContentType: "text/plain"}
	before := c.Stats().BackendReads
	if got, err := c.Size(ctx, &d); err != nil || got != 300 {
		t.Fatalf("Size = %d, %v", got, err)
	}
	if n := c.Stats().BackendReads - before; n != 1 {
		t.Fatalf("first stat of a large plain body with sniffing read the bucket %d times; the probe's answer carries the stored length, want 1", n)
	}
}

// TestBlobAdoptOffsetMoved: AdoptStored copies from an *os.File
// whose offset was moved by the upload (PutBlobFile reads it through
// Read), as a spill file's is; the copy must start at byte 0 and be
// served verified, without a backend read.
func TestBlobAdoptOffsetMoved(t *testing.T) {
	ctx := context.Background()
	body := blobTestBody(200<<10, 9)
	src := newFakeBlobSource()
	dg := src.put(body)
	staged := filepath.Join(t.TempDir(), "spill")
	if err := os.WriteFile(staged, append(bytes.Clone(body), []byte("tail past the size")...), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(staged, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(12345, 0); err != nil {
		t.Fatal(err)
	}
	c := newTestBlobCache(t, src, diskOpts(t.TempDir()))
	c.AdoptStored(dg, int64(len(body)), f)
	if c.Stats().Adopted != 1 {
		t.Fatalf("adopted %d", c.Stats().Adopted)
	}
	if off, _ := f.Seek(0, 1); off != 12345 {
		t.Errorf("AdoptStored moved the staged file's offset to %d", off)
	}
	src.set(func(s *fakeBlobSource) {
		s.fail = func(layout.Digest) error { return errors.New("backend must not be used") }
	})
	d := &layout.Descriptor{Name: "f", Digest: dg, Size: int64(len(body))}
	got, err := readAll(ctx, c, d, 5000)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	if n, _ := c.disk.usage(); n < int64(len(body)) {
		t.Errorf("disk tier accounts %d bytes, want at least %d", n, len(body))
	}
	c.disk.mu.Lock()
	w := c.disk.writing
	c.disk.mu.Unlock()
	if w != 0 {
		t.Errorf("disk tier reservations left: %d", w)
	}
}

// TestBlobSizeStoredEndDiskCopy: a body the disk tier holds at exactly
// the claimed size (kept by an earlier mount, or adopted from the
// mount's own upload) proves the stored length: the first stat of such a
// large file asks the bucket nothing. It cost a ranged read, and with
// the bucket down every stat waited for the store's retries (review 28).
func TestBlobSizeStoredEndDiskCopy(t *testing.T) {
	ctx := context.Background()
	body := blobTestBody(200<<10, 11)
	const endFrom = 100 << 10
	t.Run("kept by an earlier mount", func(t *testing.T) {
		dir := t.TempDir()
		src := newFakeBlobSource()
		dg := src.put(body)
		d := layout.Descriptor{Name: "a.bin", Digest: dg, Size: int64(len(body)), ContentType: "application/octet-stream"}
		opts := diskOpts(dir)
		opts.SniffEncoding = false
		c1 := newTestBlobCache(t, src, opts)
		if got, err := readAll(ctx, c1, &d, 64<<10); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
		c1.Close()
		src.set(func(s *fakeBlobSource) {
			s.fail = func(layout.Digest) error { return errors.New("bucket unreachable (transient)") }
		})
		c2 := newTestBlobCache(t, src, opts)
		c2.endFrom = endFrom
		known := c2.SizeKnown(&d)
		before := c2.Stats().BackendReads
		if got, err := c2.Size(ctx, &d); err != nil || got != d.Size {
			t.Fatalf("Size = %d, %v", got, err)
		}
		if n := c2.Stats().BackendReads - before; n != 0 || !known {
			t.Fatalf("stat of a body the disk tier holds at its size: SizeKnown %v, %d backend reads; want true, 0", known, n)
		}
	})
	t.Run("adopted from the mount's upload", func(t *testing.T) {
		src := newFakeBlobSource()
		dg := src.put(body)
		d := layout.Descriptor{Name: "a.bin", Digest: dg, Size: int64(len(body)), ContentType: "application/octet-stream"}
		staged := filepath.Join(t.TempDir(), "spill")
		if err := os.WriteFile(staged, body, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(staged)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		opts := diskOpts(t.TempDir())
		opts.SniffEncoding = false
		c := newTestBlobCache(t, src, opts)
		c.endFrom = endFrom
		c.AdoptStored(dg, d.Size, f)
		before := c.Stats().BackendReads
		if got, err := c.Size(ctx, &d); err != nil || got != d.Size {
			t.Fatalf("Size = %d, %v", got, err)
		}
		if n := c.Stats().BackendReads - before; n != 0 {
			t.Fatalf("stat of the mount's own just-uploaded large file read the bucket %d times; want 0", n)
		}
	})
}
