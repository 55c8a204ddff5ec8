package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// KillHard's way out of a killed pugfs that cannot exit is abortFuse; if
// it failed silently (fusectl not mounted, as in most containers), the run
// would hang until the test timeout. A stopped pugfs stands in for the
// dead one: it holds its connection and answers nothing.
func TestHarnessAbortFuse(t *testing.T) {
	m := mount(t, openBucket(t, testbucket.Local))
	pid := m.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	defer syscall.Kill(pid, syscall.SIGCONT)
	if err := abortFuse(m.Dir); err != nil {
		t.Fatal(err)
	}
	// A name never looked up is a LOOKUP, which an aborted connection
	// fails at once instead of waiting for the stopped daemon.
	_, err := os.Stat(filepath.Join(m.Dir, "never-looked-up"))
	if !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat through the aborted mount: %v, want ENOTCONN", err)
	}
}
