package e2e

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/s3test"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// Access: who may use the mount, what the mode bits and ownership say, a
// read-only mount, and credentials kept out of everything pugfs shows.

// asNobody runs a shell command as uid/gid 65534 with no groups.
func asNobody(dir, script string) (string, string, error) {
	return run(dir, "setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '"+strings.ReplaceAll(script, "'", `'\''`)+"'")
}

func relNeedSetpriv(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to switch users")
	}
}

// TestReliabilityOnlyTheMountingUser: without --allow-other, another user
// cannot even list the mount (the kernel refuses with EACCES), although
// the mountpoint's own mode would let them.
//
// Removing the protection (mounting with allow_other by default) lets
// nobody list sessions/.
func TestReliabilityOnlyTheMountingUser(t *testing.T) {
	relNeedSetpriv(t)
	bk := relLocalBucket(t)
	relSession(t, bk)
	mnt := mount(t, bk)
	os.Chmod(filepath.Dir(mnt.Dir), 0o755)
	if out, e, err := asNobody("/", "ls "+mnt.Dir+"/sessions"); err == nil || !strings.Contains(e, "Permission denied") {
		t.Fatalf("nobody listed the mount: %v %q %q", err, out, e)
	}
	sh(t, mnt.Dir, "ls sessions >/dev/null") // the owner can
}

// TestReliabilityAllowOtherModeBits: with --allow-other the kernel checks
// the mode bits (default_permissions): nobody reads a 0644 file and lists
// the session, but cannot write the file, create a file, or make a
// directory in the 0755 session directory owned by root.
//
// Removing the protection (allow_other without default_permissions) lets
// nobody write into every session, because pugfs itself checks no
// credentials.
func TestReliabilityAllowOtherModeBits(t *testing.T) {
	relNeedSetpriv(t)
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	relCommitFiles(t, bk, id, map[string]string{"f.txt": "readable\n"})
	mnt := mount(t, bk, "--allow-other")
	os.Chmod(filepath.Dir(mnt.Dir), 0o755)
	sd := mnt.Dir + "/sessions/" + id.String()
	if got := sh(t, "/", "stat -c %a "+sd+"/f.txt"); strings.TrimSpace(got) != "644" {
		t.Fatalf("mode of f.txt: %s", got)
	}
	if out, e, err := asNobody("/", "cat "+sd+"/f.txt && ls "+sd); err != nil || !strings.Contains(out, "readable") {
		t.Fatalf("nobody cannot read a 0644 file with --allow-other: %v %q %q", err, out, e)
	}
	for _, script := range []string{"echo x >> " + sd + "/f.txt", "echo x > " + sd + "/new.txt", "mkdir " + sd + "/d", "rm " + sd + "/f.txt"} {
		if _, e, err := asNobody("/", script); err == nil || !strings.Contains(e, "Permission denied") {
			t.Errorf("nobody: %s: %v %q, want permission denied", script, err, e)
		}
	}
	if e, ok := relLiveSlots(t, bk, id)["f.txt"]; !ok || string(e.Data) != "readable\n" {
		t.Fatalf("f.txt changed: %+v %v", e, ok)
	}
	if _, ok := relLiveSlots(t, bk, id)["new.txt"]; ok {
		t.Fatal("nobody created new.txt")
	}
}

// TestReliabilityOwnerMapping: --uid, --gid and --umask decide what stat
// shows, and with --allow-other the kernel honours them: a mount owned by
// 65534 with umask 077 lets 65534 write and nobody else read.
//
// Removing the protection (ignoring the flags) shows root's ownership and
// 0644/0755.
func TestReliabilityOwnerMapping(t *testing.T) {
	relNeedSetpriv(t)
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	relCommitFiles(t, bk, id, map[string]string{"f.txt": "mapped\n"})
	mnt := mount(t, bk, "--allow-other", "--uid=65534", "--gid=65534", "--umask=077")
	os.Chmod(filepath.Dir(mnt.Dir), 0o755)
	sd := mnt.Dir + "/sessions/" + id.String()
	got := sh(t, "/", "stat -c '%u %g %a' "+sd+" "+sd+"/f.txt")
	if got != "65534 65534 700\n65534 65534 600\n" {
		t.Fatalf("stat with --uid/--gid/--umask:\n%s", got)
	}
	if out, e, err := asNobody("/", "cat "+sd+"/f.txt && echo by-nobody > "+sd+"/mine.txt"); err != nil || out != "mapped\n" {
		t.Fatalf("the mapped owner: %v %q %q", err, out, e)
	}
	if e, ok := relLiveSlots(t, bk, id)["mine.txt"]; !ok || string(e.Data) != "by-nobody\n" {
		t.Fatalf("mine.txt: %+v %v", e, ok)
	}
	// Another user (not the mapped owner, not root) is shut out.
	if _, e, err := run("/", "setpriv --reuid=4242 --regid=4242 --clear-groups cat "+sd+"/f.txt"); err == nil || !strings.Contains(e, "Permission denied") {
		t.Errorf("uid 4242 read a 0600 file of 65534: %v %q", err, e)
	}
}

// TestReliabilityReadOnlyInTheKernel: --read-only mounts with the kernel's
// ro option (in /proc/self/mountinfo), so every write fails with EROFS
// before it reaches pugfs.
//
// Removing the protection (read-only only in pugfs) leaves "rw" in
// mountinfo, and a write that pugfs forgot to refuse would go through.
func TestReliabilityReadOnlyInTheKernel(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	relCommitFiles(t, bk, id, map[string]string{"f.txt": "ro\n"})
	mnt := mount(t, bk, "--read-only")
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var opts string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == mnt.Dir {
			opts = f[5]
		}
	}
	if !strings.Contains(","+opts+",", ",ro,") {
		t.Fatalf("mount options %q lack ro", opts)
	}
	sd := "sessions/" + id.String()
	for _, script := range []string{"echo x > " + sd + "/f.txt", "echo x > " + sd + "/new", "mkdir " + sd + "/d",
		"rm " + sd + "/f.txt", "touch " + sd + "/f.txt", "mv " + sd + "/f.txt " + sd + "/g", "mkdir sessions/" + layout.NewSessionID(time.Now()).String()} {
		if e := shErr(t, mnt.Dir, script); !strings.Contains(e, "Read-only file system") {
			t.Errorf("%s: %q, want EROFS", script, e)
		}
	}
	if got := sh(t, mnt.Dir, "cat "+sd+"/f.txt"); got != "ro\n" {
		t.Fatalf("read on a read-only mount: %q", got)
	}
}

// TestReliabilityCredentialsNeverShown: the S3 secret key (from the
// environment) appears nowhere pugfs writes: not in the log (with
// --debug), .pugmark/bucket, .pugmark/flags, /proc/mounts; a secret put
// in the URL (user info, or a query parameter such as awssecret=) is
// redacted there too, and in the error of a mount the URL makes fail.
//
// Removing the protection (printing the URL as given, or os.Args as the
// flags) shows the query secret in .pugmark/flags, /proc/mounts and the
// error.
func TestReliabilityCredentialsNeverShown(t *testing.T) {
	bk := openBucket(t, testbucket.S3)
	id := relSession(t, bk)
	relCommitFiles(t, bk, id, map[string]string{"f.txt": "s3\n"})
	secrets := []string{s3test.SecretKey, "hunter2-in-the-url", "sas-sig-in-the-url"}
	check := func(t *testing.T, what, s string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				t.Errorf("%s shows the secret %q:\n%s", what, sec, s)
			}
		}
	}
	mnt := mount(t, bk, "--debug")
	sh(t, mnt.Dir, "cat sessions/"+id.String()+"/f.txt >/dev/null && ls -l sessions >/dev/null")
	for _, f := range []string{"bucket", "flags", "stats"} {
		b, err := os.ReadFile(filepath.Join(mnt.Dir, ".pugmark", f))
		if err != nil {
			t.Fatal(err)
		}
		check(t, ".pugmark/"+f, string(b))
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	check(t, "/proc/mounts", string(mounts))
	mnt.Stop(t)
	check(t, "the log", mnt.Log())

	// Secrets in the URL itself: a mount whose URL carries them in the
	// user info (accepted by the local driver, which ignores it) shows
	// them nowhere.
	lb := relLocalBucket(t)
	u, _ := url.Parse(lb.URL)
	u.User = url.UserPassword("someone", "hunter2-in-the-url")
	c := *lb
	c.URL = u.String()
	m2 := mount(t, &c)
	for _, f := range []string{"bucket", "flags"} {
		b, _ := os.ReadFile(filepath.Join(m2.Dir, ".pugmark", f))
		check(t, "user-info URL: .pugmark/"+f, string(b))
	}
	mounts, _ = os.ReadFile("/proc/mounts")
	check(t, "user-info URL: /proc/mounts", string(mounts))
	m2.Stop(t)
	check(t, "user-info URL: the log", m2.Log())

	// In query parameters, which the S3 driver refuses: the mount fails,
	// and its error names the parameter but not the value.
	q := *bk
	q.URL = bk.URL + "&awssecret=hunter2-in-the-url&sas_token=sas-sig-in-the-url"
	cmd := exec.Command(pugfsBinary(t), "mount", q.URL, t.TempDir())
	cmd.Env = append(os.Environ(), q.Env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("mount with unknown query parameters succeeded:\n%s", out)
	}
	check(t, "the failed mount's error", string(out))
	if !strings.Contains(string(out), "awssecret") {
		t.Errorf("the error does not say which parameter is wrong:\n%s", out)
	}
}
