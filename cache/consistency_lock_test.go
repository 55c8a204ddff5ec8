package cache

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
)

// bounded is how long an operation that must not wait for a stalled one
// may take; it only matters when the contract is broken.
const bounded = 10 * time.Second

// consistency.md §3: while every backend request of session A stalls (its
// first loads hold A's lock at the stall; a reader of A's blob sits in its
// verify pass), session B's cached state, a first load of B, B's blob, the
// registry, the session listing and the stats all complete.
//
// Seen failing: with refreshLocked holding the global state lock across
// LatestVersion, B's state read was still blocked after the bound; with a
// blob flight holding blobcache.Cache.mu across the backend read, B's blob read
// was.
func TestLockScopeStalledSessionDoesNotBlockOthers(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		c := newCache(t, w.store, Options{MetadataTTL: 0}) // every read goes to the bucket
		blobs := newBlobCache(t, w.store, blobcache.Options{MemBytes: 4 << 20, ChunkSize: 64 << 10})
		a, bs := w.session(), w.session()
		put := func(id layout.SessionID, seed uint64) (layout.Descriptor, []byte) {
			body := randomBody(150<<10, seed)
			bi, err := w.store.PutBlobBytes(bg, body, layout.BlobOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d := layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: "data.bin",
				ContentType: "application/octet-stream", CreatedAt: epoch}
			w.commit(id, d)
			return d, body
		}
		dA, bodyA := put(a, 1)
		dB, bodyB := put(bs, 2)
		mustState(t, c, bs)

		gate, release := w.inj.Stall(0, faultblob.Match{Prefix: sessionPrefix(t, a)})
		defer release()
		blobGate, releaseBlob := w.inj.Stall(0, faultblob.Match{Prefix: layout.BlobKey(dA.Digest)})
		defer releaseBlob()
		var stalled sync.WaitGroup
		errc := make(chan error, 8)
		for range 4 {
			stalled.Add(1)
			go func() {
				defer stalled.Done()
				st, err := c.State(bg, a)
				if err == nil && st.Slots()["data.bin"].Digest != dA.Digest {
					err = fmt.Errorf("state of A: %v", st.Slots())
				}
				if err != nil {
					errc <- err
				}
			}()
		}
		for range 2 {
			stalled.Add(1)
			go func() {
				defer stalled.Done()
				got, err := readBlob(bg, blobs, &dA, 40<<10)
				if err == nil && !bytes.Equal(got, bodyA) {
					err = fmt.Errorf("A's blob: wrong bytes")
				}
				if err != nil {
					errc <- err
				}
			}()
		}
		waitFor(t, "A's load and A's blob read to stall", func() bool {
			return gate.Waiting() >= 1 && blobGate.Waiting() >= 1
		})

		ops := map[string]func(ctx context.Context) error{
			"evict B and load it again": func(ctx context.Context) error {
				c.Evict(bs)
				_, err := c.State(ctx, bs)
				return err
			},
			"registry, listing and stats": func(ctx context.Context) error {
				if _, ok := c.registry.Get(bs); !ok {
					return fmt.Errorf("no row for B")
				}
				c.registry.List()
				c.Stats()
				blobs.Stats()
				_, err := c.Sessions(ctx)
				return err
			},
		}
		for i := range 4 { // B's readers, concurrently
			ops[fmt.Sprintf("state of B (%d)", i)] = func(ctx context.Context) error {
				st, err := c.State(ctx, bs)
				if err == nil && st.Slots()["data.bin"].Digest != dB.Digest {
					err = fmt.Errorf("wrong state %v", st.Slots())
				}
				return err
			}
			ops[fmt.Sprintf("B's blob (%d)", i)] = func(ctx context.Context) error {
				got, err := readBlob(ctx, blobs, &dB, 16<<10*(i+1))
				if err == nil && !bytes.Equal(got, bodyB) {
					err = fmt.Errorf("wrong bytes")
				}
				return err
			}
		}
		stuck, errs := runBounded(bounded, ops)
		if len(stuck) > 0 {
			release()
			releaseBlob()
			t.Fatalf("while A stalls, still blocked after %v: %v", bounded, stuck)
		}
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if gate.Waiting() == 0 || blobGate.Waiting() == 0 {
			t.Fatal("A's requests stopped stalling before B was done")
		}
		release()
		releaseBlob()
		stalled.Wait()
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}
	})
}

// consistency.md §3: concurrent first loads of one session publish exactly
// one cached object. 32 goroutines ask at once; the first load is held in
// its snapshot read until every other caller is parked on the session's
// lock; afterwards all have the same *State, and the bucket saw one
// LatestVersion, one manifest read and one snapshot range read.
//
// Seen failing: with Session.State not re-checking freshness after taking
// the session lock, every waiter listed again (32 LatestVersion calls);
// with entry() handing each caller a new Session, callers got different
// *State objects.
func TestLockScopeConcurrentFirstLoadsPublishOne(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		cs := newCountingStore(w.store)
		c := newCache(t, cs, Options{MetadataTTL: time.Hour})
		s := w.session()
		for i := range 3 {
			w.commit(s, textDesc(fmt.Sprintf("f%d", i), "x", epoch))
		}
		gate := make(chan struct{})
		var atGate atomic.Int32
		cs.beforeRange = func(ctx context.Context, id layout.SessionID) {
			atGate.Add(1)
			<-gate
		}
		const n = 32
		states := make([]*State, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				states[i], errs[i] = c.State(bg, s)
			}()
		}
		waitFor(t, "every caller to be at the gate or on the session lock", func() bool {
			return int(atGate.Load())+blockedOnMutex("(*Session).State") >= n
		})
		close(gate)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if states[i] != states[0] {
				t.Fatalf("caller %d got another *State", i)
			}
		}
		if l, r, m := cs.counts(s); l != 1 || r != 1 || m != 1 {
			t.Fatalf("%d LatestVersion, %d snapshot range and %d manifest reads; want one each", l, r, m)
		}
		if st := c.Stats(); st.Loads != 1 || st.Sessions != 1 {
			t.Fatalf("stats %+v: want one load, one cached session", st)
		}
		if got := mustState(t, c, s); got != states[0] || got.Version != 3 {
			t.Fatalf("later read: version %d, same object %v", got.Version, got == states[0])
		}
	})
}

// consistency.md §3: an eviction racing a load cannot bring the evicted
// object back. A first load is held in its snapshot read; the session is
// evicted, a newer version lands and a new load publishes it; then the old
// load finishes. Its caller gets its (older) state, but the LRU holds the
// new object, the registry row keeps the newer version, and later reads
// are served from the new object without another load.
//
// Seen failing: with observe re-adding its Session to the LRU, the old
// object came back; without the evicted check in Cache.observe (the code
// before commit 4bfccc8), the registry row went back to version 1.
func TestLockScopeEvictionDuringLoad(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		cs := newCountingStore(w.store)
		c := newCache(t, cs, Options{MetadataTTL: time.Hour})
		s := w.session()
		w.commit(s, textDesc("a", "1", epoch))
		gate, reached := make(chan struct{}), make(chan struct{})
		var first atomic.Bool
		cs.beforeRange = func(ctx context.Context, id layout.SessionID) {
			if first.CompareAndSwap(false, true) {
				close(reached)
				<-gate
			}
		}
		type result struct {
			st  *State
			err error
		}
		old := make(chan result, 1)
		go func() {
			st, err := c.State(bg, s)
			old <- result{st, err}
		}()
		<-reached
		c.mu.Lock()
		oldObj, ok := c.sessions.Peek(s)
		c.mu.Unlock()
		if !ok {
			t.Fatal("the loading session is not in the LRU")
		}

		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); c.Evict(s) }()
		go func() { defer wg.Done(); w.commit(s, textDesc("b", "2", epoch.Add(time.Minute))) }()
		wg.Wait()
		var newest *State
		var mu sync.Mutex
		var loads sync.WaitGroup
		for range 8 { // the new object's concurrent first loads
			loads.Add(1)
			go func() {
				defer loads.Done()
				if st, err := c.State(bg, s); err == nil && st.Version == 2 {
					mu.Lock()
					newest = st
					mu.Unlock()
				}
			}()
		}
		loads.Wait()
		if newest == nil {
			t.Fatal("the load after eviction did not see version 2")
		}
		close(gate)
		r := <-old
		if r.err != nil || r.st.Version != 1 {
			t.Fatalf("the stalled load: version %v, %v", r.st, r.err)
		}

		c.mu.Lock()
		cur, ok := c.sessions.Peek(s)
		c.mu.Unlock()
		if !ok || cur == oldObj {
			t.Fatalf("after the stalled load finished the LRU holds the evicted object (%v)", ok)
		}
		if row, _ := c.registry.Get(s); row.Version != 2 || !row.UpdatedAt.Equal(epoch.Add(time.Minute)) {
			t.Fatalf("row %+v after the evicted load finished; want version 2", row)
		}
		if st := mustState(t, c, s); st != newest {
			t.Fatalf("later read: version %d, not the new object's state", st.Version)
		}
		if l, _, _ := cs.counts(s); l != 2 {
			t.Fatalf("%d LatestVersion calls, want 2 (one per object)", l)
		}
	})
}
