package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// Read-ahead for traversals (issues #12 and #14, fs/readahead.go): budgets
// counted by the fault injector and the mount's own counters, on real
// mounts of a bucket whose every request takes 20 ms. Nothing here is
// timed: overlap shows as requests in flight together.

// raLine is read-ahead's line in .pugmark/stats.
var raLine = regexp.MustCompile(`(?m)^read-ahead: streams (\d+) \(started (\d+)\), in flight (\d+), issued (\d+), bodies fetched (\d+), states loaded (\d+), failed (\d+), cancelled (\d+), bytes ahead (\d+) \(peak (\d+), bound (\d+)\)$`)

// raStats is what read-ahead and the scheduler said in .pugmark/stats.
type raStats struct {
	inFlight, issued, fetched, states, failed, cancelled int64
	peakAhead, bound                                     int64
	schedPeak, promoted                                  int64
	blobGets                                             int64
	raw                                                  string
}

var raSchedLine = regexp.MustCompile(`(?m)^request scheduler: .*peak (\d+)\), queued .*promoted (\d+);`)

func raRead(t *testing.T, m *Mount) raStats {
	t.Helper()
	st := relReadStats(t, m)
	g := raLine.FindStringSubmatch(st.raw)
	s := raSchedLine.FindStringSubmatch(st.raw)
	if g == nil || s == nil {
		t.Fatalf("no read-ahead or scheduler line in .pugmark/stats:\n%s", st.raw)
	}
	n := func(x string) int64 { v, _ := strconv.ParseInt(x, 10, 64); return v }
	return raStats{inFlight: n(g[3]), issued: n(g[4]), fetched: n(g[5]), states: n(g[6]), failed: n(g[7]), cancelled: n(g[8]),
		peakAhead: n(g[10]), bound: n(g[11]), schedPeak: n(s[1]), promoted: n(s[2]), blobGets: budgetBlobGets(t, m), raw: st.raw}
}

// raIdle waits until read-ahead has nothing in flight.
func raIdle(t *testing.T, m *Mount) raStats {
	t.Helper()
	var s raStats
	waitFor(t, "read-ahead idle", func() bool { s = raRead(t, m); return s.inFlight == 0 })
	return s
}

// raBody is file i's body: larger than the inline limit, so that reading
// it is a blob GET, and each one distinct.
func raBody(i, size int) string {
	line := fmt.Sprintf("file %05d says hello\n", i)
	return strings.Repeat(line, size/len(line)+1)[:size]
}

// raSession commits n files of size bytes in 4 directories and returns
// their names in the order grep -r and find visit them.
func raSession(t *testing.T, bk *Bucket, n, size int) (layout.SessionID, []string) {
	t.Helper()
	id := relSession(t, bk)
	files := map[string]string{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("d%d/f%04d.txt", i%4, i)
		files[name] = raBody(i, size)
		names = append(names, name)
	}
	relCommitFiles(t, bk, id, files)
	sort.Strings(names)
	return id, names
}

// raMount mounts bk with every request 20 ms away and blob requests
// counted.
func raMount(t *testing.T, bk *Bucket, args ...string) *Mount {
	t.Helper()
	fb := relWithFaults(bk, map[string]string{"fault_latency": "20ms", "fault_count_prefix": "objects/"})
	return relMountOn(t, fb, t.TempDir(), args...)
}

// TestReadAheadSessionFiles: reading a session's small files one after
// another keeps several blob GETs in flight, fetches each body once,
// and a read-only and a read-write mount both do it: in name order
// (grep -r) and in inode-number order (GNU cp -r sorts each directory's
// entries so; it read one file a round trip, 30 s for 2,000 files 20 ms
// away where grep -r took 1.5 s).
func TestReadAheadSessionFiles(t *testing.T) {
	t.Parallel()
	for _, tool := range []struct {
		name string
		run  func(t *testing.T, m *Mount, id layout.SessionID, names []string)
	}{
		{"grep -r", func(t *testing.T, m *Mount, id layout.SessionID, _ []string) {
			if got := sh(t, m.Dir, "grep -rl 'file 00063 says' "+sess(id)); got != sess(id)+"/d3/f0063.txt\n" {
				t.Fatalf("grep -rl found %q", got)
			}
		}},
		{"two readers at once", func(t *testing.T, m *Mount, id layout.SessionID, names []string) {
			// As rg's threads do, each in a part of the tree of its own.
			out := t.TempDir()
			got := sh(t, m.Dir, fmt.Sprintf("cd %s && (cat d0/* d1/* > %s/a & cat d2/* d3/* > %s/b; wait) && cat %s/a %s/b", sess(id), out, out, out, out))
			var want strings.Builder
			for _, n := range names {
				want.WriteString(raBody(raIndex(n), 2048))
			}
			if got != want.String() {
				t.Fatalf("the two readers read %d bytes, not the %d of the bodies", len(got), want.Len())
			}
		}},
		{"cp -r", func(t *testing.T, m *Mount, id layout.SessionID, names []string) {
			to := filepath.Join(t.TempDir(), "copy")
			sh(t, m.Dir, "cp -r "+sess(id)+" "+to)
			for i, n := range names {
				if b, err := os.ReadFile(filepath.Join(to, n)); err != nil || string(b) != raBody(raIndex(n), 2048) {
					t.Fatalf("copy of %s (file %d): %d bytes, %v", n, i, len(b), err)
				}
			}
		}},
	} {
		for _, ro := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/read-only=%v", tool.name, ro), func(t *testing.T) {
				t.Parallel()
				bk := relLocalBucket(t)
				id, names := raSession(t, bk, 64, 2048)
				var args []string
				if ro {
					args = append(args, "--read-only")
				}
				m := raMount(t, bk, args...)
				tool.run(t, m, id, names)
				s := raIdle(t, m)
				t.Logf("%s over %d files: %d blob GETs, scheduler peak %d, read-ahead issued %d, fetched %d", tool.name, len(names), s.blobGets, s.schedPeak, s.issued, s.fetched)
				if s.blobGets != int64(len(names)) {
					t.Errorf("%s read %d files with %d blob GETs, want one each", tool.name, len(names), s.blobGets)
				}
				if s.fetched < int64(len(names))/2 || s.schedPeak < 4 {
					t.Errorf("read-ahead fetched %d of %d bodies, with at most %d requests in flight at once; want most of them fetched ahead, 4 or more in flight", s.fetched, len(names), s.schedPeak)
				}
				if s.failed != 0 {
					t.Errorf("%d prefetches failed:\n%s", s.failed, s.raw)
				}
			})
		}
	}
}

// raIndex is the number of raSession's file name.
func raIndex(name string) int {
	var d, i int
	fmt.Sscanf(name, "d%d/f%d.txt", &d, &i)
	return i
}

// TestReadAheadAcrossSessions: `cat sessions/*/b.txt` loads the next
// sessions' states while the shell's glob lstat()s each b.txt (bash does
// that in reverse listing order) without fetching any body, and
// prefetches the next b.txt bodies once cat reads them: state loads and
// blob GETs overlap, and each body is fetched once.
func TestReadAheadAcrossSessions(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	const n = 40
	var want strings.Builder
	ids := make([]string, 0, n)
	bodies := map[string]string{}
	for i := range n {
		id := relSession(t, bk)
		relCommitFiles(t, bk, id, map[string]string{"b.txt": raBody(i, 2048)})
		ids = append(ids, id.String())
		bodies[id.String()] = raBody(i, 2048)
	}
	sort.Strings(ids)
	for _, id := range ids {
		want.WriteString(bodies[id])
	}
	m := raMount(t, bk, "--read-only")
	if got := sh(t, m.Dir, "echo sessions/*/b.txt | wc -w"); got != fmt.Sprintf("%d\n", n) {
		t.Fatalf("the glob found %s files, want %d", got, n)
	}
	g := raIdle(t, m)
	t.Logf("glob over %d sessions: %d blob GETs, read-ahead loaded %d states", n, g.blobGets, g.states)
	if g.blobGets != 0 || g.states < n/2 {
		t.Errorf("the glob alone: %d blob GETs, %d states loaded ahead; want none, and most of the %d states", g.blobGets, g.states, n)
	}
	if got := sh(t, m.Dir, "cat sessions/*/b.txt"); got != want.String() {
		t.Fatalf("cat sessions/*/b.txt printed %d bytes, not the %d of the bodies in order", len(got), want.Len())
	}
	s := raIdle(t, m)
	t.Logf("cat over %d sessions: %d blob GETs, scheduler peak %d, read-ahead issued %d, states loaded %d, bodies fetched %d", n, s.blobGets, s.schedPeak, s.issued, s.states, s.fetched)
	if s.blobGets != n {
		t.Errorf("cat read %d bodies with %d blob GETs, want one each", n, s.blobGets)
	}
	if s.states < n/2 || s.fetched < n/2 || s.schedPeak < 4 {
		t.Errorf("read-ahead loaded %d states and fetched %d bodies of %d sessions, at most %d requests in flight; want most of them ahead, 4 or more in flight:\n%s", s.states, s.fetched, n, s.schedPeak, s.raw)
	}
}

// TestReadAheadStopsWithTheReader: a reader that stops after a few files
// leaves at most a window of fetches behind it, not the rest of the
// session.
func TestReadAheadStopsWithTheReader(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id, names := raSession(t, bk, 400, 2048)
	m := raMount(t, bk, "--read-only")
	const read = 8
	var cmd strings.Builder
	for _, n := range names[:read] {
		fmt.Fprintf(&cmd, "cat %s/%s >/dev/null; ", sess(id), n)
	}
	sh(t, m.Dir, cmd.String())
	s := raIdle(t, m)
	t.Logf("read %d files: %d blob GETs, read-ahead issued %d, fetched %d", read, s.blobGets, s.issued, s.fetched)
	// A stream fetches at most four files ahead per file read in order.
	if s.fetched == 0 || s.blobGets > 5*read {
		t.Errorf("after %d reads the mount sent %d blob GETs (%d fetched ahead); want some ahead, at most %d in all", read, s.blobGets, s.fetched, 5*read)
	}
	// Nothing is in flight or waiting: no GET can follow without a read.
	if again := raRead(t, m); again.blobGets != s.blobGets || again.issued != s.issued {
		t.Errorf("read-ahead went on after the reader stopped: %d blob GETs, then %d", s.blobGets, again.blobGets)
	}
}

// TestReadAheadWithinMemoryBudget: with a small --cache-size, bodies
// fetched ahead and not read yet stay within a quarter of it, and the
// traversal still reads every file right.
func TestReadAheadWithinMemoryBudget(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id, names := raSession(t, bk, 200, 16<<10)
	m := raMount(t, bk, "--read-only", "--cache-size", "1MiB")
	if got := sh(t, m.Dir, "grep -rl 'file 00150 says' "+sess(id)); got != sess(id)+"/d2/f0150.txt\n" {
		t.Fatalf("grep -rl found %q", got)
	}
	s := raIdle(t, m)
	t.Logf("grep -r over %d files of 16 KiB with --cache-size 1MiB: %d blob GETs, fetched ahead %d, peak bytes ahead %d (bound %d)", len(names), s.blobGets, s.fetched, s.peakAhead, s.bound)
	if s.bound != 256<<10 || s.peakAhead > s.bound || s.peakAhead < 64<<10 {
		t.Errorf("bytes fetched ahead peaked at %d with a bound of %d; want the bound a quarter of 1 MiB, the peak within it and past 64 KiB", s.peakAhead, s.bound)
	}
	if s.blobGets != int64(len(names)) {
		t.Errorf("%d blob GETs for %d files: read-ahead pushed bodies out before they were read", s.blobGets, len(names))
	}
}

// TestReadAheadYieldsToTheReader: with two request slots (one for
// speculative work), the reader soon finds the next file's prefetch
// still queued; joining it promotes it rather than waiting behind the
// other prefetches, and no body is fetched twice.
func TestReadAheadYieldsToTheReader(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id, names := raSession(t, bk, 48, 2048)
	m := raMount(t, bk, "--read-only", "--max-requests", "2")
	sh(t, m.Dir, "cat "+sess(id)+"/d*/* >/dev/null")
	s := raIdle(t, m)
	t.Logf("cat of %d files with 2 request slots: %d blob GETs, %d promoted, peak %d in flight", len(names), s.blobGets, s.promoted, s.schedPeak)
	if s.promoted == 0 {
		t.Errorf("no queued prefetch was promoted for the reader:\n%s", s.raw)
	}
	if s.blobGets != int64(len(names)) || s.schedPeak > 2 {
		t.Errorf("%d blob GETs for %d files, %d requests at once with --max-requests 2", s.blobGets, len(names), s.schedPeak)
	}
}
