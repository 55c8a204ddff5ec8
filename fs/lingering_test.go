package fs

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/internal/testrig"
	"golang.org/x/sys/unix"
)

// TestMountUnmountedBeforeReady: a script that waits for the mountpoint
// to appear can unmount it before Mount returns, after another mount
// namespace took a copy of it. Mount failed then (go-fuse's poll hack
// found no file) and its watch for lingering copies took the device of
// the directory under the mount: the process neither served the copy nor
// ended its connection (TestUnmountWithNamespaceCopy under load). Now
// the mount goes on, and its connection ends once nobody uses the copy.
func TestMountUnmountedBeforeReady(t *testing.T) {
	r := testrig.New(t, 0)
	var log syncbuf.Buffer
	staging := t.TempDir()
	f, err := New(Config{Store: r.Store, Cache: r.Cache, Blobs: r.Blobs, StagingDir: staging, FailedDir: staging + "/failed",
		UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Logger: log.Logger(slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	early := func(dir string) {
		// Not t.Fatal: Mount is waiting on this, with the mount made.
		if _, err := holdNamespaceCopy(t); err != nil {
			t.Error(err)
			return
		}
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount before serving: %v", err)
		}
	}
	srv, err := Mount(dir, f, MountOptions{afterMount: early})
	if err != nil {
		t.Fatalf("Mount of a mount unmounted before it was ready: %v", err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		srv.Unmount()
		t.Fatalf("the connection a namespace copy held was not ended; log:\n%s", log.String())
	}
	for _, want := range []string{"unmounted before it was ready", "ending its FUSE connection"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// TestFuseDevAt: the device of a mount is read from the mount table: the
// topmost mount at the path wins, a path is unescaped, and anything but
// FUSE on top gives none.
func TestFuseDevAt(t *testing.T) {
	const (
		root  = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
		fuse1 = "40 22 0:51 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:20 - fuse.pugfs file:///b rw,user_id=0,group_id=0\n"
		fuse2 = "41 40 0:52 / /mnt/a\\040b rw,nosuid,nodev,relatime - fuse pugfs rw\n"
		tmpfs = "42 41 0:53 / /mnt/a\\040b rw - tmpfs tmpfs rw\n"
	)
	for _, c := range []struct {
		what, info, dir, want string
	}{
		{"a FUSE mount", root + fuse1, "/mnt/a b", "0:51"},
		{"the topmost of two", root + fuse1 + fuse2, "/mnt/a b", "0:52"},
		{"tmpfs on top", root + fuse1 + tmpfs, "/mnt/a b", ""},
		{"another path", root + fuse1, "/mnt/a", ""},
		{"not FUSE", root, "/", ""},
	} {
		t.Run(c.what, func(t *testing.T) {
			if got := fuseDevAt([]byte(c.info), c.dir); got != c.want {
				t.Errorf("fuseDevAt(%q) = %q, want %q", c.dir, got, c.want)
			}
			if c.want != "" && !mountsDev([]byte(c.info), c.want) {
				t.Errorf("mountsDev(%q) = false", c.want)
			}
		})
	}
	if mountsDev([]byte(root+fuse1), "0:5") {
		t.Error("mountsDev matched a prefix of a device")
	}
}

// TestNextScan: a copy in use is scanned for less and less often, up to
// scanMax, and one found idle is scanned again soon, whatever came before.
func TestNextScan(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		busy bool
		want time.Duration
	}{
		{scanMin, true, 2 * scanMin},
		{2 * scanMin, true, 4 * scanMin},
		{scanMax / 2, true, scanMax},
		{scanMax, true, scanMax},
		{scanMax, false, scanMin},
		{scanMin, false, scanMin},
	} {
		if got := nextScan(c.wait, c.busy); got != c.want {
			t.Errorf("nextScan(%v, busy=%v) = %v, want %v", c.wait, c.busy, got, c.want)
		}
	}
}

// TestDevInUse: what tells a copy of a mount in use, on a tmpfs of the
// test's own (a device nobody else uses): a descriptor, a mapping, a
// working directory of another process; and whether some mount namespace
// still holds the device once it is unmounted here.
func TestDevInUse(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs (the tests run as root): %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if devInUse(dev) {
		t.Fatal("devInUse of a device nobody uses")
	}
	start := func(t *testing.T, script string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sh", "-c", script, "sh", file)
		cmd.Dir = "/"
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	for _, c := range []struct{ what, script, link string }{
		{"a descriptor", `exec 3<"$1"; exec sleep 600`, "fd/3"},
		{"a working directory", `cd "$(dirname "$1")"; exec sleep 600`, "cwd"},
	} {
		t.Run(c.what, func(t *testing.T) {
			cmd := start(t, c.script)
			link := fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, c.link)
			waitUntil(t, "the process on the tmpfs", func() bool {
				l, _ := os.Readlink(link)
				return strings.HasPrefix(l, dir)
			})
			if !devInUse(dev) {
				t.Errorf("devInUse missed %s", c.what)
			}
			cmd.Process.Kill()
			cmd.Wait()
			if devInUse(dev) {
				t.Errorf("devInUse after the process with %s ended", c.what)
			}
		})
	}
	t.Run("a mapping", func(t *testing.T) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := unix.Mmap(int(f.Fd()), 0, 1, unix.PROT_READ, unix.MAP_SHARED)
		f.Close() // the mapping alone holds the file
		if err != nil {
			t.Fatal(err)
		}
		if !devInUse(dev) {
			t.Error("devInUse missed a mapping")
		}
		unix.Munmap(m)
		if devInUse(dev) {
			t.Error("devInUse after the unmap")
		}
	})
	if !copiesLeft(dev) {
		t.Fatal("copiesLeft: the tmpfs is mounted here")
	}
	holder, err := holdNamespaceCopy(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if !copiesLeft(dev) {
		t.Error("copiesLeft missed the copy in unshare's namespace")
	}
	holder.Process.Kill()
	holder.Wait()
	if copiesLeft(dev) {
		t.Error("copiesLeft after the namespace ended")
	}
}

// holdNamespaceCopy starts a process in a mount namespace of its own,
// made as a copy of this one's (so holding a copy of each mount), and
// returns once the namespace exists; the process lives until the test
// ends or it is killed.
func holdNamespaceCopy(t *testing.T) (*exec.Cmd, error) {
	if _, err := exec.LookPath("unshare"); err != nil {
		return nil, fmt.Errorf("unshare (util-linux) is needed: %w", err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sleep", "600")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	comm := fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(comm); strings.TrimSpace(string(b)) == "sleep" {
			return cmd, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("unshare did not start its namespace")
		}
	}
}

// waitUntil polls cond until it holds, failing the test after 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
