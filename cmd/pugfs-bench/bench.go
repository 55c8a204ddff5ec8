package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pugmark/pugfs/internal/childproc"
	"github.com/pugmark/pugfs/internal/s3test"

	"github.com/pugmark/pugfs/layout"
)

// unit is what a row's numbers are.
type unit int

const (
	unitSeconds unit = iota // wall time of the command
	unitMiBps               // bytes moved / wall time
	unitFilesps             // files written / wall time
)

// mode is how a measurement is prepared.
type mode int

const (
	// modeWarm reuses the mount and runs the command once untimed first.
	modeWarm mode = iota
	// modeCold mounts afresh and drops the page cache, dentries and
	// inodes before the timed run (nothing is cached in the kernel or in
	// the daemon).
	modeCold
	// modeFresh mounts afresh and leaves the page cache alone.
	modeFresh
	// modeOnce reuses the mount; the timed run is the only one (writes).
	modeOnce
)

// job is one command to time.
type job struct {
	argv []string
	dir  string
	// setup and cleanup run untimed before and after.
	setup, cleanup [][]string
	// amount is the bytes or files the command moves, for rates.
	amount float64
}

// row is one line of the table: a workload on up to one target per
// column.
type row struct {
	id    string // for the goals; may be empty
	name  string
	group string // rows of a group share mounts; the RSS rows are per group
	unit  unit
	mode  mode
	cells map[string]*target
	// na says why a column has no cell.
	na map[string]string
	// ideal, if set, is the time the ratio is taken against instead of
	// the native disk's (seconds).
	ideal float64
	job   func(root string, run int) (*job, error)
	// check, if set, prints something every column must agree on (or
	// that must equal expect); run once per column, untimed.
	check  func(root string) (dir, script string)
	expect string
	// floor, if set, is the file (relative to the root) a cold read row
	// reads: each native run also times one SHA-256 pass over it, and the
	// row's floor is the slower of the two (issue #14).
	floor string
}

type cellResult struct {
	vals []float64
	// floors are the floor seconds of each native run of a floor row.
	floors []float64
	reqs   []int64 // bucket requests during each timed run (remote preset)
	// fsCPU and srvCPU are the CPU seconds the column's daemon, and the
	// S3 server with the delay proxy, used during each timed run (remote
	// preset): on one machine the server's CPU is the client's too.
	fsCPU, srvCPU []float64
	err           error
	check         string
}

// bench is one run of the harness.
type bench struct {
	cfg     *Config
	start   time.Time
	tools   *tools
	m       *mounter
	s3      *s3test.Server
	groups  []string
	rows    []*row
	results map[*row]map[string]*cellResult
	devnull *os.File
	// notes are printed under the table.
	notes   []string
	dropErr error
	scratch string
	srcRun  int
	srcPath string
	// reqCount, if set, counts the requests the bucket has seen; each
	// timed run's share is kept as lastReqs (the remote preset's proxy).
	reqCount func() int64
	lastReqs int64
	// serverPid, if set, is the S3 server's process: each timed run's CPU
	// time of it and of this process (the proxy) is kept as lastSrvCPU,
	// the column daemon's as lastFsCPU.
	serverPid             int
	lastFsCPU, lastSrvCPU float64
	// goalOf is the remote preset's goal per row.
	goalOf map[*row]remoteGoal
}

func (b *bench) logf(format string, args ...any) {
	el := time.Since(b.start).Round(time.Second)
	fmt.Fprintf(b.cfg.Log, "pugfs-bench %v: "+format+"\n", append([]any{el}, args...)...)
}

// measure runs row r once on column col and returns its number.
func (b *bench) measure(ctx context.Context, r *row, col string, run int) (float64, error) {
	t := r.cells[col]
	fresh := r.mode == modeCold || r.mode == modeFresh
	root, err := b.m.root(ctx, t, fresh)
	if err != nil {
		return 0, err
	}
	j, err := r.job(root, run)
	if err != nil {
		return 0, err
	}
	for _, s := range j.setup {
		argv, dir := b.inDir(s, j.dir)
		if _, err := runQuiet(ctx, b.cfg.CmdTimeout, dir, nil, argv...); err != nil {
			return 0, fmt.Errorf("setup: %w", err)
		}
	}
	if r.mode == modeWarm {
		if _, err := b.exec(ctx, j); err != nil {
			return 0, fmt.Errorf("warm-up run: %w", err)
		}
	}
	if r.mode == modeCold && b.cfg.DropCaches && b.dropErr == nil {
		if err := dropCaches(); err != nil {
			b.dropErr = err
		}
	}
	var reqs0 int64
	if b.reqCount != nil {
		reqs0 = b.reqCount()
	}
	fsPid := b.m.pid(t)
	fs0, srv0 := b.cpu(fsPid)
	el, err := b.exec(ctx, j)
	if b.reqCount != nil {
		b.lastReqs = b.reqCount() - reqs0
	}
	fs1, srv1 := b.cpu(fsPid)
	b.lastFsCPU, b.lastSrvCPU = (fs1 - fs0).Seconds(), (srv1 - srv0).Seconds()
	if err != nil {
		return 0, err
	}
	for _, s := range j.cleanup {
		argv, dir := b.inDir(s, j.dir)
		if _, err := runQuiet(ctx, b.cfg.CmdTimeout, dir, nil, argv...); err != nil {
			return 0, fmt.Errorf("cleanup: %w", err)
		}
	}
	sec := el.Seconds()
	switch r.unit {
	case unitMiBps:
		return j.amount / (1 << 20) / sec, nil
	case unitFilesps:
		return j.amount / sec, nil
	}
	return sec, nil
}

// cpu returns the CPU time used so far by the daemon fsPid (0: none) and,
// when the bench has a server, by the server and this process together.
func (b *bench) cpu(fsPid int) (fs, srv time.Duration) {
	if fsPid != 0 {
		fs = procCPU(fsPid)
	}
	if b.serverPid != 0 {
		srv = procCPU(b.serverPid) + selfCPU()
	}
	return fs, srv
}

// exec runs a job's command with its output discarded and returns the
// wall time from just before the fork to the reaping of the process.
func (b *bench) exec(ctx context.Context, j *job) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CmdTimeout)
	defer cancel()
	argv, dir := b.inDir(j.argv, j.dir)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout = b.devnull
	errOut := &childproc.Tail{Max: 2048}
	cmd.Stderr = errOut
	killGroup(cmd)
	t0 := time.Now()
	err := cmd.Run()
	el := time.Since(t0)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %v", b.cfg.CmdTimeout)
		}
		return el, fmt.Errorf("%s (in %s): %w: %s", strings.Join(j.argv, " "), j.dir, err, tail([]byte(errOut.String()), 400))
	}
	return el, nil
}

// inDir returns how to run argv in dir. With the remote preset's proxy in
// this process, a command must not start in a mount: Go starts children
// with vfork, and a child whose chdir waits on a FUSE daemon that waits on
// the proxy freezes the thread that holds a P, which stalls this whole
// runtime (the proxy included) at the next stop-the-world. A shell that
// changes directory after its exec does the same without that.
func (b *bench) inDir(argv []string, dir string) ([]string, string) {
	if b.reqCount == nil || dir == "" {
		return argv, dir
	}
	return append([]string{"bash", "-c", `cd "$0" && exec "$@"`, dir}, argv...), ""
}

// runCheck runs a row's check on col and returns its output.
func (b *bench) runCheck(ctx context.Context, r *row, col string) (string, error) {
	root, err := b.m.root(ctx, r.cells[col], false)
	if err != nil {
		return "", err
	}
	dir, script := r.check(root)
	argv, dir := b.inDir([]string{"bash", "-c", "set -eo pipefail; " + script}, dir)
	out, err := runQuiet(ctx, b.cfg.CmdTimeout, dir, []string{"LC_ALL=C"}, argv...)
	if err != nil {
		return "", fmt.Errorf("content check: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// runAll measures every row, alternating the columns within each run
// (pugfs, native, loopback, rclone, pugfs, native, ...), group by group;
// each group's mounts are stopped before the next group starts.
func (b *bench) runAll(ctx context.Context) error {
	for _, r := range b.rows {
		b.results[r] = map[string]*cellResult{}
		for col := range r.cells {
			b.results[r][col] = &cellResult{}
		}
	}
	total := 0
	for _, r := range b.rows {
		total += len(r.cells) * b.cfg.Runs
	}
	done := 0
	for run := 1; run <= b.cfg.Runs; run++ {
		for _, g := range b.groups {
			for _, r := range b.rows {
				if r.group != g {
					continue
				}
				for _, col := range columns {
					res := b.results[r][col]
					if res == nil {
						continue
					}
					done++
					if res.err != nil {
						continue
					}
					if run == 1 && r.check != nil {
						out, err := b.runCheck(ctx, r, col)
						if ctx.Err() != nil {
							return ctx.Err()
						}
						res.check, res.err = out, err
						if err == nil && r.expect != "" && out != r.expect {
							res.err = fmt.Errorf("content check: got %q, want %q", out, r.expect)
						}
						if res.err != nil {
							b.logf("%s on %s: %v", r.name, col, res.err)
							continue
						}
					}
					v, err := b.measure(ctx, r, col, run)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if err != nil {
						res.err = err
						b.logf("[%d/%d] %s on %s: %v", done, total, r.name, col, err)
						continue
					}
					res.vals = append(res.vals, v)
					res.reqs = append(res.reqs, b.lastReqs)
					res.fsCPU = append(res.fsCPU, b.lastFsCPU)
					res.srvCPU = append(res.srvCPU, b.lastSrvCPU)
					if col == colNative && r.floor != "" {
						if err := b.measureFloor(ctx, r, res, v); err != nil {
							b.logf("%s: floor: %v", r.name, err)
						}
					}
					b.logf("[%d/%d] run %d: %s on %s: %s", done, total, run, r.name, col, formatValue(r.unit, v))
				}
				b.compareChecks(r)
			}
			b.m.stopPrefix(g + "-")
		}
	}
	return nil
}

// compareChecks fails the columns whose check output differs from the
// native disk's.
func (b *bench) compareChecks(r *row) {
	if r.check == nil || r.expect != "" {
		return
	}
	nat := b.results[r][colNative]
	if nat == nil || nat.err != nil || nat.check == "" {
		return
	}
	ref := nat.check
	for col, res := range b.results[r] {
		if col != colNative && res.err == nil && res.check != "" && res.check != ref {
			res.err = fmt.Errorf("shows different contents than the native disk: %q vs %q", res.check, ref)
			b.logf("%s on %s: %v", r.name, col, res.err)
		}
		res.check = "" // compared once
	}
}

// source returns a fresh file of n random bytes on the native disk for
// run's large-file write; each run gets new contents, so no write is
// deduplicated against an earlier one.
func (b *bench) source(run int, n int64) (string, error) {
	if b.srcRun == run && b.srcPath != "" {
		return b.srcPath, nil
	}
	if b.srcPath != "" {
		os.Remove(b.srcPath)
	}
	p := filepath.Join(b.scratch, fmt.Sprintf("source-%d.bin", run))
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	seed := seedOf(fmt.Sprintf("write-%d-%d", run, time.Now().UnixNano()))
	_, err = io.CopyN(f, rand.NewChaCha8(seed), n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	b.srcRun, b.srcPath = run, p
	return p, nil
}

// freshSession is a new session directory name: a fresh ID, which a
// mkdir under a pugfs mount's sessions/ turns into a session.
func freshSession() string { return layout.NewSessionID(time.Now()).String() }
