package fs

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// objectsDir is objects/sha256:<hex>: every blob, raw bytes.
type objectsDir struct{ f *FS }

func (o *objectsDir) list(ctx context.Context) ([]child, error) {
	var out []child
	var listed []aheadItem
	err := o.f.store.ListBlobs(ctx, func(d layout.Digest, size int64) bool {
		out = append(out, o.f.objectChild(d, size))
		listed = append(listed, aheadItem{d.String(), layout.Descriptor{Digest: d, Size: size}})
		return true
	}, nil)
	if err == nil {
		o.f.objAhead.listed(listed)
	}
	return out, err
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

// dirAttr closes objects/ to other users of a shared mount: its files
// are the owner's (privateRead), and a lookup of a name still told any
// user whether a guessed content is stored (audit 14: a 4-digit PIN in
// a file of mode 0600 found in 11 stats).
func (o *objectsDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	o.f.privateDir(out)
	return nil
}

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
		r.f.objAhead.read(r.f, r.d.String())
	}
}

func (r *rawContent) mtime() time.Time { return time.Time{} }

func (r *rawContent) immutable() bool { return true }
