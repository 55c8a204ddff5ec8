// Package gcsfix adapts gocloud's GCS buckets to the layout: bounded
// retries (the layout store and a mount's per-request deadline do their
// own), and reads of the bytes an object stores, never a decompressed
// copy of them.
package gcsfix

import (
	"context"

	"cloud.google.com/go/storage"
	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
)

// attempts bounds the tries of one GCS request. The storage client
// retries an idempotent request until its context ends; a deadline per
// attempt and the layout store's own retries are pugfs's (a mount's
// --request-timeout), so, unbounded, an endpoint refusing connections
// held every request for the whole deadline, five times over, and a
// command without a deadline forever.
const attempts = 3

// Wrap returns b as pugfs needs a GCS bucket (also one behind a fault
// injector, whose As defers to it): its requests tried at most
// attempts times, and reads of the stored bytes (stored). Any other
// bucket is returned as it is.
func Wrap(b *blob.Bucket) *blob.Bucket {
	var c *storage.Client
	if !b.As(&c) || c == nil {
		return b
	}
	c.SetRetry(storage.WithMaxAttempts(attempts))
	return blob.NewBucket(stored{blobwrap.Portable(b)})
}

// stored reads the bytes an object holds. An object stored with
// Content-Encoding: gzip (§15 requires the header on every encoded body)
// is otherwise decompressed by GCS on the way out (decompressive
// transcoding), so its bytes never match the blob's digest and every read
// of it failed as corrupt; the layout decodes bodies itself.
type stored struct{ driver.Bucket }

// NewRangeReader implements driver.Bucket, asking for the stored bytes
// (ObjectHandle.ReadCompressed) before any BeforeRead of the caller.
func (g stored) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	o := driver.ReaderOptions{}
	if opts != nil {
		o = *opts
	}
	before := o.BeforeRead
	o.BeforeRead = func(as func(any) bool) error {
		var objp **storage.ObjectHandle
		if as(&objp) && objp != nil && *objp != nil {
			*objp = (*objp).ReadCompressed(true)
		}
		if before != nil {
			return before(as)
		}
		return nil
	}
	return g.Bucket.NewRangeReader(ctx, key, offset, length, &o)
}

// NewTypedWriter implements driver.Bucket: the upload is never retried
// by the storage client, which ignores attempts for uploads and retried a
// conditional one (every commit and blob PUT) until its context ended;
// the layout store retries it. The handle is replaced before the
// caller's BeforeWrite, which may ask for the writer made from it.
func (g stored) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	o := driver.WriterOptions{}
	if opts != nil {
		o = *opts
	}
	before := o.BeforeWrite
	o.BeforeWrite = func(as func(any) bool) error {
		var objp **storage.ObjectHandle
		if as(&objp) && objp != nil && *objp != nil {
			*objp = (*objp).Retryer(storage.WithPolicy(storage.RetryNever))
		}
		if before != nil {
			return before(as)
		}
		return nil
	}
	return g.Bucket.NewTypedWriter(ctx, key, contentType, &o)
}
