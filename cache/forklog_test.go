package cache

import (
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// TestLogKeepsOwnForkRecord: a fork's log (log.jsonl) holds the parent's
// fork record that made it and not its siblings' (§11.3), as the full
// scan does, also for two children forked by one parent snapshot, which
// share the parent's version: the parent's log is kept per child (the
// cached one of the first child named it to the second).
func TestLogKeepsOwnForkRecord(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	p := layout.NewSessionID(time.Now())
	if _, _, err := w.store.CreateSession(bg, &layout.Manifest{Session: p, FirstSequenceNumber: 1}); err != nil {
		t.Fatal(err)
	}
	var recs []layout.Descriptor
	var kids []layout.SessionID
	for _, name := range []string{"a", "b"} {
		d, err := w.store.PutBody(bg, name+"-task", []byte(name), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kid := layout.NewSessionID(time.Now())
		d.Fork, d.TargetSession, d.CreatedAt = true, kid, time.Now().UTC()
		recs, kids = append(recs, d), append(kids, kid)
	}
	res, err := w.store.Commit(bg, p, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: recs})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Descriptors {
		if _, err := w.store.MaterializeFork(bg, layout.PendingFork{Parent: p, Version: res.Version, Descriptor: d}); err != nil {
			t.Fatal(err)
		}
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Minute})
	for _, kid := range kids {
		st, err := c.State(bg, kid)
		if err != nil {
			t.Fatal(err)
		}
		var got []layout.SessionID
		for _, e := range st.Log(st.Version) {
			if e.Fork {
				got = append(got, e.TargetSession)
			}
		}
		if len(got) != 1 || got[0] != kid {
			t.Errorf("fork records in the log of %s: %v, want its own only", kid, got)
		}
		full, err := w.store.FullLog(bg, kid, st.Version)
		if err != nil {
			t.Fatal(err)
		}
		if len(full) != len(st.Log(st.Version)) {
			t.Errorf("log of %s: %d entries, the full scan %d", kid, len(st.Log(st.Version)), len(full))
		}
	}
}
