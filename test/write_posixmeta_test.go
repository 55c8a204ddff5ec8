package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// posixTree is the source tree of TestWritePosixMeta: path -> mode and
// content. Its files get old mtimes with nanoseconds.
var posixTree = []struct {
	path string
	mode os.FileMode
	body string
}{
	{"run.sh", 0o755, "#!/bin/sh\necho script ran\n"},
	{"sub/secret.txt", 0o640, "only the owner writes, the group reads\n"},
	{"sub/plain.txt", 0o644, "the default mode writes no posix-mode\n"},
}

var posixOld = time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)

// needTool skips the test when a program it drives is not installed.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed (apt-get install %s)", name, name)
	}
}

// makePosixTree writes posixTree under a new directory and returns it.
func makePosixTree(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	for i, f := range posixTree {
		p := filepath.Join(src, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		mt := posixOld.Add(time.Duration(i) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// wantPosixTree checks that dir holds posixTree with the source's modes
// (less clear, for a read-only view) and mtimes, to the nanosecond
// unless coarse (tar keeps whole seconds).
func wantPosixTree(t *testing.T, dir string, clear os.FileMode, coarse bool) {
	t.Helper()
	for i, f := range posixTree {
		fi, err := os.Stat(filepath.Join(dir, f.path))
		if err != nil {
			t.Error(err)
			continue
		}
		if got, want := fi.Mode().Perm(), f.mode&^clear; got != want {
			t.Errorf("%s: mode %o, want %o", f.path, got, want)
		}
		want := posixOld.Add(time.Duration(i) * time.Hour)
		if coarse {
			want = want.Truncate(time.Second)
		}
		if !fi.ModTime().Equal(want) {
			t.Errorf("%s: mtime %v, want %v", f.path, fi.ModTime().UTC(), want)
		}
	}
}

// TestWritePosixMeta: the create mode, chmod and utimes are kept as
// posix-mode / posix-mtime metadata (decisions.md), so rsync -a, cp -p
// and tar x copy a tree once, and a remount or a second mount shows the
// source's modes and mtimes; a script written into a session runs.
//
// What it protects: metadata that is accepted and dropped (rsync copying
// everything on every run, scripts that never run), metadata-only
// changes that upload the blob again, and chown that pretends to work.
func TestWritePosixMeta(t *testing.T) {
	t.Parallel()
	needTool(t, "rsync")
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	src := makePosixTree(t)
	m := mount(t, bk)
	dir := sessDir(m, id)

	sh(t, src, `rsync -a ./ '`+dir+`/'`)
	wantPosixTree(t, dir, 0, false)
	// What the bucket keeps: the modes (rsync creates 0600 and chmods,
	// so even 0644 is written), the times as RFC 3339 with nanoseconds.
	s := slots(t, bk, id)
	for _, c := range []struct{ name, key, want string }{
		{"run.sh", "posix-mode", "0755"},
		{"sub/secret.txt", "posix-mode", "0640"},
		{"sub/plain.txt", "posix-mode", "0644"},
		{"run.sh", "posix-mtime", "2020-01-02T03:04:05.123456789Z"},
	} {
		if got := s[c.name].Metadata[c.key]; got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.name, c.key, got, c.want)
		}
	}

	// A second run changes nothing and commits nothing. Directories have
	// no descriptor to keep a time in (tree.md: a session directory shows
	// its latest append), so their times are left out of the comparison.
	v := latest(t, bk, id)
	if out := sh(t, src, `rsync -ai --omit-dir-times ./ '`+dir+`/'`); out != "" {
		t.Errorf("second rsync -ai listed changes:\n%s", out)
	}
	if got := latest(t, bk, id); got != v {
		t.Errorf("second rsync committed: version %d, was %d", got, v)
	}

	// chmod and touch -d of a committed file: a new descriptor of the
	// same blob, nothing uploaded.
	blobs := objectCount(t, bk)
	sh(t, dir, `chmod 600 sub/plain.txt && touch -d '2021-05-06T07:08:09.5Z' sub/plain.txt && chmod 644 sub/plain.txt`)
	if got := objectCount(t, bk); got != blobs {
		t.Errorf("chmod/touch uploaded: %d blobs, was %d", got, blobs)
	}
	if got := slots(t, bk, id)["sub/plain.txt"].Metadata["posix-mtime"]; got != "2021-05-06T07:08:09.500000000Z" {
		t.Errorf("touch -d: posix-mtime %q", got)
	}
	sh(t, dir, `touch -d '`+posixOld.Add(2*time.Hour).Format(time.RFC3339Nano)+`' sub/plain.txt`)

	// cp -p and tar x keep them too.
	sh(t, src, `mkdir '`+dir+`/cp' && cp -pr run.sh sub '`+dir+`/cp/'`)
	wantPosixTree(t, filepath.Join(dir, "cp"), 0, false)
	sh(t, src, `mkdir '`+dir+`/tar' && tar cf - . | tar -C '`+dir+`/tar' -xf -`)
	wantPosixTree(t, filepath.Join(dir, "tar"), 0, true)

	// So does rsync -aX with the filter the README gives to keep the
	// meta. keys, and its second run changes nothing: listed as
	// attributes, posix-mode was removed by rsync after its chmod (the
	// source file has no such attribute), every file then 0644, again at
	// every run (audit 12).
	const filter = `--filter='-x user.pugmark.[a-ln-z]*'`
	sh(t, src, `mkdir '`+dir+`/x' && rsync -aX `+filter+` ./ '`+dir+`/x/'`)
	wantPosixTree(t, filepath.Join(dir, "x"), 0, false)
	if out := sh(t, src, `rsync -aXi --omit-dir-times `+filter+` ./ '`+dir+`/x/'`); out != "" {
		t.Errorf("second rsync -aXi listed changes:\n%s", out)
	}

	// chown to the mount's own owner succeeds; to anyone else, EPERM.
	for _, c := range []struct {
		uid, gid int
		want     error
	}{
		{os.Getuid(), os.Getgid(), nil},
		{-1, os.Getgid(), nil},
		{os.Getuid() + 1000, -1, syscall.EPERM},
		{-1, os.Getgid() + 1000, syscall.EPERM},
	} {
		err := os.Chown(filepath.Join(dir, "run.sh"), c.uid, c.gid)
		if !errors.Is(err, c.want) {
			t.Errorf("chown %d:%d: %v, want %v", c.uid, c.gid, err, c.want)
		}
	}

	// Another mount sees them while this one runs; a read-only view
	// shows no write bits.
	other := mount(t, bk, "--metadata-ttl", "0")
	wantPosixTree(t, sessDir(other, id), 0, false)
	ro := mount(t, bk, "--read-only")
	wantPosixTree(t, sessDir(ro, id), 0o222, false)
	at := strings.TrimSpace(sh(t, ro.Dir, "cat "+meta(id)+"/version"))
	wantPosixTree(t, filepath.Join(ro.Dir, meta(id), "at", at), 0o222, false)

	// After a remount: the source's modes and times, and the script runs.
	m.Stop(t)
	again := mount(t, bk)
	dir = sessDir(again, id)
	wantPosixTree(t, dir, 0, false)
	if out := sh(t, dir, `./run.sh`); out != "script ran\n" {
		t.Errorf("run.sh printed %q", out)
	}
	if out := sh(t, src, `rsync -ai --omit-dir-times ./ '`+dir+`/'`); out != "" {
		t.Errorf("rsync -ai after a remount listed changes:\n%s", out)
	}
}

// TestWritePosixMetaContent: a content write keeps posix-mode and drops
// posix-mtime (decisions.md): the commit's created-at is the new mtime.
func TestWritePosixMetaContent(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	dir := sessDir(m, id)
	sh(t, dir, `echo one > f && chmod 750 f && touch -d 2001-01-01T00:00:00Z f`)
	before := time.Now()
	sh(t, dir, `echo two >> f`)
	e := slots(t, bk, id)["f"]
	if got := e.Metadata["posix-mode"]; got != "0750" {
		t.Errorf("posix-mode after a write: %q, want 0750", got)
	}
	if got, ok := e.Metadata["posix-mtime"]; ok {
		t.Errorf("posix-mtime after a write: %q, want none", got)
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 || fi.ModTime().Before(before.Add(-time.Second)) {
		t.Errorf("after a write: mode %o, mtime %v", fi.Mode().Perm(), fi.ModTime())
	}
}

// TestPosixModeNoPermissionBits: a posix-mode that leaves no permission
// bits is shown as such, not as go-fuse's default 0644: chmod 000 on a
// read-write mount, and 0200 on a read-only one (which shows no write
// bits). A write-only or mode-000 file shown readable would be copied out
// by cp -a and rsync -a as 0644.
func TestPosixModeNoPermissionBits(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	sh(t, sessDir(m, id), `echo none > none && echo wo > wo && chmod 000 none && chmod 200 wo`)
	ro := mount(t, bk, "--read-only")
	for _, c := range []struct {
		m    *Mount
		name string
		want os.FileMode
	}{
		{m, "none", 0}, {m, "wo", 0o200},
		{ro, "none", 0}, {ro, "wo", 0},
	} {
		fi, err := os.Stat(filepath.Join(sessDir(c.m, id), c.name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("%s on %s: mode %v, want %v", c.name, c.m.Dir, got, c.want)
		}
	}
}

// TestPosixModeValueChecked: setfattr of a posix-mode no reader can use
// (0o600, a space, 9) is EINVAL and leaves the file as it was, and a
// value another writer stored that way fails closed, to 0600 (audit 14:
// stored, then shown 0644 to every user).
func TestPosixModeValueChecked(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	sd := sessDir(m, id)
	sh(t, sd, `echo f > f && chmod 640 f`)
	for _, v := range []string{"0o600", " 600", "0789", "rw-------"} {
		if e := shErr(t, sd, "setfattr -n user.pugmark.meta.posix-mode -v '"+v+"' f"); !strings.Contains(e, "Invalid argument") {
			t.Errorf("setfattr posix-mode %q: %q, want EINVAL", v, e)
		}
	}
	if got := strings.TrimSpace(sh(t, sd, "stat -c %a f")); got != "640" {
		t.Errorf("after refused posix-modes f is %s, want 640", got)
	}
	res, err := bk.Store.Commit(context.Background(), id, layout.CommitRequest{Descriptors: []layout.Descriptor{{
		Name: "odd", Digest: layout.DigestOf([]byte("o\n")), Size: 2, Data: []byte("o\n"),
		Metadata: map[string]string{layout.MetaPosixMode: "0o644"}, CreatedAt: time.Now()}}})
	if err != nil {
		t.Fatal(err)
	}
	ro := mount(t, bk)
	if got := strings.TrimSpace(sh(t, sessDir(ro, id), "stat -c %a odd")); got != "600" {
		t.Errorf("a stored posix-mode 0o644 (version %d) shows %s, want 600", res.Version, got)
	}
}

// TestMetadataChangeKeepsInode: chmod, utimes and setxattr of a file
// this mount never wrote commit a new descriptor of the same bytes, and
// the file keeps the inode number the kernel knows (ino.go), as a rename
// does: the number changed, so a lock held on the file (flock) no longer
// excluded a second flock of it.
func TestMetadataChangeKeepsInode(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	names := []string{"chmod.txt", "touch.txt", "xattr.txt"}
	files := map[string]string{}
	for _, n := range names {
		files[n] = n + "\n"
	}
	seed(t, bk, id, files)
	m := mount(t, bk, "--metadata-ttl=0")
	dir := sessDir(m, id)
	for _, c := range []struct{ name, op string }{
		{"chmod.txt", "chmod 600 chmod.txt"},
		{"touch.txt", "touch -d 2021-05-06T07:08:09Z touch.txt"},
		{"xattr.txt", "setfattr -n user.pugmark.meta.k -v v xattr.txt"},
	} {
		before := strings.TrimSpace(sh(t, dir, "stat -c %i "+c.name))
		v := latest(t, bk, id)
		sh(t, dir, c.op)
		if latest(t, bk, id) == v {
			t.Fatalf("%s committed nothing", c.op)
		}
		if after := strings.TrimSpace(sh(t, dir, "stat -c %i "+c.name)); after != before {
			t.Errorf("%s: inode %s before, %s after", c.op, before, after)
		}
	}
	// And a lock held across the change still excludes.
	out := sh(t, dir, `exec 9<chmod.txt; flock -x 9; chmod 644 chmod.txt; flock -xn chmod.txt true && echo "second lock taken" || echo excluded`)
	if strings.TrimSpace(out) != "excluded" {
		t.Errorf("a flock held across a chmod: %q, want the second one excluded", out)
	}
}
