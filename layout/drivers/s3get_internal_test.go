package drivers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/pugmark/pugfs/layout/schedblob"
	"gocloud.dev/blob"
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
	b := openTestS3(t, srv.URL)
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

// openDirect opens the S3 driver on a test server answering with h,
// behind a request scheduler, and returns a ranged read through both.
func openDirect(t *testing.T, h http.HandlerFunc) (read func(key string, off, n int64) ([]byte, error), s *schedblob.Scheduler) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	b := openTestS3(t, srv.URL)
	s = schedblob.New(8)
	sb := schedblob.Wrap(b, s)
	return func(key string, off, n int64) ([]byte, error) {
		r, err := sb.NewRangeReader(context.Background(), key, off, n, nil)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return io.ReadAll(r)
	}, s
}

// TestDirectGetRangeAnswers: the bytes of a ranged read are the range,
// whatever the server does with Range. A server or proxy that ignores it
// answers 200 with the whole object, which was handed out as the range
// (from offset 0: a healthy blob failed its digest and was held bad); a
// 206 that starts elsewhere is an error.
func TestDirectGetRangeAnswers(t *testing.T) {
	const object = "0123456789"
	for _, c := range []struct {
		name    string
		answer  func(w http.ResponseWriter, r *http.Request)
		off, n  int64
		want    string
		wantErr bool
	}{
		{"206 as asked", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 2-4/10")
			w.WriteHeader(http.StatusPartialContent)
			io.WriteString(w, "234")
		}, 2, 3, "234", false},
		{"200, Range ignored", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, object)
		}, 2, 3, "234", false},
		{"200, Range ignored, to the end", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, object)
		}, 7, -1, "789", false},
		{"206 from elsewhere", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 0-2/10")
			w.WriteHeader(http.StatusPartialContent)
			io.WriteString(w, "012")
		}, 2, 3, "", true},
		{"206 longer than asked", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 2-9/10")
			w.WriteHeader(http.StatusPartialContent)
			io.WriteString(w, "23456789")
		}, 2, 3, "234", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			read, _ := openDirect(t, c.answer)
			got, err := read("sessions/a/b", c.off, c.n)
			switch {
			case c.wantErr && err == nil:
				t.Fatalf("read %q, want an error", got)
			case !c.wantErr && (err != nil || string(got) != c.want):
				t.Fatalf("read %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestDirectGetSlowDownThrottles: a 503 SlowDown to the direct GET path
// lowers the scheduler's limit, as the same answer to the SDK's path
// does: the direct path carries most reads, and its errors said neither
// their status nor their code.
func TestDirectGetSlowDownThrottles(t *testing.T) {
	read, s := openDirect(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
	})
	for _, key := range []string{"x/../y" /* the SDK's path */, "sessions/a/b" /* direct */} {
		before := s.Stats().Throttled
		if _, err := read(key, 0, 3); err == nil {
			t.Fatalf("%s: read succeeded against a 503", key)
		}
		if s.Stats().Throttled == before {
			t.Errorf("%s: a 503 SlowDown did not count as throttling", key)
		}
	}
}

// openTestS3 opens the S3 driver on the test server at endpoint, in
// eu-west-3 with static test keys and nothing else from the environment;
// the test closes it.
func openTestS3(t *testing.T, endpoint string) *blob.Bucket {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	u, _ := url.Parse("s3://bkt?endpoint=" + url.QueryEscape(endpoint) + "&use_path_style=true&disable_https=true&region=eu-west-3")
	b, err := OpenS3(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
