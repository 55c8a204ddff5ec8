package drivers_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/s3test"
	"github.com/pugmark/pugfs/layout/drivers"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// TestS3DirectGetMatchesSDK reads the same objects of a real S3 server
// (versitygw, which checks every SigV4 signature) through the direct GET
// path and through the SDK's (direct_get=false): the bytes, the
// attributes and the error codes must not tell them apart, for keys with
// the characters pugmark's keys hold (=, :), others a path must escape,
// and those s3blob escapes (which the direct path leaves to the SDK).
func TestS3DirectGetMatchesSDK(t *testing.T) {
	srv := s3test.Shared(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	_, u := srv.NewBucket(t)
	ctx := context.Background()
	open := func(u string) *blob.Bucket {
		b, err := drivers.OpenURL(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	direct, sdk := open(u), open(u+"&direct_get=false")
	body := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	keys := []string{
		"sessions/year=2026/month=01/day=02/hour=03/0123/snapshots/FFFFFFFE.json",
		"objects/sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"refs/a b+c@d,e;f!g'(h)*i$j&k",
		"names/%41%2F",
		"memory/é/ü",     // not ASCII: the SDK's way
		"x/../y",         // s3blob escapes "../"
		"a__0x41__b",     // s3blob's escape marker
		"tab\there/ctrl", // a control character
	}
	for _, k := range keys {
		if err := sdk.WriteAll(ctx, k, body, &blob.WriterOptions{ContentType: "application/x-test"}); err != nil {
			t.Fatalf("write %q: %v", k, err)
		}
	}
	// A body stored with Content-Encoding: gzip is read as stored: its
	// bytes are what the blob's hash covers (pugmark's encoded blobs).
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(body)
	zw.Close()
	body = gz.Bytes()
	keys = append(keys, "objects/sha256:gzipped")
	if err := sdk.WriteAll(ctx, keys[len(keys)-1], body, &blob.WriterOptions{ContentType: "text/plain", ContentEncoding: "gzip"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readRange(t, direct, keys[len(keys)-1], 0, -1); got != string(body) {
		t.Fatalf("a gzip-encoded body read %d bytes, want the %d stored", len(got), len(body))
	}
	type rng struct{ off, n int64 }
	ranges := []rng{{0, -1}, {0, 10}, {5, 7}, {30, -1}, {3, 0}, {35, 1}}
	for _, k := range keys {
		for _, r := range ranges {
			want, wa := readRange(t, sdk, k, r.off, r.n)
			got, ga := readRange(t, direct, k, r.off, r.n)
			if got != want {
				t.Errorf("%q [%d,%d): direct path read %q, SDK %q", k, r.off, r.n, got, want)
			}
			if ga != wa {
				t.Errorf("%q [%d,%d): direct path attributes %+v, SDK %+v", k, r.off, r.n, ga, wa)
			}
		}
	}
	for _, b := range []*blob.Bucket{direct, sdk} {
		_, err := b.NewReader(ctx, "sessions/missing", nil)
		if gcerrors.Code(err) != gcerrors.NotFound {
			t.Errorf("a missing key: %v (code %v), want NotFound", err, gcerrors.Code(err))
		}
	}
}

// TestS3DirectGetRefusedSignature: an answer S3 refuses (a wrong secret
// key) is PermissionDenied, an error that says so, not a retry.
func TestS3DirectGetRefusedSignature(t *testing.T) {
	srv := s3test.Shared(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	_, u := srv.NewBucket(t)
	ctx := context.Background()
	good, err := drivers.OpenURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if err := good.WriteAll(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	bad, err := drivers.OpenURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.ReadAll(ctx, "k")
	if gcerrors.Code(err) != gcerrors.PermissionDenied || !strings.Contains(err.Error(), "403") {
		t.Fatalf("read with a wrong secret: %v (code %v), want PermissionDenied naming HTTP 403", err, gcerrors.Code(err))
	}
}

type readAttrs struct {
	size        int64
	modTime     string
	contentType string
}

func readRange(t *testing.T, b *blob.Bucket, key string, off, n int64) (string, readAttrs) {
	t.Helper()
	r, err := b.NewRangeReader(context.Background(), key, off, n, nil)
	if err != nil {
		t.Fatalf("read %q [%d,%d): %v", key, off, n, err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read %q [%d,%d): %v", key, off, n, err)
	}
	return string(got), readAttrs{r.Size(), r.ModTime().UTC().String(), r.ContentType()}
}
