package cache

import (
	"fmt"
	"sync"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
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
