package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/fsck"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/localblob"
)

// bin is the pugfs binary built once for the tests that run it as a user
// would (exit codes, stdout/stderr separation).
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pugfs-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "pugfs")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code        int
	stdout, err string
}

func pugfs(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("pugfs %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.err)
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	r := pugfs(t, args...)
	if r.code != 0 {
		t.Fatalf("pugfs %v: %s", args, r)
	}
	return r.stdout
}

var idLine = regexp.MustCompile(`^[0-9a-f]{32}\n$`)

func newDemo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bucket")
	out := mustRun(t, "demo", dir)
	if !strings.Contains(out, "wrote a demo bucket") || !strings.Contains(out, "refs/sessions/demo") {
		t.Fatalf("demo output:\n%s", out)
	}
	return dir
}

func TestDemoThenFsck(t *testing.T) {
	dir := newDemo(t)
	out := mustRun(t, "fsck", dir)
	if !strings.Contains(out, "fsck: clean") {
		t.Errorf("fsck output:\n%s", out)
	}
	var rep fsck.Report
	js := mustRun(t, "fsck", "--json", dir)
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("--json output is not a report: %v\n%s", err, js)
	}
	if rep.Errors != 0 || rep.Warnings != 0 || rep.Stats.BlobsRead == 0 {
		t.Errorf("report: %+v", rep)
	}
	if r := pugfs(t, "fsck", "--quiet", dir); r.code != 0 || r.stdout != "" || r.err != "" {
		t.Errorf("--quiet on a clean bucket printed something: %s", r)
	}
	// A second demo into the same directory needs --force.
	if r := pugfs(t, "demo", dir); r.code != 1 || !strings.Contains(r.err, "--force") {
		t.Errorf("demo into a non-empty dir: %s", r)
	}
	mustRun(t, "demo", "--force", dir)
	mustRun(t, "fsck", "--no-blobs", dir)
}

func TestFsckFindsCorruption(t *testing.T) {
	dir := newDemo(t)
	// Drop version 2 of the main session: a gap (§6.1).
	id := strings.TrimSpace(mustRun(t, "session", "new", "--name", "demo", dir))
	sid, _ := layout.ParseSessionID(id)
	key, _ := layout.SnapshotKey(sid, 2)
	if err := os.Remove(filepath.Join(dir, key)); err != nil {
		t.Fatal(err)
	}
	r := pugfs(t, "fsck", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "§6.1") || !strings.Contains(r.stdout, "version 2 is missing") || !strings.Contains(r.stdout, "HAS ERRORS") {
		t.Errorf("fsck of a corrupted bucket: %s", r)
	}
	r = pugfs(t, "fsck", "--json", dir)
	var rep fsck.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.Errors == 0 {
		t.Errorf("fsck --json of a corrupted bucket: %v %s", err, r)
	}
}

func TestSessionNew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new-bucket") // created on first use
	a := mustRun(t, "session", "new", "--name", "x", "--agent", "me", dir)
	b := mustRun(t, "session", "new", "--name", "x", dir)
	if !idLine.MatchString(a) || a != b {
		t.Errorf("named session: %q then %q", a, b)
	}
	c := mustRun(t, "session", "new", dir)
	d := mustRun(t, "session", "new", dir)
	if !idLine.MatchString(c) || c == d || c == a {
		t.Errorf("unnamed sessions: %q %q", c, d)
	}
	mustRun(t, "fsck", dir)
	for _, bad := range []string{"a/b", "-dash"} {
		if r := pugfs(t, "session", "new", "--name", bad, dir); r.code != 2 {
			t.Errorf("bad name %q: %s", bad, r)
		}
	}
}

func TestFork(t *testing.T) {
	dir := newDemo(t)
	child := mustRun(t, "fork", dir, "demo")
	if !idLine.MatchString(child) {
		t.Fatalf("fork printed %q", child)
	}
	parent := strings.TrimSpace(mustRun(t, "session", "new", "--name", "demo", dir))
	at := mustRun(t, "fork", "--at", "2", "--name", "FORK.json", dir, parent)
	if !idLine.MatchString(at) {
		t.Fatalf("fork --at printed %q", at)
	}
	out := mustRun(t, "fsck", dir)
	if regexp.MustCompile(`(?m)^(warning|error) `).MatchString(out) {
		t.Errorf("fsck after forks:\n%s", out)
	}

	b, err := localblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := layout.New(b, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		id   string
		name string
		at   int64 // -1: the version of the fork record
	}{{strings.TrimSpace(child), defaultForkFile, -1}, {strings.TrimSpace(at), "FORK.json", 2}} {
		id, _ := layout.ParseSessionID(tc.id)
		m, err := s.LoadManifest(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Parent == nil || m.Parent.Session.String() != parent {
			t.Fatalf("child %s: parent %+v", id, m.Parent)
		}
		if tc.at >= 0 && m.Parent.Version != uint32(tc.at) {
			t.Errorf("child %s forked at %d, want %d", id, m.Parent.Version, tc.at)
		}
		log, err := s.FullLog(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := layout.Lookup(log, tc.name); !ok {
			t.Errorf("child %s has no %s", id, tc.name)
		}
	}
	for _, args := range [][]string{
		{"fork", dir, "no-such-session"},
		{"fork", "--at", "99", dir, "demo"},
	} {
		if r := pugfs(t, args...); r.code != 1 || strings.Count(r.err, "\n") != 1 {
			t.Errorf("pugfs %v: %s", args, r)
		}
	}
	// A negative version is a usage error, not "no --at".
	if r := pugfs(t, "fork", "--at=-1", dir, "demo"); r.code != 2 {
		t.Errorf("pugfs fork --at=-1: %s", r)
	}
}

func TestHelp(t *testing.T) {
	for _, path := range [][]string{{"mount"}, {"demo"}, {"fsck"}, {"session"}, {"session", "new"}, {"fork"}, {"version"}} {
		for _, form := range [][]string{append(append([]string{}, path...), "--help"), append([]string{"help"}, path...)} {
			r := pugfs(t, form...)
			if r.code != 0 || !strings.Contains(r.stdout, "Usage: pugfs "+strings.Join(path, " ")) || !strings.Contains(r.stdout, "Examples:\n  pugfs") {
				t.Errorf("pugfs %v: %s", form, r)
			}
		}
	}
	r := pugfs(t, "help")
	for _, c := range []string{"mount", "demo", "fsck", "session new", "fork", "version"} {
		if !strings.Contains(r.stdout, "  "+c+" ") {
			t.Errorf("help does not list %s:\n%s", c, r.stdout)
		}
	}
	if r.code != 0 {
		t.Errorf("help: %s", r)
	}
}

// Every usage error is exit 2 with exactly one line on stderr that says
// what to run next.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"fsck", "--bogus", dir},
		{"mount", "--bogus", dir, dir},
		{"demo", "--bogus", dir},
		{"session", "new", "--bogus", dir},
		{"fork", "--bogus", dir, "x"},
		{"version", "--bogus"},
		{"session"},
		{"session", "old"},
		{"fsck"},
		{"fsck", dir, dir},
		{"mount", dir},
		{"mount", "--commit=sometimes", dir, dir},
		{"mount", "--snapshot-type=draft", dir, dir},
		{"mount", "--cache-size=lots", dir, dir},
		{"mount", "--umask=999", dir, dir},
		{"mount", "--metrics-addr=nonsense", dir, dir},
		{"mount", "--uid=-5", dir, dir},
		{"mount", "--metadata-ttl=-1s", dir, dir},
		{"fork", "--name", "../x", dir, "demo"},
		{"session", "new", "--name", "", dir},
		{"session", "new", "--name", strings.Repeat("n", 256), dir},
		{"session", "new", "--name=-x", dir},
		{"fork", "--snapshot-type=x", dir, "demo"},
		{"help", "frobnicate"},
	} {
		r := pugfs(t, args...)
		if r.code != 2 || strings.Count(r.err, "\n") != 1 || r.stdout != "" || !strings.Contains(r.err, "pugfs") {
			t.Errorf("pugfs %v: want exit 2 and one line: %s", args, r)
		}
	}
}

func TestFailuresAreOneLine(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"fsck", filepath.Join(dir, "absent")},
		{"fsck", "nosuchscheme://x"},
		{"mount", dir, filepath.Join(dir, "no-mountpoint")},
		{"fork", filepath.Join(dir, "absent"), "demo"},
	} {
		r := pugfs(t, args...)
		if r.code != 1 || strings.Count(r.err, "\n") != 1 {
			t.Errorf("pugfs %v: want exit 1 and one line: %s", args, r)
		}
	}
}

func TestVersion(t *testing.T) {
	r := pugfs(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "pugfs dev") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("version: %s", r)
	}
	old := version
	defer func() { version = old }()
	version = "v9.9.9"
	var out bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "pugfs v9.9.9 go1.") {
		t.Errorf("version with -X: %d %q", code, out.String())
	}
}

func TestBucketURL(t *testing.T) {
	cwd, _ := os.Getwd()
	for _, tc := range []struct {
		in, url, local string
		onDisk         bool // onLocalDisk: no disk copy of small bodies
	}{
		{"/srv/bucket", "file:///srv/bucket", "/srv/bucket", true},
		{"rel/b", "file://" + filepath.Join(cwd, "rel/b"), filepath.Join(cwd, "rel/b"), true},
		{"/with space", "file:///with%20space", "/with space", true},
		{"mem://", "mem://", "", false},
		{"s3://b?region=x", "s3://b?region=x", "", false},
		{"file:///x/y", "file:///x/y", "/x/y", true},
		{"fault+file:///x?fault_latency=1ms", "fault+file:///x?fault_latency=1ms", "/x", false},
		// A prefix is a directory: prefix=team wrote teamsessions/...
		{"s3://b?prefix=team&region=x", "s3://b?prefix=team%2F&region=x", "", false},
		{"s3://b?prefix=team/", "s3://b?prefix=team/", "", false},
		{"s3://b?prefix=", "s3://b?prefix=", "", false},
	} {
		u, local, err := bucketURL(tc.in)
		if err != nil || u != tc.url || local != tc.local {
			t.Errorf("bucketURL(%q) = %q, %q, %v; want %q, %q", tc.in, u, local, err, tc.url, tc.local)
		}
		if got := onLocalDisk(tc.in); got != tc.onDisk {
			t.Errorf("onLocalDisk(%q) = %v", tc.in, got)
		}
	}
	if _, _, err := bucketURL(""); err == nil {
		t.Error("empty URL accepted")
	}
}

func TestMemBucket(t *testing.T) {
	// mem:// works end to end in one process: a fresh bucket is clean.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"fsck", "mem://"}, &out, &errb); code != 0 {
		t.Errorf("fsck mem://: %d %s %s", code, out.String(), errb.String())
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1024": 1024, "64k": 64 << 10, "512MiB": 512 << 20, "1.5G": 3 << 29, "2GB": 2e9,
		"1TiB": 1 << 40, "10b": 10, " 7 MiB ": 7 << 20,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	// 8388608t is 2^63 bytes, one past what an int64 holds.
	for _, in := range []string{"", "MiB", "-1", "1XB", "1e400", "8388608t", "9223372036854775808"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
	if s := formatSize(256 << 20); s != "256MiB" {
		t.Errorf("formatSize = %s", s)
	}
}

func TestUmaskFlag(t *testing.T) {
	var o octalFlag
	for in, want := range map[string]uint32{"022": 0o22, "0o077": 0o77, "7": 7, "0777": 0o777} {
		if err := o.Set(in); err != nil || uint32(o) != want {
			t.Errorf("umask %q = %o, %v", in, uint32(o), err)
		}
	}
	for _, in := range []string{"8", "1000", "abc"} {
		if err := o.Set(in); err == nil {
			t.Errorf("umask %q accepted", in)
		}
	}
}

func TestInterspersedFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	j := fs.Bool("json", false, "")
	n := fs.String("name", "", "")
	pos, dash, err := parseInterspersed(fs, []string{"a", "--json", "b", "--name", "v", "--", "--c"})
	if err != nil || !*j || *n != "v" || strings.Join(pos, ",") != "a,b,--c" || dash != 2 {
		t.Errorf("got %v %d %v %v %q", pos, dash, err, *j, *n)
	}
	for _, c := range []struct {
		args []string
		pos  string
		dash int
	}{
		{[]string{"a", "b"}, "a,b", -1},
		{[]string{"--", "a", "b"}, "a,b", 0},
		// "--" first ends the flags; a second is the separator.
		{[]string{"--json", "--", "a", "b", "--", "c", "--d"}, "a,b,c,--d", 2},
		{[]string{"a", "b", "--", "c", "--", "d"}, "a,b,c,--,d", 2},
	} {
		pos, dash, err := parseInterspersed(fs, c.args)
		if err != nil || strings.Join(pos, ",") != c.pos || dash != c.dash {
			t.Errorf("%q: %q, dash %d, %v; want %q, dash %d", c.args, pos, dash, err, c.pos, c.dash)
		}
	}
}
