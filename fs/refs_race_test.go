package fs

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"
	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// waitingIn reports whether a goroutine in fn waits for a lock.
func waitingIn(fn string) bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "RWMutex).Lock") {
			return true
		}
	}
	return false
}

// TestRefRmRacingItsCreate: rm refs/new while the close that creates it
// is writing it, on the same mount. The removal waits for that write and
// removes what it wrote: it answered 0 at once (the bucket had no ref
// yet, and the open descriptor made that "created here, not written"),
// and the write landed after it (review 40).
func TestRefRmRacingItsCreate(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
	mnt := testMount(t, store, nil)
	gate := faultblob.NewGate()
	rule := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: "refs/"}, Stall: gate})
	wr := exec.Command("bash", "-c", "cd '"+mnt+"' && echo objects/target > refs/new")
	if err := wr.Start(); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, gate, 1) // the create's close is writing the ref
	rm := exec.Command("bash", "-c", "cd '"+mnt+"' && rm refs/new")
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	rmDone := make(chan error, 1)
	go func() { rmDone <- rm.Wait() }()
	// The rm waits for the write, or (the bug) answers before it.
	var rmErr error
	answered := false
	for deadline := time.Now().Add(20 * time.Second); !answered && !waitingIn("refsNode).Unlink"); time.Sleep(5 * time.Millisecond) {
		select {
		case rmErr = <-rmDone:
			answered = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("rm neither waits for the write nor answers")
		}
	}
	inj.Remove(rule)
	gate.Release()
	wrErr := wr.Wait()
	if !answered {
		rmErr = <-rmDone
	}
	if rmErr != nil {
		t.Fatalf("rm: %v", rmErr)
	}
	if r, err := store.ReadRef(context.Background(), "new"); err == nil {
		t.Fatalf("rm refs/new returned 0 (the create's close: %v), yet the bucket holds refs/new -> %q", wrErr, r.Target)
	}
}

// blockedIn reports whether a goroutine in fn is blocked on a lock: a
// name change waiting for a write in flight (the fix), or one that went
// ahead and waits for that write's handle afterwards (the bug). Either
// way it cannot go further until the write does.
func blockedIn(fn string) bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, fn) && (strings.Contains(header, "[sync.Mutex.Lock") || strings.Contains(header, "[sync.RWMutex.Lock")) {
			return true
		}
	}
	return false
}

// refTargets returns the targets of refs names in the bucket, "" for
// one that is not there.
func refTargets(t *testing.T, store *layout.Store, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range names {
		r, err := store.ReadRef(context.Background(), name)
		switch {
		case err == nil:
			out[name] = r.Target
		case errors.Is(err, layout.ErrNotFound):
			out[name] = ""
		default:
			t.Fatal(err)
		}
	}
	return out
}

// renameRef renames refs/from to refs/to in mount mnt with renameat2(2)
// flags (0: rename(2)), in this process, as a descriptor flush has to
// be for the older-node test below.
func renameRef(mnt, from, to string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, filepath.Join(mnt, "refs", from), unix.AT_FDCWD, filepath.Join(mnt, "refs", to), flags)
}

// settleAgainst runs change while a write is held at gate: until change
// is blocked in fn (waiting for the write, or for its handle once done
// with the bucket) or has answered. It then lets the write through, and
// returns the write's result (wait) and change's.
func settleAgainst(t *testing.T, gate *faultblob.Gate, wait, change func() error, fn string) (writeErr, changeErr error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- change() }()
	answered := false
	for deadline := time.Now().Add(20 * time.Second); !answered && !blockedIn(fn); time.Sleep(5 * time.Millisecond) {
		select {
		case changeErr = <-done:
			answered = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the name change neither waits nor answers")
		}
	}
	gate.Release()
	writeErr = wait()
	if !answered {
		changeErr = <-done
	}
	return writeErr, changeErr
}

// TestRefRenameRacingAWrite: rename(2) or renameat2(RENAME_NOREPLACE)
// of refs/a to refs/b while the close of a descriptor writing a (the
// source) or b (the ref it replaces) is writing it, on the same mount.
// The rename waits for that write, and the outcome is that of one order
// of the two, the close answering 0 in either. Before, the rename went
// ahead of the write, which then landed on names the rename had settled:
// it returned 0 and a came back holding the write, b the old value (the
// write was aimed at the old name); a rename of a ref created and not
// written yet found nothing in the bucket and moved the open file alone,
// and its write made a, b never made; b held the write to the ref it
// had replaced, the moved value nowhere; and the write creating the ref
// renamed over found b made and failed ESTALE, its bytes in failed/.
func TestRefRenameRacingAWrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   string // before the write
		write   string // the ref written, its close stalled while writing it
		body    string
		flags   uint
		wantErr error
		want    map[string]string // the bucket's refs after both
	}{
		{"away", "echo objects/one > refs/a", "a", "objects/two\n", 0, nil,
			map[string]string{"a": "", "b": "objects/two"}},
		{"away noreplace", "echo objects/one > refs/a", "a", "objects/two\n", unix.RENAME_NOREPLACE, nil,
			map[string]string{"a": "", "b": "objects/two"}},
		{"away while created", "true", "a", "objects/two\n", 0, nil,
			map[string]string{"a": "", "b": "objects/two"}},
		{"away while created noreplace", "true", "a", "objects/two\n", unix.RENAME_NOREPLACE, nil,
			map[string]string{"a": "", "b": "objects/two"}},
		{"over", "echo objects/one > refs/a && echo objects/old > refs/b", "b", "objects/new\n", 0, nil,
			map[string]string{"a": "", "b": "objects/one"}},
		{"over while created", "echo objects/one > refs/a", "b", "objects/new\n", 0, nil,
			map[string]string{"a": "", "b": "objects/one"}},
		// The kernel answers this one (b's entry is there): a guard.
		{"onto while created noreplace", "echo objects/one > refs/a", "b", "objects/new\n", unix.RENAME_NOREPLACE, syscall.EEXIST,
			map[string]string{"a": "objects/one", "b": "objects/new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := faultblob.NewInjector(faultblob.Options{})
			store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
			mnt := testMount(t, store, nil)
			sh(t, mnt, tc.setup)
			gate := faultblob.NewGate()
			rule := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`^refs/` + tc.write + `$`)}, Stall: gate})
			// In this process, for close(2)'s result (a shell's
			// redirection drops it).
			written := make(chan error, 1)
			go func() { written <- os.WriteFile(filepath.Join(mnt, "refs", tc.write), []byte(tc.body), 0o644) }()
			waitStalled(t, gate, 1) // the close is writing the ref
			inj.Remove(rule)        // the rename's own writes go through
			writeErr, err := settleAgainst(t, gate, func() error { return <-written }, func() error { return renameRef(mnt, "a", "b", tc.flags) }, "refsNode).Rename")
			if writeErr != nil {
				t.Errorf("write refs/%s: %v", tc.write, writeErr)
			}
			if !errors.Is(err, tc.wantErr) && err != tc.wantErr {
				t.Errorf("rename a b (flags %d): %v, want %v", tc.flags, err, tc.wantErr)
			}
			if got := refTargets(t, store, "a", "b"); !maps.Equal(got, tc.want) {
				t.Errorf("rename a b (flags %d): %v; the bucket holds %v, want %v", tc.flags, err, got, tc.want)
			}
		})
	}
}

// TestRefNameChangeRacingAWriteOnAnOlderNode: rm or rename(2) of refs/a
// while the flush of a descriptor open on it since before it took its
// name is writing it. The descriptor is on the node the rename of c to a
// moved (its number c's), and a's next lookup (the name change's own, at
// a TTL of 0) gets a node of its own, of a's number. Before, the name
// change held the commits of that new node alone, and the write landed
// after it: a came back after rm or the rename returned 0, and the
// rename moved the new node alone, the descriptor still writing a.
func TestRefNameChangeRacingAWriteOnAnOlderNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(mnt string) error
		fn     string
		want   map[string]string
	}{
		{"rm", func(mnt string) error { return syscall.Unlink(filepath.Join(mnt, "refs/a")) }, "refsNode).Unlink",
			map[string]string{"a": "", "b": "", "c": ""}},
		{"rename", func(mnt string) error { return renameRef(mnt, "a", "b", 0) }, "refsNode).Rename",
			map[string]string{"a": "", "b": "objects/two", "c": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := faultblob.NewInjector(faultblob.Options{})
			store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
			mnt := testMount(t, store, nil)
			sh(t, mnt, "echo objects/one > refs/c")
			f, err := os.OpenFile(filepath.Join(mnt, "refs/c"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := renameRef(mnt, "c", "a", 0); err != nil {
				t.Fatal(err)
			}
			var open, named syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &open); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Stat(filepath.Join(mnt, "refs/a"), &named); err != nil {
				t.Fatal(err)
			}
			if open.Ino == named.Ino {
				t.Fatalf("refs/a is still the node the descriptor is on (%d): no older node to test", open.Ino)
			}
			if _, err := f.WriteAt([]byte("objects/two\n"), 0); err != nil {
				t.Fatal(err)
			}
			gate := faultblob.NewGate()
			rule := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`^refs/a$`)}, Stall: gate})
			flushed := make(chan error, 1)
			go func() {
				d, err := syscall.Dup(int(f.Fd()))
				if err == nil {
					err = syscall.Close(d) // FLUSH: the ref is written
				}
				flushed <- err
			}()
			waitStalled(t, gate, 1)
			inj.Remove(rule)
			flushErr, changeErr := settleAgainst(t, gate, func() error { return <-flushed }, func() error { return tc.change(mnt) }, tc.fn)
			if flushErr != nil {
				t.Errorf("flush: %v", flushErr)
			}
			if changeErr != nil {
				t.Fatalf("%s: %v", tc.name, changeErr)
			}
			if got := refTargets(t, store, "a", "b", "c"); !maps.Equal(got, tc.want) {
				t.Errorf("%s returned 0; the bucket holds %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
