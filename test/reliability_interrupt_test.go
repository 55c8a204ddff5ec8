package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReliabilityInterruptedCallsComplete: a signal that reaches a program
// blocked on the mount does not turn its call into EINTR. The kernel sends
// FUSE INTERRUPT for any signal, Go programs get SIGURG all the time
// (goroutine preemption), and raw syscalls are not retried: the property
// test saw `unlink f1 -> interrupted system call` for a name that did not
// exist. Here an unlink waits on a bucket LIST held for 1.5 s while the
// very thread blocked in it gets SIGURG; it must answer ENOENT, as without
// the signal.
//
// Removing fs.uninterrupted (answering INTERRUPT by cancelling the
// request's context) makes the unlink fail with EINTR.
func TestReliabilityInterruptedCallsComplete(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	relCommitFiles(t, bk, id, map[string]string{"kept.txt": "kept\n"})
	sw, on, off := relSwitchFile(t)
	mnt := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "1500ms", "fault_ops": "list", "fault_active_file": sw}), "--metadata-ttl=0")
	sd := filepath.Join(mnt.Dir, "sessions", id.String())
	if _, err := os.Stat(filepath.Join(sd, "kept.txt")); err != nil {
		t.Fatal(err)
	}
	on()
	defer off()

	tids := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the signal must reach the thread in the call
		defer runtime.UnlockOSThread()
		tids <- syscall.Gettid()
		done <- syscall.Unlink(filepath.Join(sd, "missing.txt"))
	}()
	tid := <-tids
	// Wait until the thread sleeps in the kernel (on the FUSE request),
	// not before the call or on its way out.
	deadline := time.Now().Add(10 * time.Second)
	for !relThreadInSyscall(tid) {
		if time.Now().After(deadline) {
			t.Fatal("the unlink never blocked on the mount")
		}
		time.Sleep(time.Millisecond)
	}
	signalled := 0
	for {
		select {
		case err := <-done:
			if signalled == 0 {
				t.Fatal("the unlink returned before any signal was sent: the test tested nothing")
			}
			if !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("unlink of a missing name interrupted by %d SIGURG: %v, want ENOENT\n%s", signalled, err, mnt.Log())
			}
			// The mount still answers normally.
			off()
			if b, err := os.ReadFile(filepath.Join(sd, "kept.txt")); err != nil || string(b) != "kept\n" {
				t.Fatalf("read after the interrupted call: %q, %v", b, err)
			}
			return
		case <-time.After(100 * time.Millisecond):
			if err := syscall.Tgkill(os.Getpid(), tid, syscall.SIGURG); err != nil {
				t.Fatal(err)
			}
			signalled++
		}
	}
}

// relThreadInSyscall reports whether thread tid of this process is asleep
// in unlink(2) (/proc/self/task/<tid>/syscall names it: unlinkat or
// unlink, by number on x86-64 and arm64).
func relThreadInSyscall(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	unlinks := map[string]bool{"263": true, "87": true} // x86-64: unlinkat, unlink
	if runtime.GOARCH == "arm64" {
		unlinks = map[string]bool{"35": true} // unlinkat
	}
	if len(f) == 0 || !unlinks[f[0]] {
		return false
	}
	st, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(st), ')')
	return i >= 0 && i+2 < len(st) && (st[i+2] == 'S' || st[i+2] == 'D')
}
