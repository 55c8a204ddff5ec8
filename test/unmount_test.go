package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestUnmountWithNamespaceCopy: a mount namespace made while a mount
// exists (pugfs exec makes one per handler, unshare -m another) holds a
// copy of it, which kept the FUSE connection of an unmounted pugfs alive
// for as long as the namespace lived: the process served nobody and did
// not exit (a test's mount waited on another test's handler). Now it
// ends the connection once nobody uses the copy, and not before: a file
// held open through the copy, or a working directory in it, still reads
// after the unmount, on a read-only mount too (whose files the kernel
// never OPENs, so no handle count says they are in use).
func TestUnmountWithNamespaceCopy(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	bk := openBucket(t, testbucket.Local)
	// Each holder uses the copy until the fifo says go, reads the file
	// ($1) through it into $3, stops using it, and lives on.
	// in is the link in /proc/<pid> that shows the holder in the copy.
	holders := []struct{ what, script, in, want string }{
		{"descriptor", `exec 3<"$1"; read x < "$2"; cat <&3 > "$3"; exec 3<&-; exec sleep 600`, "fd/3", "/bucket"},
		{"working directory", `cd "$(dirname "$1")"; read x < "$2"; cat "$(basename "$1")" > "$3"; cd /; exec sleep 600`, "cwd", "/.pugmark"},
	}
	for _, mode := range []struct {
		what string
		args []string
	}{{"read-write", nil}, {"read-only", []string{"--read-only"}}} {
		for _, h := range holders {
			t.Run(mode.what+"/"+h.what, func(t *testing.T) {
				mnt := mount(t, bk, mode.args...)
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("log of the mount:\n%s", mnt.Log())
					}
				})
				file := filepath.Join(mnt.Dir, ".pugmark", "bucket")
				fifo := filepath.Join(t.TempDir(), "go")
				if err := syscall.Mkfifo(fifo, 0o600); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(t.TempDir(), "read")
				holder := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", h.script, "sh", file, fifo, out)
				if err := holder.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
				waitFor(t, "the holder in the copy", func() bool {
					l, err := os.Readlink(fmt.Sprintf("/proc/%d/%s", holder.Process.Pid, h.in))
					return err == nil && strings.HasSuffix(l, h.want)
				})
				unmountBusy(t, mnt.Dir)
				// The holder keeps using the copy until the mount has seen it
				// in use (which takes it two idle checks to end).
				for deadline := time.Now().Add(20 * time.Second); !strings.Contains(mnt.Log(), "is in use: serving it"); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						report := hangReport(mnt.cmd.Process.Pid)
						mi, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", mnt.cmd.Process.Pid))
						for _, l := range strings.Split(string(mi), "\n") {
							if strings.Contains(l, "fuse") {
								report += "\nmountinfo: " + l
							}
						}
						quitAndWait(mnt.cmd.Process.Pid, mnt.done)
						t.Fatalf("timed out waiting for the mount to see its copy in use\n%s", report)
					}
				}
				if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the holder's read through its copy", func() bool {
					b, _ := os.ReadFile(out)
					return strings.Contains(string(b), "file://")
				})
				waitFor(t, "pugfs to exit", func() bool {
					select {
					case <-mnt.done:
						return true
					default:
						return false
					}
				})
				if mnt.err != nil {
					t.Fatalf("pugfs exited with %v\n%s", mnt.err, mnt.Log())
				}
				if !strings.Contains(mnt.Log(), "ending its FUSE connection") {
					t.Fatalf("the mount did not say why it ended:\n%s", mnt.Log())
				}
			})
		}
	}
}

// unmountBusy unmounts dir (no MNT_DETACH: the test is about what a plain
// unmount leaves). Under CI's load it was EBUSY once with no holder the
// test made: a process outside it (a walk of /tmp) can hold the mount for
// a moment. It is tried again until nobody holds it, the holders logged;
// one that stays fails the test.
func unmountBusy(t *testing.T, dir string) {
	t.Helper()
	id := mountID(dir)
	var err error
	seen := map[string]bool{}
	waitFor(t, "an unmount of "+dir+" that is not busy", func() bool {
		err = syscall.Unmount(dir, 0)
		if err == syscall.EBUSY {
			if h := mountHolders(id); !seen[h] {
				seen[h] = true
				t.Logf("unmount: EBUSY; %s", h)
			}
			return false
		}
		return true
	})
	if err != nil {
		t.Fatalf("unmount: %v", err)
	}
}

// TestStopWithFileOpenForWriting: a mount stopped (SIGTERM) while a
// program keeps a file open for writing detaches, waits a while for its
// last users, then keeps what was written in the failed directory and
// exits. It waited for the writer for as long as it lived, its bytes
// neither committed nor kept, until the supervisor's SIGKILL lost them
// (review 5).
func TestStopWithFileOpenForWriting(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	cacheDir := t.TempDir()
	m := mount(t, bk, "--cache-dir", cacheDir)
	file := filepath.Join(sessDir(m, id), "held.txt")
	// No shell: its redirections close a duplicate of the descriptor,
	// and that close commits the file.
	writer := exec.Command("python3", "-c", `
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, b"written, never closed")
time.sleep(600)
`, file)
	writer.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-writer.Process.Pid, syscall.SIGKILL); writer.Wait() })
	waitFor(t, "the write", func() bool { st, err := os.Stat(file); return err == nil && st.Size() > 0 })
	m.Stop(t) // fails after 30 s
	if !strings.Contains(m.Log(), "still in use after the stop signal") {
		t.Fatalf("the mount did not say why it stopped with a file open:\n%s", m.Log())
	}
	var kept []string
	filepath.Walk(cacheDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.Contains(fi.Name(), "held.txt") {
			if b, _ := os.ReadFile(p); string(b) == "written, never closed" {
				kept = append(kept, p)
			}
		}
		return nil
	})
	if len(kept) != 1 {
		t.Fatalf("kept copies of held.txt: %v\n%s", kept, m.Log())
	}
}

// TestStopTwiceWhileCommitting: a second SIGTERM while the mount drains
// (a close's commit hangs on the bucket) stops the wait at once: pugfs
// exits, and the file whose close was committing is kept in the failed
// directory. The second signal killed pugfs with the default action: the
// file was kept nowhere and the mountpoint was left dead (audit 37).
func TestStopTwiceWhileCommitting(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	cacheDir := t.TempDir()
	sw, on, off := relSwitchFile(t)
	defer off()
	fb := relWithFaults(bk, map[string]string{"fault_stall_prefix": "objects/", "fault_stall": "2m", "fault_active_file": sw})
	m := mount(t, fb, "--cache-dir", cacheDir, "--request-timeout=2s")
	on()
	body := strings.Repeat("committing when stopped\n", 1000) // above the inline limit: a blob PUT
	file := filepath.Join(sessDir(m, id), "late.txt")
	writer := exec.Command("python3", "-c", `
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, sys.argv[2].encode())
try:
    os.close(fd)
except OSError:
    pass
`, file, body)
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Process.Kill(); writer.Wait() })
	relWait(t, 10*time.Second, "the close's blob PUT stalled", func() bool { return relReadStats(t, m).Faults["put"].Delayed > 0 })
	m.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the first signal taken", func() bool { return strings.Contains(m.Log(), "unmounting") })
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("pugfs did not exit 30 s after a second SIGTERM\n%s", m.Log())
	}
	if ws, ok := m.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("pugfs was killed by %v: the second signal was not taken\n%s", ws.Signal(), m.Log())
	}
	var kept []string
	filepath.Walk(cacheDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.Contains(fi.Name(), "late.txt") {
			if b, _ := os.ReadFile(p); string(b) == body {
				kept = append(kept, p)
			}
		}
		return nil
	})
	if len(kept) != 1 {
		t.Fatalf("kept copies of late.txt: %v\n%s", kept, m.Log())
	}
}

// TestStopTwiceWhileBusy: a second SIGTERM while a busy mount (a program
// holds a file open on it) is unmounting leaves no dead mountpoint: pugfs
// detaches it before it exits. It exited while the unmount still retried,
// and every access to the mountpoint was ENOTCONN until someone unmounted
// it (review 42).
func TestStopTwiceWhileBusy(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	t.Cleanup(func() {
		if _, err := os.Stat(m.Dir); errors.Is(err, syscall.ENOTCONN) {
			syscall.Unmount(m.Dir, syscall.MNT_DETACH) // our own dead mount
		}
	})
	file := filepath.Join(sessDir(m, id), "held.txt")
	holder := exec.Command("python3", "-c", `
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, b"held\n")
print("open", flush=True)
time.sleep(600)
`, file)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if _, err := out.Read(make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the first signal taken", func() bool { return strings.Contains(m.Log(), "unmounting") })
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("pugfs did not exit 30 s after a second SIGTERM\n%s", m.Log())
	}
	if _, err := os.Stat(m.Dir); err != nil {
		t.Fatalf("the mountpoint after pugfs exited: %v\n%s", err, m.Log())
	}
}
