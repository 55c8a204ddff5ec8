package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The namespaces of a pugfs exec run by root. runExecOuter starts this
// same binary again as the first process (PID 1) of a PID namespace of its
// own, in a mount namespace of its own; that inner process mounts the
// bucket, runs the handler and commits. When PID 1 of a namespace ends,
// the kernel kills every other process in it, so whatever the handler
// started ends with the invocation, even when pugfs exec is SIGKILLed
// (nothing else could end them then: a killed process runs no cleanup).
// Those processes would otherwise live on in the mount namespace and keep
// it, and with it every mount it holds, alive.
//
// The inner process gets SIGKILL when the outer one dies (the parent-death
// signal, armed in init below). Go's SysProcAttr.Pdeathsig cannot be used
// for it: its check that the parent is still alive compares getppid()
// with the parent's PID, and in a new PID namespace getppid() is 0, so the
// child would kill itself at once. The outer process passes the read end
// of a pipe instead, whose write end only it holds: EOF there means it is
// gone.

// execAliveFD is the inner process's descriptor for that pipe (the first
// of exec.Cmd.ExtraFiles). execInnerEnv's value is its number.
const execAliveFD = 3

// execReadyFD is the inner process's end of a second pipe, on which it
// tells the outer one that it catches SIGINT, SIGTERM and SIGQUIT
// (signalsCaught).
const execReadyFD = 4

// signalsCaught tells the outer process, in the inner one, that signals
// are caught from now on: main calls it once its handlers are in place.
// Until then the outer process holds the signals it gets, since the
// kernel drops a signal sent from outside to a PID namespace's first
// process that has no handler for it (and the Go runtime's default action
// is such a drop): a SIGTERM in the inner process's first 50 ms used to
// be lost, and its handler ran and committed.
// It reports whether this is the inner process.
func signalsCaught() bool {
	if !execInner {
		return false
	}
	catchQuit()
	forwardSignals()
	unix.Write(execReadyFD, []byte{1})
	unix.Close(execReadyFD)
	return true
}

// init arms the inner process's parent-death signal. It runs on the main
// thread (the Go runtime runs init there), which is the one whose setting
// counts: the kernel signals the thread-group leader.
func init() {
	fd, err := strconv.Atoi(os.Getenv(execInnerEnv))
	if err != nil || fd != execAliveFD || !isPipe(execAliveFD) || !isPipe(execReadyFD) || !isPipe(execForwardFD) {
		// Not started by pugfs exec, whatever the environment says: a
		// stray PUGFS_EXEC_NAMESPACE made a root pugfs exec skip its
		// namespaces (review 38).
		return
	}
	execInner = true
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		os.Exit(1)
	}
	// The outer process may have died before the prctl.
	if outerGone(fd) {
		os.Exit(1)
	}
	unix.Close(fd) // the handler must not hold it
	unix.CloseOnExec(execForwardFD)
}

// execInner is set, before main, in the inner process of pugfs exec:
// execInnerEnv names the pipes the outer process opened for it.
var execInner bool

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// outerGone reports whether the write end of the pipe at fd is closed.
func outerGone(fd int) bool {
	if err := unix.SetNonblock(fd, true); err != nil {
		return false
	}
	var b [1]byte
	n, err := unix.Read(fd, b[:])
	return n == 0 && err == nil
}

// ownProc mounts a /proc of the inner process's PID namespace over the
// host's, in its own mount namespace: the handler's PIDs ($$, os.getpid())
// are the namespace's, and /proc/<pid> must name the same processes.
// It does nothing outside a PID namespace of its own.
func ownProc() error {
	if os.Getpid() != 1 {
		return nil
	}
	return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}
