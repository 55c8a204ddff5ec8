package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
)

// countedSession is a new session on b and a cache over a counting store
// of it, with the tests' TTL.
func countedSession(t *testing.T, b *blob.Bucket) (*world, *countingStore, *Cache, layout.SessionID) {
	t.Helper()
	w := newWorld(t, b)
	cs := newCountingStore(w.store)
	return w, cs, newCache(t, cs, Options{MetadataTTL: testTTL}), w.session()
}

// A first load reads the snapshots while it reads the manifest: the
// manifest read here returns only once a snapshot read has started, which
// a load reading them one after the other never sees. A session that does
// not exist is still not found, whatever its snapshot reads say.
func TestFirstLoadReadsManifestAndSnapshotsTogether(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w, cs, c, s := countedSession(t, b)
		w.commit(s, textDesc("f", "v1", epoch))
		w.commit(s, textDesc("g", "v2", epoch))
		started := make(chan struct{})
		var once sync.Once
		cs.beforeRange = func(ctx context.Context, id layout.SessionID) { once.Do(func() { close(started) }) }
		cs.beforeManifest = func(ctx context.Context, id layout.SessionID) {
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Errorf("the manifest read of %s waited 5 s and no snapshot read started", id)
			}
		}
		if st := mustState(t, c, s); st.Version != 2 || body(st, "g") != "v2" {
			t.Fatalf("state: version %d, %q", st.Version, body(st, "g"))
		}
		cs.beforeManifest = nil
		if _, err := c.State(bg, layout.NewSessionID(time.Now())); !errors.Is(err, layout.ErrSessionNotFound) {
			t.Fatalf("a session that does not exist: %v, want ErrSessionNotFound", err)
		}
	})
}

// A load after a summary reads only the versions the summary did not:
// the latest snapshot, which the summary read for the session's time, is
// not fetched a second time.
func TestLoadAfterSummaryReadsLatestOnce(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w, cs, c, s := countedSession(t, b)
		for i := range 3 {
			w.commit(s, textDesc(fmt.Sprintf("f%d", i), "x", epoch.Add(time.Duration(i)*time.Minute)))
		}
		if _, at, err := c.Summary(bg, s); err != nil || !at.Equal(epoch.Add(2*time.Minute)) {
			t.Fatalf("summary: %v, %v", at, err)
		}
		if st := mustState(t, c, s); st.Version != 3 || len(st.Slots()) != 3 {
			t.Fatalf("state: version %d, %d files", st.Version, len(st.Slots()))
		}
		if got := strings.Join(cs.spans, " "); got != "3-3 1-2" {
			t.Fatalf("snapshot reads %q, want \"3-3 1-2\"", got)
		}
	})
}

// SlotAt is what SlotsAt holds for one name at every version, found
// without building the slots: puts, rewrites and tombstones in the own
// snapshots, over a parent's names (a fork), and names never written.
func TestStateSlotAt(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	parent := w.session()
	w.commit(parent, textDesc("p", "parent's", epoch), textDesc("a", "parent's a", epoch))
	id, err := w.store.Fork(bg, parent, layout.ForkRequest{Descriptor: textDesc("fork", "f", epoch)})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "p", "fork", "never"}
	for i := range 24 {
		n := names[i%3]
		d := textDesc(n, fmt.Sprintf("%s at %d", n, i), epoch.Add(time.Duration(i)*time.Second))
		if i%5 == 4 {
			d = layout.Descriptor{Name: n, Deleted: true, CreatedAt: d.CreatedAt}
		}
		w.commit(id, d)
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Hour})
	st := mustState(t, c, id)
	for v := range st.Version + 1 {
		all := st.SlotsAt(v)
		for _, n := range names {
			want, wok := all[n]
			got, ok := st.SlotAt(n, v)
			if ok != wok || ok && (got.Digest != want.Digest || got.Version != want.Version || got.Session != want.Session) {
				t.Errorf("SlotAt(%q, %d) = %+v, %v; SlotsAt holds %+v, %v", n, v, got, ok, want, wok)
			}
		}
	}
}
