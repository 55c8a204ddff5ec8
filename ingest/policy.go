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
	// OpenBucket opens a source bucket URL; nil is blob.OpenBucket.
	OpenBucket layout.BucketOpener
	// ProcDir is where the callers' /proc/<pid>/status files are read
	// for their supplementary groups; "" is /proc.
	ProcDir string
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
		ct := mime.TypeByExtension(path.Ext(t.rel))
		if ct == "" {
			ct = "application/octet-stream"
		}
		return &Source{ReadCloser: f, ContentType: ct, URL: shown}, nil
	}
	open := p.OpenBucket
	if open == nil {
		open = blob.OpenBucket
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
	r, err := b.NewReader(ctx, t.key, nil)
	if err != nil {
		b.Close()
		return nil, redact.Err(fmt.Errorf("ingest %s: %w", shown, err), bu)
	}
	return &Source{ReadCloser: &bucketReader{r, b}, ContentType: r.ContentType(), ContentEncoding: a.ContentEncoding, URL: shown}, nil
}

// bucketReader closes the source bucket with its reader.
type bucketReader struct {
	*blob.Reader
	b *blob.Bucket
}

func (r *bucketReader) Close() error { return errors.Join(r.Reader.Close(), r.b.Close()) }
