package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// cloudKinds are the emulated clouds the end-to-end cloud tests mount
// (S3 and local run the whole suite through eachBucket).
var cloudKinds = []testbucket.Kind{testbucket.GCS, testbucket.Azure}

func eachCloud(t *testing.T, fn func(t *testing.T, bk *Bucket)) {
	t.Parallel()
	for _, k := range cloudKinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			fn(t, openBucket(t, k))
		})
	}
}

// TestCloudTwoMountsOneSession: two mounts of one GCS (or Azure) bucket
// write files into one session at the same time. Their commits race for
// the same snapshot keys, which only the backend's conditional create
// settles; every close that returned success must be in the session
// after a remount, with its content, and fsck must find the bucket clean.
func TestCloudTwoMountsOneSession(t *testing.T) {
	eachCloud(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		mounts := []*Mount{mount(t, bk, "--metadata-ttl", "0"), mount(t, bk, "--metadata-ttl", "0")}
		const perMount = 12
		type ack struct{ name, content string }
		acks := make(chan ack, 2*perMount)
		errs := make(chan error, 2*perMount)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for mi, m := range mounts {
			for i := range perMount {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					name := fmt.Sprintf("m%d-f%02d.txt", mi, i)
					content := fmt.Sprintf("mount %d file %d\n", mi, i)
					if err := writeFile(filepath.Join(sessDir(m, id), name), []byte(content), createFlags); err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
						return
					}
					acks <- ack{name, content}
				}()
			}
		}
		close(start)
		wg.Wait()
		close(acks)
		close(errs)
		for err := range errs {
			t.Errorf("close failed: %v", err)
		}
		for _, m := range mounts {
			m.Stop(t)
			if log := m.Log(); strings.Contains(log, "panic") {
				t.Fatalf("mount log has a panic:\n%s", log)
			}
		}
		fresh := mount(t, bk, "--read-only")
		n := 0
		for a := range acks {
			n++
			got, err := os.ReadFile(filepath.Join(sessDir(fresh, id), a.name))
			if err != nil || string(got) != a.content {
				t.Errorf("acknowledged %s after a remount: %q, %v; want %q", a.name, got, err, a.content)
			}
		}
		if n == 0 {
			t.Fatal("no close was acknowledged")
		}
		t.Logf("%d acknowledged closes, %d snapshots", n, latest(t, bk, id))
		checkBucket(t, bk)
	})
}

// TestCloudRefCompareAndSwap: a ref written twice through a mount is a
// real compare-and-swap on GCS and Azure (no fallback warning in the
// log), and of two mounts that opened the ref, the second to close gets
// ESTALE and the first's target stays.
func TestCloudRefCompareAndSwap(t *testing.T) {
	eachCloud(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		m := mount(t, bk, "--metadata-ttl", "0")
		shE(t, m.Dir, `echo first > refs/r`)
		shE(t, m.Dir, `echo second > refs/r`)
		shE(t, m.Dir, `echo third > refs/r`)
		if r, err := bk.Store.ReadRef(ctx, "r"); err != nil || r.Target != "third" {
			t.Fatalf("ref r = %+v, %v; want third", r, err)
		}

		if err := bk.Store.Link(ctx, "race", "start"); err != nil {
			t.Fatal(err)
		}
		other := mount(t, bk, "--metadata-ttl", "0")
		fa, err := os.OpenFile(filepath.Join(m.Dir, "refs", "race"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := os.OpenFile(filepath.Join(other.Dir, "refs", "race"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Closed before the mounts stop even when the test fails early: an
		// open file keeps a mount busy.
		t.Cleanup(func() { fa.Close(); fb.Close() })
		// fb is written only after fa's close: a child another test
		// forks holds a copy of fb until its exec, and that copy's close
		// is a FLUSH that commits what fb holds by then. Writing fb later
		// keeps the order of the commits the test's own; both opens
		// still come before the first commit.
		fa.Write([]byte("from-a\n"))
		if err := fa.Close(); err != nil {
			t.Fatalf("first close: %v", err)
		}
		fb.Write([]byte("from-b\n"))
		if err := fb.Close(); errnoOf(err) != syscall.ESTALE {
			t.Fatalf("second close = %v, want ESTALE", err)
		}
		if r, err := bk.Store.ReadRef(ctx, "race"); err != nil || r.Target != "from-a" {
			t.Fatalf("ref race = %+v, %v; want from-a", r, err)
		}
		for _, mm := range []*Mount{m, other} {
			if log := mm.Log(); strings.Contains(log, "without compare-and-swap") {
				t.Fatalf("a ref write fell back to a weak swap:\n%s", log)
			}
		}
		checkBucket(t, bk)
	})
}

// TestCloudExec: pugfs exec on GCS and Azure, by name: a handler's
// changes land as one checkpoint; of two runs at once, one lands and the
// other exits 75 with its outputs kept (the checkpoint's conditional
// create is the backend's); a send is delivered to its target; the
// bucket is clean for fsck.
func TestCloudExec(t *testing.T) {
	eachCloud(t, func(t *testing.T, bk *Bucket) {
		id := namedSession(t, bk, "inbox")
		target := newSession(t, bk)
		_, errOut, code := runExec(t, bk, t.TempDir(), "inbox", "sh", "-c",
			"echo one > a.txt && mkdir -p .pugmark/send/"+target.String()+" && echo hi > .pugmark/send/"+target.String()+"/note.txt")
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		wantOneCheckpoint(t, bk, id, 0)
		wantSlots(t, bk, target, map[string]string{"note.txt": "hi\n"})

		g := newGate(t)
		caches := []string{t.TempDir(), t.TempDir()}
		var runs []*execRun
		for i := range 2 {
			runs = append(runs, startExec(t, bk, caches[i], "inbox", "sh", "-c",
				fmt.Sprintf("echo run%d >> a.txt; ", i)+g.wait("x")))
		}
		g.ready(t, 2, runs...)
		g.open(t)
		codes := []int{runs[0].wait(t), runs[1].wait(t)}
		winner := slices.Index(codes, 0)
		loser := slices.Index(codes, 75)
		if winner < 0 || loser < 0 {
			t.Fatalf("exit statuses %v, want one 0 and one 75\n%s\n%s", codes, runs[0].stderr.String(), runs[1].stderr.String())
		}
		if len(execFailed(caches[loser], id)) == 0 {
			t.Errorf("the losing run kept nothing: %s", runs[loser].stderr.String())
		}
		wantOneCheckpoint(t, bk, id, 1)
		wantSlots(t, bk, id, map[string]string{"a.txt": fmt.Sprintf("one\nrun%d\n", winner)})
		checkBucket(t, bk)
	})
}

// TestCloudGzipStored: a body stored gzip with Content-Encoding: gzip
// (§15 asks for the header) reads through a GCS mount decoded, and its
// raw bytes under objects/; GCS decompresses such an object on the way
// out unless asked for the stored bytes, which then never matched the
// blob's digest: every read was EIO and fsck called the blob corrupt.
func TestCloudGzipStored(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.GCS)
	ctx := context.Background()
	id := newSession(t, bk)
	raw := make([]byte, 10000)
	rand.NewChaCha8([32]byte{1}).Read(raw)
	text := hex.EncodeToString(raw) + "\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(text))
	zw.Close()
	d, err := bk.Store.PutBody(ctx, "report.csv", gz.Bytes(), layout.BlobOptions{ContentType: "text/csv", ContentEncoding: "gzip"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Data != nil {
		t.Fatal("the body is inline: the test would not read the blob")
	}
	if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
	m := mount(t, bk, "--read-only")
	got, err := os.ReadFile(filepath.Join(sessDir(m, id), "report.csv"))
	if err != nil || string(got) != text {
		t.Fatalf("report.csv: %d bytes, %v; want the %d decoded bytes\n%s", len(got), err, len(text), m.Log())
	}
	stored, err := os.ReadFile(filepath.Join(m.Dir, "objects", d.Digest.String()))
	if err != nil || !bytes.Equal(stored, gz.Bytes()) {
		t.Fatalf("objects/%s: %d bytes, %v; want the %d stored bytes", d.Digest, len(stored), err, gz.Len())
	}
	checkBucket(t, bk)
}
