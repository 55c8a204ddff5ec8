package drivers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestDirectGetRequest checks what the direct path sends: the key in the
// path escaped as the SDK escapes it, the range, a SigV4 signature for
// s3 in the URL's region, and none of the SDK's per-request headers (so
// the read did not go through the SDK); a key s3blob would escape goes
// the SDK's way.
func TestDirectGetRequest(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		w.Header().Set("Content-Range", "bytes 2-4/10")
		w.WriteHeader(http.StatusPartialContent)
		w.Write([]byte("234"))
	}))
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	u, _ := url.Parse("s3://bkt?endpoint=" + url.QueryEscape(srv.URL) + "&use_path_style=true&disable_https=true&region=eu-west-3")
	b, err := OpenS3(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		key, path string
		direct    bool
	}{
		{"sessions/year=2026/x:y/a b+c", "/bkt/sessions/year%3D2026/x%3Ay/a%20b%2Bc", true},
		{"x/../y", "", false},
	} {
		got = nil
		r, err := b.NewRangeReader(context.Background(), tc.key, 2, 3, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.key, err)
		}
		if r.Size() != 10 {
			t.Errorf("%q: size %d, want 10 (from Content-Range)", tc.key, r.Size())
		}
		r.Close()
		if len(got) != 1 {
			t.Fatalf("%q: %d requests, want 1", tc.key, len(got))
		}
		req := got[0]
		sdk := req.Header.Get("Amz-Sdk-Invocation-Id") != ""
		if sdk == tc.direct {
			t.Errorf("%q: went the SDK's way: %v, want %v", tc.key, sdk, !tc.direct)
		}
		if !tc.direct {
			continue
		}
		if req.URL.EscapedPath() != tc.path {
			t.Errorf("%q: path %s, want %s", tc.key, req.URL.EscapedPath(), tc.path)
		}
		if rg := req.Header.Get("Range"); rg != "bytes=2-4" {
			t.Errorf("%q: Range %q, want bytes=2-4", tc.key, rg)
		}
		auth := req.Header.Get("Authorization")
		if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKTEST/") || !strings.Contains(auth, "/eu-west-3/s3/aws4_request") {
			t.Errorf("%q: Authorization %q, want SigV4 for s3 in eu-west-3", tc.key, auth)
		}
	}
}
