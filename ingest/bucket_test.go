package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/cloudtest"
)

// TestOpenGCSGzipSource: ln -s of a GCS object stored with
// Content-Encoding: gzip ingests its stored bytes and their encoding.
// The source bucket was opened without gcsfix, so GCS decoded the body
// on the way out, past the size its HEAD gave, and the ingestion was
// refused as a source that grew (review 15).
func TestOpenGCSGzipSource(t *testing.T) {
	srv := cloudtest.StartGCS(t)
	ctx := context.Background()
	if err := srv.CreateBucket(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	c, err := cloudtest.Client(ctx, srv.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Repeat("hello pugfs\n", 1000)))
	zw.Close()
	w := c.Bucket("src").Object("in/x.txt").NewWriter(ctx)
	w.ContentEncoding, w.ContentType = "gzip", "text/plain"
	if _, err := w.Write(gz.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(cloudtest.GCSEmulatorEnv, srv.Host)
	ps, err := ParsePrefixes([]string{"gs://src/in/"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := (&Policy{Prefixes: ps}).Open(ctx, "gs://src/in/x.txt", Caller{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got, err := io.ReadAll(src)
	if err != nil {
		t.Fatalf("reading a gzip-encoded GCS source: %v", err)
	}
	if !bytes.Equal(got, gz.Bytes()) || src.ContentEncoding != "gzip" || src.Size != int64(gz.Len()) {
		t.Errorf("read %d bytes (equal to the stored %d: %v), encoding %q, size %d; want the stored bytes, gzip", len(got), gz.Len(), bytes.Equal(got, gz.Bytes()), src.ContentEncoding, src.Size)
	}
}
