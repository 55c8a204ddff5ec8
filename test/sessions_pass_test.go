package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// The freshness pass of `ls -l sessions/` (issue 12, README "What each
// operation costs"): one LIST per hour partition gives every session and
// its latest version, a session's attributes cost a snapshot GET only for
// a version the mount (or its cache directory) has no summary of, and
// READDIRPLUS is answered from the pass, so the kernel sends no lookup per
// entry. Counted by the mount's own request counters, not timed.

// passHours are the hour partitions of these tests: four hours of one
// day, so the walk above them is sessions/, year=, month= and day=.
var passHours = []uint32{listBase, listBase + 1, listBase + 2, listBase + 3}

// passWalkLists is what the partition walk costs above the hours.
const passWalkLists = 4

// passSessions creates n sessions in each of passHours, each with one
// committed file written at created, and returns their IDs in ls order.
func passSessions(t *testing.T, bk *Bucket, n int, created time.Time) []layout.SessionID {
	t.Helper()
	var ids []layout.SessionID
	for _, byHour := range listSessions(t, bk, passHours, n) {
		for _, s := range byHour {
			id, err := layout.ParseSessionID(s)
			if err != nil {
				t.Fatal(err)
			}
			passCommit(t, bk, id, "b.txt", "body of "+s, created)
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, layout.SessionID.Compare)
	return ids
}

// passCommit commits one file written at created.
func passCommit(t *testing.T, bk *Bucket, id layout.SessionID, name, body string, created time.Time) layout.CommitResult {
	t.Helper()
	ctx := context.Background()
	if _, err := bk.Store.PutBlobBytes(ctx, []byte(body), layout.BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	d := layout.Descriptor{Name: name, Digest: layout.DigestOf([]byte(body)), Size: int64(len(body)),
		CreatedAt: created.UTC(), ContentType: "text/plain", Data: []byte(body)}
	res, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// passListing runs `ls -l` of sessions/ and returns each entry's mtime
// (seconds) by name; it fails the test on any error.
func passListing(t *testing.T, m *Mount) map[string]int64 {
	t.Helper()
	return passParse(t, sh(t, m.Dir, "ls -l --time-style=+%s sessions"))
}

var passLine = regexp.MustCompile(`^d\S+ +\d+ +\S+ +\S+ +\d+ +(\d+) +([0-9a-f]{32})$`)

func passParse(t *testing.T, out string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "total") {
			continue
		}
		g := passLine.FindStringSubmatch(l)
		if g == nil {
			t.Fatalf("ls -l line %q is not a session directory with its time", l)
		}
		got[g[2]], _ = strconv.ParseInt(g[1], 10, 64)
	}
	return got
}

// passLookups counts the FUSE LOOKUPs of names in ids that the mount's
// --debug log shows (go-fuse logs a request as `rx N: LOOKUP nI "name"`).
func passLookups(m *Mount, ids []layout.SessionID) int {
	n := 0
	for _, l := range strings.Split(m.Log(), "\n") {
		if !strings.Contains(l, ": LOOKUP n") {
			continue
		}
		for _, id := range ids {
			if strings.Contains(l, `"`+id.String()+`"`) {
				n++
			}
		}
	}
	return n
}

// TestSessionsListPassCost: cold, `ls -l sessions/` costs the walk, one
// LIST per hour partition and one snapshot GET per session, with the
// GETs in flight together, and the kernel looks up no entry (READDIRPLUS
// carried the attributes). After the TTL the same `ls -l` costs only the
// walk and the partition LISTs: no request per session.
func TestSessionsListPassCost(t *testing.T) {
	bk := relLocalBucket(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := passSessions(t, bk, 10, created)
	const ttl = time.Second
	m := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "20ms"}), "--metadata-ttl="+ttl.String(), "--debug")

	before := listReadCounts(t, m)
	first := passListing(t, m)
	cost := listReadCounts(t, m).minus(before)
	if len(first) != len(ids) {
		t.Fatalf("ls -l shows %d sessions, want %d", len(first), len(ids))
	}
	for _, id := range ids {
		if first[id.String()] != created.Unix() {
			t.Fatalf("ls -l shows %s at %d, want its last append %d", id, first[id.String()], created.Unix())
		}
	}
	t.Logf("cold ls -l of %d sessions over %d partitions: %+v", len(ids), len(passHours), cost)
	if want := int64(passWalkLists + len(passHours)); cost.List != want || cost.Get != int64(len(ids)) || cost.Head != 0 {
		t.Fatalf("cold ls -l cost %+v, want %d LISTs (walk and one per partition), %d GETs (one snapshot per session), no HEAD",
			cost, want, len(ids))
	}
	if cost.Peak < 8 {
		t.Fatalf("peak %d requests in flight: the session attributes are fetched one after another", cost.Peak)
	}
	if n := passLookups(m, ids); n != 0 {
		t.Fatalf("the kernel looked up %d session entries after READDIRPLUS: the listing gave no attributes", n)
	}

	time.Sleep(ttl + ttl/2) // past the metadata TTL: the next listing is a new pass
	before = listReadCounts(t, m)
	again := passListing(t, m)
	cost = listReadCounts(t, m).minus(before)
	t.Logf("ls -l after the TTL: %+v", cost)
	if want := int64(passWalkLists + len(passHours)); cost.List != want || cost.Get != 0 || cost.Head != 0 {
		t.Fatalf("ls -l after the TTL cost %+v, want the freshness pass only: %d LISTs, no GET or HEAD", cost, want)
	}
	if fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("ls -l after the TTL shows %v, first %v", again, first)
	}
}

// TestSessionsListOtherMount: a commit made through another mount shows
// in `ls -l sessions/` (the session's mtime) and in its .pugmark/version
// once the TTL has passed (consistency.md §1, §4).
func TestSessionsListOtherMount(t *testing.T) {
	bk := relLocalBucket(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := passSessions(t, bk, 2, created)
	const ttl = time.Second
	a := mount(t, bk, "--metadata-ttl="+ttl.String())
	b := mount(t, bk, "--metadata-ttl="+ttl.String())
	target := ids[3]
	if got := passListing(t, a)[target.String()]; got != created.Unix() {
		t.Fatalf("before: %s at %d, want %d", target, got, created.Unix())
	}
	if got := sh(t, a.Dir, "cat "+meta(target)+"/version"); got != "1\n" {
		t.Fatalf("before: version %q", got)
	}

	sh(t, b.Dir, "echo new > "+sess(target)+"/new.txt")
	v, err := bk.Store.LatestVersion(context.Background(), target)
	if err != nil || v != 2 {
		t.Fatalf("the other mount's commit: version %d, %v", v, err)
	}
	ds, err := bk.Store.ReadSnapshot(context.Background(), target, 2)
	if err != nil || len(ds) != 1 {
		t.Fatalf("read the other mount's commit: %v, %v", ds, err)
	}

	time.Sleep(ttl + ttl/2)
	after := passListing(t, a)
	if got, want := after[target.String()], ds[0].CreatedAt.Unix(); got != want {
		t.Fatalf("after the TTL: ls -l shows %s at %d, want the other mount's commit at %d", target, got, want)
	}
	for _, id := range ids {
		if id != target && after[id.String()] != created.Unix() {
			t.Fatalf("after the TTL: %s moved to %d", id, after[id.String()])
		}
	}
	if got := sh(t, a.Dir, "cat "+meta(target)+"/version"); got != "2\n" {
		t.Fatalf("after the TTL: version %q, want 2", got)
	}
}

var passSchedLine = regexp.MustCompile(`(?m)^request scheduler: .* in flight (\d+) `)

// TestSessionsListStall: a session whose snapshot GET hangs holds up
// neither the listing nor the other sessions' attributes (consistency.md
// §3): sessions/ lists, and every other session stats with its time,
// while that request still hangs. (The hung session's own lookup waits
// for its request's deadline and retries, as any request does:
// TestReliabilityBackendHang.)
func TestSessionsListStall(t *testing.T) {
	bk := relLocalBucket(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := passSessions(t, bk, 3, created)
	stalled := ids[5]
	key, err := layout.SnapshotKey(stalled, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The stall outlasts the test; --request-timeout keeps its default
	// (30 s, then retries), far longer than the listing may wait.
	m := mount(t, relWithFaults(bk, map[string]string{"fault_stall_prefix": key, "fault_stall": "10m"}), "--metadata-ttl=1m")

	listed := map[string]bool{}
	for _, name := range lines(shE(t, m.Dir, "ls -f sessions")) {
		listed[name] = true
	}
	var others []string
	for _, id := range ids {
		if !listed[id.String()] {
			t.Fatalf("ls sessions/ does not list %s while %s hangs", id, stalled)
		}
		if id != stalled {
			others = append(others, "sessions/"+id.String())
		}
	}
	out := shE(t, m.Dir, "stat -c '%n %Y' "+strings.Join(others, " "))
	for _, l := range lines(out) {
		name, mtime, _ := strings.Cut(l, " ")
		if mtime != strconv.FormatInt(created.Unix(), 10) {
			t.Fatalf("while %s hangs: %s has mtime %s, want %d", stalled, name, mtime, created.Unix())
		}
	}
	if n := len(lines(out)); n != len(others) {
		t.Fatalf("stat of the other sessions printed %d lines, want %d:\n%s", n, len(others), out)
	}
	st := relReadStats(t, m)
	g := passSchedLine.FindStringSubmatch(st.raw)
	// The stall is the URL's only delay rule: its requests are the
	// delayed ones, and one is still in flight.
	if st.Faults["get"].Delayed < 1 || g == nil || g[1] == "0" {
		t.Fatalf("after the listing: hung GETs %d, scheduler line %q: the listing waited for the hung request to end",
			st.Faults["get"].Delayed, g)
	}
}

// TestSessionsListCacheDir: the disk cache is on by default, per bucket
// under the user's cache directory, and a fresh mount on the cache
// directory of an earlier one confirms what it knows with the freshness
// pass: no snapshot or manifest GET for a session that did not change,
// one snapshot GET for one that did. --cache-dir=off keeps nothing.
func TestSessionsListCacheDir(t *testing.T) {
	bk := relLocalBucket(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := passSessions(t, bk, 5, created)
	walk := int64(passWalkLists + len(passHours))

	first := mount(t, bk)
	passListing(t, first)
	first.Stop(t)
	kept, _ := filepath.Glob(filepath.Join(testCacheHome(t), "pugfs", "*", "summaries"))
	if len(kept) != 1 {
		t.Fatalf("after a mount with the default --cache-dir: summary files %v under %s, want one", kept, testCacheHome(t))
	}

	// One session moves while no mount runs.
	changed := ids[7]
	later := created.Add(time.Minute)
	passCommit(t, bk, changed, "c.txt", "later", later)

	tests := []struct {
		name string
		args []string
		gets int64
	}{
		{"default cache directory", nil, 1},
		{"cache directory off", []string{"--cache-dir=off"}, int64(len(ids))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := relMountOn(t, bk, t.TempDir(), tt.args...)
			before := listReadCounts(t, m)
			got := passListing(t, m)
			cost := listReadCounts(t, m).minus(before)
			t.Logf("ls -l on a fresh mount: %+v", cost)
			if cost.List != walk || cost.Get != tt.gets || cost.Head != 0 {
				t.Fatalf("ls -l on a fresh mount cost %+v, want %d LISTs, %d GETs, no HEAD", cost, walk, tt.gets)
			}
			for _, id := range ids {
				want := created.Unix()
				if id == changed {
					want = later.Unix()
				}
				if got[id.String()] != want {
					t.Fatalf("%s at %d, want %d", id, got[id.String()], want)
				}
			}
		})
	}
}

// TestSessionsListServesStateLoads: after `ls sessions/`, reading a file
// of every session (cat sessions/*/b.txt) loads each session's state
// without a LIST of its own: the pass's version, as of the pass, is the
// fingerprint (consistency.md §4), and the snapshot the pass read is not
// read again. What is left per session is its manifest.
func TestSessionsListServesStateLoads(t *testing.T) {
	bk := relLocalBucket(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := passSessions(t, bk, 5, created)
	m := mount(t, bk, "--metadata-ttl=1m")
	if got := len(lines(sh(t, m.Dir, "ls sessions"))); got != len(ids) {
		t.Fatalf("ls sessions/ lists %d, want %d", got, len(ids))
	}
	before := listReadCounts(t, m)
	out := sh(t, m.Dir, "cat sessions/*/b.txt")
	cost := listReadCounts(t, m).minus(before)
	t.Logf("cat sessions/*/b.txt after ls: %+v", cost)
	for _, id := range ids {
		if !strings.Contains(out, "body of "+id.String()) {
			t.Fatalf("cat sessions/*/b.txt lacks %s:\n%s", id, out)
		}
	}
	if cost.List != 0 || cost.Get > int64(len(ids)) || cost.Head != 0 {
		t.Fatalf("cat of one file per session after ls costs %+v; want no LIST and at most one GET (the manifest) per session (%d)", cost, len(ids))
	}
}
