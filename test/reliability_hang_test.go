package e2e

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// holdingProxy is a reverse proxy in front of an S3 server that never
// answers the requests hold selects (they wait until the client gives up
// or the test ends) and forwards the rest: a backend that stops answering
// for some keys only.
type holdingProxy struct {
	srv     *httptest.Server
	hold    func(r *http.Request) bool
	release chan struct{}
	held    atomic.Int64 // requests held so far
	waiting atomic.Int64 // requests held right now
}

// startHoldingProxy starts a proxy to the S3 endpoint; it stops at cleanup,
// after letting the held requests go.
func startHoldingProxy(t *testing.T, endpoint string, hold func(r *http.Request) bool) *holdingProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	// The Host header is left as the client sent it: the request is
	// signed with the proxy's address, and the server checks the
	// signature against the Host it receives.
	fwd := httputil.NewSingleHostReverseProxy(target)
	p := &holdingProxy{hold: hold, release: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.hold(r) {
			p.held.Add(1)
			p.waiting.Add(1)
			defer p.waiting.Add(-1)
			select {
			case <-p.release:
			case <-r.Context().Done():
			}
			http.Error(w, "held by the test proxy", http.StatusServiceUnavailable)
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { close(p.release) })
		p.srv.Close()
	})
	return p
}

// viaProxy returns bk with its S3 endpoint replaced by the proxy's.
func viaProxy(t *testing.T, bk *Bucket, p *holdingProxy) *Bucket {
	t.Helper()
	u, err := url.Parse(bk.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("endpoint", p.srv.URL)
	u.RawQuery = q.Encode()
	c := *bk
	c.URL = u.String()
	return &c
}

// TestReliabilityBackendHang: a backend that never answers for one
// session's keys gives EIO on that session, within --request-timeout
// times the store's bounded attempts, with a log line naming the key,
// while another session reads normally meanwhile (tree.md "Reading":
// every backend request has a deadline).
func TestReliabilityBackendHang(t *testing.T) {
	bk := openBucket(t, testbucket.S3)
	held, free := relSession(t, bk), relSession(t, bk)
	big := strings.Repeat("0123456789abcdef", 16<<10) // 256 KiB: a blob, not inline
	relCommitFiles(t, bk, held, map[string]string{"notes.md": "held session\n"})
	relCommitFiles(t, bk, free, map[string]string{"notes.md": "free session\n", "big.bin": big})
	heldDir, err := layout.SessionDir(held)
	if err != nil {
		t.Fatal(err)
	}

	endpoint, err := url.Parse(bk.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Held: any request on a key of the held session, or listing under it.
	// The listings of sessions/ and its partitions still answer.
	p := startHoldingProxy(t, endpoint.Query().Get("endpoint"), func(r *http.Request) bool {
		return strings.Contains(r.URL.Path, heldDir) || strings.HasPrefix(r.URL.Query().Get("prefix"), heldDir)
	})
	// A fresh cache directory and --metadata-ttl=0: nothing the mount
	// knows from before can answer for the bucket.
	m := mount(t, viaProxy(t, bk, p), "--request-timeout=2s", "--metadata-ttl=0", "--cache-dir", t.TempDir())

	// giveUp is when a call is declared hung. The promise is EIO within
	// 30 s (five attempts of 2 s plus backoff per request); this is not
	// a speed test, so only a hang fails it.
	const giveUp = 60 * time.Second
	type result struct {
		what    string
		err     error
		elapsed time.Duration
	}
	results := make(chan result, 2)
	start := time.Now()
	heldPath := filepath.Join(m.Dir, "sessions", held.String())
	go func() {
		_, err := os.ReadFile(filepath.Join(heldPath, "notes.md"))
		results <- result{"cat " + held.String() + "/notes.md", err, time.Since(start)}
	}()
	go func() {
		_, err := os.ReadDir(heldPath)
		results <- result{"ls " + held.String(), err, time.Since(start)}
	}()
	relWait(t, giveUp, "the mount never asked for a key of the held session", func() bool { return p.waiting.Load() > 0 })

	// Meanwhile, the other session reads normally.
	freePath := filepath.Join(m.Dir, "sessions", free.String())
	for name, want := range map[string]string{"notes.md": "free session\n", "big.bin": big} {
		got, err := os.ReadFile(filepath.Join(freePath, name))
		if err != nil || string(got) != want {
			t.Fatalf("reading %s of the session that answers, while the other one hangs: %d bytes, %v\n%s", name, len(got), err, m.Log())
		}
	}
	if _, err := os.ReadDir(freePath); err != nil {
		t.Fatalf("ls of the session that answers, while the other one hangs: %v", err)
	}
	if p.waiting.Load() == 0 {
		t.Logf("the held requests had already timed out when the other session was read")
	}

	timer := time.NewTimer(giveUp)
	defer timer.Stop()
	for range 2 {
		select {
		case r := <-results:
			if !errors.Is(r.err, syscall.EIO) {
				t.Errorf("%s on the session whose backend hangs: %v, want EIO", r.what, r.err)
			}
			t.Logf("%s: %v after %v", r.what, r.err, r.elapsed.Round(100*time.Millisecond))
			if r.elapsed > 30*time.Second {
				t.Logf("note: %s took longer than the 30 s the issue promises (a loaded machine?)", r.what)
			}
		case <-timer.C:
			t.Fatalf("a call on the session whose backend hangs did not return within %v: it hangs\n%s", giveUp, m.Log())
		}
	}
	if p.held.Load() == 0 {
		t.Fatalf("no request was held; the test did not test anything")
	}

	// The log says which key did not answer, and why.
	var line string
	relWait(t, 10*time.Second, "a log line naming a held key and the request timeout", func() bool {
		for _, l := range strings.Split(m.Log(), "\n") {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, heldDir) &&
				strings.Contains(l, "errno=\"input/output error\"") && strings.Contains(l, "request timeout") {
				line = l
				return true
			}
		}
		return false
	})
	t.Logf("mount log: %s", line)
}
