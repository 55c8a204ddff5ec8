package localblob

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Multi-process tests: the test binary re-executes itself as several OS
// processes (TestHelperProcess) that race on one bucket directory. Goroutines
// in one process would not do: the point is that the guarantees hold across
// processes, where no in-process mutex can help.

const (
	helperEnv   = "LOCALBLOB_TEST_HELPER" // mode
	helperDir   = "LOCALBLOB_TEST_DIR"
	helperStart = "LOCALBLOB_TEST_START" // file whose appearance starts the race
	helperID    = "LOCALBLOB_TEST_ID"
	helperN     = "LOCALBLOB_TEST_N"

	raceProcs = 4
	raceKeys  = 200
)

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	out   []string
	done  chan struct{}
}

// startChildren starts n helpers in mode and waits until each reports
// READY, so that creating the start file releases them together.
func startChildren(t *testing.T, n int, mode, dir string, extra ...string) ([]*child, func()) {
	t.Helper()
	start := filepath.Join(t.TempDir(), "start")
	var cs []*child
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			helperEnv+"="+mode, helperDir+"="+dir, helperStart+"="+start,
			helperID+"="+strconv.Itoa(i))
		cmd.Env = append(cmd.Env, extra...)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), done: make(chan struct{})}
		go func() {
			defer close(c.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
			close(c.lines)
		}()
		cs = append(cs, c)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	for i, c := range cs {
		select {
		case l := <-c.lines:
			if l != "READY" {
				t.Fatalf("child %d: %q", i, l)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("child %d never became ready", i)
		}
	}
	release := func() {
		if err := os.WriteFile(start, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return cs, release
}

// wait collects every child's output and checks it exited cleanly.
func waitChildren(t *testing.T, cs []*child) {
	t.Helper()
	for i, c := range cs {
		for l := range c.lines {
			c.out = append(c.out, l)
		}
		<-c.done
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v; output %q", i, err, c.out)
		}
	}
}

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper for the multi-process tests")
	}
	ctx := context.Background()
	dir, id := os.Getenv(helperDir), os.Getenv(helperID)
	fail := func(format string, args ...any) {
		fmt.Printf("ERROR "+format+"\n", args...)
		os.Exit(1)
	}
	b, err := OpenBucket(dir, &Options{StaleTempAge: -1})
	if err != nil {
		fail("%v", err)
	}
	fmt.Println("READY")
	for {
		if _, err := os.Stat(os.Getenv(helperStart)); err == nil {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	switch mode {
	case "ifnotexist":
		// Lockstep with the parent: "PREP i" writes the body of key i into
		// an open writer, "GO" closes it. All processes thus publish the
		// same key at the same moment, which is when a check-then-act
		// create loses.
		in := bufio.NewScanner(os.Stdin)
		var w *blob.Writer
		var i int
		for in.Scan() {
			if l := in.Text(); l != "GO" {
				if _, err := fmt.Sscanf(l, "PREP %d", &i); err != nil {
					fail("bad command %q", l)
				}
				w, err = b.NewWriter(ctx, raceKey(i), &blob.WriterOptions{
					ContentType:  "text/plain",
					CacheControl: "writer-" + id,
					Metadata:     map[string]string{"writer": id},
					IfNotExist:   true,
				})
				if err == nil {
					_, err = io.WriteString(w, raceBody(id, i))
				}
				if err != nil {
					fail("write %d: %v", i, err)
				}
				fmt.Println("PREPARED")
				continue
			}
			switch err := w.Close(); gcerrors.Code(err) {
			case gcerrors.OK:
				fmt.Println("WON", i)
			case gcerrors.FailedPrecondition:
				fmt.Println("LOST", i)
			default:
				fail("close %d: %v", i, err)
			}
		}
	case "cas":
		n, _ := strconv.Atoi(os.Getenv(helperN))
		wins, retries := 0, 0
		for wins < n {
			r, err := b.NewReader(ctx, "counter", nil)
			if err != nil {
				fail("read: %v", err)
			}
			var info ObjectInfo
			r.As(&info)
			body, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				fail("read: %v", err)
			}
			v, err := strconv.Atoi(string(body))
			if err != nil || info.Metadata["value"] != string(body) {
				fail("counter body %q metadata %v: torn object", body, info.Metadata)
			}
			next := strconv.Itoa(v + 1)
			err = b.WriteAll(ctx, "counter", []byte(next), &blob.WriterOptions{
				ContentType: "text/plain",
				Metadata:    map[string]string{"value": next, "writer": id},
				BeforeWrite: func(as func(any) bool) error {
					as(&WriteOptions{IfMatch: info.ETag})
					return nil
				},
			})
			switch gcerrors.Code(err) {
			case gcerrors.OK:
				wins++
			case gcerrors.FailedPrecondition:
				retries++
			default:
				fail("cas: %v", err)
			}
		}
		fmt.Println("CAS", wins, retries)
	case "crash":
		w, err := b.NewWriter(ctx, "crash/obj", &blob.WriterOptions{ContentType: "application/octet-stream"})
		if err != nil {
			fail("%v", err)
		}
		if _, err := w.Write(make([]byte, 1<<20)); err != nil {
			fail("%v", err)
		}
		fmt.Println("HALF")
		time.Sleep(time.Hour) // until SIGKILL
	default:
		fail("unknown mode %q", mode)
	}
	if err := b.Close(); err != nil {
		fail("%v", err)
	}
	os.Exit(0)
}

// raceLockstep drives "ifnotexist" children through every key and returns
// the winners of each.
func raceLockstep(t *testing.T, cs []*child) map[int][]string {
	t.Helper()
	winners := map[int][]string{}
	send := func(cmd string) {
		for _, c := range cs {
			if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	recv := func() []string {
		var out []string
		for id, c := range cs {
			l, ok := <-c.lines
			if !ok {
				t.Fatalf("child %d exited early", id)
			}
			out = append(out, l)
		}
		return out
	}
	for i := range raceKeys {
		send(fmt.Sprintf("PREP %d", i))
		for id, l := range recv() {
			if l != "PREPARED" {
				t.Fatalf("child %d: %q", id, l)
			}
		}
		send("GO")
		for id, l := range recv() {
			if l == fmt.Sprintf("WON %d", i) {
				winners[i] = append(winners[i], strconv.Itoa(id))
			} else if l != fmt.Sprintf("LOST %d", i) {
				t.Fatalf("child %d: %q", id, l)
			}
		}
	}
	for _, c := range cs {
		c.stdin.Close()
	}
	return winners
}

func raceKey(i int) string { return fmt.Sprintf("race/k%03d", i) }

func raceBody(id string, i int) string {
	return fmt.Sprintf("writer=%s key=%d %s", id, i, strings.Repeat(id, 100+i))
}

// Four processes race IfNotExist writes of their own bodies and metadata on
// the same keys: exactly one wins each key, and the key holds the winner's
// body and the winner's metadata (never a mix).
func TestMultiProcessIfNotExist(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cs, release := startChildren(t, raceProcs, "ifnotexist", dir)
	release()
	winners := raceLockstep(t, cs)
	waitChildren(t, cs)
	b, err := OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spread := map[string]int{}
	for i := range raceKeys {
		w := winners[i]
		if len(w) != 1 {
			t.Errorf("key %d: winners %v, want exactly one", i, w)
			continue
		}
		spread[w[0]]++
		body, err := b.ReadAll(ctx, raceKey(i))
		if err != nil || string(body) != raceBody(w[0], i) {
			t.Errorf("key %d: body %.30q (%v), want writer %s's", i, body, err, w[0])
		}
		a, err := b.Attributes(ctx, raceKey(i))
		if err != nil || a.Metadata["writer"] != w[0] || a.CacheControl != "writer-"+w[0] {
			t.Errorf("key %d: metadata %v cache-control %q (%v), want writer %s's", i, a.Metadata, a.CacheControl, err, w[0])
		}
	}
	t.Logf("wins per process: %v", spread)
	if n := tmpEntries(t, dir); len(n) != 0 {
		t.Errorf("temp files left: %q", n)
	}
}

// Several processes increment a counter with If-Match compare-and-swap:
// the final value equals the number of successful swaps, so no update was
// lost, and body and metadata always match.
func TestMultiProcessCAS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	write(t, b, "counter", "0", &blob.WriterOptions{ContentType: "text/plain", Metadata: map[string]string{"value": "0"}})
	const perProc = 25
	cs, release := startChildren(t, raceProcs, "cas", dir, helperN+"="+strconv.Itoa(perProc))
	release()
	waitChildren(t, cs)
	total, retries := 0, 0
	for _, c := range cs {
		var w, r int
		if len(c.out) != 1 {
			t.Fatalf("output %q", c.out)
		}
		if _, err := fmt.Sscanf(c.out[0], "CAS %d %d", &w, &r); err != nil {
			t.Fatalf("output %q", c.out)
		}
		total += w
		retries += r
	}
	body, err := b.ReadAll(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != strconv.Itoa(total) || total != raceProcs*perProc {
		t.Fatalf("counter = %s after %d successful swaps (want %d)", body, total, raceProcs*perProc)
	}
	t.Logf("%d swaps, %d precondition failures", total, retries)
}

// A writer killed mid-write leaves no object and nothing listed; its temp
// file survives only in .pugfs-tmp until an open finds it stale.
func TestCrashMidWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cs, release := startChildren(t, 1, "crash", dir)
	release()
	select {
	case l := <-cs[0].lines:
		if l != "HALF" {
			t.Fatalf("child: %q", l)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("child never wrote")
	}
	if err := cs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cs[0].cmd.Wait()

	b, err := OpenBucket(dir, nil) // default age: the fresh temp file stays
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Exists(ctx, "crash/obj"); ok || err != nil {
		t.Fatalf("half-written object visible: %v %v", ok, err)
	}
	if got := listAll(t, b, "", "", 10); len(got) != 0 {
		t.Fatalf("listing after crash: %q", got)
	}
	if got := listAll(t, b, "", "/", 10); len(got) != 0 {
		t.Fatalf("delimited listing after crash: %q", got)
	}
	b.Close()
	if n := tmpEntries(t, dir); len(n) != 1 {
		t.Fatalf("temp dir after crash: %q, want the one abandoned file", n)
	}
	b, err = OpenBucket(dir, &Options{StaleTempAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if n := tmpEntries(t, dir); len(n) != 0 {
		t.Fatalf("stale temp files not swept: %q", n)
	}
}

// In-process concurrency on the same keys, for the race detector: writers,
// deleters (which prune directories under the writers) and listers.
func TestConcurrentWriteDeleteList(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				key := fmt.Sprintf("deep/%d/a/b/k", i%3)
				switch (g + i) % 3 {
				case 0:
					if err := b.WriteAll(ctx, key, []byte("v"), &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
						errs <- fmt.Errorf("write: %w", err)
						return
					}
				case 1:
					if err := b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
						errs <- fmt.Errorf("delete: %w", err)
						return
					}
				case 2:
					if _, _, err := b.ListPage(ctx, blob.FirstPageToken, 5, &blob.ListOptions{Prefix: "deep/"}); err != nil {
						errs <- fmt.Errorf("list: %w", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
