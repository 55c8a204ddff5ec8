package cache

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// laggingStore is a Store whose full listing of a session's snapshots
// (SnapshotVersions) shows none while lag is set: LIST may lag (§2.5)
// behind the listing the latest version came from.
type laggingStore struct {
	Store
	lag atomic.Bool
}

func (l *laggingStore) SnapshotVersions(ctx context.Context, id layout.SessionID) ([]uint32, error) {
	if l.lag.Load() {
		return nil, nil
	}
	return l.Store.SnapshotVersions(ctx, id)
}

// TestDamagedVersions: a damaged session's versions are those its
// listing shows, never nil (which the history reads as "every version up
// to the latest": 4,294,967,295 entries for a stray key, review 9), and
// a listing that lags behind the latest version is not kept: the next
// look lists again and finds them.
func TestDamagedVersions(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		st := &laggingStore{Store: w.store}
		c := newCache(t, st, Options{})
		s := w.session()
		w.commit(s, textDesc("f", "v1", epoch))
		w.commit(s, textDesc("g", "v2", epoch))
		w.commit(s, textDesc("h", "v3", epoch))
		// Snapshot 2 is corrupt: the session is damaged.
		if err := w.raw.WriteAll(bg, snapshotKey(t, s, 2), []byte("{not json"), nil); err != nil {
			t.Fatal(err)
		}
		st.lag.Store(true)
		if vers, err := c.DamagedVersions(bg, s); err != nil || vers == nil || len(vers) != 0 {
			t.Errorf("with the listing behind: %v, %v; want none listed, not nil", vers, err)
		}
		st.lag.Store(false)
		if vers, err := c.DamagedVersions(bg, s); err != nil || !slices.Equal(vers, []uint32{1, 2, 3}) {
			t.Errorf("once the listing caught up: %v, %v; want 1, 2, 3", vers, err)
		}
		if _, err := c.Snapshot(bg, s, 3); err != nil {
			t.Errorf("snapshot 3 beside the damaged 2: %v", err)
		}
	})
}

// TestDamagedLoadRemembered: a session whose load failed on a damaged
// snapshot answers that failure again without reading its snapshots
// while its latest version stays where it was, for up to damageRecheck:
// they are immutable. Every lookup past the TTL read them all again, and
// a snapshot decoding past the limit cost 0.14 s of CPU each time (audit
// 24). A new version, or the time passing, loads it again.
func TestDamagedLoadRemembered(t *testing.T) {
	w := newWorld(t, memblob.OpenBucket(nil))
	st := newCountingStore(w.store)
	now := time.Now()
	c := newCache(t, st, Options{Now: func() time.Time { return now }})
	s := w.session()
	w.commit(s, textDesc("f", "v1", epoch))
	w.commit(s, textDesc("g", "v2", epoch))
	if err := w.raw.WriteAll(bg, snapshotKey(t, s, 2), []byte("{not json"), nil); err != nil {
		t.Fatal(err)
	}
	load := func(what string, wantReads bool) {
		t.Helper()
		reads := func() int { st.mu.Lock(); defer st.mu.Unlock(); return st.ranges[s] }
		before := reads()
		if _, err := c.State(bg, s); !errors.Is(err, layout.ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", what, err)
		}
		if read := reads() > before; read != wantReads {
			t.Errorf("%s: read snapshots = %v, want %v", what, read, wantReads)
		}
	}
	load("first load", true)
	load("again, the same latest version", false)
	// Another writer's version 3 (layout's commit would refuse the
	// damaged session).
	if err := w.raw.WriteAll(bg, snapshotKey(t, s, 3), []byte("[]"), nil); err != nil {
		t.Fatal(err)
	}
	load("a new version", true)
	load("again", false)
	now = now.Add(damageRecheck)
	load("after damageRecheck", true)
}
