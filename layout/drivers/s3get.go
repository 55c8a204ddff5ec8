package drivers

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// directGet is a driver over an s3blob bucket whose reads skip the AWS
// SDK's per-request pipeline: a GET is signed with the SDK's own SigV4
// signer and credentials and sent on the SDK's own HTTP client, to the
// bucket endpoint the SDK's resolver gave once, at open. Everything else
// (listings, HEADs, writes, copies, deletes) goes to the s3blob bucket.
//
// Why: a mount reads thousands of small objects (snapshots, manifests,
// small blobs) with 64 in flight, and on a 2-core workstation the
// client's CPU per request decides how many it reads a second. The SDK
// builds and runs a middleware stack of about forty steps per operation
// (endpoint rules, ARN and S3 Express checks, retry bookkeeping, user
// agent, checksum tracking). BenchmarkS3SmallGet (a 2 KiB GET, the
// httptest server's side included) went from 104 to 63 µs and from 494
// to 155 allocations a GET this way.
// pugfs retries on its own (layout.Store), and checks every body it reads
// (SHA-256 for blobs, parsing for snapshots and manifests), so the SDK's
// retries and checksums are not missed.
//
// A read goes the SDK's way instead when it could differ: a key that
// s3blob would escape, a BeforeRead option (which wants the SDK's input
// types). The open takes this path only for a plain SigV4 endpoint: a
// bucket ARN, S3 Express or SigV4a keep the SDK for everything.
type directGet struct {
	*blobwrap.Bucket
	client aws.HTTPClient
	creds  aws.CredentialsProvider // nil: anonymous
	signer *v4.Signer
	// base is the bucket's endpoint URL (its path "/bucket" with path
	// style, empty with virtual hosts); a key is appended to it.
	base               url.URL
	signName, signRegn string
}

var _ driver.Bucket = (*directGet)(nil)

// newDirectGet returns inner with its reads on the direct path, or inner
// itself when the SDK resolves the bucket to an endpoint that path does
// not handle (see directGet). endpoint is the URL's endpoint parameter,
// if any: gocloud hands it to the SDK as a (deprecated) resolver of its
// own, which the current rules the direct path asks do not see.
func newDirectGet(ctx context.Context, inner *blob.Bucket, client *s3.Client, bucket, endpoint string) *blob.Bucket {
	o := client.Options()
	params := s3.EndpointParameters{
		Bucket:         aws.String(bucket),
		Region:         aws.String(o.Region),
		UseFIPS:        aws.Bool(o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		UseDualStack:   aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		ForcePathStyle: aws.Bool(o.UsePathStyle),
		Accelerate:     aws.Bool(o.UseAccelerate),
		Endpoint:       o.BaseEndpoint,
	}
	if endpoint != "" {
		params.Endpoint = aws.String(endpoint)
	}
	if o.EndpointResolverV2 == nil || o.HTTPClient == nil {
		return inner
	}
	ep, err := o.EndpointResolverV2.ResolveEndpoint(ctx, params)
	if err != nil {
		return inner
	}
	name, region, ok := sigV4Of(&ep.Properties, o.Region)
	if !ok {
		return inner
	}
	base := ep.URI
	if o.EndpointOptions.DisableHTTPS {
		base.Scheme = "http"
	}
	base.RawQuery, base.Fragment = "", ""
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""
	d := &directGet{
		client:   o.HTTPClient,
		signer:   v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true }),
		base:     base,
		signName: name,
		signRegn: region,
	}
	if o.Credentials != nil {
		d.creds = o.Credentials
	}
	d.Bucket = blobwrap.New(inner, blobwrap.PassThrough{})
	return blob.NewBucket(d)
}

// sigV4Of returns the SigV4 signing name and region an endpoint asks
// for; ok is false for any other scheme (SigV4a, S3 Express sessions).
// An endpoint that names no scheme is signed as "s3" in the client's
// region, as the SDK does.
func sigV4Of(props *smithy.Properties, region string) (name, signRegion string, ok bool) {
	opts, has := smithyauth.GetAuthOptions(props)
	if !has || len(opts) == 0 {
		return "s3", region, true
	}
	o := opts[0]
	// Endpoint rules name the scheme "sigv4"; auth resolution, in full.
	if o.SchemeID != "sigv4" && o.SchemeID != smithyauth.SchemeIDSigV4 {
		return "", "", false
	}
	name, signRegion = "s3", region
	if n, has := smithyhttp.GetSigV4SigningName(&o.SignerProperties); has && n != "" {
		name = n
	}
	if r, has := smithyhttp.GetSigV4SigningRegion(&o.SignerProperties); has && r != "" {
		signRegion = r
	}
	return name, signRegion, true
}

// emptySHA256 is the hex SHA-256 of an empty body: a GET's payload hash.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// NewRangeReader implements driver.Bucket: one signed GET.
func (d *directGet) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	if opts.BeforeRead != nil || !plainKey(key) {
		return d.Bucket.NewRangeReader(ctx, key, offset, length, opts)
	}
	u := d.base
	u.Path = d.base.Path + "/" + key
	u.RawPath = d.base.EscapedPath() + "/" + escapePath(key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	// As s3blob asks (a zero-length read is one byte, dropped below).
	switch {
	case offset > 0 && length < 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	case length == 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset))
	case length > 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	}
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	// Without it Go's transport asks for gzip and inflates a body stored
	// with Content-Encoding: gzip, and the reader would get bytes whose
	// hash is not the blob's (the SDK sets the same).
	req.Header.Set("Accept-Encoding", "identity")
	if d.creds != nil {
		creds, err := d.creds.Retrieve(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3 credentials: %w", err)
		}
		if creds.HasKeys() {
			if err := d.signer.SignHTTP(ctx, creds, req, emptySHA256, d.signName, d.signRegn, time.Now()); err != nil {
				return nil, fmt.Errorf("sign GET %s: %w", key, err)
			}
		}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		defer resp.Body.Close()
		return nil, responseError(resp, key)
	}
	size := resp.ContentLength
	cr := resp.Header.Get("Content-Range")
	if cr != "" {
		if _, total, ok := strings.Cut(cr, "/"); ok {
			if n, err := strconv.ParseInt(total, 10, 64); err == nil {
				size = n
			}
		}
	}
	modTime, _ := http.ParseTime(resp.Header.Get("Last-Modified"))
	body, err := rangeBody(resp, key, offset, length, cr)
	if err != nil {
		return nil, err
	}
	return &directReader{body: body, attrs: driver.ReaderAttributes{
		ContentType: resp.Header.Get("Content-Type"),
		ModTime:     modTime,
		Size:        size,
	}}, nil
}

// ErrorCode implements driver.Bucket: the direct path's own errors carry
// their code; the rest came through the inner bucket with theirs.
func (d *directGet) ErrorCode(err error) gcerrors.ErrorCode {
	var se *statusError
	if errors.As(err, &se) {
		return se.code()
	}
	return gcerrors.Code(err)
}

// ErrorAs implements driver.Bucket: a **statusError receives the direct
// path's errors; anything else is the inner bucket's question.
func (d *directGet) ErrorAs(err error, i any) bool {
	if p, ok := i.(**statusError); ok {
		return errors.As(err, p)
	}
	return d.Bucket.ErrorAs(err, i)
}

type directReader struct {
	body  io.ReadCloser
	attrs driver.ReaderAttributes
}

func (r *directReader) Read(p []byte) (int, error)           { return r.body.Read(p) }
func (r *directReader) Close() error                         { return r.body.Close() }
func (r *directReader) Attributes() *driver.ReaderAttributes { return &r.attrs }
func (r *directReader) As(any) bool                          { return false }

// rangeBody returns the bytes of the range asked for from an answer: a
// 206 must start where asked, and an answer of 200 to a ranged GET (a
// server or proxy that ignores Range) is read from its start to there.
// Taken as the range, the object's first bytes failed the digest, and
// the blob was held bad for a while though it was whole. length < 0
// reads to the end; a zero-length read gets no body.
func rangeBody(resp *http.Response, key string, offset, length int64, cr string) (io.ReadCloser, error) {
	if length == 0 {
		resp.Body.Close()
		return http.NoBody, nil
	}
	if offset == 0 && length < 0 {
		return resp.Body, nil // no Range was asked for
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		first, _, _ := strings.Cut(strings.TrimPrefix(cr, "bytes "), "-")
		if start, err := strconv.ParseInt(first, 10, 64); err != nil || start != offset {
			resp.Body.Close()
			return nil, fmt.Errorf("s3 GET %s: asked for the bytes from %d, answered Content-Range %q", key, offset, cr)
		}
	case http.StatusOK:
		if _, err := io.CopyN(io.Discard, resp.Body, offset); err != nil && err != io.EOF {
			resp.Body.Close()
			return nil, fmt.Errorf("s3 GET %s: skipping to byte %d of a whole answer: %w", key, offset, err)
		}
	}
	if length < 0 {
		return resp.Body, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, length), resp.Body}, nil
}

// statusError is an S3 error answer to a direct GET.
type statusError struct {
	Status int
	Code   string // S3's error code, from the XML body, when it has one
	Msg    string
	Key    string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("s3 GET %s: HTTP %d", e.Key, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// HTTPStatusCode is the answer's status: the request scheduler lowers its
// limit on a 503 (schedblob's throttled), as it does for the SDK's errors.
func (e *statusError) HTTPStatusCode() int { return e.Status }

// ErrorCode is S3's error code (SlowDown, ...), when the answer had one.
func (e *statusError) ErrorCode() string { return e.Code }

// code maps the answer as s3blob's ErrorCode maps the SDK's errors, and
// a 401 or 403 by its status whatever its S3 code (s3blob's Unknown for a
// refused signature would be retried in vain).
func (e *statusError) code() gcerrors.ErrorCode {
	switch e.Code {
	case "NoSuchBucket", "NoSuchKey", "NotFound", "ObjectNotInActiveTierError":
		return gcerrors.NotFound
	case "PreconditionFailed":
		return gcerrors.FailedPrecondition
	case "AccessDenied", "Forbidden":
		return gcerrors.PermissionDenied
	}
	switch e.Status {
	case http.StatusNotFound, http.StatusMovedPermanently:
		return gcerrors.NotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return gcerrors.PermissionDenied
	}
	return gcerrors.Unknown
}

// responseError reads an error answer's S3 code and message (at most
// 64 KiB of it).
func responseError(resp *http.Response, key string) error {
	e := &statusError{Status: resp.StatusCode, Key: key}
	var body struct {
		Code    string
		Message string
	}
	if b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); err == nil && xml.Unmarshal(b, &body) == nil {
		e.Code, e.Msg = body.Code, body.Message
	}
	return e
}

// plainKey reports whether s3blob sends key as it is (its escapeKey
// changes nothing): printable ASCII, no "../", no "__0x" that its
// escaping would have to quote.
func plainKey(key string) bool {
	if key == "" || strings.Contains(key, "../") || strings.Contains(key, "__0x") {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// escapePath escapes a key for an S3 request path as the SDK does:
// everything but RFC 3986's unreserved characters and '/'.
func escapePath(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) + 16)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
