// Package ingest decides which URLs a mount may ingest on behalf of whom,
// and opens them (tree.md "Writing", storage-layout.txt §3.2).
//
// `ln -s URL sessions/<id>/name` makes the mount fetch URL. The mount
// fetches with its own authority (its cloud credentials, its local user),
// which on a shared mount (root-run, --allow-other) is more than the
// caller's: without a policy any user of the mount could copy any file
// the daemon can read, or any object its credentials reach, into a bucket
// others read. So ingestion is refused unless the URL is under a prefix
// the mount was started with, and a file:// source is read only if the
// calling user could read it. The package knows nothing of FUSE: the
// caller is a plain Caller.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"path"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/internal/redact"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/drivers"
)

// ErrRefused: the policy does not let this caller ingest this URL (not
// under an allowed prefix, a query that would change how the source is
// opened, a path that leaves the allowed directory, or a file the caller
// may not read). The filesystem answers EACCES.
var ErrRefused = errors.New("ingestion refused")

// Policy is a mount's ingestion policy. The zero value, and a nil
// *Policy, refuse everything.
type Policy struct {
	// Prefixes are the trusted sources (ParsePrefixes).
	Prefixes []Prefix
	// OpenBucket opens a source bucket URL; nil is drivers.OpenURL.
	OpenBucket layout.BucketOpener
	// ProcDir is where the callers' /proc/<pid>/status files are read
	// for their supplementary groups; "" is /proc.
	ProcDir string
	// MaxSize refuses sources larger than this many bytes
	// (--ingest-max-size); 0 is no bound. An ingestion holds the
	// directory it lands in for as long as it streams (ln -s is one
	// change of names, which the kernel serialises with listings of the
	// directory), and a sparse source costs its caller no disk and the
	// mount its whole size (audit 14).
	MaxSize int64
}

// Source is an opened ingestion source.
type Source struct {
	io.ReadCloser
	// ContentType is the source's type: the object's stored type, or for
	// a local file a guess from its extension.
	ContentType string
	// ContentEncoding is the object's stored encoding (gzip, zstd), which
	// its blob keeps (§15); none for a local file.
	ContentEncoding string
	// URL is the source, with credentials removed, for logs and errors.
	URL string
	// Size is the source's size in bytes as it was opened (a local file
	// may still grow: the reader stops past Policy.MaxSize anyway).
	Size int64
	// Mode is a local file's permission bits (HasMode), which the
	// ingested file keeps as cp keeps them; an object has none.
	Mode    uint32
	HasMode bool
}

// Open checks uri against the policy for c and opens it for reading. A
// refusal wraps ErrRefused; a target that is not a URL at all wraps
// layout.ErrInvalid. Errors name the URL with credentials removed.
func (p *Policy) Open(ctx context.Context, uri string, c Caller) (*Source, error) {
	shown := redact.URL(uri)
	var prefixes []Prefix
	if p != nil {
		prefixes = p.Prefixes
	}
	t, err := match(prefixes, uri)
	var nu *errNotURL
	if errors.As(err, &nu) {
		return nil, fmt.Errorf("%w: %v", layout.ErrInvalid, err)
	}
	if err != nil {
		return nil, err
	}
	if t.prefix.isLocal() {
		procDir := p.ProcDir
		if procDir == "" {
			procDir = "/proc"
		}
		f, err := openLocal(t.prefix.path, t.rel, c.withGroups(procDir), shown)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("ingest %s: %w", shown, err)
		}
		if err := p.fits(fi.Size(), shown); err != nil {
			f.Close()
			return nil, err
		}
		ct := mime.TypeByExtension(path.Ext(t.rel))
		if ct == "" {
			ct = "application/octet-stream"
		}
		return &Source{ReadCloser: bounded(f, shown, fi.Size()), ContentType: ct, URL: shown, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), HasMode: true}, nil
	}
	open := p.OpenBucket
	if open == nil {
		// As the mount's own bucket is opened: a GCS source through
		// gcsfix, which reads an object's stored bytes. Through
		// blob.OpenBucket, GCS decoded a gzip-encoded object on the way
		// out, past the size its HEAD gave, and the ingestion was
		// refused as a source that grew (review 15).
		open = drivers.OpenURL
	}
	bu := t.bucketURL()
	b, err := open(ctx, bu)
	if err != nil {
		return nil, redact.Err(fmt.Errorf("ingest %s: open bucket: %w", shown, err), bu)
	}
	// The encoding is no reader's attribute: one HEAD.
	a, err := b.Attributes(ctx, t.key)
	if err != nil {
		b.Close()
		return nil, redact.Err(fmt.Errorf("ingest %s: %w", shown, err), bu)
	}
	if err := p.fits(a.Size, shown); err != nil {
		b.Close()
		return nil, err
	}
	r, err := b.NewReader(ctx, t.key, nil)
	if err != nil {
		b.Close()
		return nil, redact.Err(fmt.Errorf("ingest %s: %w", shown, err), bu)
	}
	return &Source{ReadCloser: bounded(&bucketReader{r, b}, shown, a.Size), ContentType: r.ContentType(), ContentEncoding: a.ContentEncoding, URL: shown, Size: a.Size}, nil
}

// fits refuses a source of size bytes past MaxSize.
func (p *Policy) fits(size int64, shown string) error {
	if p.MaxSize > 0 && size > p.MaxSize {
		return fmt.Errorf("%w: %s: %d bytes, more than the mount ingests (--ingest-max-size %d)", ErrRefused, shown, size, p.MaxSize)
	}
	return nil
}

// bounded stops r with an error past size bytes, the size the source had
// when it was opened, which MaxSize and the staging directory's room were
// checked against: a file made larger (a sparse truncate costs its owner
// nothing) or an object replaced after its HEAD is not read past it
// (review 12: it was read whole, both checks bypassed).
func bounded(r io.ReadCloser, shown string, size int64) io.ReadCloser {
	return &boundedReader{ReadCloser: r, left: size, shown: shown, max: size}
}

// boundedReader is bounded's reader.
type boundedReader struct {
	io.ReadCloser
	left, max int64
	shown     string
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.err()
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte past the bound tells
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, b.err()
	}
	return n, err
}

func (b *boundedReader) err() error {
	return fmt.Errorf("%w: %s: grew past the %d bytes it had when opened while it was read", ErrRefused, b.shown, b.max)
}

// bucketReader closes the source bucket with its reader.
type bucketReader struct {
	*blob.Reader
	b *blob.Bucket
}

func (r *bucketReader) Close() error { return errors.Join(r.Reader.Close(), r.b.Close()) }
