package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Backend faults while real tools run on the mount. Every test here
// reaches the bucket through a fault+ URL (layout/faultblob), so the faults
// happen inside the pugfs process, where the real request paths run.

// relSeedFiles commits n files of mixed sizes (inline and blob-backed) and
// returns name -> content.
func relSeedFiles(t *testing.T, bk *Bucket, id layout.SessionID, n int, seed uint64) map[string]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	files := map[string]string{}
	for i := 0; i < n; i++ {
		size := []int{10, 900, 3000, 70 << 10}[i%4]
		b := make([]byte, size)
		for j := range b {
			b[j] = 'a' + byte(rng.IntN(26))
		}
		files[fmt.Sprintf("d%d/f%02d.txt", i%3, i)] = string(b)
	}
	relCommitFiles(t, bk, id, files)
	return files
}

// relCheckReads cats every file through the mount and compares.
func relCheckReads(t *testing.T, mnt *Mount, id layout.SessionID, files map[string]string) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt.Dir, "sessions", id.String(), name))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if string(got) != want {
			t.Fatalf("read %s: %d bytes, want %d (wrong content)", name, len(got), len(want))
		}
	}
}

// TestReliabilityTransientFaultsRetried: with 10% of GET, HEAD, LIST and
// PUT requests failing transiently (Internal, and DeadlineExceeded as a
// backend timeout), cat, sha256sum, ls -lR, cp and mkdir all succeed and
// give the right bytes, because layout.Store retries with backoff.
//
// Removing the protection (layout.Store.retry returning the first error,
// or Options.Retries < 0) makes about one request in ten fail: the tools
// then see EIO and this test fails on the first of them.
func TestReliabilityTransientFaultsRetried(t *testing.T) {
	for _, code := range []string{"Internal", "DeadlineExceeded"} {
		t.Run(code, func(t *testing.T) {
			bk := relLocalBucket(t)
			id := relSession(t, bk)
			files := relSeedFiles(t, bk, id, 16, 1)
			fb := relWithFaults(bk, map[string]string{
				"fault_error_rate": "0.1", "fault_error_code": code, "fault_seed": "7",
				"fault_ops": "get,head,list,put",
			})
			mnt := mount(t, fb, "--metadata-ttl=0")
			sd := "sessions/" + id.String()
			relCheckReads(t, mnt, id, files)
			sh(t, mnt.Dir, "ls -lR "+sd+" >/dev/null && sha256sum "+sd+"/d*/* >/dev/null")
			src := t.TempDir()
			for i := 0; i < 8; i++ {
				os.WriteFile(filepath.Join(src, fmt.Sprintf("w%d.bin", i)), bytes.Repeat([]byte{byte(i)}, 2000+i*5000), 0o644)
			}
			sh(t, mnt.Dir, "mkdir "+sd+"/new && cp "+src+"/* "+sd+"/new/ && cmp "+src+"/w3.bin "+sd+"/new/w3.bin")
			slots := relLiveSlots(t, bk, id)
			for i := 0; i < 8; i++ {
				e, ok := slots[fmt.Sprintf("new/w%d.bin", i)]
				if !ok || e.Size != int64(2000+i*5000) {
					t.Fatalf("new/w%d.bin in the bucket: %+v, %v", i, e, ok)
				}
			}
			st := relReadStats(t, mnt)
			var injected int64
			for _, f := range st.Faults {
				injected += f.Errors
			}
			if injected == 0 || st.Retries == 0 {
				t.Fatalf("no faults were injected or retried (injected %d, retries %d):\n%s", injected, st.Retries, st.raw)
			}
			// The store's error count also counts requests the kernel
			// interrupted; what matters is that no tool saw an error.
			t.Logf("%s: %d injected errors, %d retries, %d store errors, 0 seen by tools", code, injected, st.Retries, st.Errors)
			if !relAlive(mnt) {
				t.Fatal("mount died")
			}
		})
	}
}

// TestReliabilityRetriesAreBounded: a blob whose every GET fails
// transiently gives EIO within a few seconds (5 attempts with 50ms..400ms
// backoff), the log names the key, the mount stays up and other files stay
// readable.
//
// Removing the bound (retrying transient errors forever) makes the cat
// hang: the test fails on its 20 s deadline instead of hanging.
func TestReliabilityRetriesAreBounded(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	files := relSeedFiles(t, bk, id, 4, 2)
	victim := "d2/f02.txt" // 3000 bytes: blob-backed, not inline
	key := layout.BlobKey(layout.DigestOf([]byte(files[victim])))
	fb := relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_prefix": key, "fault_ops": "get"})
	mnt := mount(t, fb)
	start := time.Now()
	out, errOut, err := relRunWithin(20*time.Second, mnt.Dir, "cat sessions/"+id.String()+"/"+victim)
	el := time.Since(start)
	if err == nil {
		t.Fatalf("cat of an unreadable blob succeeded: %q", out)
	}
	if !strings.Contains(errOut, "Input/output error") {
		t.Fatalf("cat: %v, stderr %q; want EIO", err, errOut)
	}
	if el > 15*time.Second {
		t.Errorf("EIO took %v", el)
	}
	relWait(t, 5*time.Second, "the log names the key", func() bool { return strings.Contains(mnt.Log(), key) })
	st := relReadStats(t, mnt)
	if f := st.Faults["get"]; f.Errors < 5 || st.Retries < 4 {
		t.Errorf("want >= 5 attempts (4 retries) before giving up; faults %+v, retries %d", f, st.Retries)
	}
	delete(files, victim)
	relCheckReads(t, mnt, id, files)
	if !relAlive(mnt) {
		t.Fatal("mount died")
	}
}

// relRunWithin runs a script with its own deadline.
func relRunWithin(d time.Duration, dir, script string) (string, string, error) {
	type res struct {
		out, errOut string
		err         error
	}
	c := make(chan res, 1)
	go func() {
		o, e, err := run(dir, script)
		c <- res{o, e, err}
	}()
	select {
	case r := <-c:
		return r.out, r.errOut, r.err
	case <-time.After(d):
		return "", "", fmt.Errorf("%q did not finish within %v", script, d)
	}
}

// TestReliabilityPermanentFaultIsEIOForThatCallOnly: a permanent backend
// failure (InvalidArgument: not retried) on one blob is EIO for reads of
// that file while other files read fine; once the fault is gone the very
// next read works. A permanent failure of a snapshot PUT makes that close
// return EIO, the data is kept in failed/, shown read-only under the
// mount's .pugmark/failed/ and counted in .pugmark/stats (a shell never
// sees close(2)'s error), and the next write commits. rm through the mount
// deletes the kept file.
//
// Removing the protection: remembering the failure (caching the error as
// if the blob were corrupt) makes the read after the fault fail; mapping
// all errors of a session to its directory makes the other reads fail;
// swallowing the commit error makes the first close return 0 with nothing
// in the bucket (the test checks both).
func TestReliabilityPermanentFaultIsEIOForThatCallOnly(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	files := relSeedFiles(t, bk, id, 4, 3)
	victim := "d0/f03.txt" // 70 KiB: blob-backed
	key := layout.BlobKey(layout.DigestOf([]byte(files[victim])))
	snaps, _ := layout.SnapshotsPrefix(id)
	sw, on, off := relSwitchFile(t)
	fb := relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_error_code": "InvalidArgument",
		"fault_prefix": key, "fault_active_file": sw})
	mnt := mount(t, fb)
	sd := "sessions/" + id.String()
	on()
	if e := shErr(t, mnt.Dir, "cat "+sd+"/"+victim+" >/dev/null"); !strings.Contains(e, "Input/output error") {
		t.Fatalf("cat with a permanent fault: %q, want EIO", e)
	}
	others := map[string]string{}
	for k, v := range files {
		if k != victim {
			others[k] = v
		}
	}
	relCheckReads(t, mnt, id, others)
	off()
	relCheckReads(t, mnt, id, files)

	// The same for a commit: a permanent failure of the snapshot PUT.
	mnt.Stop(t)
	fb = relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_error_code": "InvalidArgument",
		"fault_prefix": snaps, "fault_ops": "put", "fault_active_file": sw})
	cache := t.TempDir()
	mnt = mount(t, fb, "--cache-dir", cache)
	on()
	// Not echo: bash ignores the result of close(2) on a redirection.
	if err := os.WriteFile(filepath.Join(mnt.Dir, sd, "failing.txt"), []byte("lost-then-kept\n"), 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write with a failing snapshot PUT: %v, want EIO from close", err)
	}
	// The release does not retry a commit whose failure close(2)
	// returned: it keeps the bytes (staging.Writer.salvageLocked).
	relWait(t, 10*time.Second, "the failed write's data kept", func() bool { return strings.Contains(mnt.Log(), "staged data kept") })
	if _, ok := relLiveSlots(t, bk, id)["failing.txt"]; ok {
		t.Fatal("failing.txt is in the bucket although its commit failed")
	}
	shown, _ := filepath.Glob(filepath.Join(mnt.Dir, ".pugmark", "failed", id.String(), "failing.txt.*"))
	if len(shown) != 1 {
		t.Fatalf(".pugmark/failed/%s holds %v, want the one failed write", id, shown)
	}
	if b, err := os.ReadFile(shown[0]); err != nil || string(b) != "lost-then-kept\n" {
		t.Fatalf("the failed write under .pugmark/failed: %q, %v", b, err)
	}
	if st, err := os.Stat(shown[0]); err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("the kept file's mode: %v, %v; want 0400 (read-only, the owner's)", st, err)
	}
	if err := os.WriteFile(shown[0], []byte("x"), 0o644); err == nil {
		t.Fatal("the kept file was writable")
	}
	if st, _ := os.ReadFile(filepath.Join(mnt.Dir, ".pugmark", "stats")); !strings.Contains(string(st), "failed commits kept 1 ") {
		t.Fatalf(".pugmark/stats does not count the kept file:\n%s", st)
	}
	off()
	if err := os.WriteFile(filepath.Join(mnt.Dir, sd, "after.txt"), []byte("works\n"), 0o644); err != nil {
		t.Fatalf("the write after the fault: %v", err)
	}
	if e, ok := relLiveSlots(t, bk, id)["after.txt"]; !ok || string(e.Data) != "works\n" {
		t.Fatalf("after.txt in the bucket: %+v %v", e, ok)
	}
	if !relAlive(mnt) {
		t.Fatal("mount died")
	}
	// The failed write's bytes outlive the mount: they are not in the
	// staging directory that unmount removes. (Before FailedDir they were,
	// and a clean unmount deleted them.)
	mnt.Stop(t)
	kept, _ := filepath.Glob(filepath.Join(bucketCacheDir(cache), "failed", id.String(), "failing.txt.*"))
	if len(kept) != 1 {
		t.Fatalf("salvage files after unmount: %v", kept)
	}
	if b, _ := os.ReadFile(kept[0]); string(b) != "lost-then-kept\n" {
		t.Fatalf("salvaged %q", b)
	}
	// A later mount of the bucket shows it too, and rm there deletes it.
	mnt = mount(t, fb, "--cache-dir", cache)
	failed := filepath.Join(mnt.Dir, ".pugmark", "failed", id.String())
	if err := os.Remove(filepath.Join(failed, filepath.Base(kept[0]))); err != nil {
		t.Fatalf("rm of the kept file through the mount: %v", err)
	}
	if _, err := os.Stat(kept[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kept file is still on disk after rm: %v", err)
	}
	if err := os.Remove(failed); err != nil {
		t.Fatalf("rmdir of the emptied session directory: %v", err)
	}
}

// TestReliabilityFailedRecordWritesKept: a memory record or a ref whose
// write fails for good is kept under .pugmark/failed/memories/ and
// failed/refs/, as a session file's is (the write audit found them
// dropped, with only a log line), and the close says EIO.
func TestReliabilityFailedRecordWritesKept(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	fb := relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_error_code": "InvalidArgument", "fault_ops": "put"})
	mnt := mount(t, fb, "--cache-dir", t.TempDir())
	for _, tc := range []struct{ path, body, kept string }{
		{"memories/team/notes/standup.md", "memory body\n", "memories/team%2Fnotes%2Fstandup.md.*"},
		{"refs/myref", "objects/one\n", "refs/myref.*"},
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(mnt.Dir, tc.path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mnt.Dir, tc.path), []byte(tc.body), 0o644); !errors.Is(err, syscall.EIO) {
			t.Errorf("write %s with failing PUTs: %v, want EIO from close", tc.path, err)
		}
		shown, _ := filepath.Glob(filepath.Join(mnt.Dir, ".pugmark", "failed", tc.kept))
		if len(shown) != 1 {
			t.Errorf(".pugmark/failed/%s: %v, want the one failed write", tc.kept, shown)
			continue
		}
		if b, err := os.ReadFile(shown[0]); err != nil || string(b) != tc.body {
			t.Errorf("%s holds %q, %v; want %q", shown[0], b, err, tc.body)
		}
	}
}

// TestReliabilityRefWriteOutcomeUnknown: a ref written through the mount
// whose PUT lands with its reply lost (a timeout) while the bucket then
// answers no read of the ref: the close cannot know, and says EIO, the
// body kept under .pugmark/failed/refs/; once the bucket answers again the
// mount finds the ref holding the write's target and removes the copy,
// and the ref reads as written. Before, the copy stayed for good beside a
// ref that held exactly what it says was not written.
func TestReliabilityRefWriteOutcomeUnknown(t *testing.T) {
	t.Parallel()
	bk := relLocalBucket(t)
	key, _ := layout.RefKey("myref")
	sw, on, off := relSwitchFile(t)
	fb := relWithFaults(bk, map[string]string{"fault_prefix": key, "fault_ops": "get,head", "fault_error_rate": "1",
		"fault_lost_put_rate": "1", "fault_error_code": "DeadlineExceeded", "fault_active_file": sw})
	mnt := mount(t, fb, "--cache-dir", t.TempDir())
	f, err := os.OpenFile(filepath.Join(mnt.Dir, "refs", "myref"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("objects/one\n"); err != nil {
		t.Fatal(err)
	}
	on()
	if err := f.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("close of a ref whose write's outcome is unknown: %v, want EIO", err)
	}
	kept := func() []string {
		shown, _ := filepath.Glob(filepath.Join(mnt.Dir, ".pugmark", "failed", "refs", "myref.*"))
		return shown
	}
	if shown := kept(); len(shown) != 1 {
		t.Fatalf(".pugmark/failed/refs holds %v, want the write kept while its outcome is unknown", shown)
	}
	off()
	relWait(t, 30*time.Second, "the copy of the ref write that landed removed", func() bool { return len(kept()) == 0 })
	if got, err := os.ReadFile(filepath.Join(mnt.Dir, "refs", "myref")); err != nil || string(got) != "objects/one\n" {
		t.Fatalf("refs/myref reads %q, %v; want objects/one", got, err)
	}
	if !strings.Contains(mnt.Log(), "landed after all") {
		t.Fatalf("the log does not say the write landed:\n%s", mnt.Log())
	}
}

// TestReliabilityStaleListings: two mounts whose listings are 2 s stale
// (fault_stale: keys PUT through a mount stay out of its own LISTs, and
// the other mount's versions show at once) write 20 files each into one
// session at the same time, and read their own writes back after the
// metadata TTL. No commit is lost or duplicated: the bucket ends with 40
// live names, each committed by exactly one descriptor, and fsck is clean
// (§7.3: no sequence gaps or duplicates).
//
// Removing the protection (committing at the listed latest version and
// treating precondition-failed as success, or trusting a stale LIST over
// the versions already read) loses a commit (a name missing), duplicates
// one, or makes a file written a second ago vanish from its own mount.
func TestReliabilityStaleListings(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	fb := relWithFaults(bk, map[string]string{"fault_stale": "2s"})
	a := mount(t, fb, "--metadata-ttl=100ms")
	b := mount(t, fb, "--metadata-ttl=100ms")
	sd := "sessions/" + id.String()
	errc := make(chan error, 2)
	for _, m := range []*Mount{a, b} {
		go func(m *Mount, tag string) {
			for i := 0; i < 20; i++ {
				name := fmt.Sprintf("%s-%02d.txt", tag, i)
				if _, e, err := run(m.Dir, "echo "+name+" > "+sd+"/"+name); err != nil {
					errc <- fmt.Errorf("write %s: %v %s", name, err, e)
					return
				}
				if i%5 == 4 {
					// Past the TTL, a stale LIST must not hide our own
					// write from us.
					time.Sleep(150 * time.Millisecond)
					got, err := os.ReadFile(filepath.Join(m.Dir, sd, name))
					if err != nil || string(got) != name+"\n" {
						errc <- fmt.Errorf("read back %s after the TTL on its own mount: %q, %v", name, got, err)
						return
					}
				}
			}
			errc <- nil
		}(m, filepath.Base(m.Dir))
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	v, err := bk.Store.LatestVersion(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	log, err := bk.Store.FullLog(ctx, id, v)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range log {
		count[e.Name]++
	}
	if len(count) != 40 {
		t.Errorf("%d names in the bucket, want 40: %v", len(count), count)
	}
	for n, c := range count {
		if c != 1 {
			t.Errorf("%s committed %d times", n, c)
		}
	}
	relFsckClean(t, bk)
	sa, sb := relReadStats(t, a), relReadStats(t, b)
	t.Logf("stale listings: hidden keys %d+%d, ghost keys %d+%d", sa.Hidden, sb.Hidden, sa.Ghosts, sb.Ghosts)
	if sa.Hidden+sb.Hidden == 0 {
		t.Error("no listing was stale: the test tested nothing")
	}
}

// TestReliabilityLostPutResponses: 40% of PUTs commit and then report an
// error (a response lost in transit, §13.2). Every close returns 0, every
// file is committed exactly once, the new session made by mkdir exists
// once, and fsck is clean: the transaction ID tells our own landed
// snapshot from a foreign one.
//
// Removing the protection (commitAt not reading back the transaction ID
// after an unknown outcome, or Commit treating its own snapshot at V+1 as
// foreign) makes the retry land a second copy at V+2 (a duplicate commit)
// or return an error for a write that landed.
func TestReliabilityLostPutResponses(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	fb := relWithFaults(bk, map[string]string{"fault_lost_put_rate": "0.4", "fault_seed": "3"})
	mnt := mount(t, fb)
	sd := "sessions/" + id.String()
	for i := 0; i < 25; i++ {
		body := strings.Repeat(fmt.Sprint(i), 1+i*100)
		os.WriteFile(filepath.Join(t.TempDir(), "x"), nil, 0o600)
		if err := os.WriteFile(filepath.Join(mnt.Dir, sd, fmt.Sprintf("f%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatalf("write f%02d: %v", i, err)
		}
	}
	fresh := layout.NewSessionID(time.Now())
	sh(t, mnt.Dir, "mkdir sessions/"+fresh.String()+" && echo in-new > sessions/"+fresh.String()+"/x")
	st := relReadStats(t, mnt)
	if st.Faults["put"].Lost == 0 {
		t.Fatalf("no PUT response was lost:\n%s", st.raw)
	}
	log, err := bk.Store.FullLog(context.Background(), id, 25)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 25 {
		t.Fatalf("%d descriptors for 25 writes", len(log))
	}
	if v, _ := bk.Store.LatestVersion(context.Background(), id); v != 25 {
		t.Fatalf("latest version %d after 25 single-file commits: a duplicate or missing snapshot", v)
	}
	if e, ok := relLiveSlots(t, bk, fresh)["x"]; !ok || string(e.Data) != "in-new\n" {
		t.Fatalf("new session's file: %+v %v", e, ok)
	}
	relFsckClean(t, bk)
	t.Logf("lost PUT responses: %d of %d PUTs, all resolved", st.Faults["put"].Lost, st.Faults["put"].Requests)
}

// TestReliabilityStallIsolation: every request on session A's keys hangs
// (fault_stall_prefix); reading, listing and writing session B still
// complete in bounded time, and A's reader finishes once the stall ends.
//
// Removing the protection (one lock around all session loads, or a
// global lock held across backend I/O, consistency.md §3) makes the B
// operations wait for A's stall: they exceed their 10 s deadline.
func TestReliabilityStallIsolation(t *testing.T) {
	bk := relLocalBucket(t)
	a, b := relSession(t, bk), relSession(t, bk)
	fa := relSeedFiles(t, bk, a, 4, 4)
	fbFiles := relSeedFiles(t, bk, b, 4, 5)
	dirA, _ := layout.SessionDir(a)
	sw, on, off := relSwitchFile(t)
	fb := relWithFaults(bk, map[string]string{"fault_stall_prefix": dirA, "fault_stall": "2m", "fault_active_file": sw})
	mnt := mount(t, fb, "--metadata-ttl=0")
	on()
	defer off()
	type res struct {
		out string
		err error
	}
	stalled := make(chan res, 1)
	go func() {
		// Not yet loaded: the load of A hangs in the stall.
		out, e, err := run(mnt.Dir, "cat sessions/"+a.String()+"/d0/f00.txt")
		if err != nil {
			err = fmt.Errorf("%v: %s", err, e)
		}
		stalled <- res{out, err}
	}()
	relWait(t, 10*time.Second, "A's request reached the stall", func() bool {
		return relReadStats(t, mnt).Faults["list"].Delayed+relReadStats(t, mnt).Faults["get"].Delayed+relReadStats(t, mnt).Faults["head"].Delayed > 0
	})
	start := time.Now()
	sdB := "sessions/" + b.String()
	if _, e, err := relRunWithin(10*time.Second, mnt.Dir, "ls -l "+sdB+" >/dev/null && cat "+sdB+"/d1/f01.txt >/dev/null && echo b-write > "+sdB+"/new.txt && ls sessions >/dev/null"); err != nil {
		t.Fatalf("session B while A stalls: %v %s", err, e)
	}
	relCheckReads(t, mnt, b, fbFiles)
	t.Logf("session B served in %v while A stalled", time.Since(start))
	select {
	case r := <-stalled:
		t.Fatalf("A's read finished during the stall: %+v", r)
	default:
	}
	off()
	select {
	case r := <-stalled:
		if r.err != nil || r.out != fa["d0/f00.txt"] {
			t.Fatalf("A's read after the stall: %q, %v", r.out, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("A's read did not finish after the stall ended")
	}
	if !relAlive(mnt) {
		t.Fatal("mount died")
	}
}
