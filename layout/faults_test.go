package layout

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/layout/faultblob"
)

// faulty wraps b in a fault injector with a frozen clock, so stale
// listings stay stale until the test advances it.
func faulty(t *testing.T, b *blob.Bucket) (*blob.Bucket, *faultblob.Injector, func(time.Duration)) {
	now := time.Unix(1700000000, 0)
	inj := faultblob.NewInjector(faultblob.Options{Seed: 1, Now: func() time.Time { return now }})
	return faultblob.Wrap(b, inj), inj, func(d time.Duration) { now = now.Add(d) }
}

// §13.2: a PUT whose response is lost after it committed is recognised by
// its transaction ID: the commit succeeds once, at one version — whether
// the transport retries it or not.
func TestSection13_2_LostResponses(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		for _, retries := range []int{4, -1} {
			t.Run(fmt.Sprintf("retries=%d", retries), func(t *testing.T) {
				fb, inj, _ := faulty(t, b)
				s := newStore(t, fb, &Options{Retries: retries})
				id := newSession(t, s)
				commit(t, s, id, Checkpoint, desc("base", "0"))
				prefix, _ := SnapshotsPrefix(id)
				for _, typ := range []SnapshotType{Checkpoint, Provisional} {
					rid := inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: prefix}, FailFirst: 1, LoseResponse: true})
					before, _ := s.LatestVersion(bg, id)
					r, err := s.Commit(bg, id, CommitRequest{Type: typ, Descriptors: descs("x", "y")})
					inj.Remove(rid)
					if err != nil {
						t.Fatalf("%s: %v", typ, err)
					}
					if r.Version != before+1 {
						t.Fatalf("%s landed at %d, want %d", typ, r.Version, before+1)
					}
					if v, _ := s.LatestVersion(bg, id); v != before+1 {
						t.Fatalf("%s: a lost response produced %d versions", typ, v-before)
					}
					if m, _ := s.ReadSnapshotMeta(bg, id, r.Version); m.TransactionID != r.TransactionID {
						t.Fatalf("meta %+v", m)
					}
				}
				if st := inj.Stats(); st.Ops[faultblob.OpPut].Lost != 2 {
					t.Fatalf("injected %d lost responses", st.Ops[faultblob.OpPut].Lost)
				}
				checkSeqs(t, allDescs(t, s, id), 1)

				// Manifests (§5.1), memory files (§13.4) and session refs
				// (§9.2) survive lost responses too.
				inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: SessionsPrefix}, FailNth: 1, LoseResponse: true})
				inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: RefsPrefix}, FailNth: 1, LoseResponse: true})
				inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: MemoriesPrefix}, FailNth: 1, LoseResponse: true})
				name := fmt.Sprintf("lost-%d", retries)
				m, created, err := s.CreateNamedSession(bg, name, nil)
				if err != nil || !created {
					t.Fatalf("CreateNamedSession after lost responses: created=%v %v", created, err)
				}
				if err := s.CheckSessionRef(bg, name, m.Session); err != nil {
					t.Fatal(err)
				}
				ns := fmt.Sprintf("lost/%d", retries)
				mr, err := s.WriteMemory(bg, ns, MemoryWrite{Put: descs("a")})
				if err != nil || mr.Version != 1 || !mr.Changed {
					t.Fatalf("memory %+v %v", mr, err)
				}
				if v, _ := s.LatestMemoryVersion(bg, ns); v != 1 {
					t.Fatalf("memory latest %d", v)
				}

				// A ref swap whose PUT landed but whose response was lost
				// succeeds: its retry, or the read-back, meets its own
				// write rather than failing. (Through the injector the
				// swap is the weak one; TestSection9_RenameRefCAS has the
				// If-Match retry meeting its own write.)
				{
					ref := fmt.Sprintf("swap-%d", retries)
					if err := s.Link(bg, ref, "one"); err != nil {
						t.Fatal(err)
					}
					prev, err := s.ReadRef(bg, ref)
					if err != nil {
						t.Fatal(err)
					}
					inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: RefsPrefix}, FailNth: 1, LoseResponse: true})
					if err := s.RenameRef(bg, ref, prev, "two"); err != nil && !errors.Is(err, ErrWeakCAS) {
						t.Fatalf("rename with a lost response: %v", err)
					}
					if r, _ := s.ReadRef(bg, ref); r.Target != "two" {
						t.Fatalf("ref %s = %q after the rename", ref, r.Target)
					}
				}
				inj.Reset()
			})
		}
	})
}

// Transient backend errors are retried (Options.Retries); permanent ones
// surface at once.
func TestSection2_TransientAndPermanentErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		fb, inj, _ := faulty(t, b)
		s := newStore(t, fb, nil)
		id := newSession(t, s)
		inj.Add(faultblob.Rule{FailFirst: 3, Err: faultblob.TransientError(gcerrors.Internal)})
		r, err := s.Commit(bg, id, CommitRequest{Descriptors: descs("a")})
		if err != nil || r.Version != 1 {
			t.Fatalf("%+v %v", r, err)
		}
		if st := s.Stats(); st.Retries < 3 {
			t.Fatalf("retries %d", st.Retries)
		}
		inj.Reset()
		inj.Add(faultblob.Rule{Ops: faultblob.OpGet, FailFirst: 1, Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
		before := s.Stats()
		_, err = s.ReadSnapshot(bg, id, 1)
		if gcerrors.Code(err) != gcerrors.PermissionDenied {
			t.Fatalf("got %v", err)
		}
		if st := s.Stats(); st.Retries != before.Retries || st.Errors != before.Errors+1 {
			t.Fatalf("a permanent error was retried: %+v", st)
		}
		inj.Reset()
		// Transient errors past the budget surface too.
		inj.Add(faultblob.Rule{Ops: faultblob.OpHead, Err: faultblob.TransientError(gcerrors.Internal), FailProb: 1})
		_, err = s.ReadSnapshotMeta(bg, id, 1)
		if _, ok := faultblob.IsInjected(err); !ok {
			t.Fatalf("got %v", err)
		}
		inj.Reset()
	})
}

// §2.5 / §14.3: with an eventually consistent LIST, writers that see a
// stale latest version make doomed If-None-Match attempts and converge,
// without conflicts, gaps or lost records.
func TestSection14_3_StaleListings(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		fb, inj, advance := faulty(t, b)
		s := newStore(t, fb, nil)
		inj.Add(faultblob.Rule{Ops: faultblob.OpList, StaleFor: time.Hour})
		id := newSession(t, s)
		for i := range 4 {
			typ := Provisional
			if i == 1 {
				typ = Checkpoint
			}
			r, err := s.Commit(bg, id, CommitRequest{Type: typ, Descriptors: descs(fmt.Sprintf("d%d", i))})
			if err != nil || r.Version != uint32(i+1) {
				t.Fatalf("commit %d under a stale listing: %+v %v", i, r, err)
			}
		}
		if v, _ := s.LatestVersion(bg, id); v != 0 {
			t.Fatalf("listing not stale: %d", v)
		}
		// A checkpoint without a base is not in conflict with a checkpoint
		// it could not see: it retries against the new latest.
		r, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("late")})
		if err != nil || r.Version != 5 {
			t.Fatalf("checkpoint: %+v %v", r, err)
		}
		// With an explicit base below the foreign checkpoint it is.
		_, err = s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("x"), Base: &Position{Version: 1, LastSeq: 1}})
		wantErrIs(t, err, ErrConflict)
		// Memory: every hidden version's records survive the merge.
		for _, n := range []string{"a", "b", "c"} {
			if _, err := s.WriteMemory(bg, "stale", MemoryWrite{Put: descs(n)}); err != nil {
				t.Fatalf("memory %s: %v", n, err)
			}
		}
		mr, err := s.WriteMemory(bg, "stale", MemoryWrite{Put: descs("d")})
		if err != nil || mr.Version != 4 || recNames(mr.Records) != "a,b,c,d" {
			t.Fatalf("memory %+v %v", recNames(mr.Records), err)
		}
		// §11.2 step 3: the child's snapshot 1 is hidden from the listing,
		// so phase 2 tries to write it again and takes the precondition
		// failure as success.
		p := newSession(t, s)
		child, res, err := s.RecordFork(bg, p, ForkRequest{Descriptor: desc("t", "t")})
		if err != nil {
			t.Fatal(err)
		}
		pf := PendingFork{Parent: p, Version: res.Version, Descriptor: res.Descriptors[0]}
		for i := range 3 {
			if _, err := s.MaterializeFork(bg, pf); err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		}
		advance(2 * time.Hour)
		if vs, _ := s.SnapshotVersions(bg, child); len(vs) != 1 {
			t.Fatalf("child versions %v", vs)
		}
		if v, _ := s.LatestVersion(bg, id); v != 5 {
			t.Fatalf("latest %d once the listing caught up", v)
		}
		checkSeqs(t, allDescs(t, s, id), 1)
	})
}

var _ = errors.Is

// §13.2: a snapshot PUT that failed, read back while the bucket does
// not answer, is a commit whose outcome is unknown (ErrOutcomeUnknown),
// not one that failed: the reply may have been lost after it landed, and
// then the snapshot is there once the bucket answers (audit 4). Only a
// read-back that finds nothing after the backend's own error makes it a
// plain failure: a PUT cut by a deadline may still land after that
// read (review 4), and "nothing landed" made pugfs exec's supervisor run
// the handler again.
func TestSection13_2_OutcomeUnknown(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		for _, tc := range []struct {
			name                       string
			landed, readsFail, unknown bool
			// deadline: the PUTs end with no answer (a deadline cut
			// them), not with the backend's error; early: the read-back
			// answers "not found" though the PUT landed (it ran before
			// the backend completed the write).
			deadline, early bool
		}{
			{"reply lost, no answer", true, true, true, false, false},
			{"request lost, no answer", false, true, true, false, false},
			{"request lost, answered", false, false, false, false, false},
			{"cut by a deadline, read back too early", true, false, true, true, true},
			{"cut by a deadline, not there", false, false, true, true, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				fb, inj, _ := faulty(t, b)
				retries := 1
				if tc.deadline {
					// One attempt: a retry would meet the snapshot its
					// first attempt landed, and settle it.
					retries = -1
				}
				s := newStore(t, fb, &Options{Retries: retries})
				id := newSession(t, s)
				commit(t, s, id, Checkpoint, desc("base", "0"))
				before, _ := s.LatestVersion(bg, id)
				prefix, _ := SnapshotsPrefix(id)
				key, _ := SnapshotKey(id, before+1)
				put := faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: prefix}, FailFirst: 100, LoseResponse: tc.landed}
				if tc.deadline {
					put.Err = faultblob.TransientError(gcerrors.DeadlineExceeded)
				}
				rules := []faultblob.RuleID{inj.Add(put)}
				if tc.readsFail {
					rules = append(rules, inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: key}, FailFirst: 100}))
				}
				if tc.early {
					rules = append(rules, inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: key}, FailFirst: 100,
						Err: faultblob.PermanentError(gcerrors.NotFound)}))
				}
				_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("x")})
				for _, r := range rules {
					inj.Remove(r)
				}
				if err == nil {
					t.Fatal("a commit whose PUTs all failed succeeded")
				}
				if got := errors.Is(err, ErrOutcomeUnknown); got != tc.unknown {
					t.Fatalf("errors.Is(%v, ErrOutcomeUnknown) = %v, want %v", err, got, tc.unknown)
				}
				v, _ := s.LatestVersion(bg, id)
				if landed := v == before+1; landed != tc.landed {
					t.Fatalf("latest version %d after a commit at %d: landed %v, want %v", v, before+1, landed, tc.landed)
				}
				// Once the bucket answers, the commit's fate is known.
				var unknown *OutcomeUnknownError
				if !errors.As(err, &unknown) {
					return
				}
				r, landed, err := s.ResolveCommit(bg, unknown)
				if err != nil || landed != tc.landed || landed && (r.Version != before+1 || len(r.Descriptors) != 1) {
					t.Fatalf("ResolveCommit: %+v, landed %v, %v; want landed %v at %d", r, landed, err, tc.landed, before+1)
				}
			})
		}
	})
}
