package faultblob

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// defaultPageSize is the page size used when a caller of ListPaged leaves
// it to the driver.
const defaultPageSize = 1000

// Wrap returns a bucket that forwards every request to inner, injecting
// the faults inj decides. A nil inj means an empty Injector (no faults).
// Closing the returned bucket closes inner. The returned bucket's As
// accepts a **Injector and otherwise defers to inner.
func Wrap(inner *blob.Bucket, inj *Injector) *blob.Bucket {
	return blob.NewBucket(newDriver(inner, inj))
}

func newDriver(inner *blob.Bucket, inj *Injector) *bucket {
	if inj == nil {
		inj = NewInjector(Options{})
	}
	return &bucket{inner: inner, inj: inj}
}

// bucket implements driver.Bucket on top of a portable inner bucket. The
// inner bucket's errors are returned as they come (portable errors that
// carry their gcerrors code), so the outer portable bucket keeps the code.
type bucket struct {
	inner *blob.Bucket
	inj   *Injector
}

var _ driver.Bucket = (*bucket)(nil)

// codedError is a non-injected error of the wrapper itself.
type codedError struct {
	code gcerrors.ErrorCode
	msg  string
}

func (e *codedError) Error() string { return "faultblob: " + e.msg }

// ErrorCode implements driver.Bucket. The portable bucket asks only for
// errors that do not already carry a code: our own faults and, through
// them, whatever error a Rule.Err supplied.
func (b *bucket) ErrorCode(err error) gcerrors.ErrorCode {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code
	}
	return gcerrors.Code(err)
}

// As implements driver.Bucket: a **Injector receives the Injector;
// anything else is handed to the inner bucket.
func (b *bucket) As(i any) bool {
	if p, ok := i.(**Injector); ok {
		*p = b.inj
		return true
	}
	return b.inner.As(i)
}

// ErrorAs implements driver.Bucket by deferring to the inner bucket, which
// exposes its own driver's error types. (Injected *Error values are found
// with errors.As directly.)
func (b *bucket) ErrorAs(err error, i any) bool {
	if p, ok := i.(**Error); ok {
		return errors.As(err, p)
	}
	return b.inner.ErrorAs(err, i)
}

// Attributes implements driver.Bucket (OpHead).
func (b *bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	p := b.inj.decide(OpHead, key)
	if err := p.before(ctx); err != nil {
		return nil, err
	}
	a, err := b.inner.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := p.after(); err != nil {
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

// NewRangeReader implements driver.Bucket (OpGet). Faults apply once, to
// the opening; the returned reader reads straight from the inner one.
func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	p := b.inj.decide(OpGet, key)
	if err := p.before(ctx); err != nil {
		return nil, err
	}
	r, err := b.inner.NewRangeReader(ctx, key, offset, length, &blob.ReaderOptions{BeforeRead: opts.BeforeRead})
	if err != nil {
		return nil, err
	}
	if err := p.after(); err != nil {
		_ = r.Close()
		return nil, err
	}
	return &reader{r: r, attrs: driver.ReaderAttributes{
		ContentType: r.ContentType(),
		ModTime:     r.ModTime(),
		Size:        r.Size(),
	}}, nil
}

type reader struct {
	r     *blob.Reader
	attrs driver.ReaderAttributes
}

func (r *reader) Read(p []byte) (int, error)           { return r.r.Read(p) }
func (r *reader) Close() error                         { return r.r.Close() }
func (r *reader) Attributes() *driver.ReaderAttributes { return &r.attrs }
func (r *reader) As(i any) bool                        { return r.r.As(i) }

// Close implements driver.Bucket by closing the inner bucket.
func (b *bucket) Close() error { return b.inner.Close() }

// NewTypedWriter implements driver.Bucket. Every option reaches the inner
// bucket unchanged, BeforeWrite included, so driver-specific conditions
// (an S3 If-Match set through BeforeWrite, say) still apply. Faults apply
// at Close, where the upload commits (OpPut).
func (b *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	wctx, cancel := context.WithCancel(ctx)
	w, err := b.inner.NewWriter(wctx, key, &blob.WriterOptions{
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
	if err != nil {
		cancel()
		return nil, err
	}
	return &writer{b: b, ctx: wctx, cancel: cancel, w: w, key: key}, nil
}

type writer struct {
	b      *bucket
	ctx    context.Context
	cancel context.CancelFunc
	w      *blob.Writer
	key    string
}

func (w *writer) Write(p []byte) (int, error) { return w.w.Write(p) }

// Close commits the upload, with the OpPut faults: a pre-commit fault
// aborts the inner write (nothing is stored), a lost response lets it
// commit and then fails.
func (w *writer) Close() error {
	defer w.cancel()
	if err := w.ctx.Err(); err != nil {
		// Aborted by the caller (or the portable bucket's MD5 check).
		_ = w.w.Close()
		return err
	}
	p := w.b.inj.decide(OpPut, w.key)
	if err := p.before(w.ctx); err != nil {
		w.cancel()
		_ = w.w.Close()
		return err
	}
	if err := w.w.Close(); err != nil {
		return err
	}
	w.b.inj.recordWrite(w.key)
	return p.after()
}

// Copy implements driver.Bucket (OpCopy, matched on dstKey).
func (b *bucket) Copy(ctx context.Context, dstKey, srcKey string, opts *driver.CopyOptions) error {
	p := b.inj.decide(OpCopy, dstKey)
	if err := p.before(ctx); err != nil {
		return err
	}
	if err := b.inner.Copy(ctx, dstKey, srcKey, &blob.CopyOptions{BeforeCopy: opts.BeforeCopy}); err != nil {
		return err
	}
	b.inj.recordWrite(dstKey)
	return p.after()
}

// Delete implements driver.Bucket (OpDelete).
func (b *bucket) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	p := b.inj.decide(OpDelete, key)
	if err := p.before(ctx); err != nil {
		return err
	}
	var g *ghost
	if b.inj.wantGhost(key) {
		if a, err := b.inner.Attributes(ctx, key); err == nil {
			g = &ghost{size: a.Size, modTime: a.ModTime, md5: a.MD5}
		}
	}
	if err := b.inner.DeleteWithOptions(ctx, key, &blob.DeleteOptions{BeforeDelete: opts.BeforeDelete}); err != nil {
		return err
	}
	b.inj.recordDelete(key, g)
	return p.after()
}

// SignedURL implements driver.Bucket. It is passed through without
// faults: the URL is used outside the wrapper.
func (b *bucket) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	return b.inner.SignedURL(ctx, key, &blob.SignedURLOptions{
		Expiry:                   opts.Expiry,
		Method:                   opts.Method,
		ContentType:              opts.ContentType,
		EnforceAbsentContentType: opts.EnforceAbsentContentType,
		BeforeSign:               opts.BeforeSign,
	})
}

// Page tokens are our own, so that a listing can switch between the
// pass-through and the stale path between pages:
//
//	'p' uvarint(len(last)) last innerToken   pass-through page
//	's' last                                  stale-path page
//
// where last is the last key returned so far.
const (
	tokPass  = 'p'
	tokStale = 's'
)

func passToken(last string, inner []byte) []byte {
	t := []byte{tokPass}
	t = binary.AppendUvarint(t, uint64(len(last)))
	t = append(t, last...)
	return append(t, inner...)
}

func staleToken(last string) []byte {
	return append([]byte{tokStale}, last...)
}

// parseToken splits a page token; a nil token is the first page.
func parseToken(tok []byte) (kind byte, last string, inner []byte, err error) {
	if len(tok) == 0 {
		return 0, "", nil, nil
	}
	bad := &codedError{gcerrors.InvalidArgument, "invalid page token"}
	switch tok[0] {
	case tokStale:
		return tokStale, string(tok[1:]), nil, nil
	case tokPass:
		n, w := binary.Uvarint(tok[1:])
		if w <= 0 || n > uint64(len(tok)-1-w) {
			return 0, "", nil, bad
		}
		rest := tok[1+w:]
		return tokPass, string(rest[:n]), rest[n:], nil
	}
	return 0, "", nil, bad
}

// ListPaged implements driver.Bucket (OpList, matched on the prefix).
//
// When no stale-listing record concerns the prefix, the page comes from
// the inner bucket's ListPage (whose BeforeList hook may then run more
// than once if the inner driver returns short pages). Otherwise the whole
// prefix is listed flat from the inner bucket, the stale view applied, the
// delimiter applied, and the page cut out here.
func (b *bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	p := b.inj.decide(OpList, opts.Prefix)
	if err := p.before(ctx); err != nil {
		return nil, err
	}
	page, err := b.list(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := p.after(); err != nil {
		return nil, err
	}
	return page, nil
}

func (b *bucket) list(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	kind, last, innerTok, err := parseToken(opts.PageToken)
	if err != nil {
		return nil, err
	}
	pageSize := opts.PageSize
	if pageSize <= 0 {
		pageSize = defaultPageSize
	}
	v := b.inj.staleView(opts.Prefix)
	if v != nil || kind == tokStale {
		if v == nil {
			v = &staleView{}
		}
		return b.staleList(ctx, opts, pageSize, last, v)
	}
	if kind == 0 {
		innerTok = blob.FirstPageToken
	}
	objs, next, err := b.inner.ListPage(ctx, innerTok, pageSize, &blob.ListOptions{
		Prefix:     opts.Prefix,
		Delimiter:  opts.Delimiter,
		BeforeList: opts.BeforeList,
	})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{Objects: make([]*driver.ListObject, len(objs))}
	for i, o := range objs {
		page.Objects[i] = listObject(o)
	}
	if len(next) > 0 {
		if n := len(objs); n > 0 {
			last = objs[n-1].Key
		}
		page.NextPageToken = passToken(last, next)
	}
	return page, nil
}

func listObject(o *blob.ListObject) *driver.ListObject {
	return &driver.ListObject{
		Key:     o.Key,
		ModTime: o.ModTime,
		Size:    o.Size,
		MD5:     o.MD5,
		IsDir:   o.IsDir,
		AsFunc:  o.As,
	}
}

// staleList builds the page after last from a flat listing of the prefix
// with v applied.
func (b *bucket) staleList(ctx context.Context, opts *driver.ListOptions, pageSize int, last string, v *staleView) (*driver.ListPage, error) {
	it := b.inner.List(&blob.ListOptions{Prefix: opts.Prefix, BeforeList: opts.BeforeList})
	var flat []*driver.ListObject
	var hidden []string
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if v.hidden[o.Key] {
			hidden = append(hidden, o.Key)
			continue
		}
		flat = append(flat, listObject(o))
	}
	byKey := func(a *driver.ListObject, k string) int { return strings.Compare(a.Key, k) }
	var ghosts []string
	n := len(flat)
	for _, g := range v.ghosts {
		// A ghost that exists again (re-created behind our back) is
		// simply listed.
		if _, found := slices.BinarySearchFunc(flat[:n], g.Key, byKey); !found {
			flat = append(flat, g)
			ghosts = append(ghosts, g.Key)
		}
	}
	slices.SortFunc(flat, func(a, b *driver.ListObject) int { return strings.Compare(a.Key, b.Key) })
	entries := collapse(flat, opts.Prefix, opts.Delimiter)

	i := 0
	if last != "" {
		i, _ = slices.BinarySearchFunc(entries, last, byKey)
		if i < len(entries) && entries[i].Key == last {
			i++
		}
	}
	end := min(len(entries), i+pageSize)
	page := &driver.ListPage{Objects: entries[i:end]}
	lastPage := end == len(entries)
	if !lastPage {
		page.NextPageToken = staleToken(entries[end-1].Key)
	}
	// Count the stale effects that fall within this page's key range, so
	// that a full pass over the listing counts each once.
	inPage := func(k string) bool {
		return k > last && (lastPage || k <= entries[end-1].Key)
	}
	for _, k := range hidden {
		if inPage(k) {
			b.inj.hidden.Add(1)
		}
	}
	for _, k := range ghosts {
		if inPage(k) {
			b.inj.ghosts.Add(1)
		}
	}
	return page, nil
}
