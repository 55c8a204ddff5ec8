package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A test that gives up waiting for a pugfs process says why the process
// did not end: hangReport shows where each of its threads is in the
// kernel (a thread in state D on a FUSE request cannot be killed), and
// quitAndWait makes the Go runtime print every goroutine's stack to the
// process's stderr, which the test shows with its logs. A hang on a
// loaded CI machine is then a diagnosis, not a guess.

// hangReport describes pids and all their descendants: per thread, its
// state, the kernel function it waits in, and its kernel stack.
func hangReport(pids ...int) string {
	var b strings.Builder
	for _, pid := range withDescendants(pids) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		fmt.Fprintf(&b, "process %d (%s):\n", pid, strings.TrimSpace(string(comm)))
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, task := range tasks {
			state := procState(filepath.Join(task, "stat"))
			wchan, _ := os.ReadFile(filepath.Join(task, "wchan"))
			fmt.Fprintf(&b, "  thread %s: state %s, waiting in %s\n", filepath.Base(task), state, wchan)
			if state == "D" {
				stack, _ := os.ReadFile(filepath.Join(task, "stack"))
				for _, l := range strings.Split(strings.TrimSpace(string(stack)), "\n") {
					fmt.Fprintf(&b, "    %s\n", l)
				}
			}
		}
	}
	return b.String()
}

// withDescendants returns pids, still alive, followed by every live
// process descending from them.
func withDescendants(pids []int) []int {
	children := map[int][]int{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if pp := procParent(fmt.Sprintf("/proc/%d/stat", pid)); pp > 0 {
			children[pp] = append(children[pp], pid)
		}
	}
	var out []int
	queue := slices.Clone(pids)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if syscall.Kill(pid, 0) != nil || slices.Contains(out, pid) {
			continue
		}
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// statFields returns the fields of a /proc stat file after the command
// name (which may hold spaces): state is [0], the parent pid [1].
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func procState(path string) string {
	if f := statFields(path); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func procParent(path string) int {
	if f := statFields(path); len(f) > 1 {
		pp, _ := strconv.Atoi(f[1])
		return pp
	}
	return 0
}

// quitAndWait sends SIGQUIT to pid (a Go program then prints all its
// goroutines and exits) and waits up to 10 s for done.
func quitAndWait(pid int, done <-chan struct{}) {
	syscall.Kill(pid, syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// mountID returns the ID /proc/self/mountinfo gives the mount on dir, or
// "" when nothing is mounted there.
func mountID(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return f[0]
		}
	}
	return ""
}

// mountHolders lists the open files of every process that are on the
// mount with ID id (a lazily detached mount lives on until the last of
// them closes): why an unmount found the mount busy.
func mountHolders(id string) string {
	if id == "" {
		return ""
	}
	var b strings.Builder
	infos, _ := filepath.Glob("/proc/[0-9]*/fdinfo/[0-9]*")
	for _, info := range infos {
		data, err := os.ReadFile(info)
		if err != nil || !strings.Contains(string(data), "mnt_id:\t"+id+"\n") {
			continue
		}
		pid := strings.Split(info, "/")[2]
		fd := filepath.Base(info)
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		target, _ := os.Readlink("/proc/" + pid + "/fd/" + fd)
		fmt.Fprintf(&b, "  process %s (%s) holds fd %s: %s\n", pid, strings.TrimSpace(string(comm)), fd, target)
	}
	if b.Len() == 0 {
		return "no open file on the mount\n"
	}
	return "open files on the mount:\n" + b.String()
}
