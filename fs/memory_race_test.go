package fs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// recordOf returns record name of namespace ns as the bucket holds it.
func recordOf(t *testing.T, store *layout.Store, ns, name string) (layout.Descriptor, bool) {
	t.Helper()
	ctx := context.Background()
	v, err := store.LatestMemoryVersion(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if v == 0 {
		return layout.Descriptor{}, false
	}
	recs, err := store.ReadMemory(ctx, ns, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range recs {
		if d.Name == name {
			return d, true
		}
	}
	return layout.Descriptor{}, false
}

// waitingForCommits reports whether a goroutine waits for a record's
// commits in flight (memDirNode.holdCommits).
func waitingForCommits() bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "holdCommits") && strings.Contains(g, "RWMutex).Lock") {
			return true
		}
	}
	return false
}

// TestMemoryNameChangeRacingACommit: rm or mv of a record while the
// close of a descriptor on it (or on the record renamed over) is
// committing, on the same mount. The name change waits for that commit
// and drops what the descriptors hold after it. It landed first, and the
// commit after it: rm returned 0 and the record came back holding the
// append; mv a b returned 0 and b held the rewrite, a's bytes nowhere
// (review 40).
func TestMemoryNameChangeRacingACommit(t *testing.T) {
	for _, tc := range []struct {
		name, setup, write, change string
		check                      func(t *testing.T, store *layout.Store)
	}{
		{"rm", "echo a > memories/ns/log", "echo x >> memories/ns/log", "rm memories/ns/log",
			func(t *testing.T, store *layout.Store) {
				if d, ok := recordOf(t, store, "ns", "log"); ok {
					t.Errorf("rm returned 0, yet the record is in the bucket holding %q", d.Data)
				}
			}},
		{"mv over", "echo moved > memories/ns/a && echo old > memories/ns/b", "echo new > memories/ns/b", "mv memories/ns/a memories/ns/b",
			func(t *testing.T, store *layout.Store) {
				b, _ := recordOf(t, store, "ns", "b")
				if _, ok := recordOf(t, store, "ns", "a"); ok || string(b.Data) != "moved\n" {
					t.Errorf("mv a b returned 0; a left: %v, b holds %q, want a's bytes", ok, b.Data)
				}
			}},
		{"mv away", "echo moved > memories/ns/a", "echo x >> memories/ns/a", "mv memories/ns/a memories/ns/b",
			func(t *testing.T, store *layout.Store) {
				b, _ := recordOf(t, store, "ns", "b")
				if d, ok := recordOf(t, store, "ns", "a"); ok || string(b.Data) != "moved\nx\n" {
					t.Errorf("mv a b returned 0; a left: %v (%q), b holds %q, want the appended bytes moved", ok, d.Data, b.Data)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := faultblob.NewInjector(faultblob.Options{})
			store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
			mnt := testMount(t, store, nil)
			sh(t, mnt, "mkdir -p memories/ns && "+tc.setup)
			v0, err := store.LatestMemoryVersion(context.Background(), "ns")
			if err != nil {
				t.Fatal(err)
			}
			gate := faultblob.NewGate()
			rule := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: "objects/"}, Stall: gate})
			write := exec.Command("bash", "-c", "cd '"+mnt+"' && "+tc.write)
			if err := write.Start(); err != nil {
				t.Fatal(err)
			}
			waitStalled(t, gate, 1) // the close is committing
			change := exec.Command("bash", "-c", "cd '"+mnt+"' && "+tc.change)
			if err := change.Start(); err != nil {
				t.Fatal(err)
			}
			// The change waits for the commit, or (the bug) lands before it.
			for deadline := time.Now().Add(20 * time.Second); !waitingForCommits(); time.Sleep(5 * time.Millisecond) {
				if v, _ := store.LatestMemoryVersion(context.Background(), "ns"); v > v0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the name change neither waits nor lands")
				}
			}
			inj.Remove(rule)
			gate.Release()
			if err := write.Wait(); err != nil {
				t.Fatalf("%s: %v", tc.write, err)
			}
			if err := change.Wait(); err != nil {
				t.Fatalf("%s: %v", tc.change, err)
			}
			tc.check(t, store)
		})
	}
}

// TestMemoryRmRacingACommitOnAnOlderNode: rm of a record while the
// close of a descriptor on it is committing, where the kernel looked the
// name up again since that descriptor's open (its first commit gave the
// record a new digest, and so a new node number). rm waits for that
// commit too: it held the new node's commits only, found by name, and
// the record came back after rm returned 0 (review 42).
func TestMemoryRmRacingACommitOnAnOlderNode(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
	mnt := testMount(t, store, nil)
	sh(t, mnt, "mkdir -p memories/ns && echo a > memories/ns/log")
	path := filepath.Join(mnt, "memories/ns/log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flush := func() error {
		d, err := syscall.Dup(int(f.Fd()))
		if err != nil {
			return err
		}
		return syscall.Close(d) // FLUSH: the record is committed
	}
	if _, err := f.WriteString("one\n"); err != nil {
		t.Fatal(err)
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	// (No explicit stat needed: rm's own path lookup, at a TTL of 0,
	// replaces the name's node with one of the new digest's number.)
	if _, err := f.WriteString("two\n"); err != nil {
		t.Fatal(err)
	}
	v0, err := store.LatestMemoryVersion(context.Background(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	gate := faultblob.NewGate()
	rule := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: "objects/"}, Stall: gate})
	flushed := make(chan error, 1)
	go func() { flushed <- flush() }()
	waitStalled(t, gate, 1) // the close is committing
	// In this process: a fork would close the descriptor at its exec
	// (a FLUSH of its own, waiting behind the stalled one).
	rmDone := make(chan error, 1)
	go func() { rmDone <- syscall.Unlink(path) }()
	for deadline := time.Now().Add(20 * time.Second); !waitingForCommits(); time.Sleep(5 * time.Millisecond) {
		if v, _ := store.LatestMemoryVersion(context.Background(), "ns"); v > v0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rm neither waits nor lands")
		}
	}
	inj.Remove(rule)
	gate.Release()
	if err := <-flushed; err != nil {
		t.Logf("close: %v", err)
	}
	if err := <-rmDone; err != nil {
		t.Fatalf("rm: %v", err)
	}
	if d, ok := recordOf(t, store, "ns", "log"); ok {
		t.Errorf("rm returned 0, yet the record is in the bucket holding %q", d.Data)
	}
}
