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
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
const BinaryEnv = "PUGFS_TOOLS"

// readyTimeout bounds how long Start waits for the server to answer; a
// variable for tests.
var readyTimeout = 30 * time.Second

// maxOutput is how much of the server's output is kept for failure reports.
const maxOutput = 64 << 10

// Server is a running versitygw process serving the buckets under Root.
type Server struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:PORT".
	Endpoint string
	// Root is the directory the posix backend serves; each subdirectory
	// is a bucket.
	Root string

	removeRoot bool // Stop removes Root (Shared's root is not a TempDir)
	out        *tailBuffer
	proc       *os.Process
	exited     chan struct{} // closed when the process has been reaped
	waitErr    error         // set before exited is closed
	stopOnce   sync.Once
	seq        atomic.Uint64
}

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
func Binary() (string, error) {
	dir := os.Getenv(BinaryEnv)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", fmt.Errorf("%s is unset and %v", BinaryEnv, err)
		}
		dir = filepath.Join(root, ".tools", "bin")
	}
	path := filepath.Join(dir, "versitygw")
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("versitygw not found at %s (%v): run `make deps` in the module root", path, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable: run `make deps` in the module root", path)
	}
	return path, nil
}

// moduleRoot walks up from the working directory to the directory that
// holds go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod in %s or any parent directory", wd)
		}
		dir = parent
	}
}

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
func ModuleRoot() (string, error) { return moduleRoot() }

func startBin(bin, root string, removeRoot bool) (*Server, error) {
	var lastErr error
	for range 5 {
		addr, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("pick a port: %w", err)
		}
		s, err := launch(bin, addr, root)
		if err == nil {
			s.removeRoot = removeRoot
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, lastErr
}

// freePort returns a loopback address with a port that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

var errPortTaken = errors.New("port taken")

// launch starts one versitygw process on addr and waits until it answers
// signed requests.
func launch(bin, addr, root string) (*Server, error) {
	s := &Server{
		Endpoint: "http://" + addr,
		Root:     root,
		out:      &tailBuffer{max: maxOutput},
		exited:   make(chan struct{}),
	}
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", root)
	cmd.Env = append(os.Environ(),
		"ROOT_ACCESS_KEY="+AccessKey,
		"ROOT_SECRET_KEY="+SecretKey,
		"VGW_REGION="+Region,
	)
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// Kill the server if the test binary dies without stopping it.
		Pdeathsig: syscall.SIGKILL,
	}
	// The parent-death signal fires when the thread that started the child
	// exits, not the process, so start and reap the child on a thread that
	// stays locked (and alive) for as long as the child runs.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		s.proc = cmd.Process
		started <- nil
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}

	if err := s.waitReady(); err != nil {
		s.Stop()
		out := s.out.String()
		err = fmt.Errorf("versitygw on %s: %w\nserver output:\n%s", addr, err, out)
		if strings.Contains(out, "address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, err
	}
	return s, nil
}

// waitReady polls the server with a signed ListBuckets until it succeeds,
// which also proves the port is served by this process with these
// credentials.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	// One attempt per poll: the SDK's own retries would back off for
	// seconds while the server is still binding its port.
	client := s3.New(s.clientOptions(), func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	var lastErr error
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.ListBuckets(attempt, &s3.ListBucketsInput{})
		cancelAttempt()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-s.exited:
			return fmt.Errorf("server exited before answering (%v)", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("server not ready after %v: %v", readyTimeout, lastErr)
		case <-time.After(delay):
		}
	}
}

// Stop kills the server's process group, waits for it and, for the shared
// server, removes its root directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.proc != nil {
			// Negative pid: the whole process group.
			_ = syscall.Kill(-s.proc.Pid, syscall.SIGKILL)
			<-s.exited
		}
		if s.removeRoot {
			os.RemoveAll(s.Root)
		}
	})
}

// Output returns the tail of what the server has printed.
func (s *Server) Output() string { return s.out.String() }

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
func (s *Server) Client() *s3.Client { return s3.New(s.clientOptions()) }

func (s *Server) clientOptions() s3.Options {
	return s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
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
	name := s.bucketName(tb.Name())
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

// bucketName returns a bucket name unique on this server that is derived
// from the test's name, within S3's rules: 3 to 63 characters of lower-case
// letters, digits and hyphens, starting and ending with a letter or digit.
func (s *Server) bucketName(testName string) string {
	n := s.seq.Add(1)
	var b strings.Builder
	dash := true // suppress leading and repeated hyphens
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	suffix := "-" + strconv.FormatUint(n, 10)
	stem := b.String()
	if limit := 63 - len("t-") - len(suffix); len(stem) > limit {
		stem = stem[:limit]
	}
	return "t-" + strings.TrimRight(stem, "-") + suffix
}

// tailBuffer keeps the last max bytes written to it; it is safe for
// concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "[...]" + t.buf.String()
	}
	return t.buf.String()
}
