package cloudtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
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

	"gocloud.dev/blob"
)

// BinaryEnv names the environment variable holding the directory of the
// project's test tools; the Makefile sets it to <module root>/.tools/bin.
// It is the same variable package s3test reads.
const BinaryEnv = "PUGFS_TOOLS"

// readyTimeout bounds how long a start waits for an emulator to answer.
// Azurite is a node program and takes a second or two on a loaded
// machine; the bound is generous so that a slow start is not a failure.
var readyTimeout = 60 * time.Second

// maxOutput is how much of an emulator's output is kept for failure
// reports.
const maxOutput = 64 << 10

// binary returns the path of the tool name in the project's tool
// directory, or an error that says how to get it.
func binary(name string) (string, error) {
	dir := os.Getenv(BinaryEnv)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", fmt.Errorf("%s is unset and %v", BinaryEnv, err)
		}
		dir = filepath.Join(root, ".tools", "bin")
	}
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s not found at %s (%v): run `make deps` in the module root", name, path, err)
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

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// errPortTaken marks a start that lost its port to another process, which
// is worth another try on another port.
var errPortTaken = errors.New("port taken")

// startOnFreePort starts the emulator name (argv gives its command line
// for a port and its "127.0.0.1:PORT") on a free loopback port and waits
// until probe succeeds against that host. A start that lost its port to
// another process is tried again on another port, five times at most.
func startOnFreePort(name string, argv func(port int, host string) []string, probe func(host string) error) (*process, string, error) {
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, "", fmt.Errorf("pick a port: %w", err)
		}
		host := "127.0.0.1:" + strconv.Itoa(port)
		p, err := launch(name, argv(port, host), nil)
		if err != nil {
			return nil, "", err
		}
		err = p.waitReady(host, func() error { return probe(host) })
		if err == nil {
			return p, host, nil
		}
		p.stop()
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, "", lastErr
}

// server is what every emulator of this package has: its address, its
// process and a counter that keeps bucket names unique.
type server struct {
	// Host is "127.0.0.1:PORT".
	Host string

	p   *process
	seq atomic.Uint64
}

// Stop kills the emulator. It is safe to call more than once.
func (s *server) Stop() { s.p.stop() }

// Output returns the tail of what the emulator has printed.
func (s *server) Output() string { return s.p.out.String() }

// newBucket creates a fresh, uniquely named, empty bucket or container
// with create and opens it with open.
func (s *server) newBucket(tb testing.TB, create func(context.Context, string) error, open func(testing.TB, string) *blob.Bucket) (*blob.Bucket, string) {
	tb.Helper()
	name := bucketName(tb.Name(), s.seq.Add(1))
	if err := create(context.Background(), name); err != nil {
		tb.Fatalf("cloudtest: %v", err)
	}
	return open(tb, name), name
}

// startServer starts a server of its own for tb with start and stops it
// when tb ends. It fails tb if the emulator cannot be started.
func startServer[S interface{ Stop() }](tb testing.TB, start func() (S, error)) S {
	tb.Helper()
	s, err := start()
	if err != nil {
		tb.Fatalf("cloudtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// process is one emulator process, killed with its process group by stop.
type process struct {
	name     string
	out      *tailBuffer
	proc     *os.Process
	exited   chan struct{} // closed when the process has been reaped
	waitErr  error         // set before exited is closed
	stopOnce sync.Once
	dir      string // working directory, removed by stop
}

// launch starts argv in a fresh working directory, with a parent-death
// signal so that a test binary that dies without stopping it does not
// leave it behind.
func launch(name string, argv []string, env []string) (*process, error) {
	dir, err := os.MkdirTemp("", "pugfs-cloudtest-"+name+"-")
	if err != nil {
		return nil, err
	}
	p := &process{name: name, out: &tailBuffer{max: maxOutput}, exited: make(chan struct{}), dir: dir}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The parent-death signal fires when the thread that started the
	// child exits, not the process: start and reap the child on a thread
	// that stays locked for as long as the child runs.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.proc = cmd.Process
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return p, nil
}

// waitReady calls probe until it succeeds, the process exits or
// readyTimeout passes. A failure names the emulator and carries its output.
func (p *process) waitReady(addr string, probe func() error) error {
	deadline := time.After(readyTimeout)
	var lastErr error
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		if lastErr = probe(); lastErr == nil {
			return nil
		}
		select {
		case <-p.exited:
			err := fmt.Errorf("%s on %s exited before answering (%v)\nemulator output:\n%s", p.name, addr, p.waitErr, p.out.String())
			if strings.Contains(p.out.String(), "in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-deadline:
			return fmt.Errorf("%s on %s not ready after %v: %v\nemulator output:\n%s", p.name, addr, readyTimeout, lastErr, p.out.String())
		case <-time.After(delay):
		}
	}
}

// stop kills the process group, waits for it and removes its working
// directory. It is safe to call more than once.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		if p.proc != nil {
			// Negative pid: the whole process group (npm's shim and node).
			_ = syscall.Kill(-p.proc.Pid, syscall.SIGKILL)
			<-p.exited
		}
		os.RemoveAll(p.dir)
	})
}

// tailBuffer keeps the last max bytes written to it; it is safe for
// concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
	cut bool
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(b)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
		t.cut = true
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "[...]" + t.buf.String()
	}
	return t.buf.String()
}

// sharedServer starts one server per test binary on first use.
type sharedServer[S any] struct {
	once sync.Once
	mu   sync.Mutex
	srv  *S
	err  error
}

func (s *sharedServer[S]) get(start func() (*S, error)) (*S, error) {
	s.once.Do(func() {
		srv, err := start()
		s.mu.Lock()
		s.srv, s.err = srv, err
		s.mu.Unlock()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if s.srv == nil {
		return nil, errors.New("shared server already stopped (used after Main's tests finished)")
	}
	return s.srv, nil
}

// take hands the running server, if any, to the caller to stop; later
// gets fail.
func (s *sharedServer[S]) take() *S {
	s.once.Do(func() {})
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.srv
	s.srv = nil
	return srv
}

// bucketName returns a bucket or container name derived from a test's
// name that GCS and Azure both accept: 3 to 63 characters of lower-case
// letters, digits and single hyphens, starting and ending with a letter or
// digit.
func bucketName(testName string, n uint64) string {
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
	suffix := fmt.Sprintf("-%d", n)
	stem := b.String()
	if limit := 63 - len("t-") - len(suffix); len(stem) > limit {
		stem = stem[:limit]
	}
	return "t-" + strings.TrimRight(stem, "-") + suffix
}
