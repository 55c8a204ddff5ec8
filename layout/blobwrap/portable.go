package blobwrap

import (
	"context"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// Portable returns a driver whose every call is the same call on the
// portable bucket b: the bottom of a stack of decorators (Over). Errors
// come back as b returns them, gocloud's codes and its ErrorAs included.
func Portable(b *blob.Bucket) driver.Bucket { return portable{b} }

type portable struct{ b *blob.Bucket }

var _ driver.Bucket = portable{}

// ErrorCode implements driver.Bucket. The portable bucket above asks only
// about errors without a code of their own.
func (p portable) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }

func (p portable) As(i any) bool                 { return p.b.As(i) }
func (p portable) ErrorAs(err error, i any) bool { return p.b.ErrorAs(err, i) }
func (p portable) Close() error                  { return p.b.Close() }

func (p portable) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := p.b.Attributes(ctx, key)
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

func (p portable) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	return ListPage(ctx, p.b, opts)
}

// DefaultPageSize is the page size asked of the inner bucket when a
// caller of ListPaged leaves it to the driver.
const DefaultPageSize = 1000

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

func (p portable) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	r, err := p.b.NewRangeReader(ctx, key, offset, length, &blob.ReaderOptions{BeforeRead: opts.BeforeRead})
	if err != nil {
		return nil, err
	}
	return &portableReader{r: r}, nil
}

type portableReader struct {
	r *blob.Reader
	// once fills attrs from r when first asked: a reader of the body
	// alone never asks, and some drivers (localblob) read the metadata
	// only then.
	once  sync.Once
	attrs driver.ReaderAttributes
}

func (r *portableReader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *portableReader) Close() error               { return r.r.Close() }
func (r *portableReader) As(i any) bool              { return r.r.As(i) }

func (r *portableReader) Attributes() *driver.ReaderAttributes {
	r.once.Do(func() {
		r.attrs = driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
	})
	return &r.attrs
}

func (p portable) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	w, err := p.b.NewWriter(ctx, key, WriterOptions(opts, contentType))
	if err != nil {
		return nil, err // not a nil *blob.Writer in a non-nil interface
	}
	return w, nil
}

// WriterOptions converts a driver's writer options, and the content type
// the portable bucket above settled on, to a portable bucket's.
func WriterOptions(opts *driver.WriterOptions, contentType string) *blob.WriterOptions {
	return &blob.WriterOptions{
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
	}
}

func (p portable) Copy(ctx context.Context, dstKey, srcKey string, opts *driver.CopyOptions) error {
	return p.b.Copy(ctx, dstKey, srcKey, &blob.CopyOptions{BeforeCopy: opts.BeforeCopy})
}

func (p portable) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	return p.b.DeleteWithOptions(ctx, key, &blob.DeleteOptions{BeforeDelete: opts.BeforeDelete})
}

func (p portable) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	return p.b.SignedURL(ctx, key, &blob.SignedURLOptions{
		Expiry:                   opts.Expiry,
		Method:                   opts.Method,
		ContentType:              opts.ContentType,
		EnforceAbsentContentType: opts.EnforceAbsentContentType,
		BeforeSign:               opts.BeforeSign,
	})
}
