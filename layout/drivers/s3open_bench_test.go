package drivers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/pugmark/pugfs/layout/drivers"
)

// BenchmarkS3SmallGet measures the client side of one small GET through
// OpenS3's client (an httptest server answers at once): the CPU a mount
// spends per request, which bounds how many small objects a second it can
// read on a remote bucket, where thousands are in flight over a listing.
func BenchmarkS3SmallGet(b *testing.B) {
	body := make([]byte, 2048)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		h.Set("Last-Modified", "Wed, 02 Dec 2026 10:00:00 GMT")
		h.Set("Content-Type", "application/octet-stream")
		w.Write(body)
	}))
	b.Cleanup(srv.Close)
	b.Setenv("AWS_ACCESS_KEY_ID", "bench")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "bench-secret")
	u, err := url.Parse("s3://bench?endpoint=" + url.QueryEscape(srv.URL) + "&use_path_style=true&disable_https=true&region=us-east-1")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bkt, err := drivers.OpenS3(ctx, u)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bkt.Close() })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := bkt.ReadAll(ctx, "sessions/x/snapshots/00000001.json"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
