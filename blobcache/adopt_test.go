package blobcache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestBlobAdoptStored: a body this process stored, adopted from the file
// it was uploaded from, is read back from the disk tier with no backend
// read, verified as any entry (audit 23: a file just written through a
// GCS mount was fetched whole again by the md5sum that checked it). A
// file whose bytes are not the digest's is caught at the first read, and
// the body comes from the bucket.
func TestBlobAdoptStored(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		size    int
		tamper  bool // the adopted file is not the body
		fetched bool // the read goes to the backend
	}{
		{"small", 3 << 10, false, false},
		{"several chunks", 100 << 10, false, false},
		{"a file that is not the body", 100 << 10, true, true},
		// Read from its descriptor's inline data, never from a blob.
		{"small enough to be inline", layout.InlineLimit, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := blobTestBody(tc.size, 7)
			src := newFakeBlobSource()
			dg := src.put(body)
			staged := filepath.Join(t.TempDir(), "spill")
			adopted := bytes.Clone(body)
			if tc.tamper {
				adopted[len(adopted)/2] ^= 1
			}
			if err := os.WriteFile(staged, adopted, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(staged)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c := newTestBlobCache(t, src, diskOpts(t.TempDir()))
			c.AdoptStored(dg, int64(tc.size), f)
			want := int64(1)
			if tc.size <= layout.InlineLimit {
				want = 0
			}
			if got := c.Stats().Adopted; got != want {
				t.Fatalf("adopted %d bodies, want %d", got, want)
			}
			if !tc.fetched {
				src.set(func(s *fakeBlobSource) {
					s.fail = func(layout.Digest) error { return errors.New("backend must not be used") }
				})
			}
			d := &layout.Descriptor{Name: "f", Digest: dg, Size: int64(tc.size)}
			got, err := readAll(ctx, c, d, 5000)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("read back %d bytes, %v", len(got), err)
			}
			if reads := src.reads.Load(); (reads > 0) != tc.fetched {
				t.Fatalf("%d backend reads, want fetched=%v", reads, tc.fetched)
			}
		})
	}
}

// TestBlobPinnedCopyCutShort: a verified copy cut short under a running
// mount is not pinned again (a READ pins): spliced, it was a short read
// with no error, and cat got 1,000 bytes of a file stat said had 204,800
// (audit 25). The read goes to the chunks, checked against their proofs,
// and gets the whole body from the bucket.
func TestBlobPinnedCopyCutShort(t *testing.T) {
	ctx := context.Background()
	body := blobTestBody(200<<10, 3)
	src := newFakeBlobSource()
	dg := src.put(body)
	dir := t.TempDir()
	opts := diskOpts(dir)
	opts.SniffEncoding = false // else a plain body may be encoded, and is not pinned
	c := newTestBlobCache(t, src, opts)
	d := &layout.Descriptor{Name: "f", Digest: dg, Size: int64(len(body))}
	p, err := c.Pin(ctx, d)
	if err != nil || p == nil {
		t.Fatalf("pin: %v, %v", p, err)
	}
	p.Release()
	h := dg.Hex()
	if err := os.Truncate(filepath.Join(dir, diskSubdir, diskData, h[:2], h), 1000); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Pin(ctx, d); err != nil || p != nil {
		t.Fatalf("pinned a copy cut short: %v, %v", p, err)
	}
	got, err := readAll(ctx, c, d, 64<<10)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes of %d, %v", len(got), len(body), err)
	}
}
