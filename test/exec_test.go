package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/procread"
	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// Tests of pugfs exec (tree.md "Running a handler"): real binary, real
// private mounts, real handlers in sh and Python. A handler that must be
// caught mid-run writes a marker outside the mount and polls for a go
// file the test creates once it has looked at the bucket.

// execRun is a pugfs exec started in the background.
type execRun struct {
	cmd    *exec.Cmd
	stdout syncbuf.Buffer
	stderr syncbuf.Buffer
	done   chan struct{}
	code   int
	// watch are more processes of the run (the handler, the child pugfs
	// exec started) that a hang report should cover even after pugfs
	// exec itself is gone.
	watch []int
}

// startExec starts pugfs exec on session with its own cache directory
// (so failed/ is the test's) and the handler argv.
func startExec(t *testing.T, bk *Bucket, cacheDir, session string, argv ...string) *execRun {
	t.Helper()
	return startExecFlags(t, bk, cacheDir, nil, session, argv...)
}

// startExecFlags is startExec with more pugfs exec flags.
func startExecFlags(t *testing.T, bk *Bucket, cacheDir string, flags []string, session string, argv ...string) *execRun {
	t.Helper()
	args := append([]string{"exec", "--cache-size", "64MiB", "--cache-dir", cacheDir}, flags...)
	args = append(append(args, bk.URL, session, "--"), argv...)
	r := &execRun{cmd: exec.Command(pugfsBinary(t), args...), done: make(chan struct{})}
	r.cmd.Env = append(os.Environ(), append(bk.Env, "GOTRACEBACK=all")...)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	// A process group of its own, as a shell's job has: a signal to the
	// group reaches pugfs exec, its inner process and the handler at once.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait() // the status is in ProcessState
		r.code = r.cmd.ProcessState.ExitCode()
		if ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.code = 128 + int(ws.Signal())
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait returns the exit status; a run that does not end within two
// minutes fails the test (a hang, not a timing assertion).
func (r *execRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(2 * time.Minute):
		pids := append([]int{r.cmd.Process.Pid}, r.watch...)
		report := hangReport(pids...)
		for _, pid := range withDescendants(pids) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "pugfs" {
				quitAndWait(pid, r.done)
			}
		}
		for _, pid := range withDescendants(pids) {
			syscall.Kill(pid, syscall.SIGKILL) // the cleanup then waits for nothing
		}
		t.Fatalf("pugfs exec did not end\n%s\nstdout: %s\nstderr: %s", report, r.stdout.String(), r.stderr.String())
	}
	return r.code
}

// runExec runs pugfs exec to its end and returns stdout, stderr and the
// exit status.
func runExec(t *testing.T, bk *Bucket, cacheDir, session string, argv ...string) (string, string, int) {
	t.Helper()
	r := startExec(t, bk, cacheDir, session, argv...)
	code := r.wait(t)
	return r.stdout.String(), r.stderr.String(), code
}

// namedSession creates a session named name and returns its ID.
func namedSession(t *testing.T, bk *Bucket, name string) layout.SessionID {
	t.Helper()
	return parseID(t, pugfsCmd(t, bk, "session", "new", "--name", name, bk.URL))
}

// gate is a marker a handler writes and a go file it waits for.
type gate struct{ dir string }

func newGate(t *testing.T) gate { return gate{t.TempDir()} }

// wait is the handler's side, in sh: write what into the marker, then
// poll for the go file.
func (g gate) wait(what string) string {
	return fmt.Sprintf(`echo %s > %s; while [ ! -e %s/go ]; do sleep 0.02; done`, what, g.marker(), g.dir)
}

// marker is a shell word naming a new marker file of the gate. It is
// not ready.$$: handlers in PID namespaces of their own share PIDs.
func (g gate) marker() string {
	return fmt.Sprintf(`"$(mktemp %s/ready.XXXXXX)"`, g.dir)
}

// sleeper returns a sleep argument no other process has (sleep takes
// fractions of a second), so that a test can find the process by its
// command line (procsWith): a PID seen inside a handler is its PID
// namespace's, not this process's.
func sleeper(secs int) string {
	return fmt.Sprintf("%d.%d%d", secs, os.Getpid(), sleeperSeq.Add(1))
}

var sleeperSeq atomic.Int64

// procsWith returns the live processes that have arg among their
// arguments (a zombie has none).
func procsWith(arg string) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, _ := procread.ReadFile("/proc/"+d.Name()+"/cmdline", procWithin)
		if slices.Contains(strings.Split(string(b), "\x00"), arg) {
			out = append(out, pid)
		}
	}
	return out
}

// ready polls until n handlers reached the gate and returns what they
// wrote.
func (g gate) ready(t *testing.T, n int, runs ...*execRun) []string {
	t.Helper()
	var got []string
	waitFor(t, fmt.Sprintf("%d handler(s) at the gate", n), func() bool {
		for _, r := range runs {
			select {
			case <-r.done:
				t.Fatalf("pugfs exec ended before its handler reached the gate: %d\n%s", r.code, r.stderr.String())
			default:
			}
		}
		ms, _ := filepath.Glob(filepath.Join(g.dir, "ready.*"))
		if len(ms) < n {
			return false
		}
		got = got[:0]
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			got = append(got, strings.TrimSpace(string(b)))
		}
		return true
	})
	return got
}

func (g gate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// execFailed lists what pugfs exec kept for session id under cacheDir.
func execFailed(cacheDir string, id layout.SessionID) []string {
	ents, _ := os.ReadDir(filepath.Join(bucketCacheDir(cacheDir), "failed", id.String()))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// wantOneCheckpoint checks that id gained exactly one version, a
// checkpoint, over base.
func wantOneCheckpoint(t *testing.T, bk *Bucket, id layout.SessionID, base uint32) []layout.Descriptor {
	t.Helper()
	if v := latest(t, bk, id); v != base+1 {
		t.Fatalf("version %d after the run, want exactly one more than %d", v, base)
	}
	if typ := snapType(t, bk, id, base+1); typ != layout.Checkpoint {
		t.Fatalf("snapshot %d is %s, want a checkpoint", base+1, typ)
	}
	ds, err := bk.Store.ReadSnapshot(context.Background(), id, base+1)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func descNames(ds []layout.Descriptor) string {
	var out []string
	for _, d := range ds {
		n := d.Name
		if d.Deleted {
			n = "-" + n
		}
		out = append(out, n)
	}
	return strings.Join(sortStrings(out), " ")
}

// TestExecShellHandler: one run of a sh handler is exactly one new
// version, a checkpoint with every change (new files, an edit, a
// directory, a deletion); nothing lands while the handler runs, fsync or
// not; the handler runs in the session's directory with PUGMARK_*.
func TestExecShellHandler(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := namedSession(t, bk, "shell")
		seed(t, bk, id, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "keep/k.txt": "k\n"})
		g := newGate(t)
		cache := t.TempDir()
		r := startExec(t, bk, cache, "shell", "sh", "-c", `set -e
			test "$PUGMARK_SESSION" = `+id.String()+`
			test "$PUGMARK_VERSION" = 1
			test "$(pwd)" = "$PUGMARK_ROOT/sessions/$PUGMARK_SESSION"
			test -z "$AWS_SECRET_ACCESS_KEY"
			echo new > new.txt
			echo more >> a.txt
			mkdir -p out/deep
			echo report > out/deep/r.txt
			rm b.txt
			sync; sync new.txt
			`+g.wait("x")+`
			cat a.txt`)
		g.ready(t, 1, r)
		if v := latest(t, bk, id); v != 1 {
			t.Fatalf("version %d while the handler runs (it fsynced), want 1", v)
		}
		g.open(t)
		if code := r.wait(t); code != 0 {
			t.Fatalf("exit %d\n%s", code, r.stderr.String())
		}
		if got := r.stdout.String(); got != "a\nmore\n" {
			t.Fatalf("handler stdout %q", got)
		}
		ds := wantOneCheckpoint(t, bk, id, 1)
		if got := descNames(ds); got != "-b.txt a.txt new.txt out/deep/r.txt" {
			t.Fatalf("checkpoint holds %s", got)
		}
		wantSlots(t, bk, id, map[string]string{"a.txt": "a\nmore\n", "new.txt": "new\n", "out/deep/r.txt": "report\n", "keep/k.txt": "k\n"})
		if kept := execFailed(cache, id); len(kept) > 0 {
			t.Fatalf("failed/ holds %v after a clean run", kept)
		}
		// A run that writes nothing is still the invocation's checkpoint.
		if _, errOut, code := runExec(t, bk, cache, id.String(), "true"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if ds := wantOneCheckpoint(t, bk, id, 2); len(ds) != 0 {
			t.Fatalf("empty run committed %s", descNames(ds))
		}
		checkBucket(t, bk)
	})
}

// TestExecPythonHandler: a Python handler reads its input and writes its
// outputs (fsyncing them, as careful programs do); they land as one
// checkpoint.
func TestExecPythonHandler(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		seed(t, bk, id, map[string]string{"inbox/1.txt": "hello\n", "inbox/2.txt": "world\n", "state.json": "{}\n"})
		script := filepath.Join(t.TempDir(), "handler.py")
		if err := os.WriteFile(script, []byte(`import json, os
root, sid = os.environ["PUGMARK_ROOT"], os.environ["PUGMARK_SESSION"]
assert os.getcwd() == os.path.join(root, "sessions", sid)
words = [open(os.path.join("inbox", n)).read().strip() for n in sorted(os.listdir("inbox"))]
os.makedirs("replies", exist_ok=True)
with open("replies/all.txt", "w") as f:
    f.write(" ".join(words) + "\n")
    f.flush()
    os.fsync(f.fileno())
with open("state.json", "w") as f:
    json.dump({"seen": len(words), "base": int(os.environ["PUGMARK_VERSION"])}, f)
for n in os.listdir("inbox"):
    os.remove(os.path.join("inbox", n))
print("handled", len(words))
`), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "python3", script)
		if code != 0 || out != "handled 2\n" {
			t.Fatalf("exit %d, stdout %q\n%s", code, out, errOut)
		}
		ds := wantOneCheckpoint(t, bk, id, 1)
		if got := descNames(ds); got != "-inbox/1.txt -inbox/2.txt replies/all.txt state.json" {
			t.Fatalf("checkpoint holds %s", got)
		}
		wantSlots(t, bk, id, map[string]string{"replies/all.txt": "hello world\n", "state.json": `{"seen": 2, "base": 1}`})
		checkBucket(t, bk)
	})
}

// TestExecFailingHandler: a handler that exits 3 commits nothing, keeps
// nothing, and pugfs exec exits 3.
func TestExecFailingHandler(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		seed(t, bk, id, map[string]string{"a.txt": "a\n"})
		cache := t.TempDir()
		_, errOut, code := runExec(t, bk, cache, id.String(), "sh", "-c", `echo half > out.txt; rm a.txt; mkdir d; echo x > d/y; exit 3`)
		if code != 3 {
			t.Fatalf("exit %d, want the handler's 3\n%s", code, errOut)
		}
		if v := latest(t, bk, id); v != 1 {
			t.Fatalf("version %d after a failed handler, want 1", v)
		}
		if kept := execFailed(cache, id); len(kept) > 0 {
			t.Fatalf("a failed handler's output was kept: %v", kept)
		}
		wantSlots(t, bk, id, map[string]string{"a.txt": "a\n"})
		// A handler's own 74 and 75, pugfs exec's "may have landed" and
		// "nothing landed", are passed on too (tree.md: the command's
		// status), and stderr says that nothing was committed.
		for _, status := range []int{74, 75} {
			_, errOut, code := runExec(t, bk, cache, id.String(), "sh", "-c", fmt.Sprintf("echo x > out.txt; exit %d", status))
			if code != status || latest(t, bk, id) != 1 || !strings.Contains(errOut, "nothing was committed") {
				t.Errorf("a handler that exits %d: exit %d, version %d; want exit %d, nothing landed, stderr saying so\n%s", status, code, latest(t, bk, id), status, errOut)
			}
		}
		// A command that does not exist is 127, and named as given: a
		// path was reported by the starting shell, under the private
		// mountpoint's name.
		for _, missing := range []string{"./no-such-handler", "no-such-handler-on-path"} {
			_, errOut, code := runExec(t, bk, cache, id.String(), missing)
			if code != 127 || !strings.Contains(errOut, missing) || strings.Contains(errOut, "/exec/p") {
				t.Errorf("%s: exit %d, want 127 naming it\n%s", missing, code, errOut)
			}
		}
		// One that is not executable is 126, named as given, and said to
		// have committed nothing (review 38).
		plain := filepath.Join(t.TempDir(), "handler.sh")
		if err := os.WriteFile(plain, []byte("echo x > out.txt\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runExec(t, bk, cache, id.String(), plain); code != 126 || !strings.Contains(errOut, plain+": not executable") ||
			!strings.Contains(errOut, "nothing committed") || strings.Contains(errOut, "/exec/p") {
			t.Errorf("a handler without the execute bit: exit %d, want 126 naming it\n%s", code, errOut)
		}
	})
}

// TestExecNameMoved: refs/sessions/<name> re-pointed at another session
// while the handler runs (§9.1): nothing commits, exit 75, the reason on
// stderr and the staged output kept in failed/.
func TestExecNameMoved(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		id := namedSession(t, bk, "owner")
		other := newSession(t, bk)
		g := newGate(t)
		cache := t.TempDir()
		r := startExec(t, bk, cache, "owner", "sh", "-c", `echo out > out.txt; `+g.wait("x"))
		g.ready(t, 1, r)
		key, _ := layout.ManifestKey(other)
		if err := bk.Store.Link(ctx, layout.SessionRefName("owner"), key); err != nil {
			t.Fatal(err)
		}
		g.open(t)
		if code := r.wait(t); code != 75 {
			t.Fatalf("exit %d, want 75\n%s", code, r.stderr.String())
		}
		if !strings.Contains(r.stderr.String(), "name moved") {
			t.Fatalf("stderr does not say why: %s", r.stderr.String())
		}
		if v := latest(t, bk, id); v != 0 {
			t.Fatalf("version %d, want nothing committed", v)
		}
		if v := latest(t, bk, other); v != 0 {
			t.Fatalf("the other session got version %d", v)
		}
		if kept := execFailed(cache, id); len(kept) != 1 || !strings.HasPrefix(kept[0], "out.txt.") {
			t.Fatalf("failed/ holds %v, want out.txt", kept)
		}
		// Run by ID now that its name is another's: no run could land,
		// so the handler does not run and the status is not "retry"
		// (it ran every time, then 75: the exec audit).
		ran := filepath.Join(t.TempDir(), "ran")
		if _, errOut, code := runExec(t, bk, cache, id.String(), "touch", ran); code != 1 || !strings.Contains(errOut, "does not point at it") {
			t.Fatalf("a run by ID of a session whose name moved: exit %d, want 1\n%s", code, errOut)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("the handler ran although no run could land")
		}
	})
}

// execPendingFork makes a session with a.txt and a fork of it recorded
// in a snapshot of type typ (phase 1 only, §11.1: the child has no
// snapshot yet), and returns both IDs.
func execPendingFork(t *testing.T, bk *Bucket, typ layout.SnapshotType) (id, child layout.SessionID) {
	t.Helper()
	ctx := context.Background()
	id = newSession(t, bk)
	seed(t, bk, id, map[string]string{"a.txt": "a\n"})
	body := []byte("fork note\n")
	bi, err := bk.Store.PutBlobBytes(ctx, body, layout.BlobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child, _, err = bk.Store.RecordFork(ctx, id, layout.ForkRequest{Type: typ,
		Descriptor: layout.Descriptor{Name: "note.txt", Digest: bi.Digest, Size: bi.Size, Data: body, CreatedAt: time.Now().UTC()}})
	if err != nil {
		t.Fatal(err)
	}
	return id, child
}

// TestExecMaterialisesForks: a pending fork (phase 1 only) in the
// session's latest snapshot has its child materialised, manifest and
// snapshot 1, before the handler starts (§11.2).
func TestExecMaterialisesForks(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		id, child := execPendingFork(t, bk, layout.Checkpoint)
		if ok, _ := bk.Store.SessionExists(ctx, child); ok {
			t.Fatal("the child exists before the run")
		}
		// The handler sees the child, read from the bucket through the
		// mount: it was there before the handler started.
		out, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "sh", "-c",
			`cat "$PUGMARK_ROOT/sessions/`+child.String()+`/.pugmark/version" "$PUGMARK_ROOT/sessions/`+child.String()+`/note.txt"`)
		if code != 0 || out != "1\nfork note\n" {
			t.Fatalf("exit %d, handler saw %q\n%s", code, out, errOut)
		}
		m, err := bk.Store.LoadManifest(ctx, child)
		if err != nil || m.Parent == nil || m.Parent.Session != id || m.Parent.Version != 2 {
			t.Fatalf("child manifest %+v, %v", m, err)
		}
		if v := latest(t, bk, child); v != 1 {
			t.Fatalf("child version %d, want 1", v)
		}
		wantOneCheckpoint(t, bk, id, 2)
		checkBucket(t, bk)
	})
}

// TestExecMaterialisesForksBelowTheLatest: a fork whose record is not in
// the latest snapshot (an input landed on top of it) is materialised by
// the next run too (§11.2). Only the latest snapshot's were, and such a
// fork stayed pending for good (the exec audit).
func TestExecMaterialisesForksBelowTheLatest(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id, child := execPendingFork(t, bk, layout.Provisional)
	commitDescs(t, bk, id, layout.Provisional, map[string]string{"input.txt": "on top of the fork record\n"})
	if _, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "true"); code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if v := latest(t, bk, child); v != 1 {
		t.Fatalf("child version %d after the run, want 1 (materialised)", v)
	}
	checkBucket(t, bk)
}

// TestExecRace: two runs on one session at once: exactly one lands, the
// other exits 75 with nothing committed, and the bucket is clean.
func TestExecRace(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		seed(t, bk, id, map[string]string{"a.txt": "a\n"})
		g := newGate(t)
		var runs []*execRun
		for i := 0; i < 2; i++ {
			runs = append(runs, startExec(t, bk, t.TempDir(), id.String(), "sh", "-c",
				fmt.Sprintf(`echo run%d > out.txt; echo %d >> a.txt; `, i, i)+g.wait("x")))
		}
		g.ready(t, 2, runs...)
		g.open(t)
		codes := []int{runs[0].wait(t), runs[1].wait(t)}
		winner := -1
		for i, c := range codes {
			switch c {
			case 0:
				winner = i
			case 75:
				if !strings.Contains(runs[i].stderr.String(), "conflict") {
					t.Errorf("the loser's stderr does not say why: %s", runs[i].stderr.String())
				}
			default:
				t.Fatalf("run %d exited %d\n%s", i, c, runs[i].stderr.String())
			}
		}
		if winner < 0 || codes[0] == codes[1] {
			t.Fatalf("exit statuses %v, want one 0 and one 75", codes)
		}
		wantOneCheckpoint(t, bk, id, 1)
		wantSlots(t, bk, id, map[string]string{"out.txt": fmt.Sprintf("run%d\n", winner), "a.txt": fmt.Sprintf("a\n%d\n", winner)})
		relFsckClean(t, bk)
	})
}

// TestExecSharedStateDir: two runs at once on two sessions with one state
// directory (what the default cache directory of a bucket is) both land.
// Every run's inner process is PID 1 of a namespace of its own, and both
// took staging/1 and exec/1: the second one's clean-up removed the
// first's staged files, and its mount landed on the first's mountpoint
// (the exec audit).
//
// The first run ends while the second still runs: its removal of the
// mountpoint they shared took the second's mount away, whose unmount then
// failed (exit 1, nothing committed, nothing kept).
func TestExecSharedStateDir(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	state := t.TempDir()
	var gates []gate
	var runs []*execRun
	var ids []layout.SessionID
	for i := range 2 {
		id := newSession(t, bk)
		g := newGate(t)
		ids, gates = append(ids, id), append(gates, g)
		runs = append(runs, startExec(t, bk, state, id.String(), "sh", "-c",
			fmt.Sprintf(`echo run%d > out.txt; `, i)+g.wait("x")))
		g.ready(t, 1, runs[i])
	}
	for i, r := range runs {
		gates[i].open(t)
		if c := r.wait(t); c != 0 {
			t.Fatalf("run %d exited %d\n%s", i, c, r.stderr.String())
		}
		wantSlots(t, bk, ids[i], map[string]string{"out.txt": fmt.Sprintf("run%d\n", i)})
	}
}

// TestExecSIGKILL: SIGKILL of pugfs exec mid-run takes the handler with
// it, leaves no mount behind (the mount lived in the run's own mount
// namespace) and commits nothing.
func TestExecSIGKILL(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		seed(t, bk, id, map[string]string{"a.txt": "a\n"})
		g := newGate(t)
		// The handler leaves a process of its own running in the
		// background: it must end too, or it would keep the handler's
		// mount namespace, and every mount in it, alive.
		bg, fg := sleeper(600), sleeper(600)
		r := startExec(t, bk, t.TempDir(), id.String(), "sh", "-c",
			`echo out > out.txt; sleep `+bg+` & echo "$PUGMARK_ROOT" > `+g.marker()+`; exec sleep `+fg)
		root := g.ready(t, 1, r)[0]
		waitFor(t, "the handler's two sleeps", func() bool { return len(procsWith(bg)) == 1 && len(procsWith(fg)) == 1 })
		// pugfs exec's processes: the one started, the invocation in its
		// namespaces, the handler and its background process.
		procs := withDescendants([]int{r.cmd.Process.Pid})
		if len(procs) < 4 {
			t.Fatalf("pugfs exec runs as %d processes, want at least 4", len(procs))
		}
		r.watch = procs[1:]
		r.cmd.Process.Signal(syscall.SIGKILL)
		if code := r.wait(t); code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want death by SIGKILL", code)
		}
		for _, pid := range procs {
			waitFor(t, fmt.Sprintf("process %d to be gone", pid), func() bool {
				err := syscall.Kill(pid, 0)
				if errors.Is(err, syscall.ESRCH) {
					return true
				}
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				return strings.Contains(string(st), ") Z ") // dead, not yet reaped by init
			})
		}
		if isMounted(root) {
			t.Fatalf("%s is still mounted", root)
		}
		if v := latest(t, bk, id); v != 1 {
			t.Fatalf("version %d after SIGKILL, want 1", v)
		}
		wantSlots(t, bk, id, map[string]string{"a.txt": "a\n"})
	})
}

// checkpointRig is a local bucket with a new session, the key of the
// snapshot the session's next checkpoint will be, and a switch
// (relSwitchFile: the path, and what turns it off) for faults on it.
func checkpointRig(t *testing.T) (bk *Bucket, id layout.SessionID, key, sw string, off func()) {
	t.Helper()
	bk = openBucket(t, testbucket.Local)
	id = newSession(t, bk)
	key, err := layout.SnapshotKey(id, latest(t, bk, id)+1)
	if err != nil {
		t.Fatal(err)
	}
	sw, _, off = relSwitchFile(t)
	return bk, id, key, sw, off
}

// TestExecSIGKILLCommitting: SIGKILL of pugfs exec after its command
// exited 0, while the checkpoint is in flight (its snapshot PUT stalls),
// leaves the outcome unknown, as an exit 74 does, and the next run keeps
// the output under failed/, as a 74 does: the next run removed every
// staged file with a warning that the run "keeps nothing" (audit 19).
func TestExecSIGKILLCommitting(t *testing.T) {
	bk, id, key, sw, off := checkpointRig(t)
	defer off()
	fb := relWithFaults(bk, map[string]string{"fault_stall_prefix": key, "fault_active_file": sw})
	cache := t.TempDir()
	const n = 30
	r := startExec(t, fb, cache, id.String(), "sh", "-c",
		`for i in $(seq 1 `+strconv.Itoa(n)+`); do mkdir -p d$((i % 3)); seq 1 $((i * 100)) > d$((i % 3))/f$i.txt; done; touch `+sw)
	parked := func() []string {
		names, _ := filepath.Glob(filepath.Join(bucketCacheDir(cache), "staging", "*", "parked-*", id.String(), "*"))
		return names
	}
	waitFor(t, "the run's output parked under kept names while its checkpoint stalls", func() bool { return len(parked()) == n })
	r.cmd.Process.Signal(syscall.SIGKILL)
	if code := r.wait(t); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want death by SIGKILL\n%s", code, r.stderr.String())
	}
	off()
	_, errOut, code := runExec(t, fb, cache, id.String(), "true")
	if code != 0 {
		t.Fatalf("next run: exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "left its staging directory") || !strings.Contains(errOut, "kept=30") {
		t.Errorf("the next run does not say it kept what the killed one staged:\n%s", errOut)
	}
	kept := execFailed(cache, id)
	if len(kept) != n {
		t.Fatalf("failed/ holds %d files, want the killed run's %d: %v\n%s", len(kept), n, kept, errOut)
	}
	for i := 1; i <= n; i++ {
		var want strings.Builder
		for j := 1; j <= i*100; j++ {
			fmt.Fprintln(&want, j)
		}
		name := fmt.Sprintf("d%d%%2Ff%d.txt.", i%3, i)
		k := slices.IndexFunc(kept, func(s string) bool { return strings.HasPrefix(s, name) })
		if k < 0 {
			t.Fatalf("no %s* in failed/: %v", name, kept)
		}
		path := filepath.Join(bucketCacheDir(cache), "failed", id.String(), kept[k])
		if got, err := os.ReadFile(path); err != nil || string(got) != want.String() {
			t.Fatalf("%s kept with %d bytes (%v), want %d", kept[k], len(got), err, want.Len())
		}
		// The uploads had linked the spill files into the local bucket:
		// the kept copies are not its blobs (review 23).
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil || st.Nlink != 1 {
			t.Fatalf("%s kept with %d names (%v): it is the bucket's blob", kept[k], st.Nlink, err)
		}
	}
	// Nothing of the killed run landed; the next run's own checkpoint
	// holds nothing.
	wantSlots(t, bk, id, map[string]string{})
}

// commitDescs commits files (name -> content; "" is a removal) to id as
// one snapshot of type typ.
func commitDescs(t *testing.T, bk *Bucket, id layout.SessionID, typ layout.SnapshotType, files map[string]string) {
	t.Helper()
	ctx := context.Background()
	var ds []layout.Descriptor
	for _, name := range sortStrings(keys(files)) {
		content := files[name]
		if content == "" {
			ds = append(ds, layout.Descriptor{Name: name, Deleted: true, CreatedAt: time.Now().UTC()})
			continue
		}
		bi, err := bk.Store.PutBlobBytes(ctx, []byte(content), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, layout.Descriptor{Name: name, Digest: bi.Digest, Size: bi.Size, Data: []byte(content), CreatedAt: time.Now().UTC()})
	}
	if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: typ, Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
}

// TestExecSinceCheckpoint: .pugmark/since-checkpoint/ shows what was
// committed after the latest checkpoint (provisional and queueing input),
// newest per name, without fork records or removals; the handler sees it,
// and after its checkpoint it is empty.
func TestExecSinceCheckpoint(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		id := newSession(t, bk)
		seed(t, bk, id, map[string]string{"old.txt": "old\n", "gone.txt": "g\n"})
		commitDescs(t, bk, id, layout.Provisional, map[string]string{"in/a.txt": "first\n", "in/b.txt": "b\n"})
		commitDescs(t, bk, id, layout.Queueing, map[string]string{"in/a.txt": "second\n", "in/b.txt": "", "gone.txt": ""})
		body := []byte("fork\n")
		bi, err := bk.Store.PutBlobBytes(ctx, body, layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := bk.Store.RecordFork(ctx, id, layout.ForkRequest{Type: layout.Provisional,
			Descriptor: layout.Descriptor{Name: "forknote.txt", Digest: bi.Digest, Size: bi.Size, Data: body, CreatedAt: time.Now().UTC()}}); err != nil {
			t.Fatal(err)
		}
		m := mount(t, bk, "--metadata-ttl", "0", "--read-only")
		wantTree(t, filepath.Join(sessDir(m, id), ".pugmark", "since-checkpoint"), map[string]string{"in/a.txt": "second\n"})
		out, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "sh", "-c", `cd .pugmark/since-checkpoint && find . -type f | sort && cat in/a.txt && echo done > ../../done.txt`)
		if code != 0 || out != "./in/a.txt\nsecond\n" {
			t.Fatalf("exit %d, handler saw %q\n%s", code, out, errOut)
		}
		wantOneCheckpoint(t, bk, id, 4)
		wantTree(t, filepath.Join(sessDir(m, id), ".pugmark", "since-checkpoint"), map[string]string{})
		if err := os.WriteFile(filepath.Join(sessDir(m, id), ".pugmark", "since-checkpoint", "x"), []byte("x"), 0o644); err == nil {
			t.Fatal("since-checkpoint/ is writable")
		}
	})
}

// TestExecLateInput: an input that lands while the handler runs is
// merged under its checkpoint by default (§13.3), and pugfs exec says so,
// since the handler never saw it and no later run will; with
// --late-input=abort nothing lands (exit 75, outputs kept), and the next
// run sees it in since-checkpoint/ with the input from before. The
// handler sees its session at the base version for the whole run, even
// with --metadata-ttl=0: its mount refreshed, and a handler that looked
// again saw the input it was then told it never saw (review 38).
func TestExecLateInput(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		for _, tc := range []struct {
			mode string
			code int
		}{{"merge", 0}, {"abort", 75}} {
			t.Run(tc.mode, func(t *testing.T) {
				id := newSession(t, bk)
				seed(t, bk, id, map[string]string{"a.txt": "a\n"})
				commitDescs(t, bk, id, layout.Provisional, map[string]string{"in/early.txt": "early\n"})
				g := newGate(t)
				cache := t.TempDir()
				handler := `ls .pugmark/since-checkpoint/in > seen.txt; mkdir out && echo y > out/y.txt; ` + g.wait("x") +
					`; ls .pugmark/since-checkpoint/in in > again.txt; cat .pugmark/version > version.txt`
				r := startExecFlags(t, bk, cache, []string{"--late-input=" + tc.mode, "--metadata-ttl=0"}, id.String(), "sh", "-c", handler)
				g.ready(t, 1, r)
				// The input also makes "out" a file, which hides the
				// handler's out/y.txt (decisions.md "Names as paths").
				// And writes seen.txt, which the handler's checkpoint
				// replaces: the merge names it (audit 28).
				commitDescs(t, bk, id, layout.Provisional, map[string]string{"in/late.txt": "late\n", "out": "file\n", "seen.txt": "input's\n"}) // version 3
				g.open(t)
				code := r.wait(t)
				errOut := r.stderr.String()
				if code != tc.code {
					t.Fatalf("exit %d, want %d\n%s", code, tc.code, errOut)
				}
				if tc.mode == "merge" {
					if !strings.Contains(errOut, "1 input snapshot(s) landed while the handler ran (versions 3); checkpoint 4 merged them") {
						t.Errorf("the merge is not reported: %s", errOut)
					}
					if !strings.Contains(errOut, "out/y.txt, written by the handler, does not show: an input made out a file") {
						t.Errorf("the hidden output is not reported: %s", errOut)
					}
					if !strings.Contains(errOut, "checkpoint 4 replaces what those inputs wrote to seen.txt (input version 3)") {
						t.Errorf("the input's file the checkpoint replaces is not named: %s", errOut)
					}
					if typ := snapType(t, bk, id, 4); typ != layout.Checkpoint {
						t.Fatalf("version 4 is %s", typ)
					}
					wantSlots(t, bk, id, map[string]string{"a.txt": "a\n", "in/early.txt": "early\n", "in/late.txt": "late\n", "seen.txt": "early.txt\n", "out": "file\n", "out/y.txt": "y\n",
						"again.txt": ".pugmark/since-checkpoint/in:\nearly.txt\n\nin:\nearly.txt\n", "version.txt": "2\n"})
					return
				}
				if v := latest(t, bk, id); v != 3 {
					t.Fatalf("version %d after an aborted run, want 3", v)
				}
				if !strings.Contains(errOut, "input arrived while the handler ran") || len(execFailed(cache, id)) == 0 {
					t.Fatalf("stderr does not say why, or nothing kept (%v): %s", execFailed(cache, id), errOut)
				}
				if strings.Contains(errOut, "checkpoint lost to another one") {
					t.Fatalf("the log blames another checkpoint, where no other landed:\n%s", errOut)
				}
				out, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "ls", ".pugmark/since-checkpoint/in")
				if code != 0 || out != "early.txt\nlate.txt\n" {
					t.Fatalf("the next run: exit %d, saw %q\n%s", code, out, errOut)
				}
				wantOneCheckpoint(t, bk, id, 3)
			})
		}
	})
}

// TestExecHandlerForksItsSession: fork records are not input (§11.2 step
// 4). A handler that forks its own session (pugfs fork, both phases)
// lands its output above the fork record, with --late-input=abort too,
// and no input is said to be merged; a fork recorded (phase 1 only) while
// the handler ran is materialised once the run's checkpoint lands above
// it, where no later run looks. The record was late input before: abort
// exited 75 and merge reported the handler's own fork as unseen input.
func TestExecHandlerForksItsSession(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		for _, mode := range []string{"merge", "abort"} {
			t.Run(mode, func(t *testing.T) {
				id := newSession(t, bk)
				seed(t, bk, id, map[string]string{"a.txt": "a\n"})
				g := newGate(t)
				handler := fmt.Sprintf(`%s fork --name fork.json '%s' %s > child.txt && echo out > out.txt; %s`, pugfsBinary(t), bk.URL, id, g.wait("x"))
				r := startExecFlags(t, bk, t.TempDir(), []string{"--late-input=" + mode, "--pass-credentials"}, id.String(), "sh", "-c", handler)
				g.ready(t, 1, r)
				note := []byte("phase 1 only\n")
				bi, err := bk.Store.PutBlobBytes(context.Background(), note, layout.BlobOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := bk.Store.RecordFork(context.Background(), id, layout.ForkRequest{Type: layout.Provisional,
					Descriptor: layout.Descriptor{Name: "note.txt", Digest: bi.Digest, Size: bi.Size, CreatedAt: time.Now().UTC()}}); err != nil {
					t.Fatal(err)
				}
				g.open(t)
				code := r.wait(t)
				errOut := r.stderr.String()
				if code != 0 || strings.Contains(errOut, "input") {
					t.Fatalf("exit %d, want 0 and no input merged\n%s", code, errOut)
				}
				if v := latest(t, bk, id); v != 4 || snapType(t, bk, id, 4) != layout.Checkpoint {
					t.Fatalf("latest version %d, want the checkpoint at 4 above two fork records\n%s", v, errOut)
				}
				got := slots(t, bk, id)
				if out := string(body(t, bk, got["out.txt"].Descriptor)); out != "out\n" || got["child.txt"].Size != 33 {
					t.Fatalf("the handler's output: out.txt %q, child.txt of %d bytes (want a session ID)", out, got["child.txt"].Size)
				}
				var forks int
				for _, e := range fullLog(t, bk, id) {
					if e.Fork {
						forks++
						if v := latest(t, bk, e.TargetSession); v != 1 {
							t.Errorf("child %s of the fork record at version %d: version %d, want 1 (materialised)", e.TargetSession, e.Version, v)
						}
					}
				}
				if forks != 2 {
					t.Fatalf("%d fork records, want 2", forks)
				}
				checkBucket(t, bk)
			})
		}
	})
}

// deliveries returns the descriptors of target that came from source
// (§12.2), with the versions that hold them.
func deliveries(t *testing.T, bk *Bucket, target, source layout.SessionID) []layout.Entry {
	t.Helper()
	var out []layout.Entry
	for _, e := range fullLog(t, bk, target) {
		if e.SourceSession == source {
			out = append(out, e)
		}
	}
	return out
}

// TestExecSend: a file written under .pugmark/send/<target>/ is a
// cross-session write: recorded in the run's checkpoint (target-session
// set) and delivered to the target as one provisional snapshot keyed by
// (source-session, source-version); a run that ended after its commit
// but before delivering is completed by the next run, and a delivered
// batch is never delivered again. A target ID in upper case is that
// session (§4.1), as under sessions/ (it was ENOENT: review 38).
func TestExecSend(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		src, dst := newSession(t, bk), newSession(t, bk)
		out, errOut, code := runExec(t, bk, t.TempDir(), src.String(), "sh", "-c", `set -e
			mkdir -p .pugmark/send/`+dst.String()+`/sub
			echo hello > .pugmark/send/`+strings.ToUpper(dst.String())+`/msg.txt
			echo deep > .pugmark/send/`+dst.String()+`/sub/d.txt
			echo mine > local.txt
			ls -a; ls .pugmark/send`)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		if out != ".\n..\nlocal.txt\n"+dst.String()+"\n" {
			t.Fatalf("handler listing %q", out)
		}
		ds := wantOneCheckpoint(t, bk, src, 0)
		for _, d := range ds {
			if want := d.Name != "local.txt"; want != (d.TargetSession == dst) {
				t.Fatalf("checkpoint descriptor %s targets %s", d.Name, d.TargetSession)
			}
		}
		if got := descNames(ds); got != "local.txt msg.txt sub/d.txt" {
			t.Fatalf("checkpoint holds %s", got)
		}
		wantSlots(t, bk, src, map[string]string{"local.txt": "mine\n"})
		if v := latest(t, bk, dst); v != 1 || snapType(t, bk, dst, 1) != layout.Provisional {
			t.Fatalf("target at version %d, want one provisional snapshot", v)
		}
		if got := deliveries(t, bk, dst, src); len(got) != 2 || got[0].SourceVersion != 1 {
			t.Fatalf("target holds %+v", got)
		}
		wantSlots(t, bk, dst, map[string]string{"msg.txt": "hello\n", "sub/d.txt": "deep\n"})

		// A retry finds the batch delivered and delivers nothing.
		if _, errOut, code := runExec(t, bk, t.TempDir(), src.String(), "true"); code != 0 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		if v := latest(t, bk, dst); v != 1 {
			t.Fatalf("target at version %d after a retry, want 1", v)
		}

		// A checkpoint whose run died before delivering: the next run
		// delivers it, once.
		body := []byte("late\n")
		bi, err := bk.Store.PutBlobBytes(ctx, body, layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := bk.Store.Commit(ctx, src, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{
			{Name: "late.txt", Digest: bi.Digest, Size: bi.Size, Data: body, CreatedAt: time.Now().UTC(), TargetSession: dst}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, errOut, code := runExec(t, bk, t.TempDir(), src.String(), "true"); code != 0 {
				t.Fatalf("exit %d\n%s", code, errOut)
			}
		}
		late := 0
		for _, e := range deliveries(t, bk, dst, src) {
			if e.SourceVersion == res.Version {
				late++
			}
		}
		if late != 1 || latest(t, bk, dst) != 2 {
			t.Fatalf("the undelivered batch arrived %d times (target at %d), want once", late, latest(t, bk, dst))
		}

		// A target that is no session: the handler cannot write there
		// (ENOENT), and a checkpoint another writer recorded for one does
		// not stop the next runs (it did: every run failed before
		// starting its handler).
		nobody := layout.NewSessionID(time.Now())
		if _, errOut, code := runExec(t, bk, t.TempDir(), src.String(), "sh", "-c",
			`! mkdir .pugmark/send/`+nobody.String()+` && ! echo x > .pugmark/send/`+nobody.String()+`/x && ! echo x > .pugmark/send/file`); code != 0 {
			t.Fatalf("writes to no session were not refused: exit %d\n%s", code, errOut)
		}
		if _, err := bk.Store.Commit(ctx, src, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{
			{Name: "lost.txt", Digest: bi.Digest, Size: bi.Size, Data: body, CreatedAt: time.Now().UTC(), TargetSession: nobody}}}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			// The first says what was not delivered; then the latest
			// checkpoint is its own, with nothing left to deliver.
			_, errOut, code := runExec(t, bk, t.TempDir(), src.String(), "sh", "-c", "echo ran > ran.txt")
			if code != 0 || (i == 0) != strings.Contains(errOut, "no such session") {
				t.Fatalf("run %d after a write to no session: exit %d\n%s", i, code, errOut)
			}
		}
		wantSlots(t, bk, src, map[string]string{"local.txt": "mine\n", "ran.txt": "ran\n"})
	})
}

// TestExecLeftovers: the handler holds no descriptor of the FUSE device
// (go-fuse opens it without O_CLOEXEC, and every handler inherited it), and
// a process the handler leaves running is ended when it exits: it would
// hold the mount busy, keep the connection alive past pugfs exec, and
// whatever it wrote later could not land (write audit: such a child
// waited on the dead mount forever).
func TestExecLeftovers(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	tmp := t.TempDir()
	bg := sleeper(300)
	script := `for f in /proc/$$/fd/*; do readlink "$f"; done | grep -c /dev/fuse > fds.txt || true
(sleep ` + bg + `; echo late > late.txt) >/dev/null 2>&1 &
echo $! > ` + tmp + `/bg
(exec 3>held.txt 4>d/held2.txt 5<out.txt; echo part >&3; exec sleep ` + bg + `) >/dev/null 2>&1 &
while [ ! -s held.txt ]; do sleep 0.01; done
echo done > out.txt`
	_, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "sh", "-c", "mkdir d && echo first > out.txt && "+script)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	// What the background process wrote lands as it left it, and the
	// warning names the files it held open for writing (not out.txt,
	// which it held for reading): one of them may be cut short.
	if !strings.Contains(errOut, `files="[d/held2.txt held.txt]"`) {
		t.Errorf("the warning does not name the files held open for writing:\n%s", errOut)
	}
	if strings.Contains(errOut, "out.txt") {
		t.Errorf("the warning names a file held open for reading:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(tmp, "bg")); err != nil {
		t.Fatalf("the handler did not start its background process: %v", err)
	}
	if pids := procsWith(bg); len(pids) > 0 {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("the handler's background processes %v outlived pugfs exec", pids)
	}
	wantSlots(t, bk, id, map[string]string{"fds.txt": "0\n", "out.txt": "done\n", "held.txt": "part\n", "d/held2.txt": ""})
}

// TestExecWritesOnlyItsSession: an invocation is one checkpoint of one
// session. A write to another session was staged and then dropped at the
// end (exit 0, the data only in failed/), and memories, refs and new
// sessions landed at once, even when the handler then failed (write
// audit). They are read-only in the handler's mount now.
func TestExecWritesOnlyItsSession(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id, other := newSession(t, bk), newSession(t, bk)
	fresh := layout.NewSessionID(time.Now())
	script := `set -u
try() { if sh -c "$1" 2>err.txt; then echo "$1: succeeded"; elif ! grep -q "Read-only file system" err.txt; then echo "$1: $(cat err.txt)"; fi; rm -f err.txt; }
try 'echo x > $PUGMARK_ROOT/sessions/` + other.String() + `/from-exec.txt'
try 'echo x > $PUGMARK_ROOT/memories/notes'
try 'mkdir $PUGMARK_ROOT/memories/ns'
try 'echo sessions/x > $PUGMARK_ROOT/refs/exec-ref'
try 'mkdir $PUGMARK_ROOT/sessions/` + fresh.String() + `'
echo mine > mine.txt`
	out, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "sh", "-c", script)
	if code != 0 || out != "" {
		t.Fatalf("exit %d; writes outside the session not refused with EROFS:\n%s\n%s", code, out, errOut)
	}
	wantSlots(t, bk, id, map[string]string{"mine.txt": "mine\n"})
	if v := latest(t, bk, other); v != 0 {
		t.Errorf("the other session is at version %d", v)
	}
	if ok, err := bk.Store.SessionExists(context.Background(), fresh); err != nil || ok {
		t.Errorf("mkdir sessions/<id> in a handler created it: %v %v", ok, err)
	}
	if refs, err := bk.Store.ListRefs(context.Background(), nil); err != nil || len(refs) != 0 {
		t.Errorf("refs %v %v", refs, err)
	}
}

// TestExecTransientCommitFailure: a backend that fails the commit (an
// injected Internal error on every snapshot PUT) is "nothing landed,
// retrying may succeed": exit 75, not 1, so a supervisor retries; the
// staged output is kept. A retry once the backend is back lands.
func TestExecTransientCommitFailure(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	sw, _, off := relSwitchFile(t)
	fb := relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_ops": "put",
		"fault_prefix": "sessions/", "fault_active_file": sw})
	cache := t.TempDir()
	_, errOut, code := runExec(t, fb, cache, id.String(), "sh", "-c", "echo important > f.txt; touch "+sw)
	if code != 75 {
		t.Fatalf("exit %d, want 75\n%s", code, errOut)
	}
	if kept := execFailed(cache, id); len(kept) == 0 {
		t.Errorf("the staged output was not kept:\n%s", errOut)
	}
	off()
	if _, errOut, code := runExec(t, fb, cache, id.String(), "sh", "-c", "echo important > f.txt"); code != 0 {
		t.Fatalf("retry: exit %d\n%s", code, errOut)
	}
	wantSlots(t, bk, id, map[string]string{"f.txt": "important\n"})
}

// TestExecFullStateDir: with the state directory on a full disk, a run
// whose output cannot land (a write of it failed: ENOSPC) exits 75, and
// what it says of the staged files is true: kept under failed/, or how
// many could not be. It said "kept" of copies the disk never let be made
// (audit 8).
func TestExecFullStateDir(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	cache := relTmpfs(t, "size=2m")
	_, errOut, code := runExec(t, bk, cache, id.String(), "sh", "-c",
		"echo small > small.txt; dd if=/dev/zero of=big bs=1M count=4 2>/dev/null; exit 0")
	if code != 75 {
		t.Fatalf("exit %d, want 75\n%s", code, errOut)
	}
	kept := execFailed(cache, id)
	switch {
	case strings.Contains(errOut, "staged files are kept under"):
		if len(kept) < 2 {
			t.Fatalf("stderr says the staged files are kept, failed/ holds %v:\n%s", kept, errOut)
		}
	case strings.Contains(errOut, "could NOT be kept"):
		if len(kept) >= 2 {
			t.Fatalf("stderr says files could not be kept, failed/ holds %v:\n%s", kept, errOut)
		}
	default:
		t.Fatalf("stderr says nothing of the staged files:\n%s", errOut)
	}
	wantSlots(t, bk, id, map[string]string{})
}

// TestExecCommitOutcomeUnknown: a checkpoint whose PUT landed but whose
// reply was lost, read back while the bucket does not answer, may have
// landed (audit 4: exit 75, "nothing landed", after which a supervisor
// ran the handler again on input the checkpoint had consumed). pugfs
// exec asks the bucket again for a while: when it answers, the run
// succeeds with nothing kept in failed/; when it never does, the exit is
// 74 with the output kept, and the checkpoint is there once it answers.
func TestExecCommitOutcomeUnknown(t *testing.T) {
	for _, answers := range []bool{true, false} {
		t.Run(fmt.Sprintf("answers=%v", answers), func(t *testing.T) {
			bk, id, key, sw, off := checkpointRig(t)
			fb := relWithFaults(bk, map[string]string{"fault_lost_put_rate": "1", "fault_error_rate": "1", "fault_ops": "get,head",
				"fault_prefix": key, "fault_active_file": sw})
			cache := t.TempDir()
			r := startExecFlags(t, fb, cache, []string{"--request-timeout", "1s"}, id.String(), "sh", "-c", "echo important > f.txt; touch "+sw)
			if answers {
				waitFor(t, "pugfs exec asking the bucket again", func() bool {
					return strings.Contains(r.stderr.String(), "asking the bucket again")
				})
				off()
			}
			code := r.wait(t)
			errOut := r.stderr.String()
			switch {
			case answers && code != 0:
				t.Fatalf("exit %d once the bucket answered that the checkpoint landed, want 0\n%s", code, errOut)
			case answers && len(execFailed(cache, id)) > 0:
				t.Errorf("a checkpoint that landed left its output in failed/: %v", execFailed(cache, id))
			case !answers && (code != 74 || !strings.Contains(errOut, "may have landed")):
				t.Fatalf("exit %d, want 74 saying the checkpoint may have landed\n%s", code, errOut)
			case !answers && len(execFailed(cache, id)) == 0:
				t.Errorf("the staged output was not kept:\n%s", errOut)
			}
			off()
			wantSlots(t, bk, id, map[string]string{"f.txt": "important\n"})
		})
	}
}

// TestExecTransientRefCheckFailure: a named session whose §9.1 re-check
// of the name fails for the backend (here every ref read fails once the
// handler ran) exits 75 with the outputs kept, as a failed commit does;
// it exited 1, and a supervisor that retries on 75 gave up on a passing
// outage (the cloud audit).
func TestExecTransientRefCheckFailure(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := namedSession(t, bk, "flaky")
	sw, _, _ := relSwitchFile(t)
	fb := relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_ops": "get",
		"fault_prefix": "refs/", "fault_active_file": sw})
	cache := t.TempDir()
	_, errOut, code := runExec(t, fb, cache, "flaky", "sh", "-c", "echo important > f.txt; touch "+sw)
	if code != 75 || !strings.Contains(errOut, "re-check refs/sessions/flaky") {
		t.Fatalf("exit %d, want 75 naming the re-check\n%s", code, errOut)
	}
	if kept := execFailed(cache, id); len(kept) == 0 {
		t.Errorf("the staged output was not kept:\n%s", errOut)
	}
	if v := latest(t, bk, id); v != 0 {
		t.Fatalf("version %d: something landed", v)
	}
}

// TestExecHandlerDetachesItsMount: a handler that detaches its own mount
// (umount -l $PUGMARK_ROOT) and exits 0 lands what it wrote. pugfs exec
// failed to unmount what was gone already, exited 1, and dropped the
// output without a word (the handler audit).
func TestExecHandlerDetachesItsMount(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	_, errOut, code := runExec(t, bk, t.TempDir(), id.String(), "sh", "-c", `echo e > e.txt && cd / && umount -l "$PUGMARK_ROOT"`)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, errOut)
	}
	wantSlots(t, bk, id, map[string]string{"e.txt": "e\n"})
}

// TestExecStderrGone: pugfs exec whose stderr is a pipe nobody reads any
// more (a log shipper that died, exec ... 2>&1 | head) exits with the
// status it means: the first line it wrote there killed it with SIGPIPE,
// and its inner process (PID 1 of its namespace) exited 2, a usage error
// (audit 15).
func TestExecStderrGone(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone
	defer w.Close()
	cmd := exec.Command(pugfsBinary(t), "exec", "--cache-dir", t.TempDir(), bk.URL, id.String(), "--", "sh", "-c", "exit 75")
	cmd.Env = append(os.Environ(), bk.Env...)
	cmd.Stderr = w // exec says "the command exited 75" there
	if err := cmd.Run(); cmd.ProcessState == nil {
		t.Fatal(err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 75 {
		t.Errorf("exit %d with stderr gone, want the handler's 75", code)
	}
}

// TestExecManyFiles: a run that stages four times more files than pugfs
// may hold open lands them all in one checkpoint, also the ones written,
// read, moved and linked again after their first close. Each staged file
// held a descriptor until the checkpoint, and such a run exited 1 with
// everything under failed/ (audit 15); a released file is parked now.
func TestExecManyFiles(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	cache := t.TempDir()
	const files = 600
	handler := fmt.Sprintf(`set -e; i=0; while [ $i -lt %d ]; do echo $i > f$i; i=$((i+1)); done
i=0; while [ $i -lt 10 ]; do seq 1 2000 > big$i; i=$((i+1)); done
echo more >> f5; cat f7 > copy7; mv f9 moved9; ln f11 hard11; echo again >> big3`, files)
	cmd := exec.Command("sh", "-c", `ulimit -n 150 && exec "$@"`, "sh", pugfsBinary(t), "exec", "--cache-dir", cache, bk.URL, id.String(), "--", "sh", "-c", handler)
	cmd.Env = append(os.Environ(), bk.Env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		e := errOut.String()
		t.Fatalf("%v:\n%s", err, e[max(0, len(e)-2000):])
	}
	ds := wantOneCheckpoint(t, bk, id, 0)
	got := map[string]layout.Descriptor{}
	for _, d := range ds {
		got[d.Name] = d
	}
	if want := files + 10 + 2; len(got) != want {
		t.Errorf("%d files in the checkpoint, want %d", len(got), want)
	}
	var seq bytes.Buffer
	for i := 1; i <= 2000; i++ {
		fmt.Fprintln(&seq, i)
	}
	want := map[string]string{"f0": "0\n", "f5": "5\nmore\n", "copy7": "7\n", "moved9": "9\n", "hard11": "11\n", "f11": "11\n",
		"f599": "599\n", "big0": seq.String(), "big3": seq.String() + "again\n"}
	for name, body := range want {
		d, ok := got[name]
		if !ok || d.Digest != layout.DigestOf([]byte(body)) {
			t.Errorf("%s: %v, %d bytes, want %d bytes", name, ok, d.Size, len(body))
		}
	}
	if _, ok := got["f9"]; ok {
		t.Error("f9 was moved and is still in the checkpoint")
	}
	if kept := execFailed(cache, id); len(kept) != 0 {
		t.Errorf("kept under failed/: %d files", len(kept))
	}
}

// TestExecSweepsDeadMount: the mountpoint of a run that died with its
// mount still attached (a run without namespaces, not root, SIGKILLed:
// here a pugfs mount killed on such a mountpoint) is detached and removed
// by the next run. It was only rmdir'ed, which a mount refuses, and
// stayed mounted and dead for good (the handler audit, as nobody).
func TestExecSweepsDeadMount(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	state := t.TempDir()
	dead := filepath.Join(state, "exec", "p0123456789abcdef")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dead+".lock", nil, 0o600); err != nil { // its owner gone: unlocked
		t.Fatal(err)
	}
	m := startMount(t, bk, dead)
	m.KillHard() // SIGKILL: the mount stays, served by nobody
	t.Cleanup(func() { syscall.Unmount(dead, syscall.MNT_DETACH) })
	if !isMounted(dead) {
		t.Fatal("the killed mount is not attached: nothing to sweep")
	}
	if _, errOut, code := runExec(t, bk, state, id.String(), "true"); code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if isMounted(dead) {
		t.Fatal("the dead mount is still attached after the next run")
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead run's mountpoint is still there: %v", err)
	}
}

// TestExecSIGINT: SIGINT to pugfs exec reaches the handler as SIGINT, and
// the processes under it too (a shell waiting for its child would wait it
// out otherwise); the status is 130, as a shell shows for Ctrl-C, and
// nothing lands. It used to pass SIGTERM to the handler alone and say 143.
func TestExecSIGINT(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	g := newGate(t)
	r := startExec(t, bk, t.TempDir(), id.String(), "sh", "-c",
		`echo out > out.txt; echo $$ > `+g.marker()+`; sleep 600; echo after > after.txt`)
	g.ready(t, 1, r)
	r.cmd.Process.Signal(syscall.SIGINT)
	if code := r.wait(t); code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %d, want %d\n%s", code, 128+int(syscall.SIGINT), r.stderr.String())
	}
	if v := latest(t, bk, id); v != 0 {
		t.Fatalf("version %d after SIGINT, want 0", v)
	}
}

// TestExecSignalAnyTime: SIGTERM at any point of a run's start-up ends it
// with 143 and lands nothing, a second SIGINT to a run whose handler
// ignores the first kills it (130 too), and a handler that catches the
// signal and exits 3 makes 143 as well. A signal in the first 50-90 ms reached
// the inner process (PID 1 of its namespace) before it caught signals,
// and the kernel dropped it: the handler ran and its checkpoint landed,
// with exit 0; a second one made the Go runtime exit 2 (the exec audit).
// The delays are points in the start-up, not a synchronisation: every
// one must give the same answer.
func TestExecSignalAnyTime(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	state := t.TempDir()
	for _, ms := range []int{0, 15, 30, 45, 60, 75, 90, 120, 150, 200} {
		r := startExec(t, bk, state, id.String(), "sh", "-c", `echo out > out.txt; sleep 5`)
		time.Sleep(time.Duration(ms) * time.Millisecond)
		r.cmd.Process.Signal(syscall.SIGTERM)
		if code := r.wait(t); code != 128+int(syscall.SIGTERM) {
			t.Errorf("SIGTERM after %d ms: exit %d, want %d\n%s", ms, code, 128+int(syscall.SIGTERM), r.stderr.String())
		}
	}
	// SIGQUIT (Ctrl-\\) is the handler's: it dies of it (131, as a shell
	// shows) and nothing lands. It was a goroutine dump and exit 2
	// ("usage error") (the handler audit). (In the first tens of
	// milliseconds of a process, before main runs, Go's own answer
	// stands: nothing catches a signal before the runtime's packages are
	// initialised.)
	g := newGate(t)
	r := startExec(t, bk, state, id.String(), "sh", "-c", `echo out > out.txt; echo $$ > `+g.marker()+`; sleep 600`)
	g.ready(t, 1, r)
	r.cmd.Process.Signal(syscall.SIGQUIT)
	if code := r.wait(t); code != 128+int(syscall.SIGQUIT) || strings.Contains(r.stderr.String(), "goroutine") {
		t.Errorf("SIGQUIT: exit %d, want %d\n%s", code, 128+int(syscall.SIGQUIT), r.stderr.String())
	}
	// A handler that ignores the first signal is killed by the second
	// (it ran until a SIGKILL of pugfs exec: the exec audit), sent a
	// while after the first: copies of one signal are one (below).
	g = newGate(t)
	r = startExec(t, bk, state, id.String(), "sh", "-c",
		`trap "" INT; echo out > out.txt; echo $$ > `+g.marker()+`; while :; do sleep 0.5; done`)
	g.ready(t, 1, r)
	r.cmd.Process.Signal(syscall.SIGINT)
	waitFor(t, "the first SIGINT passed on", func() bool { return strings.Contains(r.stderr.String(), "a second one kills it") })
	waitFor(t, "a later SIGINT kills the handler", func() bool {
		r.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-r.done:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	if code := r.wait(t); code != 128+int(syscall.SIGINT) || !strings.Contains(r.stderr.String(), "killed") {
		t.Errorf("two SIGINTs: exit %d, want %d, and the kill said\n%s", code, 128+int(syscall.SIGINT), r.stderr.String())
	}
	// One SIGINT to the whole process group, as a terminal's Ctrl-C
	// sends it, is one signal: the handler's trap runs and ends it. Its
	// copies (pugfs exec's inner process gets one directly and one from
	// the outer) counted as a second signal, which killed the handler
	// before its trap ran (review 38).
	trapped := filepath.Join(t.TempDir(), "trapped")
	g = newGate(t)
	r = startExec(t, bk, state, id.String(), "sh", "-c",
		`trap "echo got >> `+trapped+`; exit 1" INT; echo out > out.txt; echo $$ > `+g.marker()+`; while :; do sleep 0.1; done`)
	g.ready(t, 1, r)
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT)
	// The handler gets the signal as pugfs exec does, and may have
	// exited (1) before pugfs exec looked: either way nothing lands.
	if code := r.wait(t); (code != 128+int(syscall.SIGINT) && code != 1) || strings.Contains(r.stderr.String(), "second signal") {
		t.Errorf("a SIGINT to the process group: exit %d, want %d or the handler's 1, with no second signal\n%s", code, 128+int(syscall.SIGINT), r.stderr.String())
	}
	if b, err := os.ReadFile(trapped); err != nil || !strings.HasPrefix(string(b), "got\n") {
		t.Errorf("the handler's trap did not run (%q, %v): it was killed\n%s", b, err, r.stderr.String())
	}
	// A handler that catches the signal and exits with a status of its
	// own was interrupted all the same: 128 + the signal (README).
	g = newGate(t)
	r = startExec(t, bk, state, id.String(), "sh", "-c",
		`trap "exit 3" TERM; echo out > out.txt; echo $$ > `+g.marker()+`; while :; do sleep 0.1; done`)
	g.ready(t, 1, r)
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM caught by the handler: exit %d, want %d\n%s", code, 128+int(syscall.SIGTERM), r.stderr.String())
	}
	if v := latest(t, bk, id); v != 0 {
		t.Fatalf("version %d after the signals, want 0: a run landed", v)
	}
}

// TestExecSignalReachesHandlerOnce: the handler gets each signal once,
// whether it was sent to the whole process group (a terminal's Ctrl-C or
// Ctrl-\, kill -INT -PGID) or to pugfs exec alone (a SIGTERM to each
// pugfs process, as pkill sends it: TestExecSignalToEachPugfsProcess).
// A group signal
// reached the handler directly and again from pugfs exec, which passed
// on what it got: a trap ran twice, and Python's KeyboardInterrupt came
// a second time in the middle of the first one's cleanup. Each handler
// traps the signal, counts it, and exits a second after the first: a
// copy comes within milliseconds.
func TestExecSignalReachesHandlerOnce(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	state := t.TempDir()
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		trap  string // its name for sh's trap
		group bool
	}{
		{"SIGINT to the group", syscall.SIGINT, "INT", true},
		{"SIGINT to pugfs exec", syscall.SIGINT, "INT", false},
		{"SIGTERM to pugfs exec", syscall.SIGTERM, "TERM", false},
		{"SIGQUIT to the group", syscall.SIGQUIT, "QUIT", true},
		{"SIGQUIT to pugfs exec", syscall.SIGQUIT, "QUIT", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trapped := filepath.Join(t.TempDir(), "trapped")
			g := newGate(t)
			r := startExec(t, bk, state, id.String(), "sh", "-c",
				`trap "echo got >> `+trapped+`" `+tc.trap+`; echo out > out.txt; echo $$ > `+g.marker()+`
				while [ ! -s `+trapped+` ]; do sleep 0.02; done
				sleep 1; exit 1`)
			g.ready(t, 1, r)
			if tc.group {
				syscall.Kill(-r.cmd.Process.Pid, tc.sig)
			} else {
				r.cmd.Process.Signal(tc.sig)
			}
			code := r.wait(t)
			b, err := os.ReadFile(trapped)
			if err != nil || string(b) != "got\n" {
				t.Errorf("the handler's trap ran %d times (%q, %v), want once\n%s", strings.Count(string(b), "got"), b, err, r.stderr.String())
			}
			want := 128 + int(tc.sig)
			if tc.sig == syscall.SIGQUIT {
				want = 1 // the handler's: SIGQUIT is its own
			}
			if code != want {
				t.Errorf("exit %d, want %d\n%s", code, want, r.stderr.String())
			}
		})
	}
	if v := latest(t, bk, id); v != 0 {
		t.Fatalf("version %d after the signals, want 0: a run landed", v)
	}
}

var (
	execRequestsLine = regexp.MustCompile(`(?m)^backend requests: get (\d+), head (\d+), put (\d+), list (\d+),`)
	execPeakLine     = regexp.MustCompile(`(?m)^backend requests in flight or waiting for the scheduler: peak (\d+)$`)
)

// TestExecRequestBudget: what a handler starts from is read through the
// mount's own cache, once, with the first requests sent together. Before
// the handler runs, a session of five snapshots (the last a provisional
// input above a checkpoint) costs the mount's probe (a LIST of one key,
// counted since audit 20), its hour's LIST, its manifest, each
// snapshot once and the metadata of the snapshots down to the checkpoint
// (windows of 1, then 2), with the LIST, the manifest and the first
// snapshots in flight at once behind a bucket 20 ms away. It used to be
// seven round trips in a row (the latest snapshot read three times, its
// listing twice), then the mount's own lookup listed the hour again.
func TestExecRequestBudget(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	id := newSession(t, bk)
	for i := range 3 {
		commitDescs(t, bk, id, layout.Provisional, map[string]string{fmt.Sprintf("in/%d.txt", i): "input\n"})
	}
	commitDescs(t, bk, id, layout.Checkpoint, map[string]string{"out.txt": "done\n"})
	commitDescs(t, bk, id, layout.Provisional, map[string]string{"in/new.txt": "new input\n"})
	fb := relWithFaults(bk, map[string]string{"fault_latency": "20ms"})
	out, errOut, code := runExec(t, fb, t.TempDir(), id.String(), "sh", "-c", `cat "$PUGMARK_ROOT/.pugmark/stats" && cat in/new.txt`)
	if code != 0 || !strings.HasSuffix(out, "new input\n") {
		t.Fatalf("exit %d, handler printed %q\n%s", code, out, errOut)
	}
	g, p := execRequestsLine.FindStringSubmatch(out), execPeakLine.FindStringSubmatch(out)
	if g == nil || p == nil {
		t.Fatalf("no request counts in .pugmark/stats:\n%s", out)
	}
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	gets, heads, puts, lists, peak := n(g[1]), n(g[2]), n(g[3]), n(g[4]), n(p[1])
	t.Logf("before the handler: %d GET, %d HEAD, %d PUT, %d LIST, peak %d in flight", gets, heads, puts, lists, peak)
	if gets > 6 || heads > 3 || puts != 0 || lists > 2 {
		t.Errorf("before the handler: %d GET, %d HEAD, %d PUT, %d LIST; want at most 6 (the manifest and 5 snapshots), 3, 0 and 2 (the probe and the hour)", gets, heads, puts, lists)
	}
	if peak < 4 {
		t.Errorf("at most %d requests in flight at once before the handler, want the LIST, the manifest and the first snapshots together", peak)
	}
}
