package e2e

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// The sessions list at scale (issue 12, tree.md): by-hour/ lists one hour
// partition with one LIST, the partition tree is walked with its LISTs in
// flight together, and a failed LIST makes the listing fail, never shorten.

// listBase is the first hour the tests put sessions in: 2024-05-06T07.
var listBase = uint32(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC).Unix() / 3600)

// listHourName is by-hour/'s name of hour counter h.
func listHourName(h uint32) string {
	return time.Unix(int64(h)*3600, 0).UTC().Format("2006-01-02T15")
}

// listSessions creates n sessions in each hour and returns their IDs by
// hour, sorted as ls sorts them.
func listSessions(t *testing.T, bk *Bucket, hours []uint32, n int) map[uint32][]string {
	t.Helper()
	out := map[uint32][]string{}
	for _, h := range hours {
		for range n {
			id := layout.NewSessionID(time.Unix(int64(h)*3600+60, 0))
			m := &layout.Manifest{Session: id, FirstSequenceNumber: 1}
			if _, _, err := bk.Store.CreateSession(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			out[h] = append(out[h], id.String())
		}
		slices.Sort(out[h])
	}
	return out
}

var (
	listReqLine  = regexp.MustCompile(`(?m)^backend requests: get (\d+), head (\d+), put (\d+), list (\d+), delete (\d+)$`)
	listPeakLine = regexp.MustCompile(`(?m)^backend requests in flight or waiting for the scheduler: peak (\d+)$`)
)

// listCounts are the mount's own backend request counters.
type listCounts struct{ Get, Head, Put, List, Delete, Peak int64 }

func listReadCounts(t *testing.T, m *Mount) listCounts {
	t.Helper()
	raw := relReadStats(t, m).raw
	g := listReqLine.FindStringSubmatch(raw)
	p := listPeakLine.FindStringSubmatch(raw)
	if g == nil || p == nil {
		t.Fatalf(".pugmark/stats has no request counters:\n%s", raw)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	return listCounts{n(g[1]), n(g[2]), n(g[3]), n(g[4]), n(g[5]), n(p[1])}
}

func (a listCounts) minus(b listCounts) listCounts {
	return listCounts{a.Get - b.Get, a.Head - b.Head, a.Put - b.Put, a.List - b.List, a.Delete - b.Delete, a.Peak}
}

// lines splits ls output into names.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestByHour: by-hour/ shows exactly the hours that hold sessions, each
// hour exactly its sessions as links into sessions/, listed with one LIST
// and nothing per session; names that are not there are ENOENT.
func TestByHour(t *testing.T) {
	bk := relLocalBucket(t)
	// Hours across a day, a month and a year boundary.
	hours := []uint32{listBase, listBase + 1, listBase + 20, listBase + 24*40, listBase + 24*400}
	byHour := listSessions(t, bk, hours, 3)
	// A partition whose only key is no session (skipped, logged) is
	// listed, as the walk finds it, and is an empty directory.
	noSessions := listBase + 3
	prefix, err := layout.HourPrefix(noSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := bk.B.WriteAll(context.Background(), prefix+"not-a-session/manifest.json", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	m := mount(t, bk, "--metadata-ttl=1m")

	// One hour on a fresh mount: the lookup of the hour and its listing
	// share one LIST; the links cost nothing.
	first := listHourName(hours[2])
	before := listReadCounts(t, m)
	got := lines(sh(t, m.Dir, "ls -l by-hour/"+first+" | tail -n +2 | awk '{print $9}'"))
	cost := listReadCounts(t, m).minus(before)
	if !slices.Equal(got, byHour[hours[2]]) {
		t.Fatalf("ls by-hour/%s = %v, want %v", first, got, byHour[hours[2]])
	}
	t.Logf("ls -l by-hour/%s (%d sessions): %+v", first, len(got), cost)
	if cost.List != 1 || cost.Get != 0 || cost.Head != 0 {
		t.Fatalf("ls -l of one hour cost %+v, want exactly 1 LIST", cost)
	}

	// Looked up before by-hour/ is listed (no entry the kernel keeps
	// from a READDIRPLUS), as `ls by-hour/<hour>` on a fresh mount does.
	if out := sh(t, m.Dir, "ls -a by-hour/"+listHourName(noSessions)); strings.Join(lines(out), " ") != ". .." {
		t.Fatalf("ls -a of the hour with no session: %q, want an empty directory", out)
	}

	var names []string
	for _, h := range hours {
		names = append(names, listHourName(h))
	}
	names = slices.Insert(names, 2, listHourName(noSessions))
	if got := lines(sh(t, m.Dir, "ls by-hour")); !slices.Equal(got, names) {
		t.Fatalf("ls by-hour = %v, want %v", got, names)
	}
	if got := lines(sh(t, m.Dir, "ls -r by-hour | head -1")); got[0] != names[len(names)-1] {
		t.Fatalf("ls -r by-hour starts with %v, want the newest hour %s", got, names[len(names)-1])
	}
	for _, h := range hours {
		dir := "by-hour/" + listHourName(h)
		if got := lines(sh(t, m.Dir, "ls "+dir)); !slices.Equal(got, byHour[h]) {
			t.Fatalf("ls %s = %v, want %v", dir, got, byHour[h])
		}
		for _, id := range byHour[h] {
			p := dir + "/" + id
			out := sh(t, m.Dir, "readlink "+p+"; stat -c %F "+p+"; stat -L -c %i "+p+"; stat -c %i sessions/"+id)
			f := lines(out)
			if len(f) != 4 || f[0] != "../../sessions/"+id || f[1] != "symbolic link" || f[2] != f[3] {
				t.Fatalf("%s: readlink, type, inode via link, inode of sessions/%s = %q", p, id, f)
			}
		}
	}

	other := byHour[hours[0]][0]
	absent := layout.NewSessionID(time.Unix(int64(hours[0])*3600, 0)).String()
	tests := []struct{ name, path string }{
		{"hour not zero-padded", "by-hour/2024-05-06T7"},
		{"no such month", "by-hour/2024-13-06T07"},
		{"no such day", "by-hour/2024-02-30T07"},
		{"hour with no sessions", "by-hour/" + listHourName(listBase+2)},
		{"not an hour", "by-hour/today"},
		{"id of another hour", "by-hour/" + first + "/" + other},
		{"id not in the bucket", "by-hour/" + listHourName(hours[0]) + "/" + absent},
		{"not an id", "by-hour/" + first + "/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out := shErr(t, m.Dir, "stat "+tt.path); !strings.Contains(out, "No such file") {
				t.Fatalf("stat %s: %q, want ENOENT", tt.path, out)
			}
		})
	}
	if out := shErr(t, m.Dir, "ln -s x by-hour/"+first+"/y"); !strings.Contains(out, "Read-only") {
		t.Fatalf("ln -s under by-hour: %q, want EROFS", out)
	}
}

// TestByHourFollowedLinks: following every link of a by-hour/<hour>/
// listing (ls -lL) costs a GET per session (its latest snapshot), wide in
// parallel once the first link is followed, where it cost five GETs a
// session, one session after another (the remote audit: 200 sessions
// at 20 ms, 5.5 s; 0.3 s with it, as ls -l sessions/).
func TestByHourFollowedLinks(t *testing.T) {
	bk := relLocalBucket(t)
	const n = 30
	byHour := listSessions(t, bk, []uint32{listBase}, n)
	for _, id := range byHour[listBase] {
		sid, err := layout.ParseSessionID(id)
		if err != nil {
			t.Fatal(err)
		}
		seed(t, bk, sid, map[string]string{"f.txt": "x\n"})
	}
	m := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "20ms"}), "--metadata-ttl=1m")
	before := listReadCounts(t, m)
	got := lines(sh(t, m.Dir, "ls -lL by-hour/"+listHourName(listBase)+" | tail -n +2 | awk '{print $1}'"))
	cost := listReadCounts(t, m).minus(before)
	t.Logf("ls -lL by-hour/ of %d sessions: %+v", n, cost)
	if len(got) != n {
		t.Fatalf("ls -lL shows %d entries, want %d", len(got), n)
	}
	for _, mode := range got {
		if !strings.HasPrefix(mode, "d") {
			t.Fatalf("a link followed to %q, want a session directory", mode)
		}
	}
	if cost.Get > n+4 || cost.Peak < 8 {
		t.Fatalf("following %d links cost %+v: want at most a GET a session (and the first one's early reads), %d at least in flight together", n, cost, 8)
	}
}

// TestSessionsListFailure: a LIST that fails on one hour partition makes
// every listing that needs it fail with EIO and a log line naming the
// prefix; a shorter list is never shown. Listings that do not need it
// still work.
func TestSessionsListFailure(t *testing.T) {
	bk := relLocalBucket(t)
	hours := []uint32{listBase, listBase + 1, listBase + 30}
	listSessions(t, bk, hours, 2)
	broken, err := layout.HourPrefix(hours[1])
	if err != nil {
		t.Fatal(err)
	}
	m := mount(t, relWithFaults(bk, map[string]string{
		"fault_prefix": broken, "fault_ops": "list", "fault_error_rate": "1",
	}), "--metadata-ttl=1m")

	tests := []struct{ name, script string }{
		{"ls sessions", "ls sessions"},
		{"ls -l sessions", "ls -l sessions"},
		{"ls the broken hour", "ls by-hour/" + listHourName(hours[1])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := run(m.Dir, tt.script)
			if err == nil || !strings.Contains(stderr, "Input/output error") {
				t.Fatalf("%s: err %v, stderr %q, stdout %q; want EIO", tt.script, err, stderr, stdout)
			}
			// ls -l prints its "total" line before it reads the entries.
			if rest := strings.TrimSpace(strings.TrimPrefix(stdout, "total 0")); rest != "" {
				t.Fatalf("%s printed a partial listing: %q", tt.script, stdout)
			}
		})
	}
	relWait(t, 5*time.Second, "a log line naming "+broken, func() bool {
		return strings.Contains(m.Log(), broken)
	})
	// The partition list itself does not go through the broken prefix.
	want := []string{listHourName(hours[0]), listHourName(hours[1]), listHourName(hours[2])}
	if got := lines(sh(t, m.Dir, "ls by-hour")); !slices.Equal(got, want) {
		t.Fatalf("ls by-hour = %v, want %v", got, want)
	}
	if got := lines(sh(t, m.Dir, "ls by-hour/"+listHourName(hours[0]))); len(got) != 2 {
		t.Fatalf("a healthy hour lists %v", got)
	}
}

// TestSessionsListOverlaps: with every request delayed, `ls sessions/`
// over 24 partitions has many LISTs in flight at once (counted by the
// mount, not timed).
func TestSessionsListOverlaps(t *testing.T) {
	bk := relLocalBucket(t)
	var hours []uint32
	for i := range 24 {
		hours = append(hours, listBase+uint32(i)*7) // 7 days of partitions
	}
	byHour := listSessions(t, bk, hours, 1)
	m := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "20ms"}), "--metadata-ttl=1m")

	before := listReadCounts(t, m)
	start := time.Now()
	got := lines(sh(t, m.Dir, "ls -f sessions | grep -v '^\\.'"))
	took := time.Since(start)
	cost := listReadCounts(t, m).minus(before)
	if len(got) != len(hours) {
		t.Fatalf("ls sessions shows %d sessions, want %d", len(got), len(hours))
	}
	for _, h := range hours {
		if !slices.Contains(got, byHour[h][0]) {
			t.Fatalf("ls sessions misses %s", byHour[h][0])
		}
	}
	// A sanity line only: a serial walk would take at least
	// (1+1+1+7+24) LISTs x 20 ms.
	t.Logf("ls sessions over %d partitions: %v, %+v (serial walk >= %v)", len(hours), took, cost,
		time.Duration(3+7+len(hours))*20*time.Millisecond)
	if cost.Peak < 8 {
		t.Fatalf("peak %d requests in flight: the partition walk does not overlap its LISTs", cost.Peak)
	}
}

// TestSessionsListAttrs: `ls -l sessions/` computes the session
// directories' attributes wide in parallel at listing time (all sessions
// sit in one partition here, so the walk itself is a few LISTs in a row
// and any overlap is the attributes'), and a second `ls -l` inside the
// TTL issues no request at all.
func TestSessionsListAttrs(t *testing.T) {
	bk := relLocalBucket(t)
	byHour := listSessions(t, bk, []uint32{listBase}, 24)
	for _, s := range byHour[listBase] {
		id, err := layout.ParseSessionID(s)
		if err != nil {
			t.Fatal(err)
		}
		relCommitFiles(t, bk, id, map[string]string{"b.txt": "body of " + s})
	}
	m := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "20ms"}), "--metadata-ttl=1m")

	before := listReadCounts(t, m)
	start := time.Now()
	first := sh(t, m.Dir, "ls -l --time-style=+%s sessions")
	took := time.Since(start)
	cost := listReadCounts(t, m).minus(before)
	t.Logf("ls -l sessions of %d sessions: %v, %+v", len(byHour[listBase]), took, cost)
	if n := len(lines(first)) - 1; n != len(byHour[listBase]) {
		t.Fatalf("ls -l sessions shows %d entries:\n%s", n, first)
	}
	if cost.Peak < 8 {
		t.Fatalf("peak %d requests in flight: session attributes are fetched one after another", cost.Peak)
	}

	before = listReadCounts(t, m)
	again := sh(t, m.Dir, "ls -l --time-style=+%s sessions")
	if cost := listReadCounts(t, m).minus(before); cost.Get+cost.Head+cost.List != 0 {
		t.Fatalf("a second ls -l inside the TTL cost %+v, want nothing", cost)
	}
	if again != first {
		t.Fatalf("second ls -l differs:\n%s\nfirst:\n%s", again, first)
	}
}
