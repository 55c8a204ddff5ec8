package e2e

import (
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// pacedBody is a request body read at rate bytes a second at most: in a
// proxy, it makes the link to the server that slow, and the client sees
// its connection drain at that pace.
type pacedBody struct {
	io.ReadCloser
	rate int
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if chunk := b.rate / 20; len(p) > chunk {
		p = p[:chunk]
	}
	n, err := b.ReadCloser.Read(p)
	time.Sleep(time.Duration(n) * time.Second / time.Duration(b.rate))
	return n, err
}

// TestReliabilitySlowUpload: a file whose upload takes two and a half
// times the request timeout over a slow but live link commits on close (the
// timeout bounds a request's silence, not its length), and the bucket
// holds it whole. Before, every attempt was cut off after the timeout
// and close(2) gave EIO. An upload that stops moving still times out:
// layout/deadlineblob's tests cover it, TestReliabilityBackendHang the
// backend that never answers.
func TestReliabilitySlowUpload(t *testing.T) {
	const (
		// Two seconds, not one: the local part of a step must not
		// come near it on a loaded machine with the race detector.
		timeout = 2 * time.Second
		rate    = 1 << 20 // bytes a second
		size    = 5 << 20 // five seconds at rate
	)
	bk := openBucket(t, testbucket.S3)
	id := newSession(t, bk)
	endpoint, err := url.Parse(bk.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is held: the bodies of blob uploads are read at rate.
	var paced atomic.Int64
	p := startHoldingProxy(t, endpoint.Query().Get("endpoint"), func(r *http.Request) bool {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/objects/") {
			paced.Add(1)
			r.Body = &pacedBody{ReadCloser: r.Body, rate: rate}
		}
		return false
	})
	m := mount(t, viaProxy(t, bk, p), "--request-timeout="+timeout.String(), "--cache-dir", t.TempDir())

	payload := make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// os.WriteFile returns the error of close(2), which commits.
	if err := os.WriteFile(filepath.Join(sessDir(m, id), "slow.bin"), payload, 0o644); err != nil {
		t.Fatalf("write and close a %d-byte file over a slow but live link: %v\n%s", size, err, m.Log())
	}
	elapsed := time.Since(start)
	if paced.Load() == 0 {
		t.Fatalf("no blob upload went through the paced proxy; the test tested nothing\n%s", m.Log())
	}
	if elapsed < 2*timeout {
		t.Fatalf("the upload took %v, not twice the request timeout %v; the test tested nothing", elapsed, timeout)
	}
	t.Logf("committed %d bytes in %v with --request-timeout=%v", size, elapsed.Round(100*time.Millisecond), timeout)
	wantSlots(t, bk, id, map[string]string{"slow.bin": string(payload)})
}
