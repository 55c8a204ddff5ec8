// Package blobwrap holds the one implementation of gocloud's driver.Bucket
// that the bucket decorators of pugfs share (layout/deadlineblob,
// layout/faultblob, layout/schedblob, layout/logblob). gocloud's portable
// type cannot be wrapped directly: a decorator has to be a driver. Portable
// turns a portable *blob.Bucket into a driver, converting every option,
// attribute and listing page back and forth, once, at the bottom of a
// stack; Bucket runs a driver's requests through Hooks, which see every
// request as a call they may run, delay, refuse or time. A decorator
// supplies Hooks and embeds *Bucket to change the few methods that are
// really its own (faultblob's listings, the As of each); decorators stack
// as drivers (Over), under a single portable bucket.
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

// Bucket implements driver.Bucket over another driver, running every
// request through Hooks. Decorators wrap it with blob.NewBucket, or embed
// it to replace methods of their own.
//
// Decorators stack as drivers (Over) under one portable bucket: each
// portable layer gocloud adds costs a trace span, a latency metric and
// its own conversions per request, and a mount of a local bucket that
// stacked its deadline and scheduler as portable buckets spent a sixth of
// a cold grep -r's CPU in the two layers.
type Bucket struct {
	next driver.Bucket
	h    Hooks
}

var _ driver.Bucket = (*Bucket)(nil)

// New returns a driver over the portable bucket inner whose requests go
// through h.
func New(inner *blob.Bucket, h Hooks) *Bucket { return Over(Portable(inner), h) }

// Over returns a driver over the driver next whose requests go through
// h: how decorators stack without a portable bucket between them.
func Over(next driver.Bucket, h Hooks) *Bucket { return &Bucket{next: next, h: h} }

// Wrap is blob.NewBucket(New(inner, h)).
func Wrap(inner *blob.Bucket, h Hooks) *blob.Bucket { return blob.NewBucket(New(inner, h)) }

// ErrorCode implements driver.Bucket by asking the driver below, which
// knows its own errors; a decorator with errors of its own replaces it.
func (b *Bucket) ErrorCode(err error) gcerrors.ErrorCode { return b.next.ErrorCode(err) }

// As implements driver.Bucket by deferring to the driver below.
func (b *Bucket) As(i any) bool { return b.next.As(i) }

// ErrorAs implements driver.Bucket by deferring to the driver below.
func (b *Bucket) ErrorAs(err error, i any) bool { return b.next.ErrorAs(err, i) }

// Close implements driver.Bucket by closing the driver below.
func (b *Bucket) Close() error { return b.next.Close() }

// Attributes implements driver.Bucket (OpHead).
func (b *Bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	var a *driver.Attributes
	err := b.h.Request(ctx, OpHead, key, func(ctx context.Context) error {
		var err error
		a, err = b.next.Attributes(ctx, key)
		return err
	})
	return a, err
}

// ListPaged implements driver.Bucket (OpList): each page is one request.
func (b *Bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	var page *driver.ListPage
	err := b.h.Request(ctx, OpList, opts.Prefix, func(ctx context.Context) error {
		var err error
		page, err = b.next.ListPaged(ctx, opts)
		return err
	})
	return page, err
}

// NewRangeReader implements driver.Bucket (a Stream of OpGet).
func (b *Bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	sctx, s, err := b.h.Stream(ctx, OpGet, key)
	if err != nil {
		return nil, err
	}
	var r driver.Reader
	err = s.Step(StepOpen, func() error {
		var err error
		r, err = b.next.NewRangeReader(sctx, key, offset, length, opts)
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
	r   driver.Reader
	s   Stream
	end sync.Once
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

func (r *reader) Attributes() *driver.ReaderAttributes { return r.r.Attributes() }
func (r *reader) As(i any) bool                        { return r.r.As(i) }

// NewTypedWriter implements driver.Bucket (a Stream of OpPut). Every
// option reaches the driver below unchanged, BeforeWrite and IfNotExist
// included, so driver-specific conditions (an S3 If-Match set through
// BeforeWrite) still apply.
func (b *Bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	sctx, s, err := b.h.Stream(ctx, OpPut, key)
	if err != nil {
		return nil, err
	}
	var w driver.Writer
	err = s.Step(StepOpen, func() error {
		var err error
		w, err = b.next.NewTypedWriter(sctx, key, contentType, opts)
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
	w   driver.Writer
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
		return b.next.Copy(ctx, dstKey, srcKey, opts)
	})
}

// Delete implements driver.Bucket (OpDelete).
func (b *Bucket) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	return b.h.Request(ctx, OpDelete, key, func(ctx context.Context) error {
		return b.next.Delete(ctx, key, opts)
	})
}

// SignedURL implements driver.Bucket (OpSign). Most drivers sign locally;
// those that ask a service (GCS with IAM signing) make it a request.
func (b *Bucket) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	var u string
	err := b.h.Request(ctx, OpSign, key, func(ctx context.Context) error {
		var err error
		u, err = b.next.SignedURL(ctx, key, opts)
		return err
	})
	return u, err
}
