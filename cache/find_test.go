package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
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

// TestFindReadsFirstVersionsBesideTheList: a first lookup reads the first
// versions of the session while the LIST that gives its latest version
// is still out (the LIST here answers only once versions 1 and 2 are
// being read), so a short session is loaded after one round trip; a
// version read early is not read again, and a longer session reads the
// rest of its versions in one range once the LIST has answered.
func TestFindReadsFirstVersionsBesideTheList(t *testing.T) {
	for _, n := range []uint32{2, earlyVersions + 2} {
		t.Run(fmt.Sprint(n, " versions"), func(t *testing.T) {
			w := newWorld(t, memblob.OpenBucket(nil))
			cs := newCountingStore(w.store)
			gs := &listGate{countingStore: cs, want: 2, seen: map[uint32]bool{}, open: make(chan struct{})}
			c := newCache(t, gs, Options{MetadataTTL: time.Hour, Now: newClock().Now})
			s := w.session()
			for v := uint32(1); v <= n; v++ {
				w.commit(s, textDesc(fmt.Sprint("f", v), fmt.Sprint("v", v), epoch))
			}
			cs.mu.Lock()
			cs.beforeRange = gs.started
			cs.mu.Unlock()
			if _, _, err := c.Find(bg, s); err != nil {
				t.Fatal(err)
			}
			if gs.waited.Load() {
				t.Error("the LIST answered before the first versions were being read")
			}
			st := mustState(t, c, s)
			if st.Version != n || body(st, "f1") != "v1" || body(st, fmt.Sprint("f", n)) != fmt.Sprint("v", n) {
				t.Fatalf("state after Find: version %d, f1 %q", st.Version, body(st, "f1"))
			}
			// Each version the session has is read once; the early reads
			// of versions it lacks may be cancelled before they are sent.
			var want []string
			for v := uint32(1); v <= earlyVersions; v++ {
				want = append(want, fmt.Sprintf("%d-%d", v, v))
			}
			if n > earlyVersions {
				want = append(want, fmt.Sprintf("%d-%d", earlyVersions+1, n))
			}
			cs.mu.Lock()
			spans := slices.Clone(cs.spans)
			cs.mu.Unlock()
			slices.Sort(spans)
			if !slices.Equal(spans, want) && (n >= earlyVersions || !readOnceEach(want[:n], spans, want)) {
				t.Errorf("snapshot reads %q, want %q (or at least the first %d)", spans, want, min(n, earlyVersions))
			}
			// The versions a short session lacks are read for nothing.
			if st, miss := c.Stats(), int64(earlyVersions-min(n, earlyVersions)); st.EarlyReads != earlyVersions || st.EarlyMisses != miss {
				t.Errorf("early reads %d, not used %d; want %d, %d", st.EarlyReads, st.EarlyMisses, earlyVersions, miss)
			}
		})
	}
}

// keptStore is a store whose Keeper holds every session's copies.
type keptStore struct{ *countingStore }

func (keptStore) KeptSession(layout.SessionID) bool { return true }

// TestFindKeptSessionWaitsForTheList: a first lookup of a session whose
// copies an earlier mount kept reads nothing beside the LIST (the LIST
// vouches for the copies, and the load after it reads them): no early
// reads, no manifest read ahead; the load reads the manifest once and
// the versions in one range.
func TestFindKeptSessionWaitsForTheList(t *testing.T) {
	w := newWorld(t, memblob.OpenBucket(nil))
	cs := newCountingStore(w.store)
	c := newCache(t, keptStore{cs}, Options{MetadataTTL: time.Hour, Now: newClock().Now})
	s := w.session()
	w.commit(s, textDesc("f", "v1", epoch))
	w.commit(s, textDesc("g", "v2", epoch))
	if _, _, err := c.Find(bg, s); err != nil {
		t.Fatal(err)
	}
	if st := mustState(t, c, s); body(st, "g") != "v2" {
		t.Fatalf("state after Find: %q", body(st, "g"))
	}
	cs.mu.Lock()
	spans := slices.Clone(cs.spans)
	cs.mu.Unlock()
	if _, _, m := cs.counts(s); m != 1 || !slices.Equal(spans, []string{"1-2"}) || c.Stats().EarlyReads != 0 {
		t.Errorf("%d manifest reads, snapshot reads %q, %d early reads; want 1, [1-2], 0", m, spans, c.Stats().EarlyReads)
	}
}

// readOnceEach reports whether got holds every span of need
// and otherwise only spans of all, each at most once.
func readOnceEach(need, got, all []string) bool {
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g] || !slices.Contains(all, g) {
			return false
		}
		seen[g] = true
	}
	for _, n := range need {
		if !seen[n] {
			return false
		}
	}
	return true
}

// listGate holds the hour's LIST until versions 1..want of a session are
// being read (30 s at most, then answers and says so in waited).
type listGate struct {
	*countingStore
	want   uint32
	mu     sync.Mutex
	seen   map[uint32]bool
	open   chan struct{}
	waited atomic.Bool
}

func (g *listGate) started(_ context.Context, _ layout.SessionID) {
	// Every span so far, not the last one: the early reads run
	// concurrently, and another may have been recorded after this one.
	g.countingStore.mu.Lock()
	spans := slices.Clone(g.countingStore.spans)
	g.countingStore.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, span := range spans {
		var from, to uint32
		fmt.Sscanf(span, "%d-%d", &from, &to)
		for v := from; v <= to; v++ {
			g.seen[v] = true
		}
	}
	for v := uint32(1); v <= g.want; v++ {
		if !g.seen[v] {
			return
		}
	}
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *listGate) ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(key string, err error), shown func([]layout.ListedSession)) ([]layout.ListedSession, error) {
	select {
	case <-g.open:
	case <-time.After(30 * time.Second):
		g.waited.Store(true)
	}
	return g.countingStore.ListHourVersions(ctx, hour, maxPages, bad, shown)
}

// stalledHours is a Store whose hour LISTs time out, counted.
type stalledHours struct {
	Store
	lists atomic.Int64
}

func (s *stalledHours) ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(string, error), shown func([]layout.ListedSession)) ([]layout.ListedSession, error) {
	s.lists.Add(1)
	return nil, fmt.Errorf("list hour: %w", context.DeadlineExceeded)
}

// TestFindGivesUpOnce: a lookup whose hour LIST does not answer fails
// after that LIST's retries, once: it fell back to Summary, which asked
// the same again, and a stalled bucket failed a lookup after 10x
// --request-timeout instead of 5x (the remote audit).
func TestFindGivesUpOnce(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	id := w.session()
	s := &stalledHours{Store: w.store}
	c := newCache(t, s, Options{MetadataTTL: time.Hour})
	if _, _, err := c.Find(bg, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Find: %v, want the LIST's deadline", err)
	}
	if n := s.lists.Load(); n != 1 {
		t.Errorf("%d hour LISTs for one lookup, want 1", n)
	}
}
