package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	_ "github.com/pugmark/pugfs/layout/drivers"
	"gocloud.dev/blob"
)

func TestMain(m *testing.M) { testbucket.Main(m) }

// procWithin bounds the harness's reads of other processes' /proc files
// (procread): a process stuck on a hung FUSE connection, a failed test's
// leftover, made every later scan hang, and CI with it.
const procWithin = 2 * time.Second

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// pugfsBinary builds cmd/pugfs once per test binary, with the race
// detector when the tests run with it, so the mounted filesystem is
// checked too.
func pugfsBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pugfs-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "pugfs")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/pugmark/pugfs/cmd/pugfs")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Bucket is a bucket under test with the URL a subprocess can open.
type Bucket struct {
	Kind  testbucket.Kind
	B     *blob.Bucket
	Store *layout.Store
	URL   string
	Env   []string
}

// eachBucket runs fn on a fresh local bucket and a fresh S3 bucket.
func eachBucket(t *testing.T, fn func(t *testing.T, bk *Bucket)) {
	for _, k := range testbucket.Kinds() {
		if k == testbucket.Mem {
			continue // a subprocess cannot open another process's memory
		}
		t.Run(string(k), func(t *testing.T) {
			fn(t, openBucket(t, k))
		})
	}
}

// openBucket returns a fresh bucket of kind k.
func openBucket(t *testing.T, k testbucket.Kind) *Bucket {
	t.Helper()
	b := testbucket.Open(t, k)
	u, env := testbucket.URL(t, b)
	return &Bucket{Kind: k, B: b, Store: layout.New(b, nil), URL: u, Env: env}
}

// Mount is a running pugfs mount in a subprocess.
type Mount struct {
	Dir  string
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan struct{}
	err  error
}

// Log returns what the pugfs process printed so far.
func (m *Mount) Log() string { return m.logs.String() }

// holdForks stops every goroutine of the test process from starting a
// process until the returned func is called. A child holds a copy of each
// open descriptor from its fork to its exec, and the exec's close of the
// copy is a FLUSH, which commits: a test that asserts nothing is committed
// before its own close holds this across the window. It works because Go
// forks with CLONE_VFORK under syscall.ForkLock, so the copy is closed
// before the lock is let go. The holder must not start a process itself.
// release may be called more than once (a defer and an early release).
func holdForks() (release func()) {
	syscall.ForkLock.RLock()
	return sync.OnceFunc(syscall.ForkLock.RUnlock)
}

// mount starts `pugfs mount [args] URL DIR` and waits until the mount is
// live. It is unmounted (SIGTERM, then SIGKILL) at cleanup.
func mount(t *testing.T, bk *Bucket, args ...string) *Mount {
	t.Helper()
	dir := t.TempDir()
	m := startMount(t, bk, dir, args...)
	t.Cleanup(func() { m.Stop(t) })
	return m
}

// testCacheHomes holds the cache home of each top-level test by name.
var testCacheHomes sync.Map

// testCacheHome is the user cache directory ($XDG_CACHE_HOME) of the
// mounts of one test and its subtests: a mount without --cache-dir keeps
// its disk cache there, per bucket, as it would under ~/.cache, so the
// mounts of one test share it and no test sees another's (or leaves it
// behind). A test uses the directory of the nearest test above it (or of
// itself) that asked for one; else it gets its own, which lasts as long
// as it does. Sibling subtests never share one: they may run in parallel,
// and one's directory goes when that one ends.
func testCacheHome(t testing.TB) string {
	for name := t.Name(); ; {
		if d, ok := testCacheHomes.Load(name); ok {
			return d.(string)
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			break
		}
		name = name[:i]
	}
	d := t.TempDir()
	name := t.Name()
	testCacheHomes.Store(name, d)
	t.Cleanup(func() { testCacheHomes.Delete(name) })
	return d
}

func startMount(t *testing.T, bk *Bucket, dir string, args ...string) *Mount {
	t.Helper()
	return startMountCmd(t, bk, dir, nil, args...)
}

// startMountCmd is startMount with the command line handed to wrap, which
// returns the command to run (to add a ulimit, say); wrap nil runs pugfs
// directly.
func startMountCmd(t *testing.T, bk *Bucket, dir string, wrap func(argv []string) *exec.Cmd, args ...string) *Mount {
	t.Helper()
	full := append([]string{pugfsBinary(t), "mount", "--cache-size", "64MiB"}, args...)
	full = append(full, bk.URL, dir)
	var cmd *exec.Cmd
	if wrap != nil {
		cmd = wrap(full)
	} else {
		cmd = exec.Command(full[0], full[1:]...)
	}
	cmd.Env = append(append(os.Environ(), bk.Env...), "XDG_CACHE_HOME="+testCacheHome(t), "GOTRACEBACK=all")
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &Mount{Dir: dir, cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { m.err = cmd.Wait(); close(m.done) }()
	// A test that ends (fails, most often) before it stops its mount would
	// leave the process and the mount behind for every later test and run.
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			if t.Failed() {
				t.Logf("log of the mount on %s, left running:\n%s", dir, logTail(m.Log(), 80))
			}
			m.KillHard()
		}
		if isMounted(dir) {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(dir) {
		select {
		case <-m.done:
			t.Fatalf("pugfs mount exited early: %v\n%s", m.err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("pugfs did not mount %s within 30s\n%s", dir, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// Stop unmounts gracefully and checks the process exited cleanly.
func (m *Mount) Stop(t *testing.T) { m.StopWith(t, syscall.SIGTERM) }

// StopWith is Stop by signal sig (SIGTERM, SIGINT or SIGHUP).
func (m *Mount) StopWith(t *testing.T, sig syscall.Signal) {
	select {
	case <-m.done:
		return
	default:
	}
	if t.Failed() {
		// A failure in CI is often read only from its output: what the
		// mount logged (errors name the key and the cause) says why.
		t.Logf("log of the mount on %s:\n%s", m.Dir, logTail(m.Log(), 80))
	}
	id := mountID(m.Dir)
	m.cmd.Process.Signal(sig)
	select {
	case <-m.done:
		if m.err != nil {
			t.Errorf("pugfs exited with %v after %v\n%s", m.err, sig, m.Log())
		}
	case <-time.After(30 * time.Second):
		report := mountHolders(id) + hangReport(m.cmd.Process.Pid)
		quitAndWait(m.cmd.Process.Pid, m.done)
		m.Kill()
		t.Errorf("pugfs did not exit 30s after %v\n%s\n%s", sig, report, m.Log())
	}
}

// Kill ends the mount process with SIGKILL and detaches the dead mount;
// it cannot hang on a pugfs stuck in the kernel (see KillHard).
func (m *Mount) Kill() {
	m.KillHard()
	syscall.Unmount(m.Dir, syscall.MNT_DETACH)
}

// KillHard ends the mount process with SIGKILL and waits for it, leaving
// the dead mount attached (unlike Kill).
//
// A pugfs killed while one of its threads is inside the kernel on its own
// mount (a dentry notification waiting for a directory lock that a request
// to the dead pugfs holds) cannot finish exiting until the connection is
// aborted, so after 10 s the connection is aborted through fusectl, as an
// administrator would. If even that does not end it, KillHard gives up
// after another 30 s and says so in the mount's log rather than hang the
// test run.
func (m *Mount) KillHard() {
	m.cmd.Process.Kill()
	select {
	case <-m.done:
		return
	case <-time.After(10 * time.Second):
	}
	fmt.Fprintf(m.logs, "KillHard: pugfs did not exit 10 s after SIGKILL; aborting its FUSE connection\n")
	if err := abortFuse(m.Dir); err != nil {
		fmt.Fprintf(m.logs, "KillHard: %v\n", err)
	}
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(m.logs, "KillHard: pugfs pid %d still has not exited; leaving it\n", m.cmd.Process.Pid)
	}
}

// abortFuse aborts the FUSE connection mounted on dir through fusectl,
// mounting fusectl first where nobody has (containers often do not).
func abortFuse(dir string) error {
	conn := fuseConn(dir)
	if conn == "" {
		return fmt.Errorf("no FUSE mount on %s to abort", dir)
	}
	const ctl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, conn)); errors.Is(err, os.ErrNotExist) {
		if err := syscall.Mount("none", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl on %s: %w", ctl, err)
		}
	}
	if err := os.WriteFile(filepath.Join(ctl, conn, "abort"), []byte("1"), 0o200); err != nil {
		return fmt.Errorf("abort FUSE connection %s: %w", conn, err)
	}
	return nil
}

// fuseConn returns the FUSE connection number of the mount on dir.
func fuseConn(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	conn := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				conn = minor
			}
		}
	}
	return conn
}

func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// sh runs a bash script in dir and returns its stdout; it fails the test
// on a non-zero exit. The cd happens inside bash.
func sh(t *testing.T, dir, script string) string {
	t.Helper()
	out, errOut, err := run(dir, script)
	if err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", script, err, out, errOut)
	}
	return out
}

// shErr runs a script that must fail and returns its stderr.
func shErr(t *testing.T, dir, script string) string {
	t.Helper()
	out, errOut, err := run(dir, script)
	if err == nil {
		t.Fatalf("%s: succeeded, want failure\nstdout: %s", script, out)
	}
	return errOut
}

func run(dir, script string) (string, string, error) {
	return runFor(2*time.Minute, dir, script)
}

// runFor is run with a bound of its own, for a script of many commits:
// each is fsynced, which a loaded machine can make slow.
func runFor(limit time.Duration, dir, script string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; cd '"+dir+"' && "+script)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out: %w", err)
	}
	return out.String(), errOut.String(), err
}
