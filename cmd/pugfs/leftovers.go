package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The processes a handler leaves running (pugfs exec step 3).

// killLeftovers ends this process's children (the handler's orphans,
// reparented here by PR_SET_CHILD_SUBREAPER; the handler itself is reaped
// by then) with SIGKILL and reaps them, until none is left: each one's
// own children come here when it dies. It returns how many it ended.
func killLeftovers() int {
	n := 0
	for range 100 { // a fork bomb outrunning this gives up, not hangs
		pids := childrenOf("self")
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err == nil {
				n++
			}
		}
	}
	return n
}

// childrenOf lists the children of every thread of process proc (a pid,
// or "self").
func childrenOf(proc string) []int {
	files, _ := filepath.Glob("/proc/" + proc + "/task/*/children")
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, w := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(w); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// heldForWriting returns the names, relative to dir, of the files under
// dir that processes pids or their descendants hold open for writing,
// sorted, at most heldShown of them (then "..." last). A process that
// ends meanwhile, or whose descriptors cannot be read, is passed over.
func heldForWriting(pids []int, dir string) []string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // /proc shows resolved paths (a --cache-dir under a symlink)
	}
	seen := map[string]bool{}
	var walk func(pid int)
	walk = func(pid int) {
		proc := "/proc/" + strconv.Itoa(pid)
		fds, _ := os.ReadDir(proc + "/fd")
		for _, fd := range fds {
			target, err := os.Readlink(proc + "/fd/" + fd.Name())
			if err != nil {
				continue
			}
			name, ok := strings.CutPrefix(target, dir+"/")
			// A file removed since it was opened reads "NAME (deleted)":
			// one made again under the name is the same name.
			name = strings.TrimSuffix(name, " (deleted)")
			if !ok || seen[name] || !writable(proc+"/fdinfo/"+fd.Name()) {
				continue
			}
			seen[name] = true
		}
		for _, c := range childrenOf(strconv.Itoa(pid)) {
			walk(c)
		}
	}
	for _, pid := range pids {
		walk(pid)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > heldShown {
		names = append(names[:heldShown], "...")
	}
	return names
}

// heldShown bounds the names heldForWriting returns: a log line, not a
// listing.
const heldShown = 20

// writable reports whether the descriptor that fdinfo (a
// /proc/PID/fdinfo/FD file) describes was opened for writing: its
// "flags:" line, in octal, has O_WRONLY or O_RDWR.
func writable(fdinfo string) bool {
	b, err := os.ReadFile(fdinfo)
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_ACCMODE != syscall.O_RDONLY
		}
	}
	return false
}
