// Package s3test runs a real S3 server, versitygw with its posix backend, for
// tests, and opens gocloud buckets on it.
//
// A test that needs its own server calls [Start]; tests that only need fresh
// buckets share one server per test binary through [Shared], and the
// package's TestMain calls [Main] so that server is stopped and its files
// removed when the tests are done:
//
//	func TestMain(m *testing.M) { s3test.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		b, url := s3test.Shared(t).NewBucket(t)
//		...
//	}
//
// The versitygw binary is $PUGFS_TOOLS/versitygw, or .tools/bin/versitygw in
// the module root when PUGFS_TOOLS is unset; `make deps` builds it. A missing
// binary or a server that does not come up fails the test; nothing is skipped.
//
// # Conditional writes
//
// Create-if-absent is blob.WriterOptions{IfNotExist: true}; a second create
// fails with gcerrors.FailedPrecondition.
//
// Compare-and-swap (replace only if the object's ETag is still the one read)
// has no field in blob.WriterOptions, but s3blob exposes the upload request
// through WriterOptions.BeforeWrite, and the transfer manager copies its
// IfMatch onto PutObject (single-part uploads) and onto
// CompleteMultipartUpload (multipart uploads), so one hook covers both:
//
//	attrs, _ := b.Attributes(ctx, key) // attrs.ETag is quoted: "\"9a0364b9...\""
//	err := b.WriteAll(ctx, key, data, &blob.WriterOptions{
//		BeforeWrite: func(as func(any) bool) error {
//			var in *transfermanager.UploadObjectInput
//			if !as(&in) {
//				return errors.New("not an s3blob bucket")
//			}
//			in.IfMatch = aws.String(attrs.ETag)
//			return nil
//		},
//	})
//
// A stale ETag fails the write with gcerrors.Code(err) ==
// gcerrors.FailedPrecondition (S3 error code "PreconditionFailed", HTTP 412);
// the same is reachable with b.ErrorAs(err, &apiErr) for an apiErr of type
// smithy.APIError. If-Match on a key that does not exist fails with
// gcerrors.NotFound (S3 "NoSuchKey", HTTP 404). TestCompareAndSwap shows it
// against versitygw.
//
// Bodies of 16 MiB or more are uploaded in parts and the condition is only
// checked by CompleteMultipartUpload, after every part has been sent; the
// transfer manager then also logs the refusal with the standard logger.
//
// versitygw answers a refused conditional single-part PUT (If-Match or
// If-None-Match) as soon as it has the headers and closes the connection
// without reading the body. For bodies up to 2 MiB the client has sent
// everything by then and sees the 412; for larger bodies, about one refused
// write in five instead fails with a connection reset (ECONNRESET, after the
// SDK's three attempts), which gcerrors reports as Unknown. Conditional
// writes that must tell "refused" from "failed" should keep their bodies
// small, or treat Unknown as "perhaps refused" and look at the object.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/pugmark/pugfs/internal/testproc"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// Credentials and region of every server this package starts.
const (
	AccessKey = "pugfs-test-access"
	SecretKey = "pugfs-test-secret-key"
	Region    = "us-east-1"
)

// BinaryEnv names the environment variable holding the directory of the
// project's test tools; the Makefile sets it to <module root>/.tools/bin.
const BinaryEnv = testproc.BinaryEnv

// readyTimeout bounds how long Start waits for the server to answer.
const readyTimeout = 30 * time.Second

// Server is a running versitygw process serving the buckets under Root.
type Server struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:PORT".
	Endpoint string
	// Root is the directory the posix backend serves; each subdirectory
	// is a bucket.
	Root string

	removeRoot bool // Stop removes Root (Shared's root is not a TempDir)
	p          *testproc.Process
	seq        atomic.Uint64
}

// Pid returns the server's process ID (a benchmark reads its CPU time).
func (s *Server) Pid() int { return s.p.Pid() }

// Start starts a server of its own for tb and stops it when tb ends. It
// fails tb if the server cannot be started.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start(tb.TempDir(), false)
	if err != nil {
		tb.Fatalf("s3test: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

var shared struct {
	once sync.Once
	mu   sync.Mutex // guards srv and err against Main's stop
	srv  *Server
	err  error
}

// Shared returns the server shared by every test of this test binary,
// starting it on first use. It fails tb if the server cannot be started.
//
// [Main] stops the shared server when the tests are done. Without Main the
// server is killed when the test binary exits (it runs with a parent-death
// signal), but its root directory stays behind until a later Shared in some
// test binary sweeps it up.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() {
		sweepStaleRoots()
		root, err := os.MkdirTemp("", rootPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			shared.err = err
			return
		}
		srv, err := start(root, true)
		shared.mu.Lock()
		shared.srv, shared.err = srv, err
		shared.mu.Unlock()
		if err != nil {
			os.RemoveAll(root)
		}
	})
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.err != nil {
		tb.Fatalf("s3test: shared server: %v", shared.err)
	}
	if shared.srv == nil {
		tb.Fatalf("s3test: shared server already stopped (Shared called after Main's tests finished)")
	}
	return shared.srv
}

// Main runs the tests and then stops the shared server, if one was started,
// and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared server if it is running, for a TestMain that
// does more than [Main]. Shared fails after it.
func StopShared() {
	shared.once.Do(func() {}) // a later Shared must not start a new server
	shared.mu.Lock()
	srv := shared.srv
	shared.srv = nil
	shared.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// rootPrefix starts the name of every shared server's root directory in
// os.TempDir; the owning test binary's pid follows it.
const rootPrefix = "pugfs-s3test-"

// sweepStaleRoots removes the root directories of shared servers whose test
// binary has exited without Main.
func sweepStaleRoots() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), rootPrefix+"*"))
	for _, dir := range dirs {
		rest := strings.TrimPrefix(filepath.Base(dir), rootPrefix)
		pidText, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(dir)
		}
	}
}

// Binary returns the path of the versitygw binary, or an error that says how
// to get it.
func Binary() (string, error) { return testproc.Tool("versitygw") }

// start starts versitygw serving root, retrying when another process takes
// the chosen port first.
func start(root string, removeRoot bool) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	return startBin(bin, root, removeRoot)
}

// StartWith starts the versitygw binary bin serving root (each
// subdirectory a bucket) on a free loopback port, without a testing.TB:
// for programs such as the benchmark harness, which keep root across runs
// (Stop leaves it in place).
func StartWith(bin, root string) (*Server, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return startBin(bin, root, false)
}

// ModuleRoot is the directory holding the project's go.mod, found by
// walking up from the working directory.
func ModuleRoot() (string, error) { return testproc.ModuleRoot() }

func startBin(bin, root string, removeRoot bool) (*Server, error) {
	p, host, err := versitygw(bin, root).Start()
	if err != nil {
		return nil, err
	}
	return &Server{Endpoint: "http://" + host, Root: root, removeRoot: removeRoot, p: p}, nil
}

// versitygw says how to start versitygw serving root with this package's
// credentials.
func versitygw(bin, root string) testproc.Server {
	return testproc.Server{
		Name: "versitygw",
		// --keep-alive: versitygw closes every connection after one
		// request by default (Connection: close), which no cloud S3
		// does; a client then pays a TCP connect per request, and a
		// benchmark measures that instead of the requests.
		Argv: func(_ int, host string) []string {
			return []string{bin, "--port", host, "--quiet", "--keep-alive", "posix", root}
		},
		Env: []string{
			"ROOT_ACCESS_KEY=" + AccessKey,
			"ROOT_SECRET_KEY=" + SecretKey,
			"VGW_REGION=" + Region,
		},
		Probe:        probe,
		ReadyTimeout: readyTimeout,
	}
}

// probe sends a signed ListBuckets to the server at host: an answer proves
// the port is served by a versitygw with these credentials.
func probe(host string) error {
	// One attempt per poll: the SDK's own retries would back off for
	// seconds while the server is still binding its port.
	client := s3.New(clientOptions("http://"+host), func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := client.ListBuckets(ctx, &s3.ListBucketsInput{})
	return err
}

// Stop kills the server's process group, waits for it and, for the shared
// server, removes its root directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.p.Stop()
	if s.removeRoot {
		os.RemoveAll(s.Root)
	}
}

// Output returns the tail of what the server has printed.
func (s *Server) Output() string { return s.p.Output() }

// URL returns the gocloud URL of bucket on this server. Opening it needs the
// credentials from [Server.Env] in the environment.
func (s *Server) URL(bucket string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("use_path_style", "true")
	q.Set("disable_https", "true")
	q.Set("region", Region)
	return "s3://" + bucket + "?" + q.Encode()
}

// Env returns the environment variables a process needs, besides the URL
// from [Server.URL], to open buckets on this server with gocloud: the
// credentials, and settings that keep the AWS SDK from looking for others.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + SecretKey,
		"AWS_SESSION_TOKEN=",
		"AWS_REGION=" + Region,
		"AWS_PROFILE=",
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// Client returns a new S3 client for this server with its static
// credentials; it does not read the environment or AWS config files.
func (s *Server) Client() *s3.Client { return s3.New(clientOptions(s.Endpoint)) }

func clientOptions(endpoint string) s3.Options {
	return s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	}
}

// CreateBucket creates an empty bucket called name.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	_, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	if err != nil {
		return fmt.Errorf("create bucket %q: %w\nserver output:\n%s", name, err, s.Output())
	}
	return nil
}

// NewBucket creates a fresh, uniquely named, empty bucket and opens it. The
// handle is closed and the bucket's files removed when tb ends. The URL is
// the one [Server.URL] gives for the bucket.
func (s *Server) NewBucket(tb testing.TB) (*blob.Bucket, string) {
	tb.Helper()
	name := testproc.BucketName(tb.Name(), s.seq.Add(1))
	if err := s.CreateBucket(context.Background(), name); err != nil {
		tb.Fatalf("s3test: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(filepath.Join(s.Root, name)) })
	return s.OpenBucket(tb, name), s.URL(name)
}

// OpenBucket opens another handle, with its own S3 client, on the existing
// bucket name, and closes it when tb ends. Handles do not share state, so
// two of them on one bucket behave like two processes.
func (s *Server) OpenBucket(tb testing.TB, name string) *blob.Bucket {
	tb.Helper()
	b, err := s3blob.OpenBucket(context.Background(), s.Client(), name, nil)
	if err != nil {
		tb.Fatalf("s3test: open bucket %q: %v", name, err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}
