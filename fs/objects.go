package fs

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// objectsDir is objects/sha256:<hex>: every blob, raw bytes.
type objectsDir struct{ f *FS }

func (o *objectsDir) list(ctx context.Context) ([]child, error) {
	var out []child
	var listed []layout.Descriptor
	err := o.f.store.ListBlobs(ctx, func(d layout.Digest, size int64) bool {
		out = append(out, o.f.objectChild(d, size))
		listed = append(listed, layout.Descriptor{Digest: d, Size: size})
		return true
	}, nil)
	if err == nil {
		o.f.objAhead.listed(listed)
	}
	return out, err
}

// objectsAhead reads the blobs of objects/ ahead of a program that
// reads them in the order they are listed (cat objects/*, cp -r, tar c,
// sha256sum: a glob's order is the listing's): 200 blobs 20 ms away took
// 6.4 s one GET after another, where the same bodies read through a
// session are fetched ahead (audit 3). A read of a blob at offset 0
// extends the window to the next objectsAheadN blobs of the last
// listing; one read alone costs objectsAheadN speculative GETs at most.
type objectsAhead struct {
	mu sync.Mutex
	// list is the last listing of objects/, in name order; next is the
	// index up to which its blobs were read ahead. GUARDED_BY(mu).
	list []layout.Descriptor
	next int
}

// objectsAheadN is how many blobs objectsAhead keeps read ahead.
const objectsAheadN = 32

func (a *objectsAhead) listed(ds []layout.Descriptor) {
	a.mu.Lock()
	a.list, a.next = ds, 0
	a.mu.Unlock()
}

// read notes a read of blob d from its start, and reads the ones after
// it in the listing ahead.
func (a *objectsAhead) read(f *FS, d layout.Digest) {
	a.mu.Lock()
	i, found := slices.BinarySearchFunc(a.list, d.String(), func(e layout.Descriptor, name string) int {
		return strings.Compare(e.Digest.String(), name)
	})
	if !found {
		a.mu.Unlock()
		return
	}
	from, to := max(i+1, a.next), min(len(a.list), i+1+objectsAheadN)
	if from >= to {
		a.mu.Unlock()
		return
	}
	todo := slices.Clone(a.list[from:to])
	a.next = to
	a.mu.Unlock()
	for _, d := range todo {
		go f.blobs.Prefetch(context.Background(), &d) // speculative; its reader reports errors
	}
}

func (o *objectsDir) find(ctx context.Context, name string) (child, error) {
	d, err := layout.ParseBlobKey(layout.ObjectsPrefix + name)
	if err != nil {
		return child{}, syscall.ENOENT
	}
	size, err := o.f.store.BlobSize(ctx, d)
	if err != nil {
		return child{}, err
	}
	return o.f.objectChild(d, size), nil
}

func (o *objectsDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

func (f *FS) objectChild(d layout.Digest, size int64) child {
	return f.privateRead(child{name: d.String(), mode: syscall.S_IFREG, ino: inoOf("object", d.Hex()), ttl: historyTTL,
		node: func() gofsNode {
			return &fileNode{f: f, c: &rawContent{f: f, d: d, n: size}, x: func() map[string]string {
				return map[string]string{"user.pugmark.digest": d.String()}
			}}
		}})
}

// rawContent is a blob's stored bytes, verified, not decoded.
type rawContent struct {
	f *FS
	d layout.Digest
	n int64
}

func (r *rawContent) size(ctx context.Context) (int64, error) { return r.n, nil }

func (r *rawContent) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	r.started(off)
	n, err := r.f.blobs.ReadRawAt(ctx, r.d, r.n, p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// started notes a read at off (a copy's too, pinned.go): one from the
// start reads the next blobs of objects/ ahead.
func (r *rawContent) started(off int64) {
	if off == 0 {
		r.f.objAhead.read(r.f, r.d)
	}
}

func (r *rawContent) mtime() time.Time { return time.Time{} }

func (r *rawContent) immutable() bool { return true }
