package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Request budgets of exploring a session (issue 12, tree.md "What things
// cost"), counted by the fault injector on the blob keys: names, sizes
// and times come from the snapshots, so `find` and `ls -lR` read no blob
// of a plain body; a declared encoding's decoded size costs one read of
// the body once, and nothing on a later mount with the same cache
// directory.

// budgetFile is one file of the budget session: what the tree shows.
type budgetFile struct {
	name      string
	shownSize int64
	declared  bool // has a declared content-encoding
}

// budgetSession commits a session of about 50 files over a few
// directories: plain text, JSON without encoding, declared gzip, declared
// zstd, and one gzip body whose encoding was lost. Every body is larger
// than the inline limit, so that none is served from the descriptor.
func budgetSession(t *testing.T, bk *Bucket) (layout.SessionID, []budgetFile) {
	t.Helper()
	ctx := context.Background()
	id := relSession(t, bk)
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	var ds []layout.Descriptor
	var files []budgetFile
	add := func(name, ctype, enc string, stored []byte, shown int64) {
		bi, err := bk.Store.PutBlobBytes(ctx, stored, layout.BlobOptions{ContentType: ctype, ContentEncoding: enc})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, layout.Descriptor{Name: name, Digest: bi.Digest, Size: bi.Size, CreatedAt: at,
			ContentType: ctype, ContentEncoding: enc})
		files = append(files, budgetFile{name: name, shownSize: shown, declared: enc != ""})
	}
	for i := range 12 {
		dir := fmt.Sprintf("d%d/", i%4)
		text := fixLines(fmt.Sprintf("text%d", i), 40+i)
		add(dir+fmt.Sprintf("t%02d.txt", i), "text/plain; charset=utf-8", "", text, int64(len(text)))
		js := []byte(`{"n": ` + strconv.Quote(string(fixLines(fmt.Sprintf("js%d", i), 30+i))) + "}\n")
		add(dir+fmt.Sprintf("j%02d.json", i), "application/json", "", js, int64(len(js)))
		gz := fixLines(fmt.Sprintf("gz%d", i), 200+i)
		add(dir+fmt.Sprintf("g%02d.log", i), "text/plain", layout.EncodingGzip, rdGzip(gz), int64(len(gz)))
		zs := fixLines(fmt.Sprintf("zs%d", i), 300+i)
		add(dir+fmt.Sprintf("z%02d.log", i), "text/plain", layout.EncodingZstd, rdZstd(zs), int64(len(zs)))
	}
	// Two gzip members: the trailer speaks for the second only.
	a, b := fixLines("first member", 300), fixLines("second member", 40)
	add("d0/two-members.log", "text/plain", layout.EncodingGzip, append(rdGzip(a), rdGzip(b)...), int64(len(a)+len(b)))
	// A lost encoding: shown as stored unless --sniff-encoding.
	lost := rdGzip(fixLines("lost", 300))
	add("d1/lost.json", "application/json", "", lost, int64(len(lost)))
	if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
	return id, files
}

var budgetCountedLine = regexp.MustCompile(`(?m)^faults counted objects/: get (\d+), head (\d+),`)

// budgetBlobGets is how many GET and HEAD requests the mount has sent for
// keys under objects/ so far.
func budgetBlobGets(t *testing.T, m *Mount) int64 {
	t.Helper()
	st := relReadStats(t, m)
	g := budgetCountedLine.FindStringSubmatch(st.raw)
	if g == nil {
		t.Fatalf("no count of objects/ requests in .pugmark/stats:\n%s", st.raw)
	}
	get, _ := strconv.ParseInt(g[1], 10, 64)
	head, _ := strconv.ParseInt(g[2], 10, 64)
	return get + head
}

// budgetWant is what `find -printf '%s %p\n'` prints, sorted.
func budgetWant(id layout.SessionID, files []budgetFile) string {
	var lines []string
	for _, f := range files {
		lines = append(lines, fmt.Sprintf("%d %s/%s", f.shownSize, sess(id), f.name))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func TestRemoteBudgetExploreSession(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id, files := budgetSession(t, bk)
	declared := int64(0)
	for _, f := range files {
		if f.declared {
			declared++
		}
	}
	fb := relWithFaults(bk, map[string]string{"fault_count_prefix": "objects/"})
	cacheDir := t.TempDir()
	find := "find " + sess(id) + " -type f -printf '%s %p\\n' | sort"
	lsR := "ls -lR " + sess(id) + " >/dev/null"

	// A fresh mount and a fresh cache directory: the plain bodies cost no
	// request; each declared encoding at most one, which learns its
	// decoded size (the right one, also for two gzip members).
	m := relMountOn(t, fb, t.TempDir(), "--cache-dir", cacheDir)
	if got, want := sh(t, m.Dir, find), budgetWant(id, files); got != want {
		t.Errorf("find on a fresh mount shows\n%s\nwant\n%s", got, want)
	}
	afterFind := budgetBlobGets(t, m)
	if afterFind > declared {
		t.Errorf("find on a fresh mount: %d requests for blobs, want at most %d (one per declared encoding, none for the plain bodies)", afterFind, declared)
	}
	sh(t, m.Dir, lsR)
	if n := budgetBlobGets(t, m) - afterFind; n != 0 {
		t.Errorf("ls -lR after find: %d requests for blobs, want 0", n)
	}
	t.Logf("fresh mount: find %d blob requests (%d declared encodings), ls -lR %d", afterFind, declared, budgetBlobGets(t, m)-afterFind)
	m.Stop(t)

	// A fresh mount with the cache directory of the first: the decoded
	// sizes are remembered there, so nothing asks for a blob.
	m2 := relMountOn(t, fb, t.TempDir(), "--cache-dir", cacheDir)
	sh(t, m2.Dir, lsR)
	if got, want := sh(t, m2.Dir, find), budgetWant(id, files); got != want {
		t.Errorf("find on a second mount shows\n%s\nwant\n%s", got, want)
	}
	if n := budgetBlobGets(t, m2); n != 0 {
		t.Errorf("ls -lR and find on a mount with a warm cache directory: %d requests for blobs, want 0", n)
	}
	m2.Stop(t)

	// --sniff-encoding still finds the lost encoding: the file shows its
	// decoded content and size.
	m3 := relMountOn(t, fb, t.TempDir(), "--sniff-encoding", "--cache-dir", t.TempDir())
	p := sess(id) + "/d1/lost.json"
	lost := fixLines("lost", 300)
	if got := sh(t, m3.Dir, "stat -c %s "+p); got != fmt.Sprintf("%d\n", len(lost)) {
		t.Errorf("--sniff-encoding: stat of the lost encoding = %s, want %d", got, len(lost))
	}
	if got := sh(t, m3.Dir, "head -c 9 "+p); got != string(lost[:9]) {
		t.Errorf("--sniff-encoding: the lost encoding starts %q, want %q", got, lost[:9])
	}
	// Without it (the first mounts), the same file showed the stored gzip.
}

var budgetBlobWrites = regexp.MustCompile(`(?m)^faults counted objects/: get \d+, head (\d+), put (\d+),`)

// TestRemoteBudgetSmallWrite: on a bucket that is not a local directory,
// a small file closed after writing costs its blob PUT and its snapshot
// PUT, not a HEAD first (tar and cp of small files paid three round trips
// a file); a large one asks first, and is not uploaded again when the
// bucket has it.
func TestRemoteBudgetSmallWrite(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	fb := relWithFaults(bk, map[string]string{"fault_count_prefix": "objects/"})
	m := relMountOn(t, fb, t.TempDir(), "--cache-dir", t.TempDir())
	blobs := func() (head, put int64) {
		g := budgetBlobWrites.FindStringSubmatch(relReadStats(t, m).raw)
		if g == nil {
			t.Fatalf("no count of objects/ requests in .pugmark/stats")
		}
		head, _ = strconv.ParseInt(g[1], 10, 64)
		put, _ = strconv.ParseInt(g[2], 10, 64)
		return head, put
	}
	for _, step := range []struct {
		what, script string
		head, put    int64
	}{
		{"a small file", "printf 'small body' > s1", 0, 1},
		{"the same small body again", "printf 'small body' > s2", 0, 1},
		{"a 1 MiB file", "head -c 1048576 /dev/zero > l1", 1, 1},
		{"the same 1 MiB body again", "head -c 1048576 /dev/zero > l2", 1, 0},
	} {
		h0, p0 := blobs()
		sh(t, m.Dir, "cd "+sess(id)+" && "+step.script)
		h1, p1 := blobs()
		if h1-h0 != step.head || p1-p0 != step.put {
			t.Errorf("%s: %d HEADs and %d PUTs under objects/, want %d and %d", step.what, h1-h0, p1-p0, step.head, step.put)
		}
	}
	if got := sh(t, m.Dir, "cd "+sess(id)+" && cat s1 s2 && cmp l1 l2 && stat -c %s l2"); got != "small bodysmall body1048576\n" {
		t.Errorf("read back %q", got)
	}
}

// budgetBlobReads is the fault injector's count of blob GETs.
var budgetBlobReads = regexp.MustCompile(`(?m)^faults counted objects/: get (\d+),`)

// TestRemoteBudgetOpenForWriting: opening a committed file for writing
// and closing it without writing to it (touch, `>>` of nothing, `<>`)
// reads no blob and stores none: the file is fetched only when a write
// needs its bytes. `touch` of a committed 100 MB file on a bucket 20 ms
// away downloaded all of it (audit 5).
func TestRemoteBudgetOpenForWriting(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	body := strings.Repeat("a line of the big file\n", 200_000) // 4.6 MB
	relCommitFiles(t, bk, id, map[string]string{"big.txt": body})
	fb := relWithFaults(bk, map[string]string{"fault_count_prefix": "objects/"})
	m := relMountOn(t, fb, t.TempDir(), "--cache-dir", t.TempDir())
	blobs := func() (get, put int64) {
		st := relReadStats(t, m).raw
		g, w := budgetBlobReads.FindStringSubmatch(st), budgetBlobWrites.FindStringSubmatch(st)
		if g == nil || w == nil {
			t.Fatalf("no count of objects/ requests in .pugmark/stats")
		}
		get, _ = strconv.ParseInt(g[1], 10, 64)
		put, _ = strconv.ParseInt(w[2], 10, 64)
		return get, put
	}
	dir := filepath.Join(m.Dir, sess(id))
	sh(t, dir, "stat -c %s big.txt")
	for _, step := range []struct{ what, script string }{
		{"touch", "touch -d @981173106 big.txt"},
		{"an append of nothing", ": >> big.txt"},
		{"an open for reading and writing", "exec 3<> big.txt; exec 3>&-"},
		{"a chmod while open for writing", "exec 3>> big.txt; chmod 640 /proc/self/fd/3; exec 3>&-"},
	} {
		g0, p0 := blobs()
		sh(t, dir, step.script)
		if g1, p1 := blobs(); g1 != g0 || p1 != p0 {
			t.Errorf("%s: %d blob GETs and %d blob PUTs, want none", step.what, g1-g0, p1-p0)
		}
	}
	if got := sh(t, dir, "stat -c '%s %Y %a' big.txt"); got != fmt.Sprintf("%d 981173106 640\n", len(body)) {
		t.Errorf("after the opens: size, mtime and mode %q", got)
	}
	src := filepath.Join(t.TempDir(), "big.txt")
	if err := os.WriteFile(src, []byte(body+"one more\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A write fetches the bytes it adds to.
	sh(t, dir, "echo 'one more' >> big.txt && cmp big.txt "+src)
}

// TestRemoteBudgetCopyIn: copying files into a session with the tools
// people use sends no LIST per file within the metadata TTL: rsync -a
// (a temporary name closed, its times and mode set, then renamed over
// the final name), chmod -R, GNU mv (which asks not to replace first)
// and rm each commit from the session as the mount knows it, guarded by
// the files they copy. Each chmod, utimes and rename listed the session
// first: on a bucket 20 ms away, rsync -a of 200 files sent 597 LISTs
// and took 37 s, 24 s without them.
func TestRemoteBudgetCopyIn(t *testing.T) {
	t.Parallel()
	needTool(t, "rsync")
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	m := relMountOn(t, relWithFaults(bk, map[string]string{"fault_latency": "1ms"}), t.TempDir(),
		"--cache-dir", t.TempDir(), "--metadata-ttl", "1h")
	src := t.TempDir()
	const files = 20
	for i := range files {
		body := strings.Repeat(fmt.Sprintf("file %d\n", i), 200) // a blob, not only inline
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%02d.txt", i)), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	requests := func() (list, put int64) {
		f := relReadStats(t, m).Faults
		return f["list"].Requests, f["put"].Requests
	}
	dir := filepath.Join(m.Dir, sess(id))
	sh(t, m.Dir, "ls "+sess(id)) // loads the session
	for _, step := range []struct {
		what, script string
		maxPuts      int64
	}{
		// The close's blob and snapshot, the utimes, the chmod, the
		// rename: five a file.
		{"rsync -a", "rsync -a " + src + "/ " + dir + "/", 5 * files},
		{"chmod -R", "chmod -R go-rwx " + dir, files},
		{"mv", "for i in 00 01 02 03 04; do mv " + dir + "/f$i.txt " + dir + "/g$i.txt; done", 5},
		{"rm", "rm " + dir + "/g0*.txt", 5},
	} {
		l0, p0 := requests()
		sh(t, m.Dir, step.script)
		l1, p1 := requests()
		if l1 != l0 || p1-p0 > step.maxPuts {
			t.Errorf("%s: %d LISTs and %d PUTs, want none and at most %d", step.what, l1-l0, p1-p0, step.maxPuts)
		}
	}
	got := sh(t, m.Dir, "cd "+sess(id)+" && ls | tr '\\n' ' ' && stat -c '%a %s' f19.txt && cmp f07.txt "+src+"/f07.txt")
	if !strings.HasPrefix(got, "f05.txt f06.txt ") || !strings.Contains(got, "f19.txt 600 ") {
		t.Errorf("after the copy, the chmod, the mv and the rm: %q", got)
	}
	if strings.Contains(got, ".f") {
		t.Errorf("a temporary name of rsync's is left: %q", got)
	}
}

// refsCountedLine is the fault injector's count of requests for refs/.
var refsCountedLine = regexp.MustCompile(`(?m)^faults counted refs/: get (\d+), head (\d+),`)

// TestRemoteBudgetRefs: `ls -l names/` and `ls -l refs/sessions/` read
// each ref once, wide in parallel (the kernel asks for every entry's
// size, then ls for every link's target, one after another: 500 names
// 20 ms away took 42 s), a plain `ls names/` needs no ref read to
// answer, and a second listing inside the TTL reads none.
func TestRemoteBudgetRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bk := relLocalBucket(t)
	const n = 40
	var wantNames, wantRefs strings.Builder
	for i := range n {
		id := relSession(t, bk)
		key, _ := layout.ManifestKey(id)
		name := fmt.Sprintf("n%02d", i)
		if err := bk.Store.Link(ctx, layout.SessionRefName(name), key); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&wantNames, "%s -> ../sessions/%s\n", name, id)
		fmt.Fprintf(&wantRefs, "%s\n", key)
	}
	fb := relWithFaults(bk, map[string]string{"fault_latency": "20ms", "fault_count_prefix": "refs/"})
	m := relMountOn(t, fb, t.TempDir(), "--read-only", "--metadata-ttl=1m")
	counted := func() (gets, heads int64) {
		g := refsCountedLine.FindStringSubmatch(relReadStats(t, m).raw)
		if g == nil {
			t.Fatal("no count of refs/ requests in .pugmark/stats")
		}
		a, _ := strconv.ParseInt(g[1], 10, 64)
		b, _ := strconv.ParseInt(g[2], 10, 64)
		return a, b
	}
	if got := sh(t, m.Dir, "ls names/ | wc -l"); got != fmt.Sprintf("%d\n", n) {
		t.Fatalf("ls names/ listed %q entries, want %d", got, n)
	}
	if got := sh(t, m.Dir, "stat -c %s names/n00"); got != "44\n" {
		t.Fatalf("size of names/n00: %q, want 44 (../sessions/ and an ID)", got)
	}
	if got := sh(t, m.Dir, `ls -l names/ | awk 'NR > 1 { print $(NF-2), $(NF-1), $NF }'`); got != wantNames.String() {
		t.Fatalf("ls -l names/:\n%s\nwant:\n%s", got, wantNames.String())
	}
	if got := sh(t, m.Dir, "cat refs/sessions/*"); got != wantRefs.String() {
		t.Fatalf("cat refs/sessions/*:\n%s\nwant:\n%s", got, wantRefs.String())
	}
	gets, heads := counted()
	sched := raSchedLine.FindStringSubmatch(relReadStats(t, m).raw)
	if sched == nil {
		t.Fatal("no scheduler line in .pugmark/stats")
	}
	peak, _ := strconv.Atoi(sched[1])
	t.Logf("%d names: %d GETs and %d HEADs of refs, scheduler peak %d", n, gets, heads, peak)
	if gets != n || heads != n {
		t.Errorf("%d refs were read with %d GETs and %d HEADs, want one of each a ref", n, gets, heads)
	}
	if peak < 4 {
		t.Errorf("at most %d requests were in flight at once; want the refs read wide in parallel", peak)
	}
	sh(t, m.Dir, "ls -l names/ refs/sessions/ > /dev/null")
	if g, h := counted(); g != gets || h != heads {
		t.Errorf("listing again inside the TTL read refs: %d GETs and %d HEADs, then %d and %d", gets, heads, g, h)
	}
}

// memCountedLine is the fault injector's count of requests for
// memories/.
var memCountedLine = regexp.MustCompile(`(?m)^faults counted memories/: get (\d+),`)

// TestRemoteBudgetMemories: `cat memories/*/r` walks the namespaces one
// after another; from the second on, the others' records are read ahead,
// wide in parallel, each namespace once (one round trip each before:
// 203 namespaces 20 ms away took 4.6 s).
func TestRemoteBudgetMemories(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	const n = 30
	var want strings.Builder
	for i := range n {
		body := fmt.Sprintf("record of namespace %02d\n", i)
		rdMemPut(t, bk.Store, fmt.Sprintf("ns%02d", i), "r", body)
		want.WriteString(body)
	}
	fb := relWithFaults(bk, map[string]string{"fault_latency": "20ms", "fault_count_prefix": "memories/"})
	m := relMountOn(t, fb, t.TempDir(), "--read-only", "--metadata-ttl=1m")
	if got := sh(t, m.Dir, "cat memories/*/r"); got != want.String() {
		t.Fatalf("cat memories/*/r:\n%s\nwant:\n%s", got, want.String())
	}
	raw := relReadStats(t, m).raw
	g, sched := memCountedLine.FindStringSubmatch(raw), raSchedLine.FindStringSubmatch(raw)
	if g == nil || sched == nil {
		t.Fatalf("no count of memories/ requests or no scheduler line in .pugmark/stats:\n%s", raw)
	}
	gets, _ := strconv.Atoi(g[1])
	peak, _ := strconv.Atoi(sched[1])
	t.Logf("%d namespaces: %d GETs under memories/, scheduler peak %d", n, gets, peak)
	if gets != n {
		t.Errorf("%d namespaces were read with %d GETs, want one each", n, gets)
	}
	if peak < 4 {
		t.Errorf("at most %d requests were in flight at once; want the namespaces read wide in parallel", peak)
	}
}

// TestFirstWriteFetchLeavesReadersAlone: while the first write to a file
// opened without O_TRUNC waits for its committed bytes (a bucket 1 s
// away), another process's open of the file for reading answers at
// once. It waited for the whole fetch (audit 6: cat and an editor's
// read behind a save): the reader's open dropped the page cache, which
// waits for the page the pending WRITE holds.
func TestFirstWriteFetchLeavesReadersAlone(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	body := strings.Repeat("a line of the big file\n", 100_000) // 2.3 MB
	relCommitFiles(t, bk, id, map[string]string{"big.txt": body})
	fb := relWithFaults(bk, map[string]string{"fault_latency": "1s"})
	m := relMountOn(t, fb, t.TempDir(), "--cache-dir", t.TempDir(), "--metadata-ttl", "1h")
	dir := filepath.Join(m.Dir, sess(id))
	sh(t, dir, "stat -c %s big.txt")
	written := filepath.Join(t.TempDir(), "written")
	writer := exec.Command("python3", "-c", `
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"XXXX", 1000)
open(sys.argv[2], "w").close()
os.close(fd)`, filepath.Join(dir, "big.txt"), written)
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Process.Kill(); writer.Wait() })
	// The writer's fetch is in flight: its WRITE holds the page.
	inFlight := regexp.MustCompile(`(?m)^blob cache backend: reads \d+, bytes [^,]*, in flight ([1-9]\d*)`)
	for deadline := time.Now().Add(30 * time.Second); !inFlight.MatchString(relReadStats(t, m).raw); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first write never fetched; stats:\n%s", relReadStats(t, m).raw)
		}
	}
	out := sh(t, dir, `exec 3< big.txt; if [ -e '`+written+`' ]; then echo after; else echo before; fi`)
	if strings.TrimSpace(out) != "before" {
		t.Errorf("an open for reading answered %s the first write's fetch ended, want before", strings.TrimSpace(out))
	}
	if err := writer.Wait(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	want := body[:1000] + "XXXX" + body[1004:]
	if got := sh(t, dir, "cat big.txt"); got != want {
		t.Errorf("after the write: %d bytes, want the file with XXXX at 1000", len(got))
	}
}

// TestStatsCountsEveryRequest: .pugmark/stats counts every request the
// mount sends, as the fault injector under it sees them: the probe at
// start was sent around the store's counters (and a cloud bucket's
// existence check before it, a LIST more), so a user counting requests
// from stats got fewer than were sent (audit 20).
func TestStatsCountsEveryRequest(t *testing.T) {
	bk := relLocalBucket(t)
	id := newSession(t, bk)
	// A body of more than 1 KiB is not inline: its cat is a GET.
	body := []byte(strings.Repeat("a", 5000))
	ctx := context.Background()
	bi, err := bk.Store.PutBlobBytes(ctx, body, layout.BlobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{
		{Name: "a.txt", Digest: bi.Digest, Size: bi.Size, CreatedAt: time.Now().UTC()}}}); err != nil {
		t.Fatal(err)
	}
	m := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "1ms"}))
	shE(t, m.Dir, `ls -l sessions/ >/dev/null; cat sessions/`+id.String()+`/a.txt >/dev/null; echo new > sessions/`+id.String()+`/new.txt`)
	st := relReadStats(t, m)
	g := execRequestsLine.FindStringSubmatch(st.raw)
	if g == nil {
		t.Fatalf("no request counts in .pugmark/stats:\n%s", st.raw)
	}
	for i, op := range []string{"get", "head", "put", "list"} {
		if n, _ := strconv.ParseInt(g[i+1], 10, 64); n != st.Faults[op].Requests {
			t.Errorf("stats count %d %s requests, the bucket saw %d", n, op, st.Faults[op].Requests)
		}
	}
}
