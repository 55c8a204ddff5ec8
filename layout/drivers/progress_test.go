package drivers_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/cloudtest"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/drivers"
)

// pacedBody is a request body read at rate bytes a second at most; it
// counts the bytes in n.
type pacedBody struct {
	io.ReadCloser
	rate int
	n    *atomic.Int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if chunk := b.rate / 20; len(p) > chunk {
		p = p[:chunk]
	}
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	time.Sleep(time.Duration(n) * time.Second / time.Duration(b.rate))
	return n, err
}

// pacedProxy forwards to targetHost and reads every request body at rate:
// a slow link for uploads. It adds the bytes it paced to paced. With
// keepHost, the requests keep the Host they were sent to (S3 signs it);
// without, they carry targetHost (fake-gcs-server routes reads by Host).
func pacedProxy(t *testing.T, targetHost string, keepHost bool, rate int, paced *atomic.Int64) *httptest.Server {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: targetHost}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		if keepHost {
			pr.Out.Host = pr.In.Host
		}
		if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
			pr.Out.Body = &pacedBody{ReadCloser: pr.Out.Body, rate: rate, n: paced}
		}
	}}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv
}

// TestSlowUploadCommits uploads, through the client OpenURL builds for
// each cloud backend and a deadline of two seconds per request, a body
// that a slow but live link takes four seconds to carry: the upload is
// sent in one request in Close, and must land (deadlineblob counts the
// bytes leaving as progress), where it used to be cut off.
func TestSlowUploadCommits(t *testing.T) {
	const (
		// The timeout leaves the local part of a step (copying the
		// body into the driver's buffer) room on a loaded machine with
		// the race detector: it has taken a 1 s one.
		timeout = 2 * time.Second
		rate    = 768 << 10 // bytes a second
		size    = 3 << 20   // four seconds at rate
	)
	for _, tc := range []struct {
		kind     testbucket.Kind
		keepHost bool // see pacedProxy
		// url opens a fresh bucket and returns its URL through the
		// proxy that open(emulator) starts, its environment set.
		url func(t *testing.T, proxy func(host string) string) string
	}{
		{testbucket.S3, true, func(t *testing.T, proxy func(string) string) string {
			u, env := testbucket.URL(t, testbucket.Open(t, testbucket.S3))
			setenv(t, env)
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			q := pu.Query()
			ep, err := url.Parse(q.Get("endpoint"))
			if err != nil {
				t.Fatal(err)
			}
			q.Set("endpoint", "http://"+proxy(ep.Host))
			pu.RawQuery = q.Encode()
			return pu.String()
		}},
		{testbucket.Azure, true, func(t *testing.T, proxy func(string) string) string {
			srv := cloudtest.SharedAzure(t)
			_, u := srv.NewBucket(t)
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			setenv(t, srv.Env())
			return cloudtest.AzureURL(proxy(srv.Host), pu.Host)
		}},
		{testbucket.GCS, false, func(t *testing.T, proxy func(string) string) string {
			srv := cloudtest.SharedGCS(t)
			_, u := srv.NewBucket(t)
			t.Setenv("STORAGE_EMULATOR_HOST", proxy(srv.Host))
			return u
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			var paced atomic.Int64
			u := tc.url(t, func(host string) string {
				return strings.TrimPrefix(pacedProxy(t, host, tc.keepHost, rate, &paced).URL, "http://")
			})
			inner, err := drivers.OpenURL(bg, u)
			if err != nil {
				t.Fatal(err)
			}
			b := deadlineblob.Wrap(inner, timeout)
			defer b.Close()
			body := make([]byte, size)
			if _, err := rand.Read(body); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := b.WriteAll(bg, "slow", body, nil); err != nil {
				t.Fatalf("upload of %d bytes at %d bytes/s with a %v request timeout: %v", size, rate, timeout, err)
			}
			if n := paced.Load(); n < size {
				t.Fatalf("%d bytes went through the pace of the proxy, want at least %d; the test tested nothing", n, size)
			}
			t.Logf("uploaded %d bytes in %v", size, time.Since(start).Round(100*time.Millisecond))
			got, err := b.ReadAll(bg, "slow")
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("read back %d bytes, %v; want the %d uploaded", len(got), err, size)
			}
		})
	}
}

// setenv sets every NAME=value of env for the test.
func setenv(t *testing.T, env []string) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}
