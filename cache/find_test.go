package cache

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
)

// TestFindLoadsFirstContact: a lookup of a session this cache has never
// seen reads its manifest beside the freshness LIST and, the session
// being short, loads its state, so the readdir that follows a path walk
// (cd, find) sends no request. The snapshot read waits until the
// manifest read has started: it would wait in vain if the manifest were
// read only after it.
func TestFindLoadsFirstContact(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		cs := newCountingStore(w.store)
		c := newCache(t, cs, Options{MetadataTTL: time.Hour, Now: newClock().Now})
		s := w.session()
		// Two versions: the summary would read only the second.
		w.commit(s, textDesc("f", "v1", epoch))
		w.commit(s, textDesc("g", "v2", epoch))
		started := make(chan struct{})
		var once sync.Once
		cs.mu.Lock()
		cs.beforeManifest = func(context.Context, layout.SessionID) { once.Do(func() { close(started) }) }
		cs.beforeRange = func(ctx context.Context, id layout.SessionID) {
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Error("the summary read its snapshot with no manifest read started beside it")
			}
		}
		cs.mu.Unlock()
		if _, _, err := c.Find(bg, s); err != nil {
			t.Fatal(err)
		}
		l0, r0, m0 := cs.counts(s)
		if st := mustState(t, c, s); body(st, "f") != "v1" {
			t.Fatalf("state after Find: %q", body(st, "f"))
		}
		if l, r, m := cs.counts(s); l != l0 || r != r0 || m != m0 {
			t.Errorf("the state after a lookup cost %d LISTs, %d snapshot reads and %d manifest reads, want none", l-l0, r-r0, m-m0)
		}
		if _, _, m := cs.counts(s); m != 1 {
			t.Errorf("%d manifest reads, want 1 (the prefetch, joined by the state load)", m)
		}
	})
}

// TestFindAfterListingReadsNoManifest: a session a listing showed is not
// a first contact, so its lookup reads no manifest ahead (ls -l sessions/
// looks its entries up again after their entry TTL, one per session).
func TestFindAfterListingReadsNoManifest(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		cs := newCountingStore(w.store)
		c := newCache(t, cs, Options{MetadataTTL: time.Hour, Now: newClock().Now})
		s := w.session()
		w.commit(s, textDesc("f", "v1", epoch))
		if _, err := c.ListSessions(bg); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Find(bg, s); err != nil {
			t.Fatal(err)
		}
		if _, _, m := cs.counts(s); m != 0 {
			t.Errorf("a listed session's lookup read its manifest %d times, want 0", m)
		}
	})
}
