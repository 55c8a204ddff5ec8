package drivers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/pugmark/pugfs/internal/s3test"
	"github.com/pugmark/pugfs/layout/drivers"
	"gocloud.dev/blob"
)

// roundProxy is a TCP proxy that counts the connections it accepts and
// holds every request until round requests have arrived since the last
// round was let through: the client then has round requests in flight
// at once, each on a connection of its own.
type roundProxy struct {
	target   string
	round    int
	accepted atomic.Int64

	mu      sync.Mutex
	seen    int
	release chan struct{} // closed when the current round is complete
}

func startRoundProxy(t *testing.T, target string, round int) (*roundProxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &roundProxy{target: target, round: round, release: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			go p.serve(c)
		}
	}()
	return p, "http://" + ln.Addr().String()
}

// arrive counts one request and returns the channel that opens with its
// round.
func (p *roundProxy) arrive() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.release
	p.seen++
	if p.seen == p.round {
		close(p.release)
		p.seen, p.release = 0, make(chan struct{})
	}
	return ch
}

func (p *roundProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { io.Copy(c, s); c.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			for range bytes.Count(buf[:n], []byte(" HTTP/1.1\r\n")) {
				<-p.arrive()
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestS3ClientReusesConnections: requests in flight together reuse the
// connections of earlier ones. With the SDK's default of 10 idle
// connections per host, a second round of 20 requests at once opened 10
// new connections (a TCP and TLS handshake each, on a real endpoint).
// A fault+s3:// URL gets the same client: it once got the SDK's
// defaults, and every fault_latency benchmark measured their cost.
func TestS3ClientReusesConnections(t *testing.T) {
	srv := s3test.Shared(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	for _, tc := range []struct{ name, prefix, query string }{
		{"s3", "", ""},
		{"fault+s3", "fault+", "&fault_latency=1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, u := srv.NewBucket(t)
			checkReusesConnections(t, srv.Endpoint, tc.prefix+u+tc.query)
		})
	}
}

func checkReusesConnections(t *testing.T, endpoint, u string) {
	const round = 20
	px, via := startRoundProxy(t, strings.TrimPrefix(endpoint, "http://"), round)
	u = strings.Replace(u, url.QueryEscape(endpoint), url.QueryEscape(via), 1)
	ctx := context.Background()
	b, err := drivers.OpenURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var c *s3.Client
	if !b.As(&c) {
		t.Fatal("an s3:// bucket is not an S3 client")
	}
	if got := c.Options().ResponseChecksumValidation; got != aws.ResponseChecksumValidationWhenRequired {
		t.Errorf("response checksum validation %v, want when_required (pugfs checks every body itself)", got)
	}
	var keys []string
	for i := range round {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	// The writes go one round, the reads two: every round holds round
	// requests in flight at once.
	all := func(f func(string) error) {
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(k); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	all(func(k string) error {
		return b.WriteAll(ctx, k, []byte(k), &blob.WriterOptions{ContentType: "text/plain"})
	})
	first := px.accepted.Load()
	for range 2 {
		all(func(k string) error {
			got, err := b.ReadAll(ctx, k)
			if err == nil && string(got) != k {
				err = fmt.Errorf("read %s: got %q", k, got)
			}
			return err
		})
	}
	if t.Failed() {
		return
	}
	if n := px.accepted.Load() - first; n != 0 {
		t.Errorf("two rounds of %d reads at once opened %d new connections after the writes' %d, want none", round, n, first)
	}
}
