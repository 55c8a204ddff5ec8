package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/procread"
)

// runMountHelper runs pugfs as mount(8) does for a fuse.pugfs line of
// /etc/fstab: as /sbin/mount.fuse.pugfs (a link to pugfs) when asHelper,
// else as mount.fuse3 runs it, pugfs SPEC DIR -o OPTIONS. Its log goes
// to logFile; it returns the exit status and stderr.
func runMountHelper(t *testing.T, asHelper bool, logFile string, args ...string) (int, string) {
	t.Helper()
	bin := pugfsBinary(t)
	if asHelper {
		link := filepath.Join(t.TempDir(), "mount.fuse.pugfs")
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
		bin = link
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PUGFS_LOG="+logFile, "PUGFS_MOUNT_TIMEOUT=30", "XDG_CACHE_HOME="+testCacheHome(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	return code, stderr.String()
}

// pugfsServing reports whether a pugfs process serves dir (its command
// line names it).
func pugfsServing(dir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := procread.ReadFile(p, procWithin) // a stuck process is not one being looked for
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && filepath.Base(args[0]) == "pugfs" && args[1] == "mount" && strings.Contains(string(b), "\x00"+dir+"\x00") {
			return true
		}
	}
	return false
}

// TestMountHelper: pugfs run by mount(8) for a fuse.pugfs entry of
// /etc/fstab (README's "Mounting at boot"), as mount.fuse.pugfs or as
// mount.fuse3 runs it, translates the options to pugfs flags, returns
// once the mount is there (pugfs going on in the background), and
// `umount` ends pugfs; a typo in an option or a bucket pugfs cannot mount
// fails it with the reason, and leaves nothing mounted or running.
func TestMountHelper(t *testing.T) {
	for _, asHelper := range []bool{true, false} {
		name := "pugfs SPEC DIR -o"
		if asHelper {
			name = "mount.fuse.pugfs"
		}
		t.Run(name, func(t *testing.T) { testMountHelper(t, asHelper) })
	}
}

func testMountHelper(t *testing.T, asHelper bool) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	files := relSeedFiles(t, bk, id, 2, 5)
	logFile := filepath.Join(t.TempDir(), "pugfs.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("pugfs log:\n%s", b)
		}
	})

	t.Run("mount and umount", func(t *testing.T) {
		dir := t.TempDir()
		cacheDir := t.TempDir()
		// mount.fuse3 adds dev,suid; mount(8) passes -t to a helper.
		code, stderr := runMountHelper(t, asHelper, logFile, bk.URL, dir, "-o", "ro,allow_other,metadata_ttl=5s,_netdev,nofail,cache_dir="+cacheDir+",dev,suid")
		if code != 0 {
			t.Fatalf("helper exit %d: %s", code, stderr)
		}
		if !isMounted(dir) {
			t.Fatal("the helper returned 0 and nothing is mounted")
		}
		t.Cleanup(func() {
			if isMounted(dir) {
				exec.Command("fusermount3", "-uz", dir).Run()
			}
		})
		flags, err := os.ReadFile(filepath.Join(dir, ".pugmark", "flags"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"--read-only", "--allow-other", "--metadata-ttl=5s", "--cache-dir=" + cacheDir} {
			if !strings.Contains(string(flags), want) {
				t.Errorf("pugfs runs with %q, want %s among its flags", strings.TrimSpace(string(flags)), want)
			}
		}
		relCheckReads(t, &Mount{Dir: dir}, id, files)
		if err := os.WriteFile(filepath.Join(dir, "sessions", id.String(), "w.txt"), []byte("x"), 0o644); err == nil {
			t.Error("a write through an ro mount succeeded")
		}
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v: %s", err, out)
		}
		relWait(t, 30*time.Second, "pugfs exits after umount", func() bool { return !pugfsServing(dir) })
	})

	t.Run("fail", func(t *testing.T) {
		for _, tc := range []struct {
			name, spec, opts, want string
		}{
			{"unknown option", bk.URL, "ro,colour=blue", `unknown option "colour=blue"`},
			{"no such bucket", filepath.Join(t.TempDir(), "missing"), "ro", "pugfs exited before the mount appeared"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				code, stderr := runMountHelper(t, asHelper, logFile, tc.spec, dir, "-o", tc.opts)
				if code == 0 || !strings.Contains(stderr, tc.want) {
					t.Errorf("helper exit %d, stderr %q; want a failure saying %q", code, stderr, tc.want)
				}
				if isMounted(dir) || pugfsServing(dir) {
					t.Errorf("a failed helper left %s mounted or pugfs running", dir)
				}
			})
		}
	})
}
