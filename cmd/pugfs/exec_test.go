package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"golang.org/x/sys/unix"
)

// TestHandlerEnv: the handler's environment loses the cloud credentials
// (unless passed on) and pugfs exec's own variables, and gets PUGMARK_*.
func TestHandlerEnv(t *testing.T) {
	env := []string{"HOME=/root", "AWS_SECRET_ACCESS_KEY=s3cr3t", "AWS_REGION=eu-west-1",
		"PUGMARK_SESSION=stale", execInnerEnv + "=1", execChdirEnv + "=/x", "GOOGLE_APPLICATION_CREDENTIALS=/k.json",
		// What a fixed list let through (audit 29), and what stays.
		"AWS_CONTAINER_AUTHORIZATION_TOKEN=t", "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.23/v1/credentials",
		"AWS_WEB_IDENTITY_TOKEN_FILE=/var/run/token", "AZURE_CLIENT_CERTIFICATE_PASSWORD=p", "AZURE_FEDERATED_TOKEN_FILE=/f",
		"CLOUDSDK_AUTH_ACCESS_TOKEN=g", "AWS_PROFILE=dev", "AZURE_STORAGE_ACCOUNT=acct", "TOKEN_OF_MY_APP=keep",
		"IDENTITY_ENDPOINT=http://localhost:42356/msi/token", "IDENTITY_HEADER=h", "MSI_ENDPOINT=http://m", "MSI_SECRET=s"}
	got := handlerEnv(env, false, "PUGMARK_SESSION=new")
	want := []string{"HOME=/root", "AWS_REGION=eu-west-1", "AWS_PROFILE=dev", "AZURE_STORAGE_ACCOUNT=acct", "TOKEN_OF_MY_APP=keep", "PUGMARK_SESSION=new"}
	if !slices.Equal(got, want) {
		t.Fatalf("handlerEnv = %q, want %q", got, want)
	}
	if got := handlerEnv(env, true); !slices.Contains(got, "AWS_SECRET_ACCESS_KEY=s3cr3t") {
		t.Fatalf("--pass-credentials dropped the credentials: %q", got)
	}
}

// TestHideCredentials: a process of the same user and capabilities as
// pugfs exec (its handler) cannot read the environment of pugfs exec once
// it hid it; before, a handler read the cloud credentials it was not
// given from /proc/<its parent>/environ (audit 14). Both run here as root
// without capabilities: a process with capabilities its reader lacks is
// closed to it anyway, whatever hideCredentials does.
// TestTooManyFiles: only this process's own limit (EMFILE) makes a
// failed run exit 1, "a retry fails the same way"; the system's table
// being full (ENFILE) depends on other processes, and a retry may
// succeed (review 15).
func TestTooManyFiles(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("stage f1: %w", syscall.EMFILE), true},
		{fmt.Errorf("stage f1: %w", syscall.ENFILE), false},
		{fmt.Errorf("stage f1: %w", syscall.ENOSPC), false},
	} {
		if got := tooManyFiles(tc.err); got != tc.want {
			t.Errorf("tooManyFiles(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestFirstLine: a commit's error that joins one failure a file is
// shown as its first and a count: each was a line of its own, a
// megabyte of stderr for a run of 20,000 files (audit 17).
func TestFirstLine(t *testing.T) {
	var errs []error
	for i := range 20000 {
		errs = append(errs, fmt.Errorf("commit f%d: store blob: %w", i, syscall.EMFILE))
	}
	err := fmt.Errorf("checkpoint: %w", errors.Join(errs...))
	got := firstLine(err)
	if want := "commit f0: store blob: too many open files (and 19999 more like it)"; got != want {
		t.Errorf("firstLine = %q, want %q", got, want)
	}
	if got := firstLine(syscall.EMFILE); got != "too many open files" {
		t.Errorf("firstLine of one error = %q", got)
	}
}

func TestHideCredentials(t *testing.T) {
	if os.Getenv("PUGFS_TEST_HIDE") == "1" {
		hideCredentials()
		fmt.Println("ready")
		var b [1]byte
		os.Stdin.Read(b[:]) // until the test closes it
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("drops the capabilities of root")
	}
	canary := fmt.Sprintf("canary-%d", time.Now().UnixNano())
	capless := []string{"setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"}
	holder := exec.Command(capless[0], append(capless[1:], os.Args[0], "-test.run=^TestHideCredentials$")...)
	holder.Env = append(os.Environ(), "PUGFS_TEST_HIDE=1", "AWS_SECRET_ACCESS_KEY="+canary)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	holder.Stdout = &out
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stdin.Close()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "ready"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder did not start: %q", out.String())
		}
	}
	environ := fmt.Sprintf("/proc/%d/environ", holder.Process.Pid)
	got, err := exec.Command(capless[0], append(capless[1:], "cat", environ)...).CombinedOutput()
	if bytes.Contains(got, []byte(canary)) {
		t.Fatalf("a process of the same user read the credentials from %s", environ)
	}
	if err == nil {
		t.Errorf("%s was readable: %q", environ, got)
	}
}

// TestExecUsage: exec wants a bucket, a session, -- and a command. A
// command without -- before it is refused: its flags (./handler --debug)
// would have been taken for pugfs's own.
func TestExecUsage(t *testing.T) {
	for _, args := range [][]string{
		{"exec", "./b", "s"},
		{"exec", "./b", "s", "--"},
		{"exec", "./b", "s", "./handler", "--debug"},
		{"exec", "./b", "s", "./handler", "--", "x"},
	} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, &out, &errOut); code != 2 || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, want 2 and one line: %s", args, code, errOut.String())
		}
		if len(args) > 4 && !strings.Contains(errOut.String(), "want --") {
			t.Errorf("%q: the message does not ask for --: %s", args, errOut.String())
		}
	}
}

// printPdeathsigEnv makes the test binary, run as a handler, print its
// parent-death signal (prctl PR_GET_PDEATHSIG) and exit (TestMain).
const printPdeathsigEnv = "PUGFS_TEST_PRINT_PDEATHSIG"

// The handler side of TestTrampolineKeepsPdeathsig runs in init: init
// functions run on the startup thread, the one execve left the setting
// on. A thread the runtime starts later has none (the kernel clears it
// in every new thread, while the signal still reaches the process
// through its first), so TestMain, on whatever thread the main goroutine
// had moved to, read 0 about one run in twenty.
func init() {
	if os.Getenv(printPdeathsigEnv) != "" {
		printPdeathsig()
	}
}

// printPdeathsig prints this thread's parent-death signal and exits.
func printPdeathsig() {
	var sig int32
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, 2 /* PR_GET_PDEATHSIG */, uintptr(unsafe.Pointer(&sig)), 0); e != 0 {
		fmt.Println("prctl:", e)
		os.Exit(1)
	}
	wd, _ := os.Getwd()
	fmt.Println(sig, wd)
	os.Exit(0)
}

// TestTrampolineKeepsPdeathsig: the handler that the trampoline executes
// still dies with its pugfs exec (SIGKILL on parent death), through
// /bin/sh and through pugfs itself (where there is no shell), which an
// execve from any thread but the trampoline's first would drop. The
// scheduler decides where the pugfs trampoline's main goroutine runs, so
// the bug this guards against showed on some runs only; each run here
// checks. Each run also checks that the handler starts in the directory.
func TestTrampolineKeepsPdeathsig(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"shell", func() *exec.Cmd {
			cmd, err := handlerCommand(dir, self, []string{"handler"})
			if err != nil || cmd.Path != shell {
				t.Fatalf("handlerCommand: %v, %v; want %s", cmd, err, shell)
			}
			return cmd
		}},
		{"pugfs", func() *exec.Cmd {
			// What handlerCommand returns without a shell, with the
			// pugfs binary in place of the test's.
			defer func(s string) { shell = s }(shell)
			shell = filepath.Join(dir, "no-shell")
			cmd, err := handlerCommand(dir, self, []string{"handler"})
			if err != nil || len(cmd.Env) != 1 {
				t.Fatalf("handlerCommand without a shell: %v, %v", cmd, err)
			}
			cmd.Path = bin
			return cmd
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 20 {
				cmd := tc.cmd()
				cmd.Env = append(os.Environ(), append(cmd.Env, printPdeathsigEnv+"=1")...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				out, err := func() ([]byte, error) {
					runtime.LockOSThread() // Pdeathsig is the forking thread's
					defer runtime.UnlockOSThread()
					return cmd.CombinedOutput()
				}()
				if err != nil || strings.TrimSpace(string(out)) != "9 "+dir {
					t.Fatalf("run %d: handler printed %q, %v; want 9 (SIGKILL) and %s", i, out, err, dir)
				}
			}
		})
	}
}

// TestExecDebug: pugfs exec --debug logs the handler's FUSE requests and
// the bucket calls, as its help says; the FUSE requests were missing
// (review 5).
func TestExecDebug(t *testing.T) {
	r := pugfs(t, "exec", "--debug", "--cache-dir="+t.TempDir(), newDemo(t), "demo", "--", "sh", "-c", "cat README.md >/dev/null")
	if r.code != 0 {
		t.Fatalf("exec: %s", r)
	}
	for _, want := range []string{"bucket request", "LOOKUP"} {
		if !strings.Contains(r.err, want) {
			t.Errorf("pugfs exec --debug logged no %q line:\n%s", want, r.err)
		}
	}
}

// TestNoteSignals: while a run commits its checkpoint, SIGINT, SIGTERM
// and SIGHUP are caught and each says on stderr that it changes nothing
// and why; the process does not die of them. Three Ctrl-Cs to a run
// committing to a stopped bucket got 30 s of silence (audit 10).
func TestNoteSignals(t *testing.T) {
	var out syncbuf.Buffer
	stop := noteSignals(&out)
	for _, s := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if err := syscall.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), unix.SignalName(s)+" ignored"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("no word of %s:\n%s", unix.SignalName(s), out.String())
			}
		}
	}
	stop()
	if !strings.Contains(out.String(), "being committed") || !strings.Contains(out.String(), ".pugmark/checkpoint") {
		t.Errorf("the note does not say why, or what a SIGKILL leaves:\n%s", out.String())
	}
}

// TestExecMarkersNotFromTheEnvironment: the variables by which pugfs exec
// tells its trampoline and its inner process what they are act only when
// pugfs exec set them up: found in a caller's environment, a
// PUGFS_EXEC_CHDIR made every pugfs command a trampoline (exit 127), and
// a PUGFS_EXEC_NAMESPACE made a root pugfs exec skip its PID namespace,
// and with it the end of the handler's processes on a SIGKILL (review
// 38).
func TestExecMarkersNotFromTheEnvironment(t *testing.T) {
	t.Setenv(execChdirEnv, "/")
	if r := pugfs(t, "version"); r.code != 0 {
		t.Fatalf("pugfs version with %s set: %s", execChdirEnv, r)
	}
	if os.Geteuid() != 0 {
		t.Skip("the PID namespace needs root")
	}
	t.Setenv(execInnerEnv, strconv.Itoa(execAliveFD))
	r := pugfs(t, "exec", "--cache-dir="+t.TempDir(), newDemo(t), "demo", "--", "readlink", "/proc/self/ns/pid")
	if r.code != 0 {
		t.Fatalf("exec with %s set: %s", execInnerEnv, r)
	}
	if ours, err := os.Readlink("/proc/self/ns/pid"); err != nil || strings.TrimSpace(r.stdout) == ours {
		t.Errorf("the handler runs in the PID namespace %q, ours (%q, %v): not in one of its own\n%s", r.stdout, ours, err, r)
	}
}
