package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/internal/childproc"
)

// process is a long-running child (a FUSE daemon, versitygw), in a process
// group of its own (a Ctrl-C reaches only the harness, which then
// unmounts in order) and killed if the harness is killed outright.
type process struct {
	*childproc.Child
	out *childproc.Tail
}

// startProcess starts cmd as a process, its output kept for errors.
func startProcess(cmd *exec.Cmd) (*process, error) {
	out := &childproc.Tail{Max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	c, err := childproc.Start(cmd)
	if err != nil {
		return nil, err
	}
	return &process{Child: c, out: out}, nil
}

// signal sends sig to the process and waits up to d for it to exit.
func (p *process) signal(sig syscall.Signal, d time.Duration) bool {
	if p.Exited() {
		return true
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// kill ends the process group with SIGKILL and reaps it, waiting at most
// 10 s: a FUSE daemon killed while the kernel waits on it may not exit
// until its connection is aborted.
func (p *process) kill() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
	}
}

// The columns of the table.
const (
	colPugfs    = "pugfs"
	colNative   = "native"
	colLoopback = "loopback"
	colRclone   = "rclone"
)

var columns = []string{colPugfs, colNative, colLoopback, colRclone}

// target is one filesystem configuration a row runs on: a kind (a column)
// over a source, with flags. Targets with the same key share a mount.
type target struct {
	key  string // unique: names the mount point
	col  string
	src  string // a plain directory, or pugfs's bucket URL
	env  []string
	args []string // daemon flags
	// cacheDir, if set, names pugfs's --cache-dir: every start gets a
	// new, empty directory of that name and a number. The old ones go
	// with the scratch directory at the end, not before the next run:
	// ext4 will not reuse an inode freed in the last minute or more, so
	// files created right after thousands were deleted cost several
	// times the CPU (a cold run of 2,000 small blobs paid 0.5 s more),
	// which no user's first mount pays.
	cacheDir string
}

// daemon is a mounted FUSE filesystem.
type daemon struct {
	t   *target
	dir string
	p   *process
}

// mounter starts, reuses and stops the FUSE daemons and records their
// peak RSS.
type mounter struct {
	base  string // mount points live here
	bins  map[string]string
	env   []string // for every daemon
	logf  func(string, ...any)
	mu    sync.Mutex
	live  map[string]*daemon
	peak  map[string]int64 // by target key: the highest VmHWM seen
	count map[string]int   // mounts started, by target key
}

func newMounter(base string, bins map[string]string, env []string, logf func(string, ...any)) *mounter {
	return &mounter{base: base, bins: bins, env: env, logf: logf,
		live: map[string]*daemon{}, peak: map[string]int64{}, count: map[string]int{}}
}

// root returns the directory a row runs in for t: the plain directory for
// the native disk, else a mount point, reusing a live mount unless fresh.
func (m *mounter) root(ctx context.Context, t *target, fresh bool) (string, error) {
	if t.col == colNative {
		return t.src, nil
	}
	m.mu.Lock()
	d := m.live[t.key]
	m.mu.Unlock()
	if d != nil {
		if !fresh && !d.p.Exited() && isMounted(d.dir) {
			return d.dir, nil
		}
		m.stop(d)
	}
	d, err := m.start(ctx, t)
	if err != nil {
		return "", err
	}
	return d.dir, nil
}

func (m *mounter) start(ctx context.Context, t *target) (*daemon, error) {
	dir := filepath.Join(m.base, t.key)
	if isMounted(dir) {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin := m.bins[t.col]
	var argv []string
	switch t.col {
	case colPugfs:
		args := t.args
		if t.cacheDir != "" {
			m.mu.Lock()
			n := m.count[t.key]
			m.mu.Unlock()
			cd := fmt.Sprintf("%s.%d", t.cacheDir, n)
			if err := os.RemoveAll(cd); err != nil { // a leftover of an interrupted run
				return nil, err
			}
			args = append(append([]string(nil), args...), "--cache-dir", cd)
		}
		argv = append(append([]string{bin, "mount"}, args...), t.src, dir)
	case colLoopback:
		argv = append(append([]string{bin, "-q"}, t.args...), dir, t.src)
	case colRclone:
		argv = append(append([]string{bin, "mount", "--vfs-cache-mode", "off"}, t.args...), t.src, dir)
	default:
		return nil, fmt.Errorf("no daemon for column %s", t.col)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), m.env...), t.env...)
	p, err := startProcess(cmd)
	if err != nil {
		return nil, err
	}
	d := &daemon{t: t, dir: dir, p: p}
	m.mu.Lock()
	m.live[t.key] = d
	m.count[t.key]++
	m.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(dir) {
		if p.Exited() {
			m.stop(d)
			return nil, fmt.Errorf("%s exited before mounting (%v): %s", strings.Join(argv, " "), p.Err(), tail([]byte(p.out.String()), 800))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			m.stop(d)
			return nil, fmt.Errorf("%s did not mount %s within 30s: %s", strings.Join(argv, " "), dir, tail([]byte(p.out.String()), 800))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d, nil
}

// stop records the daemon's peak RSS and unmounts it: SIGTERM (each
// daemon unmounts itself on it), then a lazy unmount and SIGKILL if it
// does not go within 20 s.
func (m *mounter) stop(d *daemon) {
	if !d.p.Exited() {
		if hwm, err := vmHWM(d.p.Pid()); err == nil {
			m.mu.Lock()
			m.peak[d.t.key] = max(m.peak[d.t.key], hwm)
			m.mu.Unlock()
		}
	}
	if !d.p.signal(syscall.SIGTERM, 20*time.Second) {
		m.logf("%s did not exit 20s after SIGTERM; detaching %s and killing it", d.t.key, d.dir)
		_ = syscall.Unmount(d.dir, syscall.MNT_DETACH)
		d.p.kill()
	}
	if isMounted(d.dir) {
		_ = syscall.Unmount(d.dir, syscall.MNT_DETACH)
	}
	m.mu.Lock()
	if m.live[d.t.key] == d {
		delete(m.live, d.t.key)
	}
	m.mu.Unlock()
}

// stopKeys stops the live daemons whose key has the prefix.
func (m *mounter) stopPrefix(prefix string) {
	m.mu.Lock()
	var ds []*daemon
	for k, d := range m.live {
		if strings.HasPrefix(k, prefix) {
			ds = append(ds, d)
		}
	}
	m.mu.Unlock()
	for _, d := range ds {
		m.stop(d)
	}
}

// pid returns the process ID of t's live daemon, 0 when it has none (the
// native disk).
func (m *mounter) pid(t *target) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := m.live[t.key]; d != nil && !d.p.Exited() {
		return d.p.Pid()
	}
	return 0
}

// groupPeak is the highest peak RSS of col's daemons in group g.
func (m *mounter) groupPeak(g, col string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var peak int64
	for key, v := range m.peak {
		if strings.HasPrefix(key, g+"-"+col) {
			peak = max(peak, v)
		}
	}
	return peak
}

// stopAll unmounts everything; deferred by run, so it runs on errors and
// on Ctrl-C too.
func (m *mounter) stopAll() { m.stopPrefix("") }
