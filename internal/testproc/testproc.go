// Package testproc starts the server processes that tests run against
// (versitygw for S3, fake-gcs-server for GCS, Azurite for Azure): it finds
// them in the project's tool directory, starts them on a free loopback
// port, waits until they answer, and kills them with their whole process
// group. A test binary that dies without stopping one does not leave it
// behind (parent-death signal). Packages s3test and cloudtest build on it.
package testproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pugmark/pugfs/internal/childproc"
)

// BinaryEnv names the environment variable holding the directory of the
// project's test tools; the Makefile sets it to <module root>/.tools/bin.
const BinaryEnv = "PUGFS_TOOLS"

// maxOutput is how much of a server's output is kept for failure reports.
const maxOutput = 64 << 10

// Tool returns the path of the tool name in the project's tool directory
// ($PUGFS_TOOLS, else .tools/bin in the module root), or an error that
// says how to get it.
func Tool(name string) (string, error) {
	dir := os.Getenv(BinaryEnv)
	if dir == "" {
		root, err := ModuleRoot()
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

// ModuleRoot walks up from the working directory to the directory that
// holds go.mod.
func ModuleRoot() (string, error) {
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

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// ErrPortTaken marks a start that lost its port to another process, which
// is worth another try on another port.
var ErrPortTaken = errors.New("port taken")

// Server says how to start one kind of server.
type Server struct {
	// Name names the server in errors and its working directory.
	Name string
	// Argv is the command line that serves on port (host is
	// "127.0.0.1:PORT").
	Argv func(port int, host string) []string
	// Env is added to the test binary's environment.
	Env []string
	// Probe succeeds once the server at host answers as this server.
	Probe func(host string) error
	// ReadyTimeout bounds the wait for Probe.
	ReadyTimeout time.Duration
}

// Start starts the server on a free loopback port and waits until Probe
// succeeds. A start that lost its port to another process is tried again
// on another port, five times at most. It returns the process and
// "127.0.0.1:PORT".
func (s Server) Start() (*Process, string, error) {
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, "", fmt.Errorf("pick a port: %w", err)
		}
		host := "127.0.0.1:" + strconv.Itoa(port)
		p, err := Launch(s.Name, s.Argv(port, host), s.Env)
		if err != nil {
			return nil, "", err
		}
		err = p.WaitReady(host, s.ReadyTimeout, func() error { return s.Probe(host) })
		if err == nil {
			return p, host, nil
		}
		p.Stop()
		lastErr = err
		if !errors.Is(err, ErrPortTaken) {
			break
		}
	}
	return nil, "", lastErr
}

// Process is one server process, killed with its process group by Stop.
type Process struct {
	name     string
	out      *childproc.Tail
	child    *childproc.Child
	stopOnce sync.Once
	dir      string // working directory, removed by Stop
}

// Launch starts argv in a fresh working directory, in its own process
// group, with a parent-death signal so that a test binary that dies
// without stopping it does not leave it behind.
func Launch(name string, argv []string, env []string) (*Process, error) {
	dir, err := os.MkdirTemp("", "pugfs-testproc-"+name+"-")
	if err != nil {
		return nil, err
	}
	p := &Process{name: name, out: &childproc.Tail{Max: maxOutput}, dir: dir}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	if p.child, err = childproc.Start(cmd); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// WaitReady calls probe until it succeeds, the process exits or timeout
// passes. A failure names the server and carries its output; a server
// that exited because its address was in use is ErrPortTaken.
func (p *Process) WaitReady(addr string, timeout time.Duration, probe func() error) error {
	deadline := time.After(timeout)
	var lastErr error
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		if lastErr = probe(); lastErr == nil {
			return nil
		}
		select {
		case <-p.child.Done():
			err := fmt.Errorf("%s on %s exited before answering (%v)\nserver output:\n%s", p.name, addr, p.child.Err(), p.out.String())
			if strings.Contains(p.out.String(), "in use") {
				err = fmt.Errorf("%w: %w", ErrPortTaken, err)
			}
			return err
		case <-deadline:
			return fmt.Errorf("%s on %s not ready after %v: %v\nserver output:\n%s", p.name, addr, timeout, lastErr, p.out.String())
		case <-time.After(delay):
		}
	}
}

// Stop kills the process group, waits for it and removes its working
// directory. It is safe to call more than once.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		p.child.KillGroup()
		os.RemoveAll(p.dir)
	})
}

// Pid returns the server's process ID.
func (p *Process) Pid() int { return p.child.Pid() }

// Output returns the tail of what the server has printed.
func (p *Process) Output() string { return p.out.String() }

// Shared starts one server per test binary on first use and hands it to
// whoever stops the binary's servers (Take).
type Shared[S any] struct {
	once sync.Once
	mu   sync.Mutex // guards srv and err against Take
	srv  *S
	err  error
}

// Get returns the shared server, starting it with start on first use.
func (s *Shared[S]) Get(start func() (*S, error)) (*S, error) {
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

// Take hands the running server, if any, to the caller to stop; later
// Gets fail.
func (s *Shared[S]) Take() *S {
	s.once.Do(func() {})
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.srv
	s.srv = nil
	return srv
}

// BucketName returns a bucket or container name derived from a test's
// name (and n, to keep it unique) that S3, GCS and Azure all accept: 3 to
// 63 characters of lower-case letters, digits and single hyphens,
// starting and ending with a letter or digit.
func BucketName(testName string, n uint64) string {
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
	if stem = strings.TrimRight(stem, "-"); stem == "" {
		return "t" + suffix // a name of no letters: no empty stem between hyphens
	}
	return "t-" + stem + suffix
}
