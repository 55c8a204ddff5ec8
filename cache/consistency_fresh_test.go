package cache

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
)

const testTTL = time.Second

// body returns the inline body of the live slot name, or "" if absent.
func body(st *State, name string) string {
	e, ok := st.Slot(name)
	if !ok {
		return ""
	}
	return string(e.Data)
}

// consistency.md §4: two stores and caches on one bucket (two mounts, or
// two processes). Readers of mount 2 spin on a session they had cached
// while mount 1 commits; after each commit, once the metadata TTL has
// passed, every reader's next read has it. A session created and written
// through mount 1 is seen by mount 2's first load, and its listing shows
// it after the TTL. Mount 1's own commits are visible to it at once.
//
// Seen failing: with fresh() ignoring the TTL (a loaded state trusted
// forever), the readers timed out on version 1; with Committed a no-op,
// mount 1 read version 1 right after its own commit of version 2.
func TestFreshnessAcrossStores(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		clk := newClock()
		cs1 := newCountingStore(w1.store)
		// Mount 1's clock stands still: its reads after its own commits
		// are within the TTL, so any LIST would be a miss of Committed.
		c1 := newCache(t, cs1, Options{MetadataTTL: testTTL, Now: newClock().Now})
		c2 := newCache(t, w2.store, Options{MetadataTTL: testTTL, Now: clk.Now})
		s := w1.session()
		w1.commit(s, textDesc("f", "v1", epoch))
		mustState(t, c1, s)
		if st := mustState(t, c2, s); st.Version != 1 {
			t.Fatalf("mount 2 starts at version %d", st.Version)
		}
		if _, err := c2.Sessions(bg); err != nil {
			t.Fatal(err)
		}

		const readers = 4
		var seen [readers]atomic.Uint32
		stop := make(chan struct{})
		errc := make(chan error, readers)
		var wg sync.WaitGroup
		for i := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					st, err := c2.State(bg, s)
					if err == nil && body(st, "f") != fmt.Sprintf("v%d", st.Version) {
						err = fmt.Errorf("version %d shows %q", st.Version, body(st, "f"))
					}
					if err != nil {
						errc <- err
						return
					}
					seen[i].Store(st.Version)
				}
			}()
		}
		for v := uint32(2); v <= 4; v++ {
			latest, _, _ := cs1.counts(s)
			mark := c1.MarkOf(s)
			res := w1.commit(s, textDesc("f", fmt.Sprintf("v%d", v), epoch))
			c1.Committed(s, res, mark)
			if st := mustState(t, c1, s); st.Version != v || body(st, "f") != fmt.Sprintf("v%d", v) {
				t.Fatalf("mount 1 reads version %d of its own commit %d", st.Version, v)
			}
			if l, _, _ := cs1.counts(s); l != latest {
				t.Fatal("mount 1 listed to see its own commit")
			}
			clk.Advance(testTTL)
			waitFor(t, fmt.Sprintf("every reader of mount 2 to see version %d", v), func() bool {
				select {
				case err := <-errc:
					t.Fatal(err)
				default:
				}
				for i := range readers {
					if seen[i].Load() != v {
						return false
					}
				}
				return true
			})
		}
		close(stop)
		wg.Wait()

		// A session mount 2 has never seen: its first load, and the
		// listing once the TTL has passed.
		fresh := w1.session()
		w1.commit(fresh, textDesc("g", "first", epoch))
		if st := mustState(t, c2, fresh); st.Version != 1 || body(st, "g") != "first" {
			t.Fatalf("first load through mount 2: version %d, %q", st.Version, body(st, "g"))
		}
		clk.Advance(testTTL)
		list, err := c2.Sessions(bg)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, id := range list {
			found = found || id == fresh
		}
		if !found {
			t.Fatalf("mount 2's listing after the TTL lacks %s", fresh)
		}
	})
}

// consistency.md §4: the rebuilt state records the fingerprint captured
// before reading. Mount 2 refreshes a session: its LIST sees version 2,
// and the read of snapshot 2 stalls; meanwhile more readers queue on the
// session lock, time passes beyond the TTL and mount 1 commits version 3.
// The refresh returns version 2 (not 3, which it never read); the queued
// readers, and every read after, see version 3.
//
// Seen failing: with publishLocked taking the check time after the rebuild
// instead of before the LIST, the queued readers took version 2 as fresh;
// with refreshLocked re-listing after the rebuild and recording that newer
// version, the refresh claimed version 3 with version 2's content.
func TestFreshnessFingerprintBeforeRead(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		clk := newClock()
		c2 := newCache(t, w2.store, Options{MetadataTTL: testTTL, Now: clk.Now})
		s := w1.session()
		w1.commit(s, textDesc("f", "v1", epoch))
		mustState(t, c2, s)
		w1.commit(s, textDesc("f", "v2", epoch))
		clk.Advance(testTTL)

		gate, release := w2.inj.Stall(faultblob.OpGet, faultblob.Match{Prefix: snapshotKey(t, s, 2)})
		defer release()
		type result struct {
			st  *State
			err error
		}
		refresh := make(chan result, 1)
		go func() {
			st, err := c2.State(bg, s)
			refresh <- result{st, err}
		}()
		waitFor(t, "the refresh to stall in the snapshot read", func() bool { return gate.Waiting() == 1 })
		const queued = 4
		later := make(chan result, queued)
		for range queued {
			go func() {
				st, err := c2.State(bg, s)
				later <- result{st, err}
			}()
		}
		waitFor(t, "the readers to queue on the session lock", func() bool {
			return blockedOnMutex("(*Session).State") >= queued
		})
		clk.Advance(testTTL)
		w1.commit(s, textDesc("f", "v3", epoch))
		release()

		r := <-refresh
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.st.Version != 2 || body(r.st, "f") != "v2" {
			t.Fatalf("the stalled refresh: version %d (%q); want version 2 with v2", r.st.Version, body(r.st, "f"))
		}
		for range queued {
			r := <-later
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.st.Version != 3 || body(r.st, "f") != "v3" {
				t.Fatalf("a reader queued behind the refresh got version %d (%q), want 3", r.st.Version, body(r.st, "f"))
			}
		}
		if st := mustState(t, c2, s); st.Version != 3 || body(st, "f") != "v3" {
			t.Fatalf("the next read: version %d (%q), want 3", st.Version, body(st, "f"))
		}
	})
}

// consistency.md §4 with TTL 0: every access checks the bucket, from
// many goroutines, and a commit through another store is seen by the very
// next read, without any time passing.
//
// Seen failing: with fresh() treating a zero TTL as "never expires", the
// 40 reads made one LatestVersion call between them.
func TestFreshnessTTLZero(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		cs := newCountingStore(w2.store)
		c := newCache(t, cs, Options{MetadataTTL: 0, Now: newClock().Now})
		s := w1.session()
		w1.commit(s, textDesc("f", "v1", epoch))
		const readers, reads = 8, 5
		var wg sync.WaitGroup
		errc := make(chan error, readers)
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range reads {
					if _, err := c.State(bg, s); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		if l, _, _ := cs.counts(s); l != readers*reads {
			t.Fatalf("%d LatestVersion calls for %d reads", l, readers*reads)
		}
		for v := 2; v <= 3; v++ {
			w1.commit(s, textDesc("f", fmt.Sprintf("v%d", v), epoch))
			if st := mustState(t, c, s); st.Version != uint32(v) || body(st, "f") != fmt.Sprintf("v%d", v) {
				t.Fatalf("read after commit %d: version %d", v, st.Version)
			}
		}
	})
}

// consistency.md §4, own commits: writers of one mount commit into one
// session concurrently (each a different name), with the TTL an hour. As
// soon as Committed returns, that writer's next read has its file, whether
// its commit was the next version of the cached state or others landed in
// between (then the cache re-checks). A commit from another store between
// them is picked up the same way.
//
// Seen failing: with Committed a no-op, writers read states without their
// own files until the TTL.
func TestFreshnessOwnCommits(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		c := newCache(t, w1.store, Options{MetadataTTL: time.Hour, Now: newClock().Now})
		s := w1.session()
		w1.commit(s, textDesc("base", "0", epoch))
		mustState(t, c, s)
		w2.commit(s, textDesc("foreign", "x", epoch)) // not seen until a re-check
		const writers, each = 6, 3
		var wg sync.WaitGroup
		errc := make(chan error, writers)
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range each {
					name := fmt.Sprintf("w%d-%d", g, k)
					mark := c.MarkOf(s)
					res, err := w1.store.Commit(bg, s, layout.CommitRequest{Type: layout.Provisional,
						Descriptors: []layout.Descriptor{textDesc(name, name, epoch)}})
					if err != nil {
						errc <- err
						return
					}
					c.Committed(s, res, mark)
					st, err := c.State(bg, s)
					if err == nil && (st.Version < res.Version || body(st, name) != name) {
						err = fmt.Errorf("after committing %s at version %d, the read has version %d without it", name, res.Version, st.Version)
					}
					if err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		st := mustState(t, c, s)
		if st.Version != 2+writers*each || len(st.Slots()) != 2+writers*each || body(st, "foreign") != "x" {
			t.Fatalf("final state: version %d, %d slots", st.Version, len(st.Slots()))
		}
	})
}

// Invalidate while a refresh is in flight: that refresh's LIST predates
// the change Invalidate announces, so its result must not count as
// checked. The next read lists again and sees the newer version.
//
// Seen failing (before the fix): the overtaken refresh stored its check
// time over Invalidate's reset and the next read served version 2 for the
// whole TTL.
func TestInvalidateDuringRefresh(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		cs := newCountingStore(w.store)
		c := newCache(t, cs, Options{MetadataTTL: time.Hour, Now: newClock().Now})
		s := w.session()
		w.commit(s, textDesc("f", "v1", epoch))
		mustState(t, c, s)
		w.commit(s, textDesc("f", "v2", epoch))
		gate, reached := make(chan struct{}), make(chan struct{})
		cs.mu.Lock()
		cs.beforeRange = func(ctx context.Context, id layout.SessionID) {
			close(reached)
			<-gate
		}
		cs.mu.Unlock()
		c.Invalidate(s)
		done := make(chan *State, 1)
		go func() {
			st, _ := c.State(bg, s)
			done <- st
		}()
		<-reached
		cs.mu.Lock()
		cs.beforeRange = nil
		cs.mu.Unlock()
		w.commit(s, textDesc("f", "v3", epoch))
		c.Invalidate(s) // e.g. this mount's commit failed against version 3
		close(gate)
		if st := <-done; st == nil || st.Version != 2 {
			t.Fatalf("the overtaken refresh returned %v", st)
		}
		if st := mustState(t, c, s); st.Version != 3 || body(st, "f") != "v3" {
			t.Fatalf("read after Invalidate: version %d, want 3", st.Version)
		}
	})
}

// TestCommittedIsACheck: a commit of this mount that lands at the next
// version is a check of the session as of its Mark (its create of the
// next free version found nothing else there, and versions are dense):
// the state is fresh for the TTL from then, with no LIST, however long
// ago the last one was. Not so for a commit that landed further up
// (another writer's snapshot in between, which the state lacks), nor
// when the session was invalidated after the Mark (a change announced
// that the commit may not cover), nor for the zero Mark.
func TestCommittedIsACheck(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		for _, c := range []struct {
			name string
			// before runs between the Mark and the commit; it returns
			// the Mark to give Committed.
			before func(w *world, c *Cache, s layout.SessionID, m Mark) Mark
			fresh  bool
		}{
			{"next-version", func(w *world, c *Cache, s layout.SessionID, m Mark) Mark { return m }, true},
			{"above-another", func(w *world, c *Cache, s layout.SessionID, m Mark) Mark {
				w.commit(s, textDesc("other", "x", epoch))
				return m
			}, false},
			{"invalidated", func(w *world, c *Cache, s layout.SessionID, m Mark) Mark {
				c.Invalidate(s)
				return m
			}, false},
			{"zero-mark", func(w *world, c *Cache, s layout.SessionID, m Mark) Mark { return Mark{} }, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				w := newWorld(t, b)
				clk := newClock()
				cs := newCountingStore(w.store)
				ca := newCache(t, cs, Options{MetadataTTL: testTTL, Now: clk.Now})
				s := w.session()
				w.commit(s, textDesc("f", "v1", epoch))
				mustState(t, ca, s)
				clk.Advance(2 * testTTL) // the load's check is long stale
				m := c.before(w, ca, s, ca.MarkOf(s))
				res := w.commit(s, textDesc("f", "mine", epoch))
				ca.Committed(s, res, m)
				clk.Advance(testTTL / 2)
				lists, _, _ := cs.counts(s)
				st := mustState(t, ca, s)
				listed, _, _ := cs.counts(s)
				if fresh := listed == lists; fresh != c.fresh {
					t.Fatalf("state trusted without a LIST: %v, want %v", fresh, c.fresh)
				}
				if st.Version != res.Version || body(st, "f") != "mine" {
					t.Fatalf("state at version %d with f %q, want %d with mine", st.Version, body(st, "f"), res.Version)
				}
				clk.Advance(testTTL)
				mustState(t, ca, s)
				if again, _, _ := cs.counts(s); again == listed {
					t.Fatal("state still trusted a TTL after the commit")
				}
			})
		}
	})
}

// TestFreshnessOwnCommitsAfterEviction: an LRU eviction of a session
// this mount has just committed to does not hide that commit: the
// listing's summary (version 1, checked within the TTL) was the
// fingerprint the reload took, and Session.floor, the guard against a
// lagging listing, went with the evicted object, so the mount's own file
// was gone from its tree until the TTL ended (review 32).
func TestFreshnessOwnCommitsAfterEviction(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		c := newCache(t, w.store, Options{MetadataTTL: time.Hour, MaxSessions: 2})
		s := w.session()
		w.commit(s, textDesc("base", "0", epoch))
		others := []layout.SessionID{w.session(), w.session()}
		// ls -l sessions/: the listing's summaries, checked now.
		if _, err := c.ListSessions(bg); err != nil {
			t.Fatal(err)
		}
		mustState(t, c, s)
		// This mount writes a file (staging: MarkOf, Commit, Committed).
		mark := c.MarkOf(s)
		res := w.commit(s, textDesc("mine", "mine", epoch.Add(time.Minute)))
		c.Committed(s, res, mark)
		if st := mustState(t, c, s); st.Version != res.Version || body(st, "mine") != "mine" {
			t.Fatalf("right after the commit: version %d", st.Version)
		}
		// Reading two other sessions pushes s out of the LRU (MaxSessions 2).
		for _, o := range others {
			mustState(t, c, o)
		}
		if ev := c.Stats().Evictions; ev == 0 {
			t.Fatal("s was not evicted")
		}
		st := mustState(t, c, s)
		row, _ := c.registry.Get(s)
		if st.Version != res.Version || body(st, "mine") != "mine" {
			t.Fatalf("after an LRU eviction, the mount's own commit (version %d) is gone: state version %d, slots %v; registry row version %d updated_at %v",
				res.Version, st.Version, fmt.Sprint(slices.Sorted(maps.Keys(st.Slots()))), row.Version, row.UpdatedAt)
		}
	})
}

// TestFreshnessCheckTimeBeforeTheList: the check time is the time before
// the LIST, not when its answer arrived. A commit lands after the bucket
// answered and before the answer reached the cache; the first read a TTL
// after the LIST, not a TTL after the answer, sees it. The other
// freshness tests pass with the check time taken after the LIST
// (hourCheck.checked set when the pages arrive, freshVersion's after
// LatestVersion); this one does not (review 32).
func TestFreshnessCheckTimeBeforeTheList(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		clk := newClock()
		ls := &lateStore{Store: w2.store}
		c2 := newCache(t, ls, Options{MetadataTTL: testTTL, Now: clk.Now})
		s := w1.session()
		w1.commit(s, textDesc("f", "v1", epoch))
		mustState(t, c2, s)
		clk.Advance(testTTL)
		held, release := ls.hold()
		defer release()
		done := make(chan *State, 1)
		go func() {
			st, _ := c2.State(bg, s)
			done <- st
		}()
		<-held // the bucket answered version 1
		w1.commit(s, textDesc("f", "v2", epoch))
		clk.Advance(testTTL / 2) // the answer is slow to arrive
		release()
		if st := <-done; st == nil || st.Version != 1 {
			t.Fatalf("the held refresh: %v", st)
		}
		clk.Advance(testTTL * 3 / 4) // a TTL and a quarter after the LIST
		if st := mustState(t, c2, s); st.Version != 2 || body(st, "f") != "v2" {
			t.Fatalf("a TTL after the LIST: version %d (%q), want 2: the check time was taken after the LIST", st.Version, body(st, "f"))
		}
	})
}

// lateStore holds every LIST answer (a page shown, a result returned)
// until release: the bucket answered, the answer is still on its way.
type lateStore struct {
	Store
	mu   sync.Mutex
	gate chan struct{} // nil: no hold
	held chan struct{} // closed at the first hold
}

func (s *lateStore) hold() (held <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate, s.held = make(chan struct{}), make(chan struct{})
	g, h := s.gate, s.held
	var once sync.Once
	return h, func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate = nil
			s.mu.Unlock()
			close(g)
		})
	}
}

func (s *lateStore) wait() {
	s.mu.Lock()
	g, h := s.gate, s.held
	s.mu.Unlock()
	if g == nil {
		return
	}
	select {
	case <-h:
	default:
		close(h)
	}
	<-g
}

func (s *lateStore) LatestVersion(ctx context.Context, id layout.SessionID) (uint32, error) {
	v, err := s.Store.LatestVersion(ctx, id)
	s.wait()
	return v, err
}

func (s *lateStore) ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(key string, err error), shown func([]layout.ListedSession)) ([]layout.ListedSession, error) {
	out, err := s.Store.ListHourVersions(ctx, hour, maxPages, bad, func(f []layout.ListedSession) {
		s.wait()
		shown(f)
	})
	s.wait()
	return out, err
}

// TestFreshnessFloorOfALostVersion: when the version this mount
// committed is gone from the bucket (restored from a backup, the
// session's versions removed), the reload after an eviction follows the
// bucket: it built at the floor Cache.floors kept, a version the bucket
// does not have, and the session was a damaged one (EIO) for the rest of
// the mount (review 33).
func TestFreshnessFloorOfALostVersion(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		c := newCache(t, w.store, Options{})
		s := w.session()
		w.commit(s, textDesc("base", "0", epoch))
		mustState(t, c, s)
		mark := c.MarkOf(s)
		res := w.commit(s, textDesc("mine", "mine", epoch))
		c.Committed(s, res, mark)
		// The bucket is restored to before the commit.
		if err := w.raw.Delete(bg, snapshotKey(t, s, res.Version)); err != nil {
			t.Fatal(err)
		}
		c.Invalidate(s)
		c.Evict(s)
		st, err := c.State(bg, s)
		if err != nil {
			t.Fatalf("after Evict, the session whose version %d is gone from the bucket: %v", res.Version, err)
		}
		if st.Version != res.Version-1 {
			t.Errorf("state version %d, want %d", st.Version, res.Version-1)
		}
	})
}

// TestFreshnessFloorRaisedAfterEvictionRace: Committed takes its
// Session (entry) before it locks it and raises Cache.floors; a Session
// evicted in between and made again by another reader (entry) copied the
// floors before the raise, so it started without the commit's version,
// and a listing from before the commit hid the mount's own file until
// the TTL ended. A refresh reads the floor now (review 33).
func TestFreshnessFloorRaisedAfterEvictionRace(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		c := newCache(t, w.store, Options{MetadataTTL: time.Hour})
		s := w.session()
		w.commit(s, textDesc("base", "0", epoch))
		if _, err := c.ListSessions(bg); err != nil {
			t.Fatal(err)
		}
		mustState(t, c, s)
		mark := c.MarkOf(s)
		res := w.commit(s, textDesc("mine", "mine", epoch.Add(time.Minute)))
		old := c.entry(s)
		old.mu.Lock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Committed(s, res, mark)
		}()
		if !waitBlockedOnMutex(t, "Committed", done) {
			t.Fatal("Committed did not wait for the session lock")
		}
		c.Evict(s) // LRU pressure between entry() and s.mu.Lock
		c.entry(s) // another reader makes the Session again
		old.mu.Unlock()
		<-done
		if st := mustState(t, c, s); st.Version != res.Version || body(st, "mine") != "mine" {
			t.Errorf("the mount's own commit (version %d) is hidden: state version %d", res.Version, st.Version)
		}
	})
}
