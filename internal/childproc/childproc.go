// Package childproc starts long-running child processes (test servers,
// FUSE daemons of the benchmark) that never outlive their parent: each
// runs in a process group of its own, so that it can be killed with
// everything it started and a Ctrl-C at the terminal reaches only the
// parent, and gets SIGKILL when the parent dies (a parent-death signal).
package childproc

import (
	"bytes"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Child is a started process; Done is closed once it has been reaped.
type Child struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// Start starts cmd in its own process group with a parent-death signal.
// The signal fires when the thread that forked the child exits, not the
// process: the child is started and reaped on a goroutine locked to its
// thread for as long as the child runs.
func Start(cmd *exec.Cmd) (*Child, error) {
	c := &Child{Cmd: cmd, done: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return c, nil
}

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is what waiting for the child returned; valid once Done is closed.
func (c *Child) Err() error { return c.err }

// Exited reports whether the child has been reaped.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Pid is the child's process ID (and its process group's).
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// KillGroup sends SIGKILL to the child's whole process group (an npm
// shim and its node, say) and waits until the child is reaped.
func (c *Child) KillGroup() {
	if c.Exited() {
		return
	}
	_ = syscall.Kill(-c.Pid(), syscall.SIGKILL)
	<-c.done
}

// Tail keeps the last Max bytes written to it (a child's output, for
// error messages); safe for concurrent use.
type Tail struct {
	Max int
	mu  sync.Mutex
	buf bytes.Buffer
	cut bool
}

// Write keeps b, dropping the oldest bytes past the tail's size.
func (t *Tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(b)
	if extra := t.buf.Len() - t.Max; extra > 0 {
		t.buf.Next(extra)
		t.cut = true
	}
	return len(b), nil
}

// String is what was kept, marked "[...]" at the front if earlier bytes
// were dropped.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "[...]" + t.buf.String()
	}
	return t.buf.String()
}
