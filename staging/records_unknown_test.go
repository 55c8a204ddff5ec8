package staging

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
	_ "github.com/pugmark/pugfs/layout/drivers" // the local driver's If-Match
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/layout/localblob"
)

// askingStore is a RecordStore that calls asked before each ResolveRef:
// the bucket answers again (and a PUT cut by its deadline completes) only
// once the background check asks, so the test orders them without
// waiting on a clock.
type askingStore struct {
	RecordStore
	asked func()
}

func (a askingStore) ResolveRef(ctx context.Context, e *layout.RefOutcomeUnknownError) (layout.Ref, bool, error) {
	a.asked()
	return a.RecordStore.ResolveRef(ctx, e)
}

// keptCopies returns the failed directory's copies of ref writes.
func keptCopies(t *testing.T, failed string) []string {
	t.Helper()
	got, err := filepath.Glob(filepath.Join(failed, "refs", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestRecordsRefWriteOutcomeUnknown: a ref write (a close of refs/<name>)
// whose PUT may have landed, cut by its deadline or its reply lost, is
// settled by what the ref holds. Holding the target, the write succeeded
// and keeps no copy. When the bucket does not answer the read back, or
// the ref does not hold the target yet while the PUT may still be under
// way, the outcome is unknown (EIO, the copy kept), and a background check
// removes the copy once the ref is found holding the target. A write the
// bucket refused, or that lost to another writer's value, fails and keeps
// its copy, as before.
//
// Before, a write whose reply was lost and whose read back got no answer
// was reported as failed for good, and with a retry refused on its own
// write's precondition as a conflict (ESTALE), the copy kept in failed/refs/
// although the ref held exactly what was written; on a backend without
// If-Match the read back after a PUT that had landed did the same; and a
// PUT cut by a deadline that the server completed later left its copy
// saying "not written" beside a ref that held it.
//
// Both compare-and-swaps run: If-Match on the local driver, and the
// re-read + PUT + re-read of a backend without it (memblob), each for a
// ref that existed (a swap) and one that did not (a create).
func TestRecordsRefWriteOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	deadline := faultblob.TransientError(gcerrors.DeadlineExceeded)
	for _, c := range []struct {
		name    string
		retries int
		put     faultblob.Rule
		// readsFail makes the ref's reads get no answer from after the
		// PUT until the background check asks.
		readsFail bool
		// other: another writer sets the ref between its read and this
		// write.
		other bool
		// landsLate: the PUT, cut by its deadline, is completed by the
		// server after the write's read back (before the check asks).
		landsLate bool
		want      error // nil, layout.ErrOutcomeUnknown, layout.ErrRefChanged, or errAny
		landed    bool  // what the background check finds
	}{
		{name: "reply lost, read back answers", retries: -1,
			put:  faultblob.Rule{FailFirst: 1, LoseResponse: true, Err: deadline},
			want: nil},
		{name: "reply lost, read back unanswered", retries: 2,
			put:       faultblob.Rule{FailFirst: 1, LoseResponse: true, Err: deadline},
			readsFail: true, want: layout.ErrOutcomeUnknown, landed: true},
		{name: "cut by a deadline, completed after the read back", retries: -1,
			put:       faultblob.Rule{FailFirst: 1, Err: deadline},
			landsLate: true, want: layout.ErrOutcomeUnknown, landed: true},
		{name: "cut by a deadline, never completed", retries: -1,
			put:  faultblob.Rule{FailFirst: 1, Err: deadline},
			want: layout.ErrOutcomeUnknown, landed: false},
		{name: "refused by the backend", retries: -1,
			put:  faultblob.Rule{FailFirst: 1, Err: faultblob.TransientError(gcerrors.Internal)},
			want: errAny},
		{name: "another writer's value", retries: 2, other: true,
			want: layout.ErrRefChanged},
	} {
		for _, backend := range []string{"if-match", "no-if-match"} {
			for _, existed := range []bool{true, false} {
				kind := "create"
				if existed {
					kind = "swap"
				}
				t.Run(c.name+"/"+backend+"/"+kind, func(t *testing.T) {
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
					store := layout.New(faultblob.Wrap(inner, inj), &layout.Options{Retries: c.retries, RetryBase: time.Millisecond})
					const name, mine = "tags/x", "objects/mine"
					var prev layout.Ref
					if existed {
						if err := plain.Link(ctx, name, "objects/before"); err != nil {
							t.Fatal(err)
						}
						var err error
						if prev, err = plain.ReadRef(ctx, name); err != nil {
							t.Fatal(err)
						}
					}
					if c.other {
						if err := plain.Link(ctx, name, "objects/theirs"); err != nil {
							t.Fatal(err)
						}
					}
					key, _ := layout.RefKey(name)
					var answered atomic.Bool
					late := func() {
						answered.Store(true)
						if c.landsLate {
							if err := plain.Link(ctx, name, mine); err != nil {
								t.Error(err)
							}
						}
					}
					failed := t.TempDir()
					logged := &syncbuf.Buffer{}
					// The background check asks once the test has looked
					// at what the write left.
					proceed := make(chan struct{})
					var proceedOnce sync.Once
					goOn := func() { proceedOnce.Do(func() { close(proceed) }) }
					late = sync1(late)
					asked := func() {
						<-proceed
						late()
					}
					r := NewRecords(askingStore{store, asked}, RecordCaches{}, RecordOptions{FailedDir: failed, Log: logged.Logger(slog.LevelInfo)})
					t.Cleanup(r.Close)
					t.Cleanup(goOn)
					r.resolveFirst = 0
					if !c.landed {
						// It keeps asking while the ref is as the PUT found
						// it (a server can complete the PUT late): not for
						// the 10 minutes a mount asks, here.
						r.resolveFor = 200 * time.Millisecond
					}
					resolved := make(chan bool, 1)
					r.resolved = func(_ string, landed bool) { resolved <- landed }

					c.put.Ops, c.put.Match = faultblob.OpPut, faultblob.Match{Prefix: key}
					if c.put.FailFirst > 0 {
						inj.Add(c.put)
					}
					if c.readsFail {
						// The weak swap reads the ref before its PUT: the
						// bucket stops answering after that read.
						var reads atomic.Int64
						skip := int64(0)
						if backend == "no-if-match" && existed {
							skip = 1
						}
						inj.Add(faultblob.Rule{Ops: faultblob.OpHead | faultblob.OpGet, Match: faultblob.Match{Prefix: key}, FailProb: 1,
							While: func() bool {
								if answered.Load() {
									return false
								}
								return reads.Add(1) > 2*skip // a read is a HEAD and a GET
							}})
					}
					_, _, err := r.WriteRef(ctx, name, prev, existed, []byte(mine+"\n"))
					switch {
					case c.want == nil && err != nil:
						t.Fatalf("write: %v, want success\n%s", err, logged)
					case c.want == errAny && (err == nil || errors.Is(err, layout.ErrOutcomeUnknown)):
						t.Fatalf("write: %v, want it failed for certain", err)
					case c.want != nil && c.want != errAny && !errors.Is(err, c.want):
						t.Fatalf("write: %v, want %v\n%s", err, c.want, logged)
					}
					if backend == "if-match" && strings.Contains(logged.String(), "without compare-and-swap") {
						t.Fatalf("the local driver's write fell back to the weak swap: the test is not testing If-Match\n%s", logged)
					}
					if errors.Is(err, layout.ErrOutcomeUnknown) && errors.Is(err, layout.ErrConflict) {
						t.Fatalf("write: %v reads as a conflict too (ESTALE for a write that may have landed)", err)
					}
					kept := keptCopies(t, failed)
					if want := err != nil; (len(kept) == 1) != want {
						t.Fatalf("copies kept %v after %v; want one iff the write failed", kept, err)
					}
					if !errors.Is(err, layout.ErrOutcomeUnknown) {
						return
					}
					goOn()
					var landed bool
					select {
					case landed = <-resolved:
					case <-time.After(time.Minute):
						t.Fatalf("no answer from the background check\n%s", logged)
					}
					if landed != c.landed {
						t.Fatalf("the check found landed=%v, want %v\n%s", landed, c.landed, logged)
					}
					got, rerr := plain.ReadRef(ctx, name)
					if holds := rerr == nil && got.Target == mine; holds != c.landed {
						t.Fatalf("the ref holds %q (%v); landed=%v", got.Target, rerr, c.landed)
					}
					if kept := keptCopies(t, failed); len(kept) != map[bool]int{true: 0, false: 1}[c.landed] {
						t.Fatalf("copies kept %v once the check found landed=%v; want none iff it landed\n%s", kept, c.landed, logged)
					}
				})
			}
		}
	}
}

// errAny is any error but an unknown outcome (a table's "it failed").
var errAny = errors.New("any error")

// sync1 returns f made safe to call from several goroutines, at most once.
func sync1(f func()) func() {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			f()
		}
	}
}

// TestRecordsRefCheckGoesOnWhileThePutMayLand: a ref write whose PUT
// was cut by its deadline before the bucket answered, the ref read back
// as the PUT found it: settleRef calls that unknown, as a server can
// complete the PUT after the read. The background check found the very
// same thing at its first look, settled it as "did not land" and
// stopped; when the server completed the PUT after that, the ref held
// what was written while its copy stayed in failed/refs/ saying it was
// not (review 43). It now asks on while the ref is as the PUT found it.
func TestRecordsRefCheckGoesOnWhileThePutMayLand(t *testing.T) {
	ctx := context.Background()
	inner, err := localblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := layout.New(inner, nil)
	inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
	store := layout.New(faultblob.Wrap(inner, inj), &layout.Options{Retries: -1, RetryBase: time.Millisecond})
	const name, mine = "tags/x", "objects/mine"
	if err := plain.Link(ctx, name, "objects/before"); err != nil {
		t.Fatal(err)
	}
	prev, err := plain.ReadRef(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	failed := t.TempDir()
	logged := &syncbuf.Buffer{}
	var asks atomic.Int64
	asked := func() {
		if asks.Add(1) == 2 {
			// The server completes the PUT it got, after the first look.
			if err := plain.Link(ctx, name, mine); err != nil {
				t.Error(err)
			}
		}
	}
	r := NewRecords(askingStore{store, asked}, RecordCaches{}, RecordOptions{FailedDir: failed, Log: logged.Logger(slog.LevelInfo)})
	t.Cleanup(r.Close)
	r.resolveFirst = 0
	resolved := make(chan bool, 4)
	r.resolved = func(_ string, landed bool) { resolved <- landed }
	key, _ := layout.RefKey(name)
	inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: key}, FailFirst: 1,
		Err: faultblob.TransientError(gcerrors.DeadlineExceeded)})
	if _, _, err := r.WriteRef(ctx, name, prev, true, []byte(mine+"\n")); !errors.Is(err, layout.ErrOutcomeUnknown) {
		t.Fatalf("write with its PUT cut by the deadline: %v, want the outcome unknown", err)
	}
	select {
	case landed := <-resolved:
		if !landed {
			t.Fatalf("the check settled \"did not land\" after %d looks, with the ref as the PUT found it\n%s", asks.Load(), logged)
		}
	case <-time.After(time.Minute):
		t.Fatal("no answer from the background check")
	}
	if kept := keptCopies(t, failed); len(kept) != 0 {
		t.Fatalf("refs/%s holds %s, what the write wrote, yet its copy %v stays in failed/\n%s", name, mine, kept, logged)
	}
}
