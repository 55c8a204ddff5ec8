package layout

import (
	"testing"

	"gocloud.dev/blob"
)

// §11.1: phase 1 records the fork in the parent's next snapshot; the child
// has no manifest and no snapshot yet. §17: branch discovery reports it.
func TestSection11_1_RecordForkOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		p := newSession(t, s)
		commit(t, s, p, Checkpoint, descs("x", "y")...)
		fd := desc("task", "do it")
		fd.Metadata = map[string]string{"role": "worker"}
		child, res, err := s.RecordFork(bg, p, ForkRequest{Descriptor: fd})
		if err != nil {
			t.Fatal(err)
		}
		if res.Version != 2 || len(res.Descriptors) != 1 {
			t.Fatalf("result %+v", res)
		}
		rec := res.Descriptors[0]
		if !rec.Fork || rec.TargetSession != child || rec.SequenceNumber != 3 || rec.Name != "task" {
			t.Fatalf("fork record %+v", rec)
		}
		if m, _ := s.ReadSnapshotMeta(bg, p, 2); m.Type != Checkpoint {
			t.Fatalf("fork snapshot type %s", m.Type)
		}
		if ok, err := s.SessionExists(bg, child); ok || err != nil {
			t.Fatalf("child manifest exists after phase 1: %v %v", ok, err)
		}
		_, err = s.LatestVersion(bg, child)
		wantErrIs(t, err, ErrSessionNotFound)
		pend, err := s.PendingForks(bg, p, 2)
		if err != nil || len(pend) != 1 || pend[0].Descriptor.TargetSession != child || pend[0].Version != 2 {
			t.Fatalf("pending %+v %v", pend, err)
		}
		if pend, _ := s.PendingForks(bg, p, 1); len(pend) != 0 {
			t.Fatalf("pending at 1: %+v", pend)
		}
		br, err := s.Branches(bg, p)
		if err != nil || len(br) != 1 || br[0] != (Branch{Child: child, Version: 2}) {
			t.Fatalf("branches %+v %v", br, err)
		}
		if _, _, err := s.RecordFork(bg, p, ForkRequest{Child: p, Descriptor: fd}); err == nil {
			t.Fatal("a session forked into itself")
		}
		if _, err := s.MaterializeFork(bg, PendingFork{Parent: p, Version: 1, Descriptor: desc("x", "x")}); err == nil {
			t.Fatal("materialised a descriptor that is not a fork record")
		}
	})
}

// §11.2: phase 2 creates the child manifest (parent, handler, agent and
// the fork descriptor's metadata; first-sequence-number = parent's last +
// 1, §7.3) and snapshot 1 (a checkpoint holding the renumbered copy with
// fork=false and no target). Running it again changes nothing.
func TestSection11_2_MaterializeIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		pm := s.NewRootManifest()
		pm.Agent, pm.Handler, pm.Name = "agent-1", "handler-1", "parent-name"
		if _, _, err := s.CreateSession(bg, pm); err != nil {
			t.Fatal(err)
		}
		p := pm.Session
		commit(t, s, p, Checkpoint, descs("x", "y")...)
		fd := desc("task", "do it")
		fd.Metadata = map[string]string{"role": "worker"}
		child, res, err := s.RecordFork(bg, p, ForkRequest{Descriptor: fd})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, p, Checkpoint, descs("later")...)
		pf := PendingFork{Parent: p, Version: res.Version, Descriptor: res.Descriptors[0]}
		for i := range 2 {
			m, err := s.MaterializeFork(bg, pf)
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			if m.Session != child || m.Parent == nil || *m.Parent != (ParentRef{p, 2}) || m.Agent != "agent-1" ||
				m.Handler != "handler-1" || m.Metadata["role"] != "worker" || m.Name != "" || m.FirstSequenceNumber != 4 {
				t.Fatalf("run %d: manifest %+v", i, m)
			}
			if v, err := s.LatestVersion(bg, child); err != nil || v != 1 {
				t.Fatalf("run %d: child latest %d %v", i, v, err)
			}
		}
		ds, err := s.ReadSnapshot(bg, child, 1)
		if err != nil || len(ds) != 1 {
			t.Fatal(ds, err)
		}
		d := ds[0]
		if d.Fork || !d.TargetSession.IsZero() || d.SequenceNumber != 4 || d.Name != "task" || d.Digest != fd.Digest || d.Metadata["role"] != "worker" {
			t.Fatalf("child descriptor %+v", d)
		}
		meta, _ := s.ReadSnapshotMeta(bg, child, 1)
		if meta.Type != Checkpoint || meta.TransactionID == 0 || meta.Session != child.String() {
			t.Fatalf("child snapshot meta %+v", meta)
		}
		if pend, _ := s.PendingForks(bg, p, 2); len(pend) != 0 {
			t.Fatalf("still pending after materialisation: %+v", pend)
		}
		// The child's next commit continues its own numbering.
		r := commit(t, s, child, Checkpoint, descs("c")...)
		checkSeqs(t, r.Descriptors, 5)
		// A later materialisation run leaves the child alone.
		if _, err := s.MaterializeFork(bg, pf); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.LatestVersion(bg, child); v != 2 {
			t.Fatalf("child latest %d", v)
		}
	})
}

// §11.2 crash recovery: phase 2 interrupted between the manifest and
// snapshot 1 completes on the next run; losing the snapshot-1 race is
// success (§13.6).
func TestSection11_2_CrashBetweenManifestAndSnapshot(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		p := newSession(t, s)
		commit(t, s, p, Checkpoint, descs("x")...)
		child, res, err := s.RecordFork(bg, p, ForkRequest{Descriptor: desc("task", "t")})
		if err != nil {
			t.Fatal(err)
		}
		// The crashed run wrote only the manifest.
		if _, created, err := s.CreateSession(bg, &Manifest{Session: child, Parent: &ParentRef{p, 2}, FirstSequenceNumber: 3}); err != nil || !created {
			t.Fatal(created, err)
		}
		if v, _ := s.LatestVersion(bg, child); v != 0 {
			t.Fatalf("latest %d", v)
		}
		pend, _ := s.PendingForks(bg, p, 2)
		if len(pend) != 1 {
			t.Fatalf("half-materialised fork not pending: %+v", pend)
		}
		m, err := s.MaterializeFork(bg, pend[0])
		if err != nil || m.FirstSequenceNumber != 3 {
			t.Fatalf("%+v %v", m, err)
		}
		ds, err := s.ReadSnapshot(bg, child, 1)
		if err != nil || len(ds) != 1 || ds[0].SequenceNumber != 3 || ds[0].Fork {
			t.Fatalf("%+v %v", ds, err)
		}
		// Snapshot 1 written by a concurrent run: commitAt reports the
		// precondition failure as "not landed", which phase 2 accepts.
		landed, err := s.commitAt(bg, child, 1, Checkpoint, NewTransactionID(), ds)
		if err != nil || landed {
			t.Fatalf("second snapshot 1: landed=%v err=%v", landed, err)
		}
		_ = res
	})
}

// §17: branch discovery walks every snapshot of the parent and reports
// each child once, materialised or not.
func TestSection17_BranchDiscovery(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		p := newSession(t, s)
		if br, err := s.Branches(bg, p); err != nil || len(br) != 0 {
			t.Fatalf("no snapshots: %v %v", br, err)
		}
		_, err := s.Branches(bg, NewSessionID(testNow))
		wantErrIs(t, err, ErrSessionNotFound)
		c1, err := s.Fork(bg, p, ForkRequest{Descriptor: desc("one", "1")})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, p, Provisional, descs("noise")...)
		c2, _, err := s.RecordFork(bg, p, ForkRequest{Descriptor: desc("two", "2")}) // pending
		if err != nil {
			t.Fatal(err)
		}
		// Two fork records in one snapshot, one a legacy form re-targeting c1.
		c3 := NewSessionID(testNow)
		f3 := desc("three", "3")
		f3.Fork, f3.TargetSession = true, c3
		again := desc("one-again", "1")
		again.Fork, again.TargetSession = true, c1
		commit(t, s, p, Checkpoint, f3, again)
		br, err := s.Branches(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		want := []Branch{{c1, 1}, {c2, 3}, {c3, 4}}
		if len(br) != len(want) {
			t.Fatalf("branches %+v, want %+v", br, want)
		}
		for i := range want {
			if br[i] != want[i] {
				t.Fatalf("branches %+v, want %+v", br, want)
			}
		}
		// A child's branches do not include its siblings.
		if cb, err := s.Branches(bg, c1); err != nil || len(cb) != 0 {
			t.Fatalf("child branches %+v %v", cb, err)
		}
	})
}

// §11.3: a full scan of a fork walks its parent chain with the fork
// records of the parent's other children (its siblings) filtered out,
// and keeps the one that made it: all were dropped, so a child's
// log.jsonl lacked its own fork record (audit 26). Two levels: the
// grandchild's scan keeps the parent's record of the child it descends
// from and the child's record of it.
func TestSection11_3_OwnForkRecordInFullLog(t *testing.T) {
	s := newStore(t, memBucket(), nil)
	p := newSession(t, s)
	commit(t, s, p, Checkpoint, descs("x")...)
	a, err := s.Fork(bg, p, ForkRequest{Descriptor: desc("a-task", "a")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Fork(bg, p, ForkRequest{Descriptor: desc("b-task", "b")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Fork(bg, b, ForkRequest{Descriptor: desc("g-task", "g")})
	if err != nil {
		t.Fatal(err)
	}
	forks := func(id SessionID) []SessionID {
		t.Helper()
		v, err := s.LatestVersion(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		log, err := s.FullLog(bg, id, v)
		if err != nil {
			t.Fatal(err)
		}
		var out []SessionID
		for _, e := range log {
			if e.Fork {
				out = append(out, e.TargetSession)
			}
		}
		return out
	}
	if got := forks(a); len(got) != 1 || got[0] != a {
		t.Errorf("fork records in the scan of a: %v, want a's own only", got)
	}
	if got := forks(b); len(got) != 2 || got[0] != b || got[1] != g {
		t.Errorf("fork records in the scan of b: %v, want the one that made it (not its sibling a's) and its own of g", got)
	}
	if got := forks(g); len(got) != 2 || got[0] != b || got[1] != g {
		t.Errorf("fork records in the scan of g: %v, want b's (in p) and g's (in b)", got)
	}
	if got := forks(p); len(got) != 2 {
		t.Errorf("fork records in p's own scan: %v, want both of its own", got)
	}
}
