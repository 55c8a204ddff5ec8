// Package blobwrap holds the one implementation of gocloud's driver.Bucket
// over a portable *blob.Bucket that the bucket decorators of pugfs share
// (layout/deadlineblob, layout/faultblob, layout/schedblob,
// layout/logblob). gocloud's portable type cannot be wrapped directly: a
// decorator has to be a driver, converting every option, attribute and
// listing page back and forth. That conversion is written here once; a
// decorator supplies Hooks, which see every request as a call it may run,
// delay, refuse or time, and embeds *Bucket to change the few methods that
// are really its own (faultblob's listings, the As of each).
//
// What a decorator sees:
//
//   - Attributes (OpHead), a page of a listing (OpList, the key is the
//     prefix), Copy (OpCopy, the key is the destination), Delete
//     (OpDelete) and SignedURL (OpSign) are one Hooks.Request each.
//   - A reader (OpGet) and a writer (OpPut) are a Hooks.Stream: its
//     opening, every Read or Write of the body and the Close are each a
//     Stream.Step, and End is called once when the stream is over.
//
// Errors of the inner bucket pass through unchanged, so their gcerrors
// codes, ErrorAs and the inner driver's As types still work through any
// number of decorators.
package blobwrap

import (
	"context"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// Op is the kind of a request, as decorators name it in errors and logs.
type Op string

// The request kinds.
const (
	OpHead   Op = "head"
	OpGet    Op = "get" // a reader: its opening, its Reads, its Close
	OpList   Op = "list"
	OpPut    Op = "put" // a writer: its opening, its Writes, its Close
	OpCopy   Op = "copy"
	OpDelete Op = "delete"
	OpSign   Op = "sign"
)

// Step is one part of a stream's life.
type Step int

// The steps of a stream, in the order they come.
const (
	// StepOpen opens the inner reader or writer.
	StepOpen Step = iota
	// StepBody is one Read or one Write of the body.
	StepBody
	// StepClose closes the inner reader, or commits the upload.
	StepClose
)

// Hooks is what a decorator adds to every request.
type Hooks interface {
	// Request runs one whole request on key; call issues it to the inner
	// bucket under the context it is given.
	Request(ctx context.Context, op Op, key string, call func(context.Context) error) error
	// Stream begins a reader (OpGet) or a writer (OpPut) on key. The
	// inner reader or writer is opened with the returned context, which
	// must stay alive until End (drivers tie the body to it); an error
	// fails the opening without reaching the inner bucket.
	Stream(ctx context.Context, op Op, key string) (context.Context, Stream, error)
}

// Stream is the life of one reader or writer.
type Stream interface {
	// Step runs one step; call does it on the inner reader or writer
	// and its error (io.EOF at the end of a body included) is what Step
	// sees. Step returns what the caller gets.
	Step(step Step, call func() error) error
	// End is called once, after Close or after the opening failed; the
	// inner reader or writer is closed right after it when the opening
	// failed, so a cancelled context aborts an upload.
	End()
}

// PassThrough is Hooks that add nothing: each call goes to the inner
// bucket as it comes. For a driver that embeds a Bucket to replace some of
// its methods and leave the rest as they are.
type PassThrough struct{}

// Request makes the call.
func (PassThrough) Request(ctx context.Context, _ Op, _ string, call func(context.Context) error) error {
	return call(ctx)
}

// Stream begins a stream whose steps are the calls.
func (PassThrough) Stream(ctx context.Context, _ Op, _ string) (context.Context, Stream, error) {
	return ctx, passStream{}, nil
}

type passStream struct{}

func (passStream) Step(_ Step, call func() error) error { return call() }
func (passStream) End()                                 {}

// Counter is a Stream that wants to know how many bytes each body step
// moved (a logger's line, say).
type Counter interface {
	Stream
	// Count is called after every Read or Write with the bytes it moved.
	Count(n int)
}

// Bucket implements driver.Bucket over a portable inner bucket, running
// every request through Hooks. Decorators wrap it with blob.NewBucket, or
// embed it to replace methods of their own.
type Bucket struct {
	inner *blob.Bucket
	h     Hooks
}

var _ driver.Bucket = (*Bucket)(nil)

// New returns a driver over inner whose requests go through h.
func New(inner *blob.Bucket, h Hooks) *Bucket { return &Bucket{inner: inner, h: h} }

// Wrap is blob.NewBucket(New(inner, h)).
func Wrap(inner *blob.Bucket, h Hooks) *blob.Bucket { return blob.NewBucket(New(inner, h)) }

// Inner returns the wrapped bucket.
func (b *Bucket) Inner() *blob.Bucket { return b.inner }

// ErrorCode implements driver.Bucket. The portable bucket asks only about
// errors without a code of their own; a decorator with errors of its own
// replaces it.
func (b *Bucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }

// As implements driver.Bucket by deferring to the inner bucket.
func (b *Bucket) As(i any) bool { return b.inner.As(i) }

// ErrorAs implements driver.Bucket by deferring to the inner bucket.
func (b *Bucket) ErrorAs(err error, i any) bool { return b.inner.ErrorAs(err, i) }

// Close implements driver.Bucket by closing the inner bucket.
func (b *Bucket) Close() error { return b.inner.Close() }

// Attributes implements driver.Bucket (OpHead).
func (b *Bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	var a *blob.Attributes
	err := b.h.Request(ctx, OpHead, key, func(ctx context.Context) error {
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

// DefaultPageSize is the page size asked of the inner bucket when a
// caller of ListPaged leaves it to the driver.
const DefaultPageSize = 1000

// ListPaged implements driver.Bucket (OpList): each page is one request.
func (b *Bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	var page *driver.ListPage
	err := b.h.Request(ctx, OpList, opts.Prefix, func(ctx context.Context) error {
		var err error
		page, err = ListPage(ctx, b.inner, opts)
		return err
	})
	return page, err
}

// ListPage reads the page opts asks for from a portable bucket, as a
// driver's page: the conversion a decorator that lists in its own way
// (faultblob's stale listings) still needs.
func ListPage(ctx context.Context, inner *blob.Bucket, opts *driver.ListOptions) (*driver.ListPage, error) {
	tok := opts.PageToken
	if len(tok) == 0 {
		tok = blob.FirstPageToken
	}
	size := opts.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	objs, next, err := inner.ListPage(ctx, tok, size, &blob.ListOptions{
		Prefix:     opts.Prefix,
		Delimiter:  opts.Delimiter,
		BeforeList: opts.BeforeList,
	})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{Objects: make([]*driver.ListObject, len(objs)), NextPageToken: next}
	for i, o := range objs {
		page.Objects[i] = ListObject(o)
	}
	return page, nil
}

// ListObject converts a portable listing entry to a driver's.
func ListObject(o *blob.ListObject) *driver.ListObject {
	return &driver.ListObject{
		Key:     o.Key,
		ModTime: o.ModTime,
		Size:    o.Size,
		MD5:     o.MD5,
		IsDir:   o.IsDir,
		AsFunc:  o.As,
	}
}

// NewRangeReader implements driver.Bucket (a Stream of OpGet).
func (b *Bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	sctx, s, err := b.h.Stream(ctx, OpGet, key)
	if err != nil {
		return nil, err
	}
	var r *blob.Reader
	err = s.Step(StepOpen, func() error {
		var err error
		r, err = b.inner.NewRangeReader(sctx, key, offset, length, &blob.ReaderOptions{BeforeRead: opts.BeforeRead})
		return err
	})
	if err != nil {
		s.End()
		if r != nil {
			_ = r.Close()
		}
		return nil, err
	}
	return &reader{r: r, s: s}, nil
}

type reader struct {
	r   *blob.Reader
	s   Stream
	end sync.Once
	// attrsOnce fills attrs from r when first asked: a reader of the body
	// alone never asks, and some drivers (localblob) read the metadata
	// only then.
	attrsOnce sync.Once
	attrs     driver.ReaderAttributes
}

func (r *reader) Read(p []byte) (int, error) {
	var n int
	err := r.s.Step(StepBody, func() error {
		var err error
		n, err = r.r.Read(p)
		return err
	})
	if c, ok := r.s.(Counter); ok {
		c.Count(n)
	}
	return n, err
}

func (r *reader) Close() error {
	err := r.s.Step(StepClose, r.r.Close)
	r.end.Do(r.s.End)
	return err
}

func (r *reader) Attributes() *driver.ReaderAttributes {
	r.attrsOnce.Do(func() {
		r.attrs = driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
	})
	return &r.attrs
}

func (r *reader) As(i any) bool { return r.r.As(i) }

// NewTypedWriter implements driver.Bucket (a Stream of OpPut). Every
// option reaches the inner bucket unchanged, BeforeWrite and IfNotExist
// included, so driver-specific conditions (an S3 If-Match set through
// BeforeWrite) still apply.
func (b *Bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	sctx, s, err := b.h.Stream(ctx, OpPut, key)
	if err != nil {
		return nil, err
	}
	var w *blob.Writer
	err = s.Step(StepOpen, func() error {
		var err error
		w, err = b.inner.NewWriter(sctx, key, &blob.WriterOptions{
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
		return err
	})
	if err != nil {
		// End first: a stream whose context it cancels makes the Close
		// below an abort, so nothing half-opened is committed.
		s.End()
		if w != nil {
			_ = w.Close()
		}
		return nil, err
	}
	return &writer{w: w, s: s}, nil
}

type writer struct {
	w   *blob.Writer
	s   Stream
	end sync.Once
}

func (w *writer) Write(p []byte) (int, error) {
	var n int
	err := w.s.Step(StepBody, func() error {
		var err error
		n, err = w.w.Write(p)
		return err
	})
	if c, ok := w.s.(Counter); ok {
		c.Count(n)
	}
	return n, err
}

func (w *writer) Close() error {
	err := w.s.Step(StepClose, w.w.Close)
	w.end.Do(w.s.End)
	return err
}

// Copy implements driver.Bucket (OpCopy, on the destination key).
func (b *Bucket) Copy(ctx context.Context, dstKey, srcKey string, opts *driver.CopyOptions) error {
	return b.h.Request(ctx, OpCopy, dstKey, func(ctx context.Context) error {
		return b.inner.Copy(ctx, dstKey, srcKey, &blob.CopyOptions{BeforeCopy: opts.BeforeCopy})
	})
}

// Delete implements driver.Bucket (OpDelete).
func (b *Bucket) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	return b.h.Request(ctx, OpDelete, key, func(ctx context.Context) error {
		return b.inner.DeleteWithOptions(ctx, key, &blob.DeleteOptions{BeforeDelete: opts.BeforeDelete})
	})
}

// SignedURL implements driver.Bucket (OpSign). Most drivers sign locally;
// those that ask a service (GCS with IAM signing) make it a request.
func (b *Bucket) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	var u string
	err := b.h.Request(ctx, OpSign, key, func(ctx context.Context) error {
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

// Passthrough is Hooks that add nothing: a decorator that changes only
// some requests embeds it.
type Passthrough struct{}

// Request implements Hooks by running call.
func (Passthrough) Request(ctx context.Context, _ Op, _ string, call func(context.Context) error) error {
	return call(ctx)
}

// Stream implements Hooks with a stream that runs every step as it is.
func (Passthrough) Stream(ctx context.Context, _ Op, _ string) (context.Context, Stream, error) {
	return ctx, plainStream{}, nil
}

type plainStream struct{}

func (plainStream) Step(_ Step, call func() error) error { return call() }
func (plainStream) End()                                 {}
