package layout

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// Concurrency tests: real goroutines racing on every backend, the GCS and
// Azure emulators included (testbucket.EachAll): conditional creates are
// what every commit rests on, so each backend's must hold under a race.
// N is modest because the S3, GCS and Azure backends are real servers.
const racers = 8

// race runs fn(i) for i in 0..n-1 in goroutines released together.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// §13.3 / §14.2: checkpoints racing at the same base: exactly one wins
// each version, the others get ErrConflict and write nothing.
func TestSection13_3_ConcurrentCheckpoints(t *testing.T) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		id := newSession(t, s)
		commit(t, s, id, Checkpoint, desc("base", "0"))
		for round := range 3 {
			v, _ := s.LatestVersion(bg, id)
			base, err := s.PositionAt(bg, id, v)
			if err != nil {
				t.Fatal(err)
			}
			results := make([]CommitResult, racers)
			errs := make([]error, racers)
			race(racers, func(i int) {
				results[i], errs[i] = s.Commit(bg, id, CommitRequest{Type: Checkpoint, Base: &base,
					Descriptors: descs(fmt.Sprintf("r%d-w%d-a", round, i), fmt.Sprintf("r%d-w%d-b", round, i))})
			})
			winners := 0
			for i, err := range errs {
				switch {
				case err == nil:
					winners++
					if results[i].Version != v+1 {
						t.Fatalf("round %d: winner landed at %d, want %d", round, results[i].Version, v+1)
					}
				case errors.Is(err, ErrConflict):
				default:
					t.Fatalf("round %d writer %d: %v", round, i, err)
				}
			}
			if winners != 1 {
				t.Fatalf("round %d: %d winners", round, winners)
			}
			if latest, _ := s.LatestVersion(bg, id); latest != v+1 {
				t.Fatalf("round %d: latest %d, want %d", round, latest, v+1)
			}
		}
		checkSeqs(t, allDescs(t, s, id), 1)
	})
}

// §13.3 / §14.2 / §7.3: provisional writers racing all land, at versions
// 1..N, with sequence numbers contiguous across the snapshots.
func TestSection13_3_ConcurrentProvisional(t *testing.T) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		id := newSession(t, s)
		results := make([]CommitResult, racers)
		errs := make([]error, racers)
		race(racers, func(i int) {
			typ := Provisional
			if i%2 == 1 {
				typ = Queueing
			}
			req := CommitRequest{Type: typ, Descriptors: descs(fmt.Sprintf("w%d-a", i), fmt.Sprintf("w%d-b", i), fmt.Sprintf("w%d-c", i))}
			if i%3 == 0 {
				req.Base = &Position{} // a stale view
			}
			results[i], errs[i] = s.Commit(bg, id, req)
		})
		var versions []int
		for i, err := range errs {
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
			versions = append(versions, int(results[i].Version))
		}
		sort.Ints(versions)
		for i, v := range versions {
			if v != i+1 {
				t.Fatalf("versions %v, want 1..%d", versions, racers)
			}
		}
		all := allDescs(t, s, id)
		if len(all) != 3*racers {
			t.Fatalf("%d descriptors, want %d", len(all), 3*racers)
		}
		checkSeqs(t, all, 1)
		// Each writer's result matches what is stored at its version.
		for i, r := range results {
			ds, _ := s.ReadSnapshot(bg, id, r.Version)
			if ds[0].Name != fmt.Sprintf("w%d-a", i) || ds[0].SequenceNumber != r.Descriptors[0].SequenceNumber {
				t.Fatalf("writer %d: result %+v, stored %+v", i, r.Descriptors[0], ds[0])
			}
		}
	})
}

// §8.3 / §13.4: concurrent memory writers adding different names all
// survive — also when they share one commit envelope (one session write
// updating several records).
func TestSection8_3_ConcurrentMemoryWriters(t *testing.T) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		shared := MemoryCommit{Session: NewSessionID(testNow), Version: 4, Transaction: NewTransactionID()}
		for _, env := range []string{"own", "shared"} {
			ns := "race/" + env
			writeMem(t, s, ns, MemoryWrite{Put: descs("seed")})
			errs := make([]error, racers)
			race(racers, func(i int) {
				w := MemoryWrite{Put: descs(fmt.Sprintf("n%d", i))}
				if env == "shared" {
					w.Commit = shared
				}
				_, errs[i] = s.WriteMemory(bg, ns, w)
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("%s writer %d: %v", env, i, err)
				}
			}
			v, _ := s.LatestMemoryVersion(bg, ns)
			recs, err := s.ReadMemory(bg, ns, v)
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, r := range recs {
				have[r.Name] = true
			}
			if len(recs) != racers+1 || !have["seed"] {
				t.Fatalf("%s: %d records at v%d: %s", env, len(recs), v, recNames(recs))
			}
			for i := range racers {
				if !have[fmt.Sprintf("n%d", i)] {
					t.Fatalf("%s: n%d lost: %s", env, i, recNames(recs))
				}
			}
			if v != racers+1 {
				t.Fatalf("%s: latest version %d, want %d", env, v, racers+1)
			}
		}
	})
}

// §11.2 / §13.6: concurrent materialisations of one fork make exactly one
// child snapshot 1 and all succeed.
func TestSection11_2_ConcurrentMaterialize(t *testing.T) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		p := newSession(t, s)
		commit(t, s, p, Checkpoint, descs("x")...)
		child, res, err := s.RecordFork(bg, p, ForkRequest{Descriptor: desc("task", "t")})
		if err != nil {
			t.Fatal(err)
		}
		pf := PendingFork{Parent: p, Version: res.Version, Descriptor: res.Descriptors[0]}
		errs := make([]error, racers)
		ms := make([]*Manifest, racers)
		race(racers, func(i int) { ms[i], errs[i] = s.MaterializeFork(bg, pf) })
		for i, err := range errs {
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			if ms[i].Session != child || ms[i].FirstSequenceNumber != 3 {
				t.Fatalf("run %d: %+v", i, ms[i])
			}
		}
		vs, err := s.SnapshotVersions(bg, child)
		if err != nil || len(vs) != 1 || vs[0] != 1 {
			t.Fatalf("child versions %v %v", vs, err)
		}
		ds, _ := s.ReadSnapshot(bg, child, 1)
		if len(ds) != 1 || ds[0].SequenceNumber != 3 {
			t.Fatalf("child snapshot 1: %+v", ds)
		}
	})
}

// §12.2 / §12.3: concurrent deliveries of one source version land exactly
// once, also while other writers append to the target: the delivery that
// loses a version to them moves to the next one.
func TestSection12_2_ConcurrentDelivery(t *testing.T) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		for _, noisy := range []bool{false, true} {
			w, target := newSession(t, s), newSession(t, s)
			x, y := desc("x", "1"), desc("y", "2")
			x.TargetSession, y.TargetSession = target, target
			r := commit(t, s, w, Checkpoint, x, y)
			outcomes := make([]DeliveryOutcome, racers)
			errs := make([]error, racers)
			race(racers+racers/2, func(i int) {
				if i >= racers {
					if noisy {
						_, err := s.Commit(bg, target, CommitRequest{Type: Provisional, Descriptors: descs(fmt.Sprintf("noise%d", i))})
						if err != nil {
							t.Error(err)
						}
					}
					return
				}
				dl, err := s.DeliverCrossSession(bg, w, r.Version, r.Descriptors)
				errs[i] = err
				if err == nil && len(dl) == 1 {
					outcomes[i] = dl[0].Outcome
				}
			})
			delivered := 0
			for i, err := range errs {
				if err != nil {
					t.Fatalf("deliverer %d: %v", i, err)
				}
				if outcomes[i] == Delivered {
					delivered++
				}
			}
			if delivered != 1 {
				t.Fatalf("noisy=%v: %d deliveries landed, want 1 (%v)", noisy, delivered, outcomes)
			}
			copies := 0
			all := allDescs(t, s, target)
			for _, d := range all {
				if d.SourceSession == w && d.SourceVersion == r.Version {
					copies++
				}
			}
			if copies != 2 {
				t.Fatalf("noisy=%v: %d delivered copies, want 2 (outcomes %v)", noisy, copies, outcomes)
			}
			checkSeqs(t, all, 1)
		}
	})
}

// §9.2: creators racing for one name: exactly one creates the session,
// every caller gets the winner, and the losers' manifests are deleted.
func TestSection9_2_CreateNamedSessionRace(t *testing.T) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		for round := range 2 {
			name := fmt.Sprintf("shared-%d", round)
			got := make([]*Manifest, racers)
			created := make([]bool, racers)
			errs := make([]error, racers)
			race(racers, func(i int) { got[i], created[i], errs[i] = s.CreateNamedSession(bg, name, nil) })
			winners := 0
			for i, err := range errs {
				if err != nil {
					t.Fatalf("creator %d: %v", i, err)
				}
				if created[i] {
					winners++
				}
				if got[i].Session != got[0].Session || got[i].Name != name {
					t.Fatalf("creator %d got %s, creator 0 got %s", i, got[i].Session, got[0].Session)
				}
			}
			if winners != 1 {
				t.Fatalf("%d creators won", winners)
			}
			if err := s.CheckSessionRef(bg, name, got[0].Session); err != nil {
				t.Fatal(err)
			}
		}
		ids, err := s.ListSessions(bg, nil)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, id := range ids {
			if ok, _ := s.SessionExists(bg, id); ok {
				live++
			}
		}
		if live != 2 {
			t.Fatalf("%d manifests left, want 2 (dangling manifests not deleted)", live)
		}
	})
}
