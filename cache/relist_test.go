package cache

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// A freshness pass that knows hours (from its last pass, or from the
// summary file of an earlier mount) sends the partition walk's LISTs and
// those hours' LISTs together: one round trip deep, not five. Counted
// with a gate that holds every LIST until all of them wait on it.
func TestRelistingSendsKnownHoursAtOnce(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	for range 3 {
		w.commit(w.session(), textDesc("x", "1", epoch))
	}
	// The sessions share the hour of their creation: sessions/, year=,
	// month=, day= and the hour itself.
	const lists = 5
	path := filepath.Join(t.TempDir(), "summaries")
	clk := newClock()
	c1 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: testTTL, Now: clk.Now})
	if ls, err := c1.ListSessions(bg); err != nil || len(ls) != 3 {
		t.Fatalf("first pass: %d sessions, %v", len(ls), err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: testTTL, Now: clk.Now})

	for _, tt := range []struct {
		name string
		c    *Cache
	}{
		{"same mount after the TTL", c1},
		{"fresh mount with the summary file", c2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(2 * testTTL)
			gate, release := w.inj.Stall(faultblob.OpList, faultblob.Match{})
			defer release()
			before := w.store.Stats().Lists
			done := make(chan error, 1)
			go func() {
				ls, err := tt.c.ListSessions(bg)
				if err == nil && len(ls) != 3 {
					err = fmt.Errorf("%d sessions, want 3", len(ls))
				}
				done <- err
			}()
			waitFor(t, fmt.Sprintf("%d LISTs in flight at once", lists),
				func() bool { return gate.Waiting() >= lists })
			release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := w.store.Stats().Lists - before; n != lists {
				t.Fatalf("%d LISTs, want %d", n, lists)
			}
		})
	}
}
