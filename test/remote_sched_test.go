package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var schedLine = regexp.MustCompile(`(?m)^request scheduler: limit (\d+) \(speculative \d+\), in flight (\d+) \(speculative \d+, peak (\d+)\), queued \d+ \(peak \d+\); requests (\d+),`)

// TestRemoteSchedulerAndDebugLog: every bucket request of a mount goes
// through the one scheduler (--max-requests bounds them, .pugmark/stats
// counts them) and, with --debug, is logged with its key.
func TestRemoteSchedulerAndDebugLog(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	files := map[string]string{}
	for i := range 24 {
		files[fmt.Sprintf("d/f%02d.txt", i)] = strings.Repeat(fmt.Sprintf("line %d\n", i), 300) // not inline
	}
	relCommitFiles(t, bk, id, files)
	fb := relWithFaults(bk, map[string]string{"fault_latency": "2ms"})
	m := relMountOn(t, fb, t.TempDir(), "--debug", "--max-requests", "2")
	sh(t, m.Dir, "ls -l sessions/ >/dev/null; grep -rl 'line 7' "+sess(id)+" >/dev/null; cat "+sess(id)+"/d/* >/dev/null")

	st := relReadStats(t, m).raw
	g := schedLine.FindStringSubmatch(st)
	if g == nil {
		t.Fatalf("no request scheduler line in .pugmark/stats:\n%s", st)
	}
	limit, _ := strconv.Atoi(g[1])
	peak, _ := strconv.Atoi(g[3])
	requests, _ := strconv.Atoi(g[4])
	if limit != 2 || peak > 2 || peak < 1 || requests < len(files) {
		t.Errorf("scheduler: limit %d, peak in flight %d, requests %d; want limit 2, a peak of 1 or 2, at least %d requests:\n%s", limit, peak, requests, len(files), st)
	}
	logs := m.Log()
	for _, want := range []string{
		`msg="bucket request" op=list key=sessions/`,
		`msg="bucket request" op=get key=objects/sha256:`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("--debug log has no line with %q", want)
		}
	}
	if n := strings.Count(logs, `msg="bucket request" op=get key=objects/sha256:`); n < len(files) {
		t.Errorf("--debug logged %d blob reads, want one at least per file (%d)", n, len(files))
	}
}
