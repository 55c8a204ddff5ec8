package cache

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// metaCounter is a MetaStore that counts ReadSnapshotMeta calls, holds
// each for a while (a remote bucket's round trip) so that reads issued
// together are seen together, and fails the versions in fail.
type metaCounter struct {
	MetaStore
	hold time.Duration
	fail map[uint32]bool

	mu             sync.Mutex // guards what follows
	read           []uint32
	inFlight, peak int
}

func (m *metaCounter) ReadSnapshotMeta(ctx context.Context, id layout.SessionID, v uint32) (layout.SnapshotMeta, error) {
	m.mu.Lock()
	m.read = append(m.read, v)
	m.inFlight++
	m.peak = max(m.peak, m.inFlight)
	m.mu.Unlock()
	time.Sleep(m.hold)
	m.mu.Lock()
	m.inFlight--
	m.mu.Unlock()
	if m.fail[v] {
		return layout.SnapshotMeta{}, errors.New("injected")
	}
	return m.MetaStore.ReadSnapshotMeta(ctx, id, v)
}

// The latest checkpoint under a run of provisional snapshots (a handler's
// inputs) is found reading the metadata newest first in windows that
// double, each window at once: one read when the latest snapshot is the
// checkpoint, and the right answer, errors included, whatever the window
// holds past it. One by one (as it was), the peak is 1 and the test fails.
func TestLatestCheckpointReadsWide(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	id := w.session()
	commit := func(typ layout.SnapshotType) {
		t.Helper()
		if _, err := w.store.Commit(bg, id, layout.CommitRequest{Type: typ, Descriptors: []layout.Descriptor{textDesc("f", string(typ), epoch)}}); err != nil {
			t.Fatal(err)
		}
	}
	commit(layout.Provisional) // 1
	commit(layout.Checkpoint)  // 2
	for range 9 {
		commit(layout.Provisional) // 3..11
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Second})
	for _, tc := range []struct {
		name     string
		at       uint32
		fail     map[uint32]bool
		want     uint32
		ok       bool
		err      bool
		reads    int // every version once: windows of 1, 2, 4 and the last 4
		wantPeak int
		hold     time.Duration
	}{
		{name: "the latest is the checkpoint", at: 2, want: 2, ok: true, reads: 1, wantPeak: 1},
		{name: "nine inputs above it", at: 11, want: 2, ok: true, reads: 11, wantPeak: 4, hold: 30 * time.Millisecond},
		{name: "none at or below", at: 1, want: 0, ok: false, reads: 1, wantPeak: 1},
		{name: "an unreadable one above it", at: 11, fail: map[uint32]bool{5: true}, err: true},
		{name: "an unreadable one below it", at: 11, fail: map[uint32]bool{1: true}, want: 2, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc := &metaCounter{MetaStore: w.store, hold: tc.hold, fail: tc.fail}
			v := c.NewViews(mc) // a fresh view: nothing read yet
			got, ok, err := v.LatestCheckpoint(bg, id, tc.at)
			if tc.err {
				if err == nil {
					t.Fatalf("checkpoint %d (%v), want the error of version 5", got, ok)
				}
				return
			}
			if err != nil || got != tc.want || ok != tc.ok {
				t.Fatalf("got %d %v %v, want %d %v", got, ok, err, tc.want, tc.ok)
			}
			if tc.reads > 0 && len(mc.read) != tc.reads {
				t.Errorf("read the metadata of %v, want %d reads", mc.read, tc.reads)
			}
			if tc.wantPeak > 0 && mc.peak < tc.wantPeak {
				t.Errorf("at most %d reads at once, want %d", mc.peak, tc.wantPeak)
			}
		})
	}
}

// Listing .pugmark/snapshots/ reads every version's metadata (each
// <N>.json shows it) wide in parallel, each once, and a second listing
// reads none: one after another, the peak is 1 and the test fails.
func TestPrefetchSnapshotMeta(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	id := w.session()
	var vers []uint32
	for v := range uint32(12) {
		if _, err := w.store.Commit(bg, id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{textDesc("f", "v", epoch)}}); err != nil {
			t.Fatal(err)
		}
		vers = append(vers, v+1)
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Second})
	mc := &metaCounter{MetaStore: w.store, hold: 20 * time.Millisecond}
	v := c.NewViews(mc)
	v.PrefetchSnapshotMeta(bg, id, vers)
	v.PrefetchSnapshotMeta(bg, id, vers)
	for _, ver := range vers {
		if m, err := v.SnapshotMeta(bg, id, ver); err != nil || m.Type != layout.Provisional {
			t.Fatalf("version %d: %+v, %v", ver, m, err)
		}
	}
	if len(mc.read) != len(vers) || mc.peak < 4 {
		t.Fatalf("read the metadata of %v, at most %d at once; want each of the %d versions once, 4 or more at once", mc.read, mc.peak, len(vers))
	}
}
