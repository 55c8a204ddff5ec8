package drivers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/drivers"
)

// TestS3BodyWithoutLength: a server (or a proxy in front of one) may
// stream a GET's body without a Content-Length. The reader then reports
// no size (-1), and the store read the manifest with a buffer grown by
// that size: a panic that took the whole mount down at its first read.
// Both GET paths (the direct one and the SDK's) must read the body.
func TestS3BodyWithoutLength(t *testing.T) {
	id := layout.NewSessionID(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	want := &layout.Manifest{Session: id, Name: "streamed", FirstSequenceNumber: 1}
	body, err := layout.EncodeManifest(want)
	if err != nil {
		t.Fatal(err)
	}
	key, err := layout.ManifestKey(id)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/"+key) {
			http.Error(w, "<Error><Code>NoSuchKey</Code></Error>", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // headers out before the body: chunked, no length
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	for _, path := range []string{"direct", "sdk"} {
		t.Run(path, func(t *testing.T) {
			u := "s3://bkt?endpoint=" + srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1"
			if path == "sdk" {
				u += "&direct_get=false"
			}
			b, err := drivers.OpenURL(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			got, err := layout.New(b, nil).LoadManifest(ctx, id)
			if err != nil {
				t.Fatalf("LoadManifest: %v", err)
			}
			if got.Session != id || got.Name != want.Name {
				t.Fatalf("LoadManifest = %+v, want %+v", got, want)
			}
		})
	}
}
