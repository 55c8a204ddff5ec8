package faultblob

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

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
	b := &bucket{inner: inner, inj: inj}
	b.Bucket = blobwrap.New(inner, b)
	return b
}

// bucket is blobwrap's driver with the faults as its hooks, and listings,
// As, ErrorAs and ErrorCode of its own. The inner bucket's errors are
// returned as they come (portable errors that carry their gcerrors code),
// so the outer portable bucket keeps the code.
type bucket struct {
	*blobwrap.Bucket
	inner *blob.Bucket
	inj   *Injector
}

var (
	_ driver.Bucket  = (*bucket)(nil)
	_ blobwrap.Hooks = (*bucket)(nil)
)

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

// ops maps blobwrap's request kinds to the injector's.
var ops = map[blobwrap.Op]Op{
	blobwrap.OpHead: OpHead, blobwrap.OpGet: OpGet, blobwrap.OpPut: OpPut, blobwrap.OpList: OpList,
	blobwrap.OpDelete: OpDelete, blobwrap.OpCopy: OpCopy,
}

// Request implements blobwrap.Hooks: the faults of OpHead, OpCopy
// (matched on the destination key) and OpDelete come before and after
// the request. SignedURL is passed through without faults: the URL is
// used outside the wrapper. (Listings have their own ListPaged.)
func (b *bucket) Request(ctx context.Context, op blobwrap.Op, key string, call func(context.Context) error) error {
	fop, ok := ops[op]
	if !ok {
		return call(ctx)
	}
	p := b.inj.decide(fop, key)
	if err := p.before(ctx); err != nil {
		return err
	}
	var g *ghost
	if fop == OpDelete && b.inj.wantGhost(key) {
		if a, err := b.inner.Attributes(ctx, key); err == nil {
			g = &ghost{size: a.Size, modTime: a.ModTime, md5: a.MD5}
		}
	}
	if err := call(ctx); err != nil {
		return err
	}
	switch fop {
	case OpCopy:
		b.inj.recordWrite(key)
	case OpDelete:
		b.inj.recordDelete(key, g)
	}
	return p.after()
}

// Stream implements blobwrap.Hooks. A reader's faults (OpGet) apply once,
// to its opening; its Reads go straight to the inner one. A writer's
// (OpPut) apply at Close, where the upload commits: a pre-commit fault
// aborts the inner write (nothing is stored), a lost response lets it
// commit and then fails.
func (b *bucket) Stream(ctx context.Context, op blobwrap.Op, key string) (context.Context, blobwrap.Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	return sctx, &stream{b: b, ctx: sctx, cancel: cancel, op: op, key: key}, nil
}

type stream struct {
	b      *bucket
	ctx    context.Context
	cancel context.CancelFunc // aborts the inner upload
	op     blobwrap.Op
	key    string
}

func (s *stream) Step(step blobwrap.Step, call func() error) error {
	switch {
	case s.op == blobwrap.OpGet && step == blobwrap.StepOpen:
		p := s.b.inj.decide(OpGet, s.key)
		if err := p.before(s.ctx); err != nil {
			return err
		}
		if err := call(); err != nil {
			return err
		}
		return p.after() // blobwrap closes the reader
	case s.op == blobwrap.OpPut && step == blobwrap.StepClose:
		if err := s.ctx.Err(); err != nil {
			// Aborted by the caller (or the portable bucket's MD5 check).
			_ = call()
			return err
		}
		p := s.b.inj.decide(OpPut, s.key)
		if err := p.before(s.ctx); err != nil {
			s.cancel()
			_ = call()
			return err
		}
		if err := call(); err != nil {
			return err
		}
		s.b.inj.recordWrite(s.key)
		return p.after()
	}
	return call()
}

func (s *stream) End() { s.cancel() }

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
		pageSize = blobwrap.DefaultPageSize
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
		page.Objects[i] = blobwrap.ListObject(o)
	}
	if len(next) > 0 {
		if n := len(objs); n > 0 {
			last = objs[n-1].Key
		}
		page.NextPageToken = passToken(last, next)
	}
	return page, nil
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
		flat = append(flat, blobwrap.ListObject(o))
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
