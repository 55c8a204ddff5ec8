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

// TestMoveRefFailure: `mv refs/a refs/b`, while another writer keeps
// changing a (once between each attempt's copy to b and its
// compare-and-delete of a), gives up after refMoveAttempts and puts b
// back as it was: the failed rename(2) left b holding a copy of a's
// value, or a ref b that did not exist (review 30).
func TestMoveRefFailure(t *testing.T) {
	const idA, idB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	for _, bExists := range []bool{true, false} {
		t.Run(fmt.Sprintf("b exists %v", bExists), func(t *testing.T) {
			ctx := context.Background()
			inner := memblob.OpenBucket(nil)
			inj := faultblob.NewInjector(faultblob.Options{})
			store := layout.New(faultblob.Wrap(inner, inj), nil)
			other := layout.New(inner, nil)
			if err := other.Link(ctx, "a", idA); err != nil {
				t.Fatal(err)
			}
			if bExists {
				if err := other.Link(ctx, "b", idB); err != nil {
					t.Fatal(err)
				}
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
			if err == nil {
				t.Fatalf("mv succeeded while a changed at every attempt: %s", out)
			}
			b, rerr := other.ReadRef(ctx, "b")
			switch {
			case bExists && (rerr != nil || b.Target != idB):
				t.Fatalf("mv failed (%v: %s) after %d copies, and left refs/b = %q, %v (was %s)", err, strings.TrimSpace(out), n.Load(), b.Target, rerr, idB)
			case !bExists && rerr == nil:
				t.Fatalf("mv failed (%v: %s), and left a new ref refs/b = %s beside refs/a", err, strings.TrimSpace(out), b.Target)
			}
		})
	}
}

// runSh is sh without failing the test.
func runSh(dir, script string) (string, error) {
	cmd := exec.Command("bash", "-c", "cd '"+dir+"' && "+script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
