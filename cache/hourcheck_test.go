package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// A traversal of many sessions re-checks them by hour partition: once
// the TTL has passed, the re-checks of every session of an hour cost one
// LIST of the hour, shared by the callers that come while it runs, not a
// LIST per session; and they still see another mount's commits. A
// session this mount was told changed (Invalidate) is asked alone.
func TestFreshnessByHour(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		clk := newClock()
		c2 := newCache(t, w2.store, Options{MetadataTTL: testTTL, Now: clk.Now})
		const n = 12
		ids := make([]layout.SessionID, n)
		hours := map[uint32]bool{} // a run across an hour boundary has two
		for i := range ids {
			ids[i] = w1.session()
			w1.commit(ids[i], textDesc("f", "v1", epoch))
			hours[ids[i].Hour()] = true
		}
		h := int64(len(hours))
		stateAll := func() {
			t.Helper()
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Go(func() { mustState(t, c2, id) })
			}
			wg.Wait()
		}
		expect := func(what string, checks, hourChecks int64) {
			t.Helper()
			if st := c2.Stats(); st.Checks != checks || st.HourChecks != hourChecks {
				t.Fatalf("%s: %d session LISTs and %d hour LISTs, want %d and %d", what, st.Checks, st.HourChecks, checks, hourChecks)
			}
		}

		stateAll()
		expect("first loads of 12 sessions", 0, h)
		w1.commit(ids[3], textDesc("f", "v2", epoch))
		stateAll()
		expect("within the TTL", 0, h)
		if st := mustState(t, c2, ids[3]); st.Version != 1 {
			t.Fatalf("within the TTL: version %d", st.Version)
		}

		clk.Advance(testTTL)
		stateAll()
		expect("re-checks after the TTL", 0, 2*h)
		for i, id := range ids {
			want := uint32(1)
			if i == 3 {
				want = 2
			}
			if st := mustState(t, c2, id); st.Version != want || body(st, "f") != fmt.Sprintf("v%d", want) {
				t.Fatalf("session %d after the TTL: version %d, %q; want %d", i, st.Version, body(st, "f"), want)
			}
		}

		w1.commit(ids[4], textDesc("f", "v2", epoch))
		c2.Invalidate(ids[4])
		if st := mustState(t, c2, ids[4]); st.Version != 2 {
			t.Fatalf("after Invalidate: version %d, want 2", st.Version)
		}
		expect("a session invalidated within the TTL", 1, 2*h)
	})
}

// An hour check the bucket did not answer in time fails the re-check
// that waited for it: asking again for the one session would make its
// caller wait a second time on a silent bucket.
func TestHourCheckTimeoutFailsOnce(t *testing.T) {
	w := newWorld(t, memblob.OpenBucket(nil))
	cs := newCountingStore(w.store)
	clk := newClock()
	c := newCache(t, cs, Options{MetadataTTL: testTTL, Now: clk.Now})
	s := w.session()
	w.commit(s, textDesc("f", "v1", epoch))
	mustState(t, c, s)
	clk.Advance(testTTL)
	hour, err := layout.HourPrefix(s.Hour())
	if err != nil {
		t.Fatal(err)
	}
	w.inj.Add(faultblob.Rule{Ops: faultblob.OpList, Match: faultblob.Match{Prefix: hour}, FailProb: 1,
		Err: fmt.Errorf("no answer: %w", context.DeadlineExceeded)})
	before, _, _ := cs.counts(s)
	if _, err := c.State(bg, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("re-check on a silent bucket: %v, want DeadlineExceeded", err)
	}
	if after, _, _ := cs.counts(s); after != before {
		t.Fatalf("%d LISTs of the session's own after its hour's LIST timed out, want none", after-before)
	}
}

// A session an hour check's first page shows in full is answered from
// that page while the check goes on: the one session of an hour holding
// thousands of versions waits neither for the pages after it nor for a
// LIST of its own. A session the pages allowed do not reach is asked
// alone once the check ends.
func TestHourCheckAnswersByPage(t *testing.T) {
	w := newWorld(t, memblob.OpenBucket(nil))
	s := w.session()
	w.commit(s, textDesc("f", "v1", epoch))
	w.commit(s, textDesc("f", "v2", epoch))
	past := s
	past[len(past)-1] ^= 0xff // same hour, not on the first page
	if _, _, err := w.store.CreateSession(bg, &layout.Manifest{Session: past, FirstSequenceNumber: 1}); err != nil {
		t.Fatal(err)
	}
	w.commit(past, textDesc("f", "p1", epoch))
	ps := &pagedStore{Store: w.store, past: past, rest: make(chan struct{})}
	c := newCache(t, ps, Options{MetadataTTL: testTTL, Now: newClock().Now})
	var once sync.Once
	release := func() { once.Do(func() { close(ps.rest) }) }
	t.Cleanup(release)

	if st := mustState(t, c, s); st.Version != 2 || body(st, "f") != "v2" {
		t.Fatalf("from the first page: version %d, %q; want 2, v2", st.Version, body(st, "f"))
	}
	if st := c.Stats(); st.Checks != 0 || st.HourChecks != 1 {
		t.Fatalf("from the first page: %d session LISTs and %d hour checks, want 0 and 1", st.Checks, st.HourChecks)
	}
	got := make(chan *State)
	go func() { got <- mustState(t, c, past) }()
	release()
	if st := <-got; st.Version != 1 || body(st, "f") != "p1" {
		t.Fatalf("past the pages: version %d, %q; want 1, p1", st.Version, body(st, "f"))
	}
	if st := c.Stats(); st.Checks != 1 || st.HourChecks != 1 {
		t.Fatalf("past the pages: %d session LISTs and %d hour checks, want 1 and 1", st.Checks, st.HourChecks)
	}
}

// pagedStore's hour checks show a first page without past, then hold
// the rest of the hour until rest is closed and end as a long hour.
type pagedStore struct {
	Store
	past layout.SessionID
	rest chan struct{}
}

func (p *pagedStore) ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(string, error), shown func([]layout.ListedSession)) ([]layout.ListedSession, error) {
	found, err := p.Store.ListHourVersions(ctx, hour, maxPages, bad, nil)
	if err != nil {
		return nil, err
	}
	found = slices.DeleteFunc(found, func(l layout.ListedSession) bool { return l.ID == p.past })
	shown(found)
	<-p.rest
	return found, layout.ErrLongPartition
}
