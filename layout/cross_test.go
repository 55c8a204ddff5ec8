package layout

import (
	"fmt"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout/faultblob"
)

// §12.2: the target receives a provisional snapshot of copies with
// target-session cleared, source-session/version set and its own sequence
// numbers; a second delivery of the same (source, version) is skipped;
// self-targets and fork records are not cross-session writes.
func TestSection12_2_DeliverCrossSession(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		w := newSession(t, s)
		t1, t2 := newSession(t, s), newSession(t, s)
		commit(t, s, t1, Checkpoint, descs("existing")...)
		x1, x2, x3 := desc("to-t1-a", "a"), desc("to-t1-b", "b"), desc("to-t2", "c")
		x1.TargetSession, x2.TargetSession, x3.TargetSession = t1, t1, t2
		self := desc("self", "s")
		self.TargetSession = w
		local := desc("local", "l")
		fork := desc("fork", "f")
		fork.Fork, fork.TargetSession = true, t2
		r := commit(t, s, w, Checkpoint, x1, local, self, x2, fork, x3)
		dl, err := s.DeliverCrossSession(bg, w, r.Version, r.Descriptors)
		if err != nil || len(dl) != 2 {
			t.Fatalf("deliveries %+v %v", dl, err)
		}
		for _, d := range dl {
			if d.Outcome != Delivered {
				t.Fatalf("outcome %+v", d)
			}
		}
		got := map[SessionID]Delivery{dl[0].Target: dl[0], dl[1].Target: dl[1]}
		if got[t1].Version != 2 || got[t2].Version != 1 {
			t.Fatalf("deliveries %+v", dl)
		}
		ds, err := s.ReadSnapshot(bg, t1, 2)
		if err != nil || len(ds) != 2 {
			t.Fatal(ds, err)
		}
		for i, d := range ds {
			if !d.TargetSession.IsZero() || d.SourceSession != w || d.SourceVersion != r.Version || d.Fork {
				t.Fatalf("delivered %+v", d)
			}
			if d.SequenceNumber != int64(2+i) {
				t.Fatalf("sequence %d", d.SequenceNumber)
			}
		}
		if ds[0].Name != "to-t1-a" || ds[1].Name != "to-t1-b" || ds[0].Digest != x1.Digest {
			t.Fatalf("delivered %+v", ds)
		}
		if m, _ := s.ReadSnapshotMeta(bg, t1, 2); m.Type != Provisional || m.TransactionID == 0 || m.Session != t1.String() {
			t.Fatalf("target snapshot meta %+v", m)
		}
		t2ds, _ := s.ReadSnapshot(bg, t2, 1)
		if len(t2ds) != 1 || t2ds[0].Name != "to-t2" || t2ds[0].SequenceNumber != 1 {
			t.Fatalf("t2 %+v", t2ds)
		}
		// The delivered copies are live slots in the target (§12.3).
		log, _ := s.FullLog(bg, t1, 2)
		if _, ok := Lookup(log, "to-t1-a"); !ok {
			t.Fatal("delivered write not visible in the target")
		}
		// Retry: already delivered, nothing new — even after the target moved on.
		commit(t, s, t1, Checkpoint, descs("after")...)
		dl, err = s.DeliverCrossSession(bg, w, r.Version, r.Descriptors)
		if err != nil || len(dl) != 2 || dl[0].Outcome != AlreadyDelivered || dl[1].Outcome != AlreadyDelivered {
			t.Fatalf("redelivery %+v %v", dl, err)
		}
		for _, d := range dl {
			if d.Version != got[d.Target].Version {
				t.Fatalf("already delivered at %d, want %d", d.Version, got[d.Target].Version)
			}
		}
		if v, _ := s.LatestVersion(bg, t1); v != 3 {
			t.Fatalf("t1 latest %d", v)
		}
		// A different source version of the same writer is a new batch.
		r2 := commit(t, s, w, Checkpoint, x1)
		dl, err = s.DeliverCrossSession(bg, w, r2.Version, r2.Descriptors)
		if err != nil || len(dl) != 1 || dl[0].Outcome != Delivered || dl[0].Version != 4 {
			t.Fatalf("second batch %+v %v", dl, err)
		}
		checkSeqs(t, allDescs(t, s, t1), 1)
		// Nothing to deliver.
		if dl, err := s.DeliverCrossSession(bg, w, 1, []Descriptor{local, self}); err != nil || len(dl) != 0 {
			t.Fatalf("%+v %v", dl, err)
		}
		// A target that is no session receives nothing, and says so: an
		// error would fail every later delivery of the writer too.
		lost := desc("lost", "x")
		lost.TargetSession = NewSessionID(testNow)
		dl, err = s.DeliverCrossSession(bg, w, 9, []Descriptor{lost})
		if err != nil || len(dl) != 1 || dl[0].Outcome != NoTarget || dl[0].Target != lost.TargetSession {
			t.Fatalf("%+v %v", dl, err)
		}
	})
}

// §13.5, §14.2: senders delivering to one target at once each land, at
// their own versions, and a batch delivered twice at once lands once. All
// three deliveries are held at their first PUT of the target's next
// version until each has reached it, so two of them are refused there.
func TestSection12_2_ConcurrentDeliveries(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		fb, inj, _ := faulty(t, b)
		s := newStore(t, fb, nil)
		target, w1, w2 := newSession(t, s), newSession(t, s), newSession(t, s)
		commit(t, s, target, Checkpoint, descs("existing")...)
		send := func(w SessionID, name string) CommitResult {
			d := desc(name, name)
			d.TargetSession = target
			return commit(t, s, w, Checkpoint, d)
		}
		r1, r2 := send(w1, "from-1"), send(w2, "from-2")
		prefix, _ := SnapshotsPrefix(target)
		gate := faultblob.NewGate()
		inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: prefix}, Stall: gate})
		type result struct {
			dl  []Delivery
			err error
		}
		runs := []struct {
			w SessionID
			r CommitResult
		}{{w1, r1}, {w1, r1}, {w2, r2}}
		results := make(chan result, len(runs))
		for _, run := range runs {
			go func() {
				dl, err := s.DeliverCrossSession(bg, run.w, run.r.Version, run.r.Descriptors)
				results <- result{dl, err}
			}()
		}
		waitFor(t, func() bool { return gate.Waiting() >= len(runs) },
			func() string { return fmt.Sprintf("%d of %d deliveries reached the gate", gate.Waiting(), len(runs)) })
		gate.Release()
		outcomes := map[DeliveryOutcome]int{}
		for range runs {
			res := <-results
			if res.err != nil || len(res.dl) != 1 {
				t.Fatalf("delivery %+v %v", res.dl, res.err)
			}
			outcomes[res.dl[0].Outcome]++
		}
		if outcomes[Delivered] != 2 || outcomes[AlreadyDelivered] != 1 {
			t.Fatalf("outcomes %v, want 2 delivered and 1 already delivered", outcomes)
		}
		all := allDescs(t, s, target)
		got := map[string]int{}
		for _, d := range all {
			got[d.Name]++
		}
		if got["from-1"] != 1 || got["from-2"] != 1 || len(all) != 3 {
			t.Fatalf("target holds %v", got)
		}
		checkSeqs(t, all, 1)
	})
}

// TestDeliverRefusedAsTaken: a delivery's create refused as taken
// while the version is not there (another writer's create in flight,
// which then failed) read the version once and failed, as commits did
// before awaitTaken (audit 18, review 17); refused every time, it waited
// at each of its hundred attempts (review 18): maxAwaits bounds its
// waits, as a commit's.
func TestDeliverRefusedAsTaken(t *testing.T) {
	for _, every := range []bool{false, true} {
		t.Run(map[bool]string{false: "once", true: "every time"}[every], func(t *testing.T) {
			shortInFlight(t, 20*time.Millisecond)
			fb, inj, _ := faulty(t, memblob.OpenBucket(nil))
			s := newStore(t, fb, nil)
			w := newSession(t, s)
			t1 := newSession(t, s)
			commit(t, s, t1, Checkpoint, descs("existing")...)
			x := desc("to-t1", "a")
			x.TargetSession = t1
			r := commit(t, s, w, Checkpoint, x)
			refuseCreate(t, inj, t1, 2, every)
			heads := inj.Stats().Ops[faultblob.OpHead].Requests
			d, err := s.DeliverCrossSession(bg, w, r.Version, r.Descriptors)
			switch {
			case !every && (err != nil || d[0].Version != 2):
				t.Errorf("delivery: %+v, %v; want it delivered at version 2", d, err)
			case every && err == nil:
				t.Error("a delivery whose every create is refused landed")
			}
			if n := inj.Stats().Ops[faultblob.OpHead].Requests - heads; n > 40 {
				t.Errorf("%d reads of the refused version, want a few waits' few", n)
			}
		})
	}
}
