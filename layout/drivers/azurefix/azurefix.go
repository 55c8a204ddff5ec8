// Package azurefix works around a crash in gocloud.dev/blob/azureblob
// (v0.47.0): when an upload written through Writer.Write fails after the
// writer's Close has begun (a create-if-absent that lost a race, a stale
// If-Match, a refused checksum, a dropped connection), the driver's upload
// goroutine sets its pipe reader to nil and Close then calls Close on that
// nil reader: a nil-pointer panic in whoever closed the writer. Every
// conditional write pugfs makes on Azure can fail that way, so one lost
// commit race would take a mount down.
//
// The driver's other path, Upload (an io.Reader handed over whole), does
// not touch the pipe. [Wrap] returns a bucket whose writers feed the
// inner bucket's Upload from a pipe of their own, so no write ever reaches
// the broken path. gocloud's portable ContentMD5 would send an Upload back
// to the Write path, so it is not passed on: the outer *blob.Writer
// already compares it with the bytes written before it lets the driver's
// Close end the body (and cancels the upload on a mismatch), and the
// wrapper puts it into the upload's Content-MD5 header itself, which is
// what the driver would have done with it.
package azurefix

import (
	"context"
	"io"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"

	"github.com/pugmark/pugfs/layout/blobwrap"
)

// Wrap returns b itself unless it is an azureblob bucket not wrapped yet
// (below any decorators), and for one a bucket that writes through the
// driver's Upload path. Everything else (reads, listings, As, errors)
// passes through unchanged.
func Wrap(b *blob.Bucket) *blob.Bucket {
	var c *container.Client
	var fixed *bucket
	if !b.As(&c) || b.As(&fixed) {
		return b
	}
	return blob.NewBucket(&bucket{Bucket: blobwrap.New(b, blobwrap.PassThrough{}), inner: b})
}

type bucket struct {
	*blobwrap.Bucket
	inner *blob.Bucket
}

// As answers **bucket with b itself, so that Wrap can tell a bucket it
// wrapped already; anything else is the inner bucket's.
func (b *bucket) As(i any) bool {
	if p, ok := i.(**bucket); ok {
		*p = b
		return true
	}
	return b.Bucket.As(i)
}

// NewTypedWriter starts the inner Upload on a pipe that Write feeds.
func (b *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	sum := opts.ContentMD5
	before := opts.BeforeWrite
	wo := blobwrap.WriterOptions(opts, contentType)
	// The MD5 goes in the upload's headers below, not through gocloud.
	wo.ContentMD5 = nil
	wo.BeforeWrite = func(as func(any) bool) error {
		if before != nil {
			if err := before(as); err != nil {
				return err
			}
		}
		var o *azblob.UploadStreamOptions
		if len(sum) > 0 && as(&o) && o != nil && o.HTTPHeaders != nil && len(o.HTTPHeaders.BlobContentMD5) == 0 {
			o.HTTPHeaders.BlobContentMD5 = sum
		}
		return nil
	}
	if wo.ContentType == "" {
		// Upload insists on one; the driver was given none to sniff.
		wo.ContentType = "application/octet-stream"
	}
	pr, pw := io.Pipe()
	w := &writer{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = b.inner.Upload(ctx, key, pr, wo)
		// Unblock a Write still waiting on an upload that gave up.
		pr.CloseWithError(errOr(w.err, io.ErrClosedPipe))
	}()
	return w, nil
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

type writer struct {
	pw   *io.PipeWriter
	done chan struct{}
	err  error // set before done is closed
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.pw.Write(p)
	if err != nil {
		<-w.done
		return n, errOr(w.err, err)
	}
	return n, nil
}

// Close ends the body and waits for the upload's outcome.
func (w *writer) Close() error {
	w.pw.Close()
	<-w.done
	return w.err
}
