package cache

import (
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestFreezeHoldsStateAndSummary: while a session is frozen (pugfs exec's
// handler sees it at the base version for the whole run), its state and
// its summary (the session directory's mtime, the listing's version) stay
// at the frozen version whatever lands; thawed, they follow the bucket.
// The summary followed the bucket while frozen, and the handler's stat of
// its directory showed a late input's time over a tree without it
// (review 39).
func TestFreezeHoldsStateAndSummary(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	id := w.session()
	w.commit(id, textDesc("a.txt", "a\n", epoch))
	c := newCache(t, w.store, Options{})
	st := mustState(t, c, id)
	c.Freeze(st)
	w.commit(id, textDesc("late.txt", "late\n", epoch.Add(3600e9)))
	if got := mustState(t, c, id); got != st {
		t.Fatalf("frozen state moved to version %d", got.Version)
	}
	for name, summary := range map[string]func() (uint32, error){
		"Summary": func() (uint32, error) { v, _, err := c.Summary(bg, id); return v, err },
		"Find":    func() (uint32, error) { v, _, err := c.Find(bg, id); return v, err },
	} {
		if v, err := summary(); err != nil || v != st.Version {
			t.Errorf("%s of the frozen session: version %d, %v; want %d", name, v, err, st.Version)
		}
	}
	if _, at, _ := c.Summary(bg, id); !at.Equal(st.UpdatedAtVersion(st.Version)) {
		t.Errorf("the frozen session's last append %v, want %v", at, st.UpdatedAtVersion(st.Version))
	}
	c.Thaw()
	c.Invalidate(id)
	if got := mustState(t, c, id); got.Version != st.Version+1 {
		t.Errorf("thawed: version %d, want %d", got.Version, st.Version+1)
	}
}
