package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/layout"
	_ "github.com/pugmark/pugfs/layout/drivers" // the local driver's If-Match
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/layout/localblob"
)

// TestRefWriteAfterAnUnknownOutcome: a descriptor of refs/x whose fsync
// was EIO with the outcome unknown (its PUT cut by a deadline), and whose
// PUT the server then completed, is written again and closed: the second
// write replaces the first, as on a local disk. The handle swapped
// against the value it read at the open, its own landed write counted as
// another writer's change: ESTALE, the new value in failed/refs/ (review
// 43). The next write now asks whether the unknown one landed first.
func TestRefWriteAfterAnUnknownOutcome(t *testing.T) {
	for _, backend := range []string{"if-match", "no-if-match"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var inner *blob.Bucket
			if backend == "if-match" {
				var err error
				if inner, err = localblob.OpenBucket(t.TempDir(), nil); err != nil {
					t.Fatal(err)
				}
			} else {
				inner = memblob.OpenBucket(nil)
			}
			plain := layout.New(inner, nil)
			inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
			store := layout.New(faultblob.Wrap(inner, inj), &layout.Options{Retries: -1, RetryBase: time.Millisecond})
			if err := plain.Link(ctx, "x", "objects/one"); err != nil {
				t.Fatal(err)
			}
			mnt := testMount(t, store, nil)
			f, err := os.OpenFile(filepath.Join(mnt, "refs", "x"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rewrite := func(body string) {
				t.Helper()
				if err := f.Truncate(0); err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte(body), 0); err != nil {
					t.Fatal(err)
				}
			}
			rewrite("objects/two\n")
			// The PUT is cut by its deadline before it reaches the
			// bucket: the read back finds the old value, and the PUT may
			// still be completed by the server.
			inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`^refs/x$`)},
				FailFirst: 1, Err: faultblob.TransientError(gcerrors.DeadlineExceeded)})
			if err := f.Sync(); !errors.Is(err, syscall.EIO) {
				t.Fatalf("fsync with the PUT cut by its deadline: %v, want EIO (outcome unknown)", err)
			}
			// The server completes the PUT: the write landed.
			if err := plain.Link(ctx, "x", "objects/two"); err != nil {
				t.Fatal(err)
			}
			// The program writes the ref again through the same
			// descriptor, and closes it.
			rewrite("objects/three\n")
			err = f.Close()
			got := refTargets(t, plain, "x")["x"]
			if err != nil || got != "objects/three" {
				t.Fatalf("close after a second write through the descriptor whose first write landed late: %v; refs/x = %q, want 0 and objects/three (no other writer touched the ref)", err, got)
			}
			// The first write landed: its copy goes (review 44: the
			// background check then found the second write there, and
			// kept the copy of the first as never written).
			if kept, _ := filepath.Glob(filepath.Join(mnt, ".pugmark", "failed", "refs", "*")); len(kept) != 0 {
				t.Fatalf("copies of landed ref writes kept: %v", kept)
			}
		})
	}
}

// TestRefOpenRacingARename: open(O_RDWR) of refs/a while mv refs/a
// refs/b runs: the descriptor's write goes to b, swapping against the
// value moved there. The open read a's value and registered the
// descriptor with nothing a rename waits for, so a rename between the two
// did not move the value to the new name, and the close was ESTALE
// though nobody else had changed anything (review 43).
func TestRefOpenRacingARename(t *testing.T) {
	ctx := context.Background()
	inner, err := localblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := layout.New(inner, nil)
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(inner, inj), nil)
	if err := plain.Link(ctx, "a", "objects/one"); err != nil {
		t.Fatal(err)
	}
	mnt := testMount(t, store, nil)
	// A descriptor of a's inode that needs no lookup to open again.
	ro, err := os.Open(filepath.Join(mnt, "refs", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	gate, op := openStalled(t, inj, faultblob.Rule{Ops: faultblob.OpHead, Match: faultblob.Match{Regexp: regexp.MustCompile(`^refs/a$`)}}, ro, "refFile).Open")
	// The rename waits for the open to register its descriptor (or,
	// before, went on at once).
	if err := renameAcrossOpen(t, "refsNode).holdCommits", gate, func() error { return renameRef(mnt, "a", "b", 0) }); err != nil {
		t.Fatalf("rename a b: %v", err)
	}
	o := <-op
	if o.err != nil {
		t.Fatalf("open: %v", o.err)
	}
	if _, err := o.f.WriteAt([]byte("objects/two\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := o.f.Truncate(int64(len("objects/two\n"))); err != nil {
		t.Fatal(err)
	}
	err = o.f.Close()
	got := refTargets(t, plain, "a", "b")
	if err != nil || got["b"] != "objects/two" {
		t.Fatalf("write through a descriptor opened while the ref was renamed: close %v, refs %v; want 0 and b = objects/two", err, got)
	}
}

func stalledIn(fn string) bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "faultblob") {
			return true
		}
	}
	return false
}

// renameAcrossOpen runs rename while an open is stalled on gate: it
// waits until rename has ended or waits in hold (a function of the
// rename, blockedIn), then releases the open, and returns rename's
// error once it has ended.
func renameAcrossOpen(t *testing.T, hold string, gate *faultblob.Gate, rename func() error) error {
	t.Helper()
	renamed := make(chan error, 1)
	go func() { renamed <- rename() }()
	deadline := time.Now().Add(10 * time.Second)
	for !blockedIn(hold) {
		select {
		case err := <-renamed:
			gate.Release()
			return err
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the rename neither ended nor waited for the open")
		}
	}
	gate.Release()
	return <-renamed
}

// opened is what an open of openStalled gave.
type opened struct {
	f   *os.File
	err error
}

// openStalled opens ro's file again for writing (by its descriptor: no
// lookup) in a goroutine whose first request matching rule stalls on the
// gate it returns, and waits until it does, in fn (the node's Open); it
// skips the test when the stalled request is another (the kernel sent
// one first).
func openStalled(t *testing.T, inj *faultblob.Injector, rule faultblob.Rule, ro *os.File, fn string) (*faultblob.Gate, chan opened) {
	t.Helper()
	gate := faultblob.NewGate()
	t.Cleanup(gate.Release)
	var armed atomic.Bool
	armed.Store(true)
	rule.Stall, rule.While = gate, func() bool { return armed.CompareAndSwap(true, false) }
	inj.Add(rule)
	op := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", ro.Fd()), os.O_RDWR, 0)
		op <- opened{f, err}
	}()
	waitStalled(t, gate, 1)
	if !stalledIn(fn) {
		t.Skip("the stalled request is not the open's (the kernel sent another first); cannot order the race")
	}
	return gate, op
}
