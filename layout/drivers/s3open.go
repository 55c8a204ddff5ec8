package drivers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/faultblob"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
)

// S3IdleConns is how many idle connections to one S3 endpoint the client
// of an s3:// bucket keeps. The AWS SDK keeps 10; a mount keeps up to
// --max-requests (64) requests in flight, so with 10 every burst closed
// the other connections and opened new ones (a TCP, and on a real
// endpoint a TLS, handshake per request), which was a large part of a
// small request's cost. Idle connections cost a file descriptor each.
const S3IdleConns = 1024

// OpenURL opens a bucket URL through gocloud's URL mux, except s3://
// URLs, which OpenS3 opens with a client tuned for many small requests,
// fault+s3:// URLs, whose injector goes in front of that same client,
// and gs:// and azblob:// URLs, which OpenGCS and OpenAzure open with a
// client that reports upload progress.
func OpenURL(ctx context.Context, rawURL string) (*blob.Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return blob.OpenBucket(ctx, rawURL)
	}
	// gocloud's URL mux roots a bucket below a prefix= of its query;
	// the openers below bypass the mux, so they do it here (the S3 one
	// refused the parameter).
	q := u.Query()
	prefix := q.Get("prefix")
	for _, part := range strings.Split(prefix, "/") {
		if part == "." || part == ".." {
			// Keys are no paths: a bucket would get a key named
			// ..__0x2f__x (gocloud's escape) where the user meant a
			// directory above.
			return nil, fmt.Errorf("prefix=%q: a key prefix has no . or .. components", prefix)
		}
	}
	if prefix == "" || !ownOpener(u.Scheme) {
		return openURL(ctx, rawURL, u)
	}
	q.Del("prefix")
	plain := *u
	plain.RawQuery = q.Encode()
	b, err := openURL(ctx, plain.String(), &plain)
	if err != nil {
		return nil, err
	}
	return blob.PrefixedBucket(b, prefix), nil
}

// ownOpener reports whether OpenURL opens URLs of scheme itself rather
// than through gocloud's URL mux.
func ownOpener(scheme string) bool {
	switch strings.TrimPrefix(scheme, faultblob.SchemePrefix) {
	case s3blob.Scheme, gcsblob.Scheme, azureblob.Scheme:
		return true
	}
	return false
}

// openURL is OpenURL without a prefix= (u is rawURL parsed).
func openURL(ctx context.Context, rawURL string, u *url.URL) (*blob.Bucket, error) {
	switch u.Scheme {
	case s3blob.Scheme:
		return OpenS3(ctx, u)
	case gcsblob.Scheme:
		return OpenGCS(ctx, u)
	case azureblob.Scheme:
		return OpenAzure(ctx, u)
	}
	if scheme, ok := strings.CutPrefix(u.Scheme, faultblob.SchemePrefix); ok && ownOpener(scheme) {
		// Through the URL mux, the inner bucket would be opened as
		// gocloud opens it, not as pugfs does: an S3 client with the
		// SDK's 10 idle connections (half the requests of a 64-wide
		// mount dialled a new one) and a CRC of every body, an Azure
		// container without azurefix (the first lost conditional write
		// crashed the mount: audit 4). A fault+ bucket must behave as
		// the plain one, plus the faults.
		inner, p, err := faultblob.SplitURL(u)
		if err != nil {
			return nil, err
		}
		b, err := openURL(ctx, inner.String(), inner)
		if err != nil {
			return nil, err
		}
		return faultblob.Wrap(b, p.NewInjector()), nil
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	return Adapt(b), nil
}

// OpenS3 opens an s3:// URL as gocloud's s3blob URL opener does (the same
// query parameters: ssetype, kmskeyid, accelerate, use_path_style,
// s3ForcePathStyle, disable_https, and those of gocloud.dev/aws), with
// three differences that matter when most requests are small:
//
//   - the HTTP client keeps S3IdleConns idle connections per host, not
//     10, so that requests in flight reuse their connections;
//   - unless the URL sets response_checksum_validation, the SDK does not
//     checksum response bodies (when_required): pugfs checks every body
//     it reads against its SHA-256 (blobs) or parses and validates it
//     (snapshots, manifests), so the SDK's pass was a second hash of
//     every byte;
//   - reads are signed GETs sent without the SDK's per-request pipeline
//     (directGet), unless the URL sets direct_get=false.
//
// Its HTTP client also reports the progress of upload bodies to
// deadlineblob (watchedClient), so that a mount's request timeout bounds
// an upload's silence, not its length.
func OpenS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	var bopts s3blob.Options
	var copts []func(*s3.Options)
	take := func(key string) (string, bool) {
		v, ok := q[key]
		if !ok || len(v) == 0 {
			return "", false
		}
		q.Del(key)
		return v[0], true
	}
	boolParam := func(key string, set func(bool)) error {
		v, ok := take(key)
		if !ok {
			return nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("open bucket %s: invalid value for %q: %w", u.Host, key, err)
		}
		set(b)
		return nil
	}
	if v, ok := take("ssetype"); ok {
		found := false
		for _, t := range types.ServerSideEncryptionAes256.Values() {
			if strings.EqualFold(string(t), v) {
				bopts.EncryptionType, found = t, true
			}
		}
		if !found {
			return nil, fmt.Errorf("open bucket %s: %q is not a valid value for %q", u.Host, v, "ssetype")
		}
	}
	if v, ok := take("kmskeyid"); ok {
		bopts.KMSEncryptionID = v
	}
	for key, set := range map[string]func(bool){
		"accelerate":       func(b bool) { copts = append(copts, func(o *s3.Options) { o.UseAccelerate = b }) },
		"disable_https":    func(b bool) { copts = append(copts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = b }) },
		"use_path_style":   func(b bool) { copts = append(copts, func(o *s3.Options) { o.UsePathStyle = b }) },
		"s3ForcePathStyle": func(b bool) { copts = append(copts, func(o *s3.Options) { o.UsePathStyle = b }) },
	} {
		if err := boolParam(key, set); err != nil {
			return nil, err
		}
	}
	direct := true
	if err := boolParam("direct_get", func(b bool) { direct = b }); err != nil {
		return nil, err
	}
	endpoint := q.Get("endpoint")
	if v, err := strconv.ParseBool(q.Get("hostname_immutable")); err == nil && v {
		// The SDK then sends to the endpoint's host as it is, which the
		// endpoint rules the direct path asks have no word for.
		direct = false
	}
	_, validation := q["response_checksum_validation"]
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Host, err)
	}
	if !validation {
		cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}
	if hc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		// Keeps what the SDK configured (a CA bundle, proxies).
		cfg.HTTPClient = hc.WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns = S3IdleConns
			t.MaxIdleConnsPerHost = S3IdleConns
		})
	}
	bopts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	// After the SDK has built its client (an option runs after that): a
	// client that is not its BuildableClient would not get its defaults.
	copts = append(copts, func(o *s3.Options) { o.HTTPClient = watchedClient{next: o.HTTPClient} })
	client := s3.NewFromConfig(cfg, copts...)
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &bopts)
	if err != nil || !direct {
		return b, err
	}
	return newDirectGet(ctx, b, client, u.Host, endpoint), nil
}

// watchedClient sends request bodies that tell deadlineblob they are
// moving (deadlineblob.WatchBody): an upload's body is sent in one step
// (S3 below its part size, in Close), and without this a mount's request
// timeout cut off a large file on a slow link however steadily it went.
type watchedClient struct {
	next aws.HTTPClient
}

// Do implements aws.HTTPClient.
func (c watchedClient) Do(req *http.Request) (*http.Response, error) {
	r, done := deadlineblob.WatchBody(req)
	defer done()
	return c.next.Do(r)
}
