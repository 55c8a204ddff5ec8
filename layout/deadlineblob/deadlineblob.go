// Package deadlineblob wraps a gocloud *blob.Bucket so that no request to
// it can hang: every request gets a deadline of its own, per attempt, and
// one that passes it fails with a *TimeoutError naming the operation and
// the key (tree.md "Reading": a backend that stops answering gives EIO,
// never a hang).
//
// What is bounded, each by the same timeout:
//
//   - Attributes, a page of a listing, Copy, Delete, SignedURL: the whole
//     request.
//   - Opening a reader, and then every Read of its body on its own: a body
//     that stops arriving half-way fails after the timeout, while a large
//     body that keeps arriving may take as long as it needs.
//   - Opening a writer, every Write (which blocks while the upload of a
//     part is in flight) and the Close that commits the upload.
//
// A deadline is enforced by cancelling the context the inner request was
// given, which is how every gocloud driver stops an HTTP request and its
// body; a driver that ignored its context could still block.
//
// The wrapper does not retry. Retries live one layer up, in
// layout.Store.retry, which knows which requests are safe to repeat and how
// to settle a conditional create whose response was lost (commit.go's
// transaction IDs): retrying here as well would multiply the attempts of
// every request, and a repeated If-None-Match PUT whose first attempt had
// landed would turn a success into a spurious conflict below the layer
// that can tell them apart. The deadline is therefore per attempt, and
// the bound on a whole call is the store's attempts times the timeout
// plus its backoff.
//
// Errors of the inner bucket that are not timeouts are returned unchanged,
// so their gcerrors codes, ErrorAs and the inner driver's As types still
// work through the wrapper.
package deadlineblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// DefaultTimeout is the per-attempt deadline of a request when the caller
// does not choose one (pugfs mount --request-timeout).
const DefaultTimeout = 30 * time.Second

// defaultPageSize is the page size asked of the inner bucket when a
// caller of ListPaged leaves it to the driver.
const defaultPageSize = 1000

// Operation names in a TimeoutError.
const (
	OpHead   = "head"
	OpGet    = "get"  // opening a reader
	OpRead   = "read" // a Read of a reader's body
	OpList   = "list" // Key is the listing's prefix
	OpPut    = "put"  // opening a writer, a Write or its Close
	OpCopy   = "copy" // Key is the destination
	OpDelete = "delete"
	OpSign   = "sign"
)

// TimeoutError is the error of a request that did not finish within its
// deadline. It matches context.DeadlineExceeded under errors.Is (and so
// gcerrors.Code reports DeadlineExceeded); it deliberately does not
// unwrap to the inner error, which after a cancellation is usually
// context.Canceled and must not read as an interrupted call.
type TimeoutError struct {
	// Op is the request kind, one of the Op constants.
	Op string
	// Key is the object's key (a listing's prefix, a copy's destination).
	Key string
	// Timeout is the deadline that passed; 0 when the caller's own
	// context ran out first.
	Timeout time.Duration
	// Err is what the inner bucket returned when the request was cut
	// off, kept for the message.
	Err error
}

func (e *TimeoutError) Error() string {
	who := fmt.Sprintf("no answer within the request timeout of %v", e.Timeout)
	if e.Timeout == 0 {
		who = "no answer before the caller's deadline"
	}
	msg := fmt.Sprintf("%s %q: %s", e.Op, e.Key, who)
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// Wrap returns a bucket that forwards every request to inner with a
// deadline of timeout per request (see the package documentation); a
// timeout <= 0 means DefaultTimeout. Closing the returned bucket closes
// inner; its As defers to inner, so a fault injector or driver type below
// is still found.
func Wrap(inner *blob.Bucket, timeout time.Duration) *blob.Bucket {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return blob.NewBucket(&bucket{inner: inner, timeout: timeout})
}

// bucket implements driver.Bucket on top of a portable inner bucket, as
// layout/faultblob does: gocloud's portable type cannot be wrapped
// directly.
type bucket struct {
	inner   *blob.Bucket
	timeout time.Duration
}

var _ driver.Bucket = (*bucket)(nil)

// watch cancels a request's context when the timeout passes while it is
// armed. A reader arms it around every Read; a single request, once.
type watch struct {
	cancel context.CancelFunc
	d      time.Duration
	t      *time.Timer
	fired  atomic.Bool
}

// start returns an armed watch over a new context derived from ctx.
func start(ctx context.Context, d time.Duration) (context.Context, *watch) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{cancel: cancel, d: d}
	w.t = time.AfterFunc(d, func() {
		w.fired.Store(true)
		cancel()
	})
	return ctx, w
}

// arm restarts the countdown; it reports false when the watch has already
// fired (the context is cancelled for good).
func (w *watch) arm() bool {
	if w.fired.Load() {
		return false
	}
	w.t.Reset(w.d)
	return true
}

// disarm stops the countdown and reports whether it fired.
func (w *watch) disarm() bool {
	stopped := w.t.Stop()
	return !stopped || w.fired.Load()
}

// end disarms the watch and releases its context.
func (w *watch) end() {
	w.t.Stop()
	w.cancel()
}

// fail turns the error of a request into what the caller sees: a
// TimeoutError when our deadline (or the caller's) cut it off, the inner
// error unchanged otherwise.
func (b *bucket) fail(parent context.Context, fired bool, op, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case fired:
		return &TimeoutError{Op: op, Key: key, Timeout: b.timeout, Err: err}
	case errors.Is(parent.Err(), context.DeadlineExceeded):
		return &TimeoutError{Op: op, Key: key, Err: err}
	}
	return err
}

// do runs one request under a deadline.
func (b *bucket) do(ctx context.Context, op, key string, fn func(context.Context) error) error {
	rctx, w := start(ctx, b.timeout)
	err := fn(rctx)
	fired := w.disarm()
	w.end()
	return b.fail(ctx, fired, op, key, err)
}

// ErrorCode implements driver.Bucket. The portable bucket asks only about
// errors that carry no code of their own; a TimeoutError never reaches it
// (gocloud passes deadline errors through unwrapped).
func (b *bucket) ErrorCode(err error) gcerrors.ErrorCode {
	var te *TimeoutError
	if errors.As(err, &te) {
		return gcerrors.DeadlineExceeded
	}
	return gcerrors.Code(err)
}

// As implements driver.Bucket by deferring to the inner bucket.
func (b *bucket) As(i any) bool { return b.inner.As(i) }

// ErrorAs implements driver.Bucket by deferring to the inner bucket.
func (b *bucket) ErrorAs(err error, i any) bool { return b.inner.ErrorAs(err, i) }

// Attributes implements driver.Bucket.
func (b *bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	var a *blob.Attributes
	err := b.do(ctx, OpHead, key, func(ctx context.Context) error {
		var err error
		a, err = b.inner.Attributes(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{
		CacheControl:       a.CacheControl,
		ContentDisposition: a.ContentDisposition,
		ContentEncoding:    a.ContentEncoding,
		ContentLanguage:    a.ContentLanguage,
		ContentType:        a.ContentType,
		Metadata:           a.Metadata,
		CreateTime:         a.CreateTime,
		ModTime:            a.ModTime,
		Size:               a.Size,
		MD5:                a.MD5,
		ETag:               a.ETag,
		AsFunc:             a.As,
	}, nil
}

// ListPaged implements driver.Bucket: each page is one request.
func (b *bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	tok := opts.PageToken
	if len(tok) == 0 {
		tok = blob.FirstPageToken
	}
	size := opts.PageSize
	if size <= 0 {
		size = defaultPageSize
	}
	var objs []*blob.ListObject
	var next []byte
	err := b.do(ctx, OpList, opts.Prefix, func(ctx context.Context) error {
		var err error
		objs, next, err = b.inner.ListPage(ctx, tok, size, &blob.ListOptions{
			Prefix:     opts.Prefix,
			Delimiter:  opts.Delimiter,
			BeforeList: opts.BeforeList,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{Objects: make([]*driver.ListObject, len(objs)), NextPageToken: next}
	for i, o := range objs {
		page.Objects[i] = &driver.ListObject{
			Key:     o.Key,
			ModTime: o.ModTime,
			Size:    o.Size,
			MD5:     o.MD5,
			IsDir:   o.IsDir,
			AsFunc:  o.As,
		}
	}
	return page, nil
}

// NewRangeReader implements driver.Bucket. The opening is bounded by the
// timeout, and so is every Read of the body: the reader's context stays
// alive between Reads (drivers tie the body to it) and is cancelled when
// one Read waits longer than the timeout.
func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	rctx, w := start(ctx, b.timeout)
	r, err := b.inner.NewRangeReader(rctx, key, offset, length, &blob.ReaderOptions{BeforeRead: opts.BeforeRead})
	fired := w.disarm()
	if err != nil || fired {
		w.end()
		if r != nil {
			_ = r.Close()
		}
		if err == nil {
			// It answered, but only after the deadline had cancelled
			// the body it would be read from.
			err = context.DeadlineExceeded
		}
		return nil, b.fail(ctx, fired, OpGet, key, err)
	}
	return &reader{b: b, ctx: ctx, key: key, r: r, w: w, attrs: driver.ReaderAttributes{
		ContentType: r.ContentType(),
		ModTime:     r.ModTime(),
		Size:        r.Size(),
	}}, nil
}

type reader struct {
	b     *bucket
	ctx   context.Context // the caller's, to tell its deadline from ours
	key   string
	r     *blob.Reader
	w     *watch
	attrs driver.ReaderAttributes
}

func (r *reader) Read(p []byte) (int, error) {
	if !r.w.arm() {
		return 0, r.b.fail(r.ctx, true, OpRead, r.key, context.DeadlineExceeded)
	}
	n, err := r.r.Read(p)
	fired := r.w.disarm()
	if err == nil || err == io.EOF {
		// Bytes that arrived are good even if the deadline passed as
		// they did; the next Read reports it.
		return n, err
	}
	return n, r.b.fail(r.ctx, fired, OpRead, r.key, err)
}

func (r *reader) Close() error {
	r.w.end()
	return r.r.Close()
}

func (r *reader) Attributes() *driver.ReaderAttributes { return &r.attrs }
func (r *reader) As(i any) bool                        { return r.r.As(i) }

// NewTypedWriter implements driver.Bucket. Every option reaches the inner
// bucket unchanged (BeforeWrite and IfNotExist included). The writer's
// context lives until Close; each Write and the Close are bounded.
func (b *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	wctx, w := start(ctx, b.timeout)
	bw, err := b.inner.NewWriter(wctx, key, &blob.WriterOptions{
		BufferSize:                  opts.BufferSize,
		MaxConcurrency:              opts.MaxConcurrency,
		CacheControl:                opts.CacheControl,
		ContentDisposition:          opts.ContentDisposition,
		ContentEncoding:             opts.ContentEncoding,
		ContentLanguage:             opts.ContentLanguage,
		ContentType:                 contentType,
		DisableContentTypeDetection: opts.DisableContentTypeDetection,
		ContentMD5:                  opts.ContentMD5,
		Metadata:                    opts.Metadata,
		BeforeWrite:                 opts.BeforeWrite,
		IfNotExist:                  opts.IfNotExist,
	})
	fired := w.disarm()
	if err != nil || fired {
		w.end()
		if bw != nil {
			_ = bw.Close()
		}
		if err == nil {
			err = context.DeadlineExceeded
		}
		return nil, b.fail(ctx, fired, OpPut, key, err)
	}
	return &writer{b: b, ctx: ctx, key: key, w: bw, watch: w}, nil
}

type writer struct {
	b     *bucket
	ctx   context.Context
	key   string
	w     *blob.Writer
	watch *watch
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.watch.arm() {
		return 0, w.b.fail(w.ctx, true, OpPut, w.key, context.DeadlineExceeded)
	}
	n, err := w.w.Write(p)
	fired := w.watch.disarm()
	if err == nil && fired {
		// The upload's context is gone; what was accepted cannot land.
		err = context.DeadlineExceeded
	}
	return n, w.b.fail(w.ctx, fired, OpPut, w.key, err)
}

// Close commits the upload within the timeout. A Close cut off by the
// deadline may still have landed (the response is what was lost): callers
// of conditional creates settle that, as for any lost response.
func (w *writer) Close() error {
	defer w.watch.end()
	if !w.watch.arm() {
		_ = w.w.Close()
		return w.b.fail(w.ctx, true, OpPut, w.key, context.DeadlineExceeded)
	}
	err := w.w.Close()
	fired := w.watch.disarm()
	return w.b.fail(w.ctx, fired, OpPut, w.key, err)
}

// Copy implements driver.Bucket.
func (b *bucket) Copy(ctx context.Context, dstKey, srcKey string, opts *driver.CopyOptions) error {
	return b.do(ctx, OpCopy, dstKey, func(ctx context.Context) error {
		return b.inner.Copy(ctx, dstKey, srcKey, &blob.CopyOptions{BeforeCopy: opts.BeforeCopy})
	})
}

// Delete implements driver.Bucket.
func (b *bucket) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	return b.do(ctx, OpDelete, key, func(ctx context.Context) error {
		return b.inner.DeleteWithOptions(ctx, key, &blob.DeleteOptions{BeforeDelete: opts.BeforeDelete})
	})
}

// SignedURL implements driver.Bucket. Most drivers sign locally; those
// that ask a service (GCS with IAM signing) are bounded like any request.
func (b *bucket) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	var u string
	err := b.do(ctx, OpSign, key, func(ctx context.Context) error {
		var err error
		u, err = b.inner.SignedURL(ctx, key, &blob.SignedURLOptions{
			Expiry:                   opts.Expiry,
			Method:                   opts.Method,
			ContentType:              opts.ContentType,
			EnforceAbsentContentType: opts.EnforceAbsentContentType,
			BeforeSign:               opts.BeforeSign,
		})
		return err
	})
	return u, err
}

// Close implements driver.Bucket by closing the inner bucket.
func (b *bucket) Close() error { return b.inner.Close() }
