package cache

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// The summary file: what one mount learnt a second mount sharing the
// cache directory confirms without reading a snapshot; two mounts both
// keep what they learnt; a damaged file is ignored, not believed.
func TestSummaryFile(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	a, b := w.session(), w.session()
	w.commit(a, textDesc("x", "1", epoch))
	w.commit(b, textDesc("y", "2", epoch))
	w.commit(b, textDesc("y", "3", epoch.Add(time.Minute)))
	path := filepath.Join(t.TempDir(), "summaries")

	// Each of two caches (two mounts) learns one session.
	c1 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: time.Minute})
	c2 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: time.Minute})
	_, atA, err := c1.Summary(bg, a)
	if err != nil {
		t.Fatal(err)
	}
	_, atB, err := c2.Summary(bg, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}

	// A third mount lists both without a snapshot read.
	before := w.store.Stats()
	c3 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: time.Minute})
	ls, err := c3.ListSessions(bg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[layout.SessionID]Listed{a: {a, 1, atA, true}, b: {b, 2, atB, true}}
	for _, l := range ls {
		if w, ok := want[l.ID]; !ok || !l.UpdatedAt.Equal(w.UpdatedAt) || l.Version != w.Version || !l.Known {
			t.Fatalf("listed %+v, want %+v", l, want[l.ID])
		}
	}
	if gets := w.store.Stats().Gets - before.Gets; gets != 0 || len(ls) != 2 {
		t.Fatalf("a mount with the summary file listed %d sessions with %d GETs, want 2 and none", len(ls), gets)
	}

	// Damaged: ignored, and the summaries are read again.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(summaryMagic)+3] ^= 1
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	before = w.store.Stats()
	c4 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: time.Minute})
	if _, err := c4.ListSessions(bg); err != nil {
		t.Fatal(err)
	}
	if gets := w.store.Stats().Gets - before.Gets; gets != 2 {
		t.Fatalf("with a damaged summary file: %d GETs, want 2 (nothing believed)", gets)
	}
}

// TestSummaryFileBucketWrittenAgain: a summary holds while the listings
// show the snapshot it came from with the stamp it was learnt with. A
// bucket emptied and written again with the same session ID and version
// shows another stamp, and the session's last append is read again (it
// showed the old time until the session was loaded and the TTL passed).
func TestSummaryFileBucketWrittenAgain(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	a := w.session()
	w.commit(a, textDesc("first.txt", "first", epoch))
	path := filepath.Join(t.TempDir(), "summaries")
	c1 := newCache(t, w.store, Options{SummaryPath: path, MetadataTTL: time.Minute})
	if _, err := c1.ListSessions(bg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first listing's summary", func() bool {
		ls, err := c1.ListSessions(bg)
		return err == nil && len(ls) == 1 && ls[0].Known
	})
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.raw.Delete(bg, snapshotKey(t, a, 1)); err != nil {
		t.Fatal(err)
	}
	later := epoch.Add(75 * time.Minute)
	w.commit(a, textDesc("second, longer name.txt", "second", later)) // version 1 again
	c2 := newCache(t, w.reopen().store, Options{SummaryPath: path, MetadataTTL: time.Minute})
	waitFor(t, "a listing of the session written again", func() bool {
		ls, err := c2.ListSessions(bg)
		return err == nil && len(ls) == 1 && ls[0].Known
	})
	ls, _ := c2.ListSessions(bg)
	if ls[0].Version != 1 || !ls[0].UpdatedAt.Equal(later) {
		t.Errorf("listed version %d, last append %v; want 1 and %v (the snapshot now under that key)", ls[0].Version, ls[0].UpdatedAt, later)
	}
}
