package cloudtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/pugmark/pugfs/internal/testproc"
	"github.com/pugmark/pugfs/layout/drivers/gcsfix"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"google.golang.org/api/option"
)

// GCSEmulatorEnv is the variable the Google Cloud storage client (and so
// gcsblob and pugfs) reads to talk to an emulator at HOST:PORT instead of
// storage.googleapis.com, without credentials.
const GCSEmulatorEnv = "STORAGE_EMULATOR_HOST"

// GCSServer is a running fake-gcs-server with the memory backend. Host is
// "127.0.0.1:PORT", the value of STORAGE_EMULATOR_HOST.
type GCSServer struct{ server }

var sharedGCS testproc.Shared[GCSServer]

// StartGCS starts a fake-gcs-server of its own for tb and stops it when tb
// ends. It fails tb if the emulator cannot be started.
func StartGCS(tb testing.TB) *GCSServer {
	tb.Helper()
	return startServer(tb, startGCS)
}

// SharedGCS returns the fake-gcs-server shared by every test of this test
// binary, starting it on first use. It fails tb (never skips it) if the
// emulator cannot be started. [Main] stops it.
func SharedGCS(tb testing.TB) *GCSServer {
	tb.Helper()
	s, err := sharedGCS.Get(startGCS)
	if err != nil {
		tb.Fatalf("cloudtest: shared fake-gcs-server: %v", err)
	}
	return s
}

func startGCS() (*GCSServer, error) {
	bin, err := testproc.Tool("fake-gcs-server")
	if err != nil {
		return nil, err
	}
	s := &GCSServer{}
	if err := s.start(testproc.Server{Name: "fake-gcs-server", Probe: probeGCS, Argv: func(port int, host string) []string {
		return []string{bin, "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1",
			"-port", strconv.Itoa(port), "-public-host", host, "-external-url", "http://" + host,
			"-log-level", "warn"}
	}}); err != nil {
		return nil, err
	}
	return s, nil
}

// probeGCS lists buckets once: a JSON answer from the storage API proves
// the port is this emulator's.
func probeGCS(host string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + host + "/storage/v1/b?project=test")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("list buckets: HTTP %d", resp.StatusCode)
	}
	return nil
}

// URL returns the gocloud URL of bucket on this server; a process opens
// it with [GCSServer.Env] in its environment.
func (s *GCSServer) URL(bucket string) string { return "gs://" + bucket }

// Env returns what a process needs in its environment, besides the URL,
// to open buckets on this emulator: STORAGE_EMULATOR_HOST, which also
// turns authentication off.
func (s *GCSServer) Env() []string { return []string{GCSEmulatorEnv + "=" + s.Host} }

// Client returns a storage client for the emulator reached at host (this
// server's Host, or a proxy in front of it), without credentials and
// without reading STORAGE_EMULATOR_HOST, so tests in one binary may use
// several.
func Client(ctx context.Context, host string) (*storage.Client, error) {
	return storage.NewClient(ctx, option.WithoutAuthentication(), option.WithEndpoint("http://"+host+"/storage/v1/"))
}

// CreateBucket creates an empty bucket called name.
func (s *GCSServer) CreateBucket(ctx context.Context, name string) error {
	c, err := Client(ctx, s.Host)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Bucket(name).Create(ctx, "test", nil); err != nil {
		return fmt.Errorf("create bucket %q: %w\nemulator output:\n%s", name, err, s.Output())
	}
	return nil
}

// NewBucket creates a fresh, uniquely named, empty bucket and opens it;
// the handle is closed when tb ends. The URL is [GCSServer.URL]'s.
func (s *GCSServer) NewBucket(tb testing.TB) (*blob.Bucket, string) {
	tb.Helper()
	b, name := s.newBucket(tb, s.CreateBucket, s.OpenBucket)
	return b, s.URL(name)
}

// OpenBucket opens another handle, with its own client, on the existing
// bucket name, closed when tb ends. Handles share nothing but the bucket,
// like two processes.
func (s *GCSServer) OpenBucket(tb testing.TB, name string) *blob.Bucket {
	tb.Helper()
	b, err := OpenGCSBucket(context.Background(), s.Host, name)
	if err != nil {
		tb.Fatalf("cloudtest: open gcs bucket %q: %v", name, err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// OpenGCSBucket opens bucket name on the emulator reached at host (a
// proxy in front of one, say) through gcsblob.
func OpenGCSBucket(ctx context.Context, host, name string) (*blob.Bucket, error) {
	c, err := Client(ctx, host)
	if err != nil {
		return nil, err
	}
	b, err := gcsblob.OpenBucket(ctx, nil, name, &gcsblob.Options{Client: c})
	if err != nil {
		return nil, err
	}
	return gcsfix.Wrap(b), nil
}
