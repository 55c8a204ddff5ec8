package layout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/layout/faultblob"
)

// §6.5 and §11.3: the full state is the parent chain (each ancestor up to
// the version its child was taken from, with the fork records of sessions
// off the chain, the siblings, dropped) then
// the session's own snapshots in version order, descriptors in stored
// order; a delta is one snapshot.
func TestSection6_5_FullStateThroughParents(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		a := newSession(t, s)
		commit(t, s, a, Checkpoint, descs("a1", "a2")...)
		// Version 2 of a holds a fork into b and a sibling fork.
		b1, _, err := s.RecordFork(bg, a, ForkRequest{Descriptor: desc("forkB", "fb")})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, a, Checkpoint, descs("a3")...)
		sib, _, err := s.RecordFork(bg, a, ForkRequest{Descriptor: desc("forkSib", "fs")})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, a, Checkpoint, descs("a-after")...) // version 5: invisible to b
		if _, err := s.MaterializeFork(bg, PendingFork{Parent: a, Version: 4, Descriptor: mustForkRecord(t, s, a, 4, sib)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MaterializeFork(bg, PendingFork{Parent: a, Version: 2, Descriptor: mustForkRecord(t, s, a, 2, b1)}); err != nil {
			t.Fatal(err)
		}
		// b sees a@2: a1, a2 and the fork record that made it, then its
		// own.
		commit(t, s, b1, Checkpoint, descs("b2")...)
		c, _, err := s.RecordFork(bg, b1, ForkRequest{Descriptor: desc("forkC", "fc")})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, b1, Checkpoint, descs("b-after")...)
		if _, err := s.MaterializeFork(bg, PendingFork{Parent: b1, Version: 3, Descriptor: mustForkRecord(t, s, b1, 3, c)}); err != nil {
			t.Fatal(err)
		}
		commit(t, s, c, Checkpoint, descs("c2", "c3")...)

		chain, err := s.ParentChain(bg, c)
		if err != nil || len(chain) != 2 || chain[0] != (Ancestor{a, 2}) || chain[1] != (Ancestor{b1, 3}) {
			t.Fatalf("chain %+v %v", chain, err)
		}
		log, err := s.FullLog(bg, c, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(log); got != "a1,a2,forkB,forkB,b2,forkC,forkC,c2,c3" {
			t.Fatalf("full log of c = %s", got)
		}
		// The parents' fork records of the chain (a's of b, b's of c) are
		// visible up to their versions (§6.5), each followed, in the
		// child, by its own snapshot-1 copy; a's sibling fork is not.
		var forks []SessionID
		for _, e := range log {
			if e.Fork {
				forks = append(forks, e.TargetSession)
			}
		}
		if len(forks) != 2 || forks[0] != b1 || forks[1] != c {
			t.Fatalf("fork records in c's chain: %v, want a's of b and b's of c", forks)
		}
		if log[3].Session != b1 || log[3].Version != 1 || log[6].Session != c || log[6].Version != 1 {
			t.Fatalf("entries %+v", log)
		}
		// §7.3: each child's numbering starts after its parent's last
		// sequence number at the fork, the fork record's, so the chain
		// counts without a gap.
		for i, want := range []int64{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			if log[i].SequenceNumber != want {
				t.Fatalf("entry %d %q: sequence %d, want %d", i, log[i].Name, log[i].SequenceNumber, want)
			}
		}
		// State at an old version.
		old, err := s.FullLog(bg, c, 1)
		if err != nil || names(old) != "a1,a2,forkB,forkB,b2,forkC,forkC" {
			t.Fatalf("c@1 = %s %v", names(old), err)
		}
		at0, err := s.FullLog(bg, c, 0)
		if err != nil || names(at0) != "a1,a2,forkB,forkB,b2,forkC" {
			t.Fatalf("c@0 = %s %v", names(at0), err)
		}
		// The parent's own log keeps its fork records (§17) and sees its
		// later versions.
		alog, err := s.FullLog(bg, a, 5)
		if err != nil || names(alog) != "a1,a2,forkB,a3,forkSib,a-after" {
			t.Fatalf("a = %s %v", names(alog), err)
		}
		a2, _ := s.FullLog(bg, a, 2)
		if names(a2) != "a1,a2,forkB" {
			t.Fatalf("a@2 = %s", names(a2))
		}
		// The sibling does not see b's or c's snapshots, nor forkB's
		// record; it sees its own.
		slog, err := s.FullLog(bg, sib, 1)
		if err != nil || names(slog) != "a1,a2,a3,forkSib,forkSib" {
			t.Fatalf("sibling = %s %v", names(slog), err)
		}
		// A delta is one snapshot.
		delta, err := s.ReadSnapshot(bg, c, 2)
		if err != nil || len(delta) != 2 || delta[0].Name != "c2" {
			t.Fatalf("delta %+v %v", delta, err)
		}
		// Slots: the child's view.
		slots := Slots(log)
		for _, n := range []string{"a1", "a2", "forkB", "b2", "forkC", "c2", "c3"} {
			if _, ok := slots[n]; !ok {
				t.Fatalf("slot %s missing from %v", n, slots)
			}
		}
		if _, ok := slots["a3"]; ok {
			t.Fatal("a3 (after the fork point) visible in the child")
		}
		// Past the latest version: not found.
		_, err = s.FullLog(bg, c, 3)
		wantErrIs(t, err, ErrNotFound)
	})
}

func mustForkRecord(t *testing.T, s *Store, parent SessionID, v uint32, child SessionID) Descriptor {
	t.Helper()
	ds, err := s.ReadSnapshot(bg, parent, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Fork && d.TargetSession == child {
			return d
		}
	}
	t.Fatalf("no fork record for %s at %s@%d", child, parent, v)
	return Descriptor{}
}

// §10: the last descriptor for a name wins, a tombstone reads as not found,
// and full scans yield tombstones.
func TestSection10_Tombstones(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		p := newSession(t, s)
		commit(t, s, p, Checkpoint, desc("x", "1"), desc("y", "1"), desc("z", "1"))
		commit(t, s, p, Checkpoint, desc("x", "2"), Descriptor{Name: "y", Deleted: true})
		child, err := s.Fork(bg, p, ForkRequest{Descriptor: desc("child-input", "c")})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, child, Checkpoint, Descriptor{Name: "z", Deleted: true}, desc("y", "3"))
		commit(t, s, child, Checkpoint, Descriptor{Name: "x", Deleted: true}, desc("x", "4"), Descriptor{Name: "x", Deleted: true})

		plog, _ := s.FullLog(bg, p, 2)
		if e, ok := Lookup(plog, "x"); !ok || string(e.Data) != "2" || e.Version != 2 {
			t.Fatalf("x = %+v %v", e, ok)
		}
		if _, ok := Lookup(plog, "y"); ok {
			t.Fatal("tombstoned y found")
		}
		if e, ok := Lookup(plog, "nope"); ok || e.Name != "" {
			t.Fatal("found a name never written")
		}
		tombs := 0
		for _, e := range plog {
			if e.Deleted {
				tombs++
			}
		}
		if tombs != 1 {
			t.Fatalf("full scan yielded %d tombstones, want 1", tombs)
		}
		clog, _ := s.FullLog(bg, child, 3)
		slots := Slots(clog)
		if _, ok := slots["z"]; ok {
			t.Fatal("child tombstone did not hide the parent's z")
		}
		if e, ok := slots["y"]; !ok || string(e.Data) != "3" {
			t.Fatalf("re-added y = %+v %v", e, ok)
		}
		if _, ok := slots["x"]; ok {
			t.Fatal("x live after a final tombstone")
		}
		if _, ok := Lookup(clog, "x"); ok {
			t.Fatal("Lookup(x) live after a final tombstone")
		}
		if len(slots) != 2 { // y, child-input
			t.Fatalf("slots %v", slots)
		}
		// The parent is unaffected by the child's tombstones.
		if _, ok := Lookup(plog, "z"); !ok {
			t.Fatal("child tombstone leaked into the parent")
		}
		// Incremental application agrees with Slots.
		inc := map[string]Entry{}
		for _, e := range clog {
			ApplySlot(inc, e)
		}
		if len(inc) != len(slots) {
			t.Fatalf("ApplySlot %v vs Slots %v", inc, slots)
		}
	})
}

// writeManifest writes a manifest directly (for shapes Store refuses).
func writeManifest(t *testing.T, b *blob.Bucket, key string, m *Manifest) {
	t.Helper()
	body, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, b, key, body, nil)
}

// §6.5: a cyclic parent chain is ErrCorrupt, not a hang; so is a missing
// ancestor or an ancestor version that does not exist.
func TestSection6_5_CorruptParentChains(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		x, y, z := NewSessionID(testNow), NewSessionID(testNow), NewSessionID(testNow)
		kx, _ := ManifestKey(x)
		ky, _ := ManifestKey(y)
		kz, _ := ManifestKey(z)
		writeManifest(t, b, kx, &Manifest{Session: x, Parent: &ParentRef{y, 0}, FirstSequenceNumber: 1})
		writeManifest(t, b, ky, &Manifest{Session: y, Parent: &ParentRef{z, 0}, FirstSequenceNumber: 1})
		writeManifest(t, b, kz, &Manifest{Session: z, Parent: &ParentRef{x, 0}, FirstSequenceNumber: 1})
		done := make(chan error, 1)
		go func() { _, err := s.FullLog(bg, x, 0); done <- err }()
		select {
		case err := <-done:
			wantErrIs(t, err, ErrCorrupt)
		case <-time.After(20 * time.Second):
			t.Fatal("FullLog hangs on a cyclic parent chain")
		}
		_, err := s.ParentChain(bg, y)
		wantErrIs(t, err, ErrCorrupt)
		// Two-cycle.
		p, q := NewSessionID(testNow), NewSessionID(testNow)
		kp, _ := ManifestKey(p)
		kq, _ := ManifestKey(q)
		writeManifest(t, b, kp, &Manifest{Session: p, Parent: &ParentRef{q, 0}})
		writeManifest(t, b, kq, &Manifest{Session: q, Parent: &ParentRef{p, 0}})
		_, err = s.FullLog(bg, q, 0)
		wantErrIs(t, err, ErrCorrupt)
		// A missing ancestor.
		orphan := NewSessionID(testNow)
		ko, _ := ManifestKey(orphan)
		writeManifest(t, b, ko, &Manifest{Session: orphan, Parent: &ParentRef{NewSessionID(testNow), 1}})
		_, err = s.FullLog(bg, orphan, 0)
		wantErrIs(t, err, ErrNotFound)
		// An ancestor version far past its latest (a corrupt manifest) is
		// an error, not a 4-billion-entry allocation.
		root := newSession(t, s)
		commit(t, s, root, Checkpoint, desc("r", "1"))
		huge := NewSessionID(testNow)
		kh, _ := ManifestKey(huge)
		writeManifest(t, b, kh, &Manifest{Session: huge, Parent: &ParentRef{root, 1<<32 - 1}, FirstSequenceNumber: 2})
		_, err = s.FullLog(bg, huge, 0)
		wantErrIs(t, err, ErrNotFound)
		// A stray 00000001.json (version 2^32-1) in a session's snapshots
		// makes the latest version huge; readers fail instead of OOM.
		pre, _ := SnapshotsPrefix(root)
		putRaw(t, b, pre+"00000001.json", mustEncode(t, nil), nil)
		if _, err := s.Branches(bg, root); err == nil {
			t.Fatal("Branches over a gap succeeded")
		}
	})
}

// ReadSnapshotRange returns versions in order, whatever the parallelism.
func TestSection6_5_ReadSnapshotRange(t *testing.T) {
	s := newStore(t, memBucket(), nil)
	id := newSession(t, s)
	for i := range 40 {
		commit(t, s, id, Provisional, desc(strings.Repeat("n", i+1), "x"))
	}
	for _, par := range []int{0, 1, 3, 8, 100} {
		snaps, err := s.ReadSnapshotRange(bg, id, 3, 40, par)
		if err != nil || len(snaps) != 38 {
			t.Fatalf("par %d: %d %v", par, len(snaps), err)
		}
		for i, ds := range snaps {
			if len(ds[0].Name) != i+3 {
				t.Fatalf("par %d: snapshot %d holds %q", par, i+3, ds[0].Name)
			}
		}
	}
	if snaps, err := s.ReadSnapshotRange(bg, id, 5, 4, 1); err != nil || snaps != nil {
		t.Fatalf("empty range %v %v", snaps, err)
	}
	if _, err := s.ReadSnapshotRange(bg, id, 39, 41, 2); err == nil {
		t.Fatal("range past the latest succeeded")
	}
	ctx, cancel := contextWithCancel()
	cancel()
	if _, err := s.ReadSnapshotRange(ctx, id, 1, 40, 2); err == nil {
		t.Fatal("cancelled range read succeeded")
	}
}

// historySession writes a session of n snapshots straight into b (one
// descriptor each, sequence numbers contiguous), faster than n commits.
func historySession(t *testing.T, s *Store, b *blob.Bucket, n int) SessionID {
	t.Helper()
	id := newSession(t, s)
	for v := 1; v <= n; v++ {
		d := desc(fmt.Sprintf("f%05d", v), "x")
		d.SequenceNumber = int64(v)
		putSnapshot(t, b, id, uint32(v), map[string]string{"pugmark-type": string(Provisional)}, d)
	}
	return id
}

// A first load of a long history keeps par reads in flight from the first
// version to the last, across the result windows: seen by stalling every
// snapshot GET and counting the ones that reach the bucket at once.
func TestReadSnapshotRangeIsWide(t *testing.T) {
	mem := memBucket()
	inj := faultblob.NewInjector(faultblob.Options{})
	s := newStore(t, faultblob.Wrap(mem, inj), nil)
	const n, par = 600, 64
	id := historySession(t, s, mem, n)
	pre, _ := SnapshotsPrefix(id)
	gate, release := inj.Stall(faultblob.OpGet, faultblob.Match{Prefix: pre})
	type res struct {
		snaps [][]Descriptor
		err   error
	}
	done := make(chan res, 1)
	go func() {
		snaps, err := s.ReadSnapshotRange(bg, id, 1, n, par)
		done <- res{snaps, err}
	}()
	for i := 0; gate.Waiting() < par; i++ {
		if i > 20000 {
			t.Fatalf("%d snapshot reads in flight at once, want %d", gate.Waiting(), par)
		}
		time.Sleep(time.Millisecond)
	}
	if w := gate.Waiting(); w != par {
		t.Fatalf("%d snapshot reads in flight at once, want exactly %d", w, par)
	}
	release()
	r := <-done
	if r.err != nil || len(r.snaps) != n {
		t.Fatalf("read %d snapshots, %v; want %d", len(r.snaps), r.err, n)
	}
	for i, ds := range r.snaps {
		if want := fmt.Sprintf("f%05d", i+1); len(ds) != 1 || ds[0].Name != want {
			t.Fatalf("version %d holds %v, want %s", i+1, ds, want)
		}
	}
	if got := inj.Stats().Ops[faultblob.OpGet].Requests; got != n {
		t.Errorf("%d snapshot GETs for %d versions, want one each", got, n)
	}
	if p := s.Stats().PeakInFlight; p != par {
		t.Errorf("store's peak in flight %d, want %d", p, par)
	}
}

// A range past the last snapshot fails at the missing version, having
// asked for little more than par versions beyond it; with a delay on
// every request the loads still overlap (counted, not timed).
func TestReadSnapshotRangeStopsAtTheEnd(t *testing.T) {
	mem := memBucket()
	inj := faultblob.NewInjector(faultblob.Options{CountPrefix: "sessions/"})
	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Latency: 2 * time.Millisecond})
	s := newStore(t, faultblob.Wrap(mem, inj), nil)
	const n, par = 300, 16
	id := historySession(t, s, mem, n)
	_, err := s.ReadSnapshotRange(bg, id, 1, 1<<31, par)
	wantErrIs(t, err, ErrNotFound)
	got := inj.Stats().Ops[faultblob.OpGet].Counted
	if got < n+1 || got > n+2*par {
		t.Errorf("%d snapshot GETs for a range past version %d, want %d to %d", got, n, n+1, n+2*par)
	}
	if p := s.Stats().PeakInFlight; p <= 1 {
		t.Errorf("peak in flight %d: the reads did not overlap", p)
	}
}

// One slow snapshot does not hold up the reads of the others: with
// version 1 stalled, every other version of a history longer than a
// result window is still asked for.
func TestReadSnapshotRangeSlowVersionHoldsUpNothing(t *testing.T) {
	mem := memBucket()
	inj := faultblob.NewInjector(faultblob.Options{})
	s := newStore(t, faultblob.Wrap(mem, inj), nil)
	const n = 700
	id := historySession(t, s, mem, n)
	k1, _ := SnapshotKey(id, 1)
	gate, release := inj.Stall(faultblob.OpGet, faultblob.Match{Prefix: k1})
	done := make(chan error, 1)
	go func() {
		snaps, err := s.ReadSnapshotRange(bg, id, 1, n, 16)
		if err == nil && len(snaps) != n {
			err = fmt.Errorf("%d snapshots", len(snaps))
		}
		done <- err
	}()
	for i := 0; inj.Stats().Ops[faultblob.OpGet].Requests < n; i++ {
		if i > 20000 {
			t.Fatalf("with version 1 stalled, %d of %d versions were asked for", inj.Stats().Ops[faultblob.OpGet].Requests, n)
		}
		time.Sleep(time.Millisecond)
	}
	if w := gate.Waiting(); w != 1 {
		t.Errorf("%d reads stalled, want version 1's", w)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAppendTime: the rule for a session's last content append, shared by
// the session state, its summary and history views: fork records do not
// count, a snapshot of content without times says content but no time.
func TestAppendTime(t *testing.T) {
	t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	for _, c := range []struct {
		name    string
		ds      []Descriptor
		want    time.Time
		content bool
	}{
		{"empty", nil, time.Time{}, false},
		{"newest wins", []Descriptor{{CreatedAt: t2}, {CreatedAt: t1}}, t2, true},
		{"fork records are not content", []Descriptor{{CreatedAt: t2, Fork: true}, {CreatedAt: t1}}, t1, true},
		{"only fork records", []Descriptor{{CreatedAt: t2, Fork: true}}, time.Time{}, false},
		{"content without times", []Descriptor{{Name: "a"}}, time.Time{}, true},
	} {
		got, content := AppendTime(c.ds)
		if !got.Equal(c.want) || content != c.content {
			t.Errorf("%s: AppendTime = %v, %v; want %v, %v", c.name, got, content, c.want, c.content)
		}
	}
}
