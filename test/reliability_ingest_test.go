package e2e

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"golang.org/x/sys/unix"
)

// Ingestion (ln -s URL) on a shared mount: the mount fetches with its own
// authority, so what a caller may ingest is decided for that caller
// (issue #17). These run on a root mount served to nobody (--allow-other
// --uid/--gid 65534), the usual way a bucket is handed to one user.

// relKeyCount counts every key in bk, blobs, snapshots and manifests
// alike: a refused ingestion must write nothing at all.
func relKeyCount(t *testing.T, bk *Bucket) int {
	t.Helper()
	n := 0
	it := bk.B.List(nil)
	for {
		_, err := it.Next(context.Background())
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
}

// relIngestFixture is a local directory to allow, with what tries to get
// out of it: a secret outside, a symbolic link to it, a root-only file,
// a group-readable one.
func relIngestFixture(t *testing.T) (shared, secret string) {
	t.Helper()
	top := t.TempDir()
	os.Chmod(top, 0o755)
	shared, secret = filepath.Join(top, "shared"), filepath.Join(top, "secret")
	for _, d := range []string{shared, secret} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		path, body string
		mode       os.FileMode
		gid        int
	}{
		{filepath.Join(shared, "pub.txt"), "shared with everyone\n", 0o644, 0},
		{filepath.Join(shared, "root-only.txt"), "root only\n", 0o600, 0},
		{filepath.Join(shared, "group.txt"), "group 4242\n", 0o640, 4242},
		{filepath.Join(secret, "s.txt"), "outside the allowed directory\n", 0o644, 0},
	} {
		if err := os.WriteFile(f.path, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f.path, f.mode)
		os.Chown(f.path, 0, f.gid)
	}
	os.Symlink("/etc/shadow", filepath.Join(shared, "shadow-link"))
	os.Symlink(secret, filepath.Join(shared, "secret-dir"))
	return shared, secret
}

// TestReliabilityIngestAsCaller: as nobody on a root mount with
// --ingest-from of one local directory and one S3 bucket, ln -s of
// /etc/shadow, of another S3 bucket, of the allowed bucket moved to
// another endpoint by a query, of the allowed directory left through ".."
// or through a symbolic link inside it, and of a root-only file in it,
// all fail with EACCES, write nothing to the bucket, and are logged with
// the URL (secrets removed) and nobody's uid and pid. A file nobody can
// read there, and an object of the allowed bucket, are ingested and
// committed; a file readable through a supplementary group only is
// ingested for a caller in that group.
//
// Removing the protection (fetching every URL with the mount's rights, as
// before) ingests /etc/shadow and the other bucket's object for nobody,
// and the bucket grows.
func TestReliabilityIngestAsCaller(t *testing.T) {
	relNeedSetpriv(t)
	shared, secret := relIngestFixture(t)
	allowed := openBucket(t, testbucket.S3)
	other := openBucket(t, testbucket.S3)
	for _, b := range []*Bucket{allowed, other} {
		if err := b.B.WriteAll(context.Background(), "in/obj.txt", []byte("object of "+b.URL+"\n"), nil); err != nil {
			t.Fatal(err)
		}
	}
	objURL := func(b *Bucket, query string) string {
		u, err := url.Parse(b.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/in/obj.txt"
		if query != "keep" {
			u.RawQuery = query
		}
		return u.String()
	}
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	env := *bk
	env.Env = append(append([]string{}, bk.Env...), allowed.Env...)
	mnt := mount(t, &env, "--allow-other", "--uid=65534", "--gid=65534",
		"--ingest-from=file://"+shared+"/", "--ingest-from="+allowed.URL)
	os.Chmod(filepath.Dir(mnt.Dir), 0o755)
	sd := mnt.Dir + "/sessions/" + id.String()

	moved, _ := url.Parse(allowed.URL)
	q := moved.Query()
	q.Set("endpoint", "http://127.0.0.1:1")
	before := relKeyCount(t, bk)
	for i, tc := range []struct{ what, target string }{
		{"/etc/shadow", "file:///etc/shadow"},
		{"another bucket", objURL(other, "keep")},
		{"another bucket, with a secret in its URL", objURL(other, "awssecret=hunter2-in-the-url")},
		{"the allowed bucket at another endpoint", objURL(allowed, q.Encode())},
		{"..", "file://" + shared + "/../secret/s.txt"},
		{"a symbolic link to /etc/shadow", "file://" + shared + "/shadow-link"},
		{"a symbolic link to a directory outside", "file://" + shared + "/secret-dir/s.txt"},
		{"a file of the allowed directory nobody may read", "file://" + shared + "/root-only.txt"},
		{"a file readable through a group nobody is not in", "file://" + shared + "/group.txt"},
		{"the directory outside, named directly", "file://" + secret + "/s.txt"},
	} {
		_, e, err := asNobody("/", "ln -s '"+tc.target+"' "+sd+"/stolen"+strconv.Itoa(i))
		if err == nil || !strings.Contains(e, "Permission denied") {
			t.Errorf("%s (%s): %v %q, want EACCES", tc.what, tc.target, err, e)
		}
	}
	if after := relKeyCount(t, bk); after != before {
		t.Errorf("refused ingestions wrote to the bucket: %d keys, then %d", before, after)
	}
	for name := range relLiveSlots(t, bk, id) {
		if strings.HasPrefix(name, "stolen") {
			t.Fatalf("a refused ingestion was committed: %s", name)
		}
	}
	log := mnt.Log()
	if strings.Contains(log, "hunter2-in-the-url") {
		t.Errorf("the log shows a URL's secret:\n%s", log)
	}
	refusal := regexp.MustCompile(`ingest refused.*url=file:///etc/shadow.*uid=65534 .*pid=[1-9]`)
	if !refusal.MatchString(log) {
		t.Errorf("no log line names the refused URL and nobody's uid and pid:\n%s", log)
	}

	// What nobody may read, nobody may ingest: the allowed file, the
	// allowed bucket's object (with and without repeating its query).
	want := map[string]string{
		"pub.txt":  "shared with everyone\n",
		"obj.txt":  "object of " + allowed.URL + "\n",
		"obj2.txt": "object of " + allowed.URL + "\n",
	}
	script := "cd " + sd + " && ln -s 'file://" + shared + "/pub.txt' pub.txt && ln -s '" + objURL(allowed, "keep") +
		"' obj.txt && ln -s '" + objURL(allowed, "") + "' obj2.txt && cat pub.txt obj.txt obj2.txt"
	if out, e, err := asNobody("/", script); err != nil || out != want["pub.txt"]+want["obj.txt"]+want["obj2.txt"] {
		t.Fatalf("allowed ingestions as nobody: %v %q %q\n%s", err, out, e, mnt.Log())
	}
	// A supplementary group counts (read from the caller's /proc status).
	if out, e, err := run("/", "setpriv --reuid=65534 --regid=65534 --groups=4242 bash -c \"ln -s 'file://"+shared+"/group.txt' "+sd+"/group.txt && cat "+sd+"/group.txt\""); err != nil || out != "group 4242\n" {
		t.Fatalf("a caller in the file's group: %v %q %q\n%s", err, out, e, mnt.Log())
	}
	want["group.txt"] = "group 4242\n"
	slots := relLiveSlots(t, bk, id)
	for name, body := range want {
		e, ok := slots[name]
		if !ok || string(relSlotBody(t, bk, e)) != body {
			t.Errorf("%s: committed %v %q, want %q", name, ok, relSlotBody(t, bk, e), body)
		}
	}
	if !strings.Contains(mnt.Log(), "ingested") || !strings.Contains(mnt.Log(), "uid=65534") {
		t.Errorf("the log does not say who ingested what:\n%s", mnt.Log())
	}
	// Root, the caller, may read the root-only file: the refusal above
	// was nobody's, not the mount's.
	sh(t, sd, "ln -s 'file://"+shared+"/root-only.txt' root.txt && test \"$(cat root.txt)\" = 'root only'")
}

// TestReliabilityIngestOffByDefault: without --ingest-from no URL is
// ingested, not even by root, the mount's own user: ln -s fails with
// EACCES and the bucket is unchanged.
//
// Removing the protection (an empty list meaning "anything") ingests
// /etc/hostname.
func TestReliabilityIngestOffByDefault(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk)
	before := relKeyCount(t, bk)
	if e := shErr(t, mnt.Dir+"/sessions/"+id.String(), "ln -s file:///etc/hostname h"); !strings.Contains(e, "Permission denied") {
		t.Fatalf("ln -s without --ingest-from: %q, want EACCES", e)
	}
	if after := relKeyCount(t, bk); after != before {
		t.Errorf("the bucket changed: %d keys, then %d", before, after)
	}
}

// TestReliabilityIngestBounded: ln -s holds its directory while the
// source streams, and a sparse file costs its owner no disk and the mount
// its whole size (audit 14: a 2 GiB one held ls of the session for 7 s,
// and a 1 TiB one would have filled the staging disk first). A source
// past --ingest-max-size is refused (EACCES, logged) and one the staging
// directory has no room for is ENOSPC, both before a byte is read; the
// bucket is unchanged. What is ingested keeps the source's mode.
func TestReliabilityIngestBounded(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "small.txt"), []byte("small\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "big.bin"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	// Sparse, and 1 GiB larger than the free space where the mount
	// stages (its cache directory's file system).
	var st unix.Statfs_t
	if err := unix.Statfs(testCacheHome(t), &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(src, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(st.Bavail)*st.Frsize + 1<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk, "--ingest-from=file://"+src+"/", "--ingest-max-size=1MiB")
	sd := mnt.Dir + "/sessions/" + id.String()
	before := relKeyCount(t, bk)
	if e := shErr(t, sd, "ln -s file://"+src+"/big.bin big"); !strings.Contains(e, "Permission denied") {
		t.Errorf("ln -s of 2 MiB past --ingest-max-size=1MiB: %q, want EACCES", e)
	}
	if !strings.Contains(mnt.Log(), "ingest refused") || !strings.Contains(mnt.Log(), "ingest-max-size") {
		t.Errorf("the refusal is not logged:\n%s", mnt.Log())
	}
	unbounded := mount(t, bk, "--ingest-from=file://"+src+"/")
	if e := shErr(t, unbounded.Dir+"/sessions/"+id.String(), "ln -s file://"+src+"/sparse.bin sparse"); !strings.Contains(e, "No space left") {
		t.Errorf("ln -s of a sparse file larger than the free space: %q, want ENOSPC", e)
	}
	if after := relKeyCount(t, bk); after != before {
		t.Errorf("the bucket changed: %d keys, then %d", before, after)
	}
	sh(t, sd, "ln -s file://"+src+"/small.txt small && cat small >/dev/null")
	if got := sh(t, sd, "cat small"); got != "small\n" {
		t.Errorf("small ingested as %q", got)
	}
	// The source's mode comes along, as with cp (audit 14: a file kept
	// 0600 became 0644).
	if err := os.WriteFile(filepath.Join(src, "private.txt"), []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"none.txt": 0, "open.txt": 0o666} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(src, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, sd, "ln -s file://"+src+"/private.txt private && ln -s file://"+src+"/none.txt none && ln -s file://"+src+"/open.txt open")
	// 0000 is a mode (it was taken for none: 0644), and others' write
	// bits go as under the usual umask (review 12).
	if got := sh(t, sd, "stat -c %a private small none open"); got != "600\n644\n0\n644\n" {
		t.Errorf("modes of the ingested private (0600), small (0644), none (0000) and open (0666):\n%s", got)
	}
}
