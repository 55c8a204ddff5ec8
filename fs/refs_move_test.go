package fs

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob/memblob"
)

// TestMoveRefFailureKeepsTarget: `mv refs/a refs/b` over an existing
// ref b, while another writer keeps changing a (once between each
// attempt's copy to b and its compare-and-delete of a), gives up after
// refMoveAttempts and puts b back as it was: the failed rename(2) left b
// holding a copy of a's value (review 30).
func TestMoveRefFailureKeepsTarget(t *testing.T) {
	ctx := context.Background()
	inner := memblob.OpenBucket(nil)
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(inner, inj), nil)
	other := layout.New(inner, nil)
	const idA, idB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	if err := other.Link(ctx, "a", idA); err != nil {
		t.Fatal(err)
	}
	if err := other.Link(ctx, "b", idB); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`^refs/b$`)},
		While: func() bool {
			// Another mount sets a while this one copies it to b.
			i := n.Add(1)
			if err := other.Link(context.Background(), "a", fmt.Sprintf("%032x", i)); err != nil {
				t.Error(err)
			}
			return false
		}})
	mnt := testMount(t, store, nil)
	out, err := runSh(mnt, "mv -T refs/a refs/b")
	b, rerr := other.ReadRef(ctx, "b")
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil && b.Target != idB {
		t.Fatalf("mv failed (%v: %s) after %d copies, and left refs/b = %s (was %s): the failed rename destroyed its target", err, strings.TrimSpace(out), n.Load(), b.Target, idB)
	}
	t.Logf("mv: %v %s; b=%s", err, out, b.Target)
}

// runSh is sh without failing the test.
func runSh(dir, script string) (string, error) {
	cmd := exec.Command("bash", "-c", "cd '"+dir+"' && "+script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMoveRefFailureLeavesNoNewRef: as TestMoveRefFailureKeepsTarget
// with the new name absent (GNU mv's first try is RENAME_NOREPLACE): the
// failed rename left a ref b that did not exist, a copy of a value a
// held once (review 30).
func TestMoveRefFailureLeavesNoNewRef(t *testing.T) {
	ctx := context.Background()
	inner := memblob.OpenBucket(nil)
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(inner, inj), nil)
	other := layout.New(inner, nil)
	const idA = "0123456789abcdef0123456789abcdef"
	if err := other.Link(ctx, "a", idA); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`^refs/b$`)},
		While: func() bool {
			i := n.Add(1)
			if err := other.Link(context.Background(), "a", fmt.Sprintf("%032x", i)); err != nil {
				t.Error(err)
			}
			return false
		}})
	mnt := testMount(t, store, nil)
	out, err := runSh(mnt, "mv -T refs/a refs/b")
	b, rerr := other.ReadRef(ctx, "b")
	if err != nil && rerr == nil {
		t.Fatalf("mv failed (%v: %s), and left a new ref refs/b = %s beside refs/a", err, strings.TrimSpace(out), b.Target)
	}
	t.Logf("mv: %v %s; b=%v %v", err, out, b.Target, rerr)
}
