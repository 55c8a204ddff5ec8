package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/blobwrap"
	"github.com/pugmark/pugfs/layout/blobwrap/blobwraptest"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/layout/schedblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// TestDecoratorsConformance: the mount's decorators, stacked as drivers
// under one portable bucket, are invisible to requests that answer
// (gocloud's conformance suite, request log on).
func TestDecoratorsConformance(t *testing.T) {
	blobwraptest.Conformance(t, func(inner *blob.Bucket) driver.Bucket {
		return decorators(blobwrap.Portable(inner), time.Minute, schedblob.New(4), slog.New(slog.DiscardHandler))
	}, nil)
}

// TestDecoratorsStack: what each decorator is for still holds through the
// stack. A request the bucket never answers fails with the deadline's
// TimeoutError and code; what the layers expose through As (the
// scheduler, a fault injector below) is found from the top.
func TestDecoratorsStack(t *testing.T) {
	ctx := context.Background()
	inj := faultblob.NewInjector(faultblob.Options{})
	b := blob.NewBucket(decorators(blobwrap.Portable(faultblob.Wrap(memblob.OpenBucket(nil), inj)), 50*time.Millisecond, schedblob.New(2), nil))
	t.Cleanup(func() { b.Close() })
	if err := b.WriteAll(ctx, "k", []byte("body"), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadAll(ctx, "k"); err != nil || string(got) != "body" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := b.ReadAll(ctx, "missing"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("read of a missing key = %v (code %v), want NotFound", err, gcerrors.Code(err))
	}

	g := faultblob.NewGate()
	defer g.Release()
	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Stall: g})
	_, err := b.NewReader(ctx, "k", nil)
	var te *deadlineblob.TimeoutError
	if !errors.As(err, &te) || gcerrors.Code(err) != gcerrors.DeadlineExceeded {
		t.Fatalf("read of a silent bucket = %v (code %v), want a TimeoutError, DeadlineExceeded", err, gcerrors.Code(err))
	}

	var s *schedblob.Scheduler
	var found *faultblob.Injector
	if !b.As(&s) || s == nil || !b.As(&found) || found != inj {
		t.Fatalf("As through the stack: scheduler %v, injector %v", s, found)
	}
}

// TestDecoratorsSilentBucketQueue: with the bucket silent, requests
// queued behind the slots fail by the deadline too, not once every
// request ahead of them has timed out in turn: 32 HEADs through 2 slots
// at a 100 ms deadline failed only after 8 s, where the README promises
// about 5x the deadline (review 5). Bounded generously: what it checks is
// that the wait does not grow with the queue.
func TestDecoratorsSilentBucketQueue(t *testing.T) {
	ctx := context.Background()
	inner, err := blob.OpenBucket(ctx, "fault+mem://?fault_stall_prefix=objects/&fault_stall=1m")
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	b := blob.NewBucket(decorators(blobwrap.Portable(inner), timeout, schedblob.New(2), nil))
	defer b.Close()
	store := layout.New(b, nil)
	const n = 32
	took := make(chan time.Duration, n)
	start := time.Now()
	for i := range n {
		go func() {
			_, err := store.BlobAttributes(ctx, layout.DigestOf([]byte{byte(i)}))
			if err == nil {
				t.Error("a HEAD of a silent bucket succeeded")
			}
			took <- time.Since(start)
		}()
	}
	var slowest time.Duration
	for range n {
		slowest = max(slowest, <-took)
	}
	if slowest > 5*time.Second {
		t.Errorf("the slowest of %d HEADs of a silent bucket failed after %v (%.0fx the deadline)", n, slowest.Round(10*time.Millisecond), float64(slowest)/float64(timeout))
	}
}
