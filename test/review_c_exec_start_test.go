package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestReviewC4_SignalBeforeTheCommandStartsNone: a SIGTERM to pugfs exec
// before its command started starts no command (runHandler: "a signal
// that came earlier (during the mount) starts no handler at all"). The
// inner process now holds a signal passed on by pugfs exec for
// sameDelivery (100 ms), looking for a copy of its own, before the run
// sees it: a command whose mount ended within those 100 ms was started
// after the signal, ran its first steps, and was then signalled. The
// signal is sent at a range of points of the start-up; the command
// notes when it started, and may not start more than a few milliseconds
// (scheduling) after the signal was sent.
func TestReviewC4_SignalBeforeTheCommandStartsNone(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	state := t.TempDir()
	const slack = 30 * time.Millisecond
	for ms := 0; ms <= 600; ms += 20 {
		started := filepath.Join(t.TempDir(), "started")
		r := startExec(t, bk, state, id.String(), "sh", "-c", `date +%s%N > `+started+`; sleep 5`)
		time.Sleep(time.Duration(ms) * time.Millisecond)
		sent := time.Now()
		r.cmd.Process.Signal(syscall.SIGTERM)
		if code := r.wait(t); code != 128+int(syscall.SIGTERM) {
			t.Errorf("SIGTERM after %d ms: exit %d, want %d\n%s", ms, code, 128+int(syscall.SIGTERM), r.stderr.String())
		}
		b, err := os.ReadFile(started)
		if err != nil {
			continue // not started: the signal came first
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("started %q: %v", b, err)
		}
		if late := time.Unix(0, ns).Sub(sent); late > slack {
			t.Errorf("SIGTERM after %d ms: the command started %v after it\n%s", ms, late.Round(time.Millisecond), r.stderr.String())
		}
	}
}
