package cache

import (
	"slices"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestPrefetchHours: once two hours in a row are listed (ls by-hour/*/
// lists its arguments in the hours' order), the next ones are listed
// all at once, each once, and their own listings then send nothing; one
// hour listed alone lists nothing more. 48 hours 20 ms away took 1.2 s,
// one LIST after another.
func TestPrefetchHours(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	const n = 6
	var hours []uint32
	for i := range n {
		m := &layout.Manifest{Session: layout.NewSessionID(start.Add(time.Duration(i) * time.Hour)), FirstSequenceNumber: 1}
		if _, created, err := w.store.CreateSession(bg, m); err != nil || !created {
			t.Fatalf("create session: %v, %v", created, err)
		}
		hours = append(hours, m.Session.Hour())
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Hour})
	if hs, err := c.Hours(bg); err != nil || len(hs) != n {
		t.Fatalf("hours: %v, %v", hs, err)
	}
	lists := func() int64 { return w.inj.Stats().Ops[faultblob.OpList].Requests }
	list := func(h uint32) {
		t.Helper()
		if ids, err := c.HourSessions(bg, h); err != nil || len(ids) != 1 {
			t.Fatalf("hour %d: %v, %v", h, ids, err)
		}
	}

	before := lists()
	c.PrefetchHours(bg, hours[0])
	list(hours[0])
	if got := lists() - before; got != 1 {
		t.Fatalf("the first hour listed alone sent %d LISTs, want its own 1", got)
	}

	gate, release := w.inj.Stall(faultblob.OpList, faultblob.Match{})
	done := make(chan struct{})
	go func() { defer close(done); c.PrefetchHours(bg, hours[1]) }()
	// The hours after the second one, all in flight at once.
	for deadline := time.Now().Add(10 * time.Second); gate.Waiting() < n-2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			release()
			t.Fatalf("%d LISTs in flight at once, want the %d hours after the second", gate.Waiting(), n-2)
		}
	}
	release()
	<-done
	list(hours[1])
	before = lists()
	for _, h := range hours[2:] {
		list(h)
	}
	if got := lists() - before; got != 0 {
		t.Fatalf("the hours read ahead sent %d LISTs more when listed", got)
	}
}

// TestHourPartitionAfterSessionList: an hour partition whose only key
// is no session, which Hours lists from a fresh walk, exists for
// HourPartition also once a full session list is fresh (ls sessions/),
// which it answered from, saying it did not: by-hour/ showed the hour
// and its lookup was ENOENT (review 30).
func TestHourPartitionAfterSessionList(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	m := &layout.Manifest{Session: layout.NewSessionID(start), FirstSequenceNumber: 1}
	if _, created, err := w.store.CreateSession(bg, m); err != nil || !created {
		t.Fatalf("create session: %v, %v", created, err)
	}
	empty := m.Session.Hour() + 3
	prefix, err := layout.HourPrefix(empty)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.raw.WriteAll(bg, prefix+"not-a-session/manifest.json", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Hour})
	hs, err := c.Hours(bg)
	if err != nil || !slices.Contains(hs, empty) {
		t.Fatalf("hours %v, %v: want the partition with no session among them", hs, err)
	}
	if _, err := c.Sessions(bg); err != nil {
		t.Fatal(err)
	}
	hs, _ = c.Hours(bg)
	_, exists, err := c.HourPartition(bg, empty)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(hs, empty) && !exists {
		t.Fatalf("Hours lists hour %d (%v) but HourPartition says it does not exist: by-hour/ lists a name whose lookup is ENOENT", empty, hs)
	}
}
