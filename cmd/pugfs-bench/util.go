package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/internal/mountinfo"
)

// mountPoints returns the mount points of /proc/self/mountinfo.
func mountPoints() map[string]bool {
	out := map[string]bool{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 {
			out[mountinfo.Unescape(fs[4])] = true
		}
	}
	return out
}

func isMounted(dir string) bool { return mountPoints()[dir] }

// sweepStaleMounts detaches mounts under base left by a harness that was
// killed before it could unmount (their daemons died with it: the mount
// points then fail with ENOTCONN).
func sweepStaleMounts(base string, logf func(string, ...any)) {
	for mp := range mountPoints() {
		if strings.HasPrefix(mp, base+"/") {
			logf("detaching a mount left by an earlier run: %s", mp)
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				logf("  %v", err)
			}
		}
	}
}

// vmHWM returns the peak resident set size of a process in bytes, from
// /proc/PID/status.
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// dropCaches writes back dirty pages and drops the page cache, dentries
// and inodes (root only).
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// median of xs (which it sorts); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// runQuiet runs argv with a timeout and returns its combined output; the
// error carries the output's tail.
func runQuiet(ctx context.Context, timeout time.Duration, dir string, env []string, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	killGroup(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %v", timeout)
		}
		return out, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, tail(out, 600))
	}
	return out, nil
}

// killGroup puts cmd in its own process group and makes cancellation kill
// the whole group, so a shell's children die with it.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 5 * time.Second
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// humanBytes formats a size: 1 GiB, 256 MiB, 4 KiB, 100 B.
func humanBytes(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d %s", n/u.n, u.s)
		}
		if n >= u.n {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.n), u.s)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// parseSize reads 1024, 4MiB, 1G, 1.5GiB (powers of 1024).
func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	i := strings.IndexFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := map[string]float64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gib": 1 << 30}[unit]
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (4MiB, 1GiB)", v)
	}
	return int64(f * mult), nil
}

// thousands formats 10000 as 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// procCPU returns the CPU time a process has used (user and system), from
// /proc/PID/stat; 0 when it cannot be read (the process is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields counted here start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ), 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
