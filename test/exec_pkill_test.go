package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestExecSignalToEachPugfsProcess: a SIGTERM sent to each pugfs
// process of a run and to nothing else (pkill pugfs, killall pugfs: run
// as root, the inner process in its PID namespace is a pugfs process of
// the host's too) is a SIGTERM to pugfs exec, which README says goes to
// the command. The inner process took its own copy for a delivery to
// the whole process group, which had reached the command already, and
// passed nothing on: the command ran on as if no signal had come (its
// trap never ran), and only a second signal ended it, with SIGKILL.
func TestExecSignalToEachPugfsProcess(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the inner process exists only for root")
	}
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	trapped := filepath.Join(t.TempDir(), "trapped")
	g := newGate(t)
	// The handler waits at most 10 s for its trap, then exits 1.
	r := startExec(t, bk, t.TempDir(), id.String(), "sh", "-c",
		`trap "echo got >> `+trapped+`" TERM; echo $$ > `+g.marker()+`
		i=0; while [ ! -s `+trapped+` ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done
		sleep 1; exit 1`)
	g.ready(t, 1, r)
	var pugfs []int
	for _, pid := range append([]int{r.cmd.Process.Pid}, childPIDs(r.cmd.Process.Pid)...) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "pugfs" {
			pugfs = append(pugfs, pid)
		}
	}
	if len(pugfs) != 2 {
		t.Fatalf("pugfs processes %v, want pugfs exec and its inner process", pugfs)
	}
	for _, pid := range pugfs {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	code := r.wait(t)
	if b, err := os.ReadFile(trapped); err != nil || string(b) != "got\n" {
		t.Errorf("the handler's trap ran %d times (%q, %v), want once\n%s", strings.Count(string(b), "got"), b, err, r.stderr.String())
	}
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d\n%s", code, 128+int(syscall.SIGTERM), r.stderr.String())
	}
}

// childPIDs returns the children of process pid.
func childPIDs(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(w); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
