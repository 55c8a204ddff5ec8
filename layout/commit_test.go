package layout

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/layout/faultblob"
)

// §13.2: transaction IDs are non-zero and random.
func TestSection13_2_TransactionIDs(t *testing.T) {
	seen := map[uint64]bool{}
	for range 2000 {
		v := NewTransactionID()
		if v == 0 || seen[v] {
			t.Fatalf("transaction ID %d zero or repeated", v)
		}
		seen[v] = true
	}
}

// §6.2: a commit writes the snapshot with Content-Type application/json,
// Content-Encoding zstd, the immutable Cache-Control (§16) and the four
// metadata keys; the body is a zstd JSON array.
func TestSection6_2_CommitWritesMetadata(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		id := newSession(t, s)
		for i, typ := range []SnapshotType{Checkpoint, Provisional, Queueing, ""} {
			r := commit(t, s, id, typ, desc("a", "x"))
			v := uint32(i + 1)
			want := typ
			if typ == "" {
				want = Checkpoint
			}
			if r.Version != v || r.TransactionID == 0 || r.Attempts != 1 {
				t.Fatalf("result %+v", r)
			}
			key, _ := SnapshotKey(id, v)
			a, err := b.Attributes(bg, key)
			if err != nil {
				t.Fatal(err)
			}
			if a.ContentType != "application/json" || a.ContentEncoding != "zstd" || a.CacheControl != CacheImmutable {
				t.Fatalf("attributes: type %q encoding %q cache %q", a.ContentType, a.ContentEncoding, a.CacheControl)
			}
			md := a.Metadata
			if md[MetaSnapshotSession] != id.String() || md[MetaSnapshotVersion] != strconv.Itoa(int(v)) ||
				md[MetaTransactionID] != strconv.FormatUint(r.TransactionID, 10) || md[MetaSnapshotType] != string(want) {
				t.Fatalf("metadata %v, want session %s version %d txn %d type %s", md, id, v, r.TransactionID, want)
			}
			raw, err := b.ReadAll(bg, key)
			if err != nil || Sniff(raw) != EncodingZstd {
				t.Fatalf("body is not zstd: %v", err)
			}
			m, err := s.ReadSnapshotMeta(bg, id, v)
			if err != nil || m.Type != want || m.TransactionID != r.TransactionID || m.Session != id.String() || m.Version != strconv.Itoa(int(v)) {
				t.Fatalf("ReadSnapshotMeta %+v %v", m, err)
			}
		}
		if _, err := s.Commit(bg, id, CommitRequest{Type: "draft"}); err == nil {
			t.Fatal("committed an unknown type")
		}
		_, err := s.Commit(bg, NewSessionID(testNow), CommitRequest{Descriptors: descs("a")})
		wantErrIs(t, err, ErrSessionNotFound)
	})
}

// §7.3: sequence numbers start at first-sequence-number and advance by one
// across all snapshots, whatever the caller put in them; empty snapshots
// do not break the count.
func TestSection7_3_SequenceNumbers(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		m := s.NewRootManifest()
		m.FirstSequenceNumber = 100
		if _, _, err := s.CreateSession(bg, m); err != nil {
			t.Fatal(err)
		}
		id := m.Session
		in := descs("a", "b", "c")
		for i := range in {
			in[i].SequenceNumber = 7 // ignored
		}
		r1 := commit(t, s, id, Checkpoint, in...)
		checkSeqs(t, r1.Descriptors, 100)
		if in[0].SequenceNumber != 7 {
			t.Fatal("Commit modified the caller's descriptors")
		}
		empty := commit(t, s, id, Provisional)
		if empty.LastSeq() != 102 || empty.Position() != (Position{Version: 2, LastSeq: 102}) {
			t.Fatalf("empty commit position %+v lastseq %d", empty.Position(), empty.LastSeq())
		}
		// A commit based on the empty commit's position continues the count.
		pos := empty.Position()
		r3, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("d", "e"), Base: &pos})
		if err != nil {
			t.Fatal(err)
		}
		checkSeqs(t, r3.Descriptors, 103)
		commit(t, s, id, Queueing)
		r5 := commit(t, s, id, Queueing, descs("f")...)
		checkSeqs(t, r5.Descriptors, 105)
		checkSeqs(t, allDescs(t, s, id), 100)
		p, err := s.PositionAt(bg, id, 4)
		if err != nil || p != (Position{Version: 4, LastSeq: 104}) {
			t.Fatalf("PositionAt(4) = %+v %v", p, err)
		}
		p, err = s.PositionAt(bg, id, 0)
		if err != nil || p != (Position{Version: 0, LastSeq: 99}) {
			t.Fatalf("PositionAt(0) = %+v %v", p, err)
		}
	})
}

// §12.3: a cross-session write targeting the writer itself is a local
// write; the target-session field is dropped at commit.
func TestSection12_3_SelfTargetDropped(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		id := newSession(t, s)
		other := newSession(t, s)
		self := desc("self", "x")
		self.TargetSession = id
		cross := desc("cross", "y")
		cross.TargetSession = other
		r := commit(t, s, id, Checkpoint, self, cross)
		if !r.Descriptors[0].TargetSession.IsZero() || r.Descriptors[1].TargetSession != other {
			t.Fatalf("committed %+v", r.Descriptors)
		}
		stored, err := s.ReadSnapshot(bg, id, 1)
		if err != nil || !stored[0].TargetSession.IsZero() || !stored[0].IsSlot() || stored[1].TargetSession != other {
			t.Fatalf("stored %+v %v", stored, err)
		}
		log, _ := s.FullLog(bg, id, 1)
		if _, ok := Lookup(log, "self"); !ok {
			t.Fatal("self-targeted write is not a live slot")
		}
		if _, ok := Lookup(log, "cross"); ok {
			t.Fatal("a cross-session record occupies a slot")
		}
		// Another writer kept the field: readers normalise it all the same.
		kept := desc("kept", "z")
		kept.SequenceNumber, kept.TargetSession = 2, id
		putSnapshot(t, b, id, 2, nil, kept)
		log, err = s.FullLog(bg, id, 2)
		if e, ok := Lookup(log, "kept"); err != nil || !ok || !e.TargetSession.IsZero() {
			t.Fatalf("a stored self-targeted write is not a live slot: %+v %v %v", e, ok, err)
		}
	})
}

// §3.1 / §7.1: inline data must match the digest and be at most 1024 bytes.
func TestSection7_1_CommitChecksInlineData(t *testing.T) {
	s := newStore(t, memBucket(), nil)
	id := newSession(t, s)
	bad := desc("a", "x")
	bad.Data = []byte("y")
	_, err := s.Commit(bg, id, CommitRequest{Descriptors: []Descriptor{bad}})
	wantErrIs(t, err, ErrInvalid)
	big := make([]byte, InlineLimit+1)
	large := Descriptor{Name: "big", Digest: DigestOf(big), Size: int64(len(big)), Data: big}
	_, err = s.Commit(bg, id, CommitRequest{Descriptors: []Descriptor{large}})
	wantErrIs(t, err, ErrInvalid)
	ok := Descriptor{Name: "ok", Digest: DigestOf(big[:InlineLimit]), Size: InlineLimit, Data: big[:InlineLimit]}
	if _, err := s.Commit(bg, id, CommitRequest{Descriptors: []Descriptor{ok}}); err != nil {
		t.Fatal(err)
	}
}

// §13.2: retrying with the same transaction ID after the snapshot landed
// succeeds at the same version and writes nothing new: with the original
// base, also after foreign snapshots (a checkpoint among them) landed on
// top. A retry without a base is refused.
func TestSection13_2_IdempotentRetry(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		for _, typ := range []SnapshotType{Checkpoint, Provisional, Queueing} {
			t.Run(string(typ), func(t *testing.T) {
				id := newSession(t, s)
				commit(t, s, id, Checkpoint, desc("base", "0"))
				base, _ := s.PositionAt(bg, id, 1)
				req := CommitRequest{Type: typ, Descriptors: descs("a", "b"), Base: &base, TransactionID: 777}
				first, err := s.Commit(bg, id, req)
				if err != nil || first.Version != 2 || first.TransactionID != 777 {
					t.Fatalf("first %+v %v", first, err)
				}
				again, err := s.Commit(bg, id, req)
				if err != nil || again.Version != 2 || again.TransactionID != 777 {
					t.Fatalf("retry with base: %+v %v", again, err)
				}
				checkSeqs(t, again.Descriptors, 2)
				// Without the base nothing says where to stop looking:
				// refused, nothing written.
				noBase := req
				noBase.Base = nil
				if _, err = s.Commit(bg, id, noBase); !errors.Is(err, ErrInvalid) {
					t.Fatalf("retry without base: %v, want ErrInvalid", err)
				}
				if v, _ := s.LatestVersion(bg, id); v != 2 {
					t.Fatalf("a retry wrote a new version: latest %d", v)
				}
				// Foreign snapshots land above ours, a checkpoint among
				// them; the retry still finds its own at version 2. One
				// without a base stopped at the checkpoint and committed
				// again (review 4).
				commit(t, s, id, Provisional, desc("other", "1"))
				commit(t, s, id, Checkpoint, desc("other2", "2"))
				again, err = s.Commit(bg, id, req)
				if err != nil || again.Version != 2 || again.Descriptors[1].Name != "b" {
					t.Fatalf("retry after foreign snapshots: %+v %v", again, err)
				}
				if v, _ := s.LatestVersion(bg, id); v != 4 {
					t.Fatalf("latest %d, want 4", v)
				}
				checkSeqs(t, allDescs(t, s, id), 1)
			})
		}
	})
}

// decisions.md §13.3, row by row.
func TestSection13_3_ConflictTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		setup := func(t *testing.T, above ...SnapshotType) (SessionID, Position) {
			id := newSession(t, s)
			commit(t, s, id, Checkpoint, desc("base", "0"))
			base, _ := s.PositionAt(bg, id, 1)
			for i, typ := range above {
				commit(t, s, id, typ, desc("above"+strconv.Itoa(i), "x"))
			}
			return id, base
		}
		// Row 2: checkpoint vs a foreign checkpoint: ErrConflict, nothing written.
		t.Run("checkpoint/checkpoint", func(t *testing.T) {
			id, base := setup(t, Checkpoint)
			_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base})
			wantErrIs(t, err, ErrConflict)
			if v, _ := s.LatestVersion(bg, id); v != 2 {
				t.Fatalf("conflict wrote something: latest %d", v)
			}
			ds, _ := s.ReadSnapshot(bg, id, 2)
			if ds[0].Name != "above0" {
				t.Fatalf("foreign checkpoint replaced: %+v", ds)
			}
		})
		// A legacy snapshot without a type is a checkpoint (§6.2).
		t.Run("checkpoint/legacy", func(t *testing.T) {
			id, base := setup(t)
			putSnapshot(t, b, id, 2, nil, Descriptor{Name: "legacy", SequenceNumber: 2})
			_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base})
			wantErrIs(t, err, ErrConflict)
		})
		// Row 3: checkpoint vs provisional/queueing: merge, renumber, land at
		// the next free version.
		for _, above := range [][]SnapshotType{{Provisional}, {Queueing}, {Provisional, Queueing, Provisional}} {
			t.Run("checkpoint/"+string(above[0])+strconv.Itoa(len(above)), func(t *testing.T) {
				id, base := setup(t, above...)
				r, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("m1", "m2"), Base: &base})
				if err != nil {
					t.Fatal(err)
				}
				// One try at base+1, then one above every version
				// the listing shows, each of them inspected.
				want := uint32(2 + len(above))
				if r.Version != want || r.Attempts != 2 {
					t.Fatalf("landed at %d after %d attempts, want %d", r.Version, r.Attempts, want)
				}
				checkSeqs(t, r.Descriptors, int64(2+len(above)))
				checkSeqs(t, allDescs(t, s, id), 1)
				m, _ := s.ReadSnapshotMeta(bg, id, want)
				if m.Type != Checkpoint || m.TransactionID != r.TransactionID {
					t.Fatalf("meta %+v", m)
				}
			})
		}
		// More inputs above the base than the commit has retries: they
		// are inspected, not retried through (150 inputs arriving while
		// a handler ran exhausted its 100 retries: the exec audit).
		t.Run("checkpoint/more-provisional-than-retries", func(t *testing.T) {
			few := newStore(t, b, &Options{CommitRetries: 3})
			id, base := setup(t, Provisional, Provisional, Provisional, Provisional, Provisional, Queueing, Provisional)
			r, err := few.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base})
			if err != nil || r.Version != 9 {
				t.Fatalf("landed at %d, %v; want 9", r.Version, err)
			}
			checkSeqs(t, allDescs(t, s, id), 1)
		})
		// ... but a foreign checkpoint anywhere above the base is a conflict.
		t.Run("checkpoint/provisional-then-checkpoint", func(t *testing.T) {
			id, base := setup(t, Provisional, Checkpoint, Provisional)
			_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base})
			wantErrIs(t, err, ErrConflict)
			if v, _ := s.LatestVersion(bg, id); v != 4 {
				t.Fatalf("latest %d", v)
			}
		})
		// An exact commit merges nothing: any snapshot above the base is
		// ErrLateInput (an ErrConflict), and nothing is written.
		for _, above := range [][]SnapshotType{{Provisional}, {Queueing}, {Checkpoint}} {
			t.Run("exact/"+string(above[0]), func(t *testing.T) {
				id, base := setup(t, above...)
				_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base, Exact: true})
				wantErrIs(t, err, ErrLateInput)
				wantErrIs(t, err, ErrConflict)
				if v, _ := s.LatestVersion(bg, id); v != 2 {
					t.Fatalf("late input wrote something: latest %d", v)
				}
			})
		}
		// Fork records are no input (§11.2 step 4): an exact commit lands
		// above snapshots holding only them (a handler that forked its
		// own session), renumbered after them, and still refuses input
		// above them, or a checkpoint of fork records.
		fork := func(t *testing.T, id SessionID, typ SnapshotType) {
			t.Helper()
			d := desc("fork.json", "{}")
			d.Fork, d.TargetSession = true, NewSessionID(testNow)
			commit(t, s, id, typ, d)
		}
		t.Run("exact/fork-records", func(t *testing.T) {
			id, base := setup(t)
			fork(t, id, Provisional)
			fork(t, id, Queueing)
			r, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base, Exact: true})
			if err != nil || r.Version != 4 {
				t.Fatalf("landed at %d, %v; want 4", r.Version, err)
			}
			checkSeqs(t, allDescs(t, s, id), 1)
		})
		for _, c := range []struct {
			name  string
			above func(t *testing.T, id SessionID)
		}{
			{"fork-then-input", func(t *testing.T, id SessionID) {
				fork(t, id, Provisional)
				commit(t, s, id, Provisional, desc("input", "x"))
			}},
			{"fork-checkpoint", func(t *testing.T, id SessionID) { fork(t, id, Checkpoint) }},
		} {
			t.Run("exact/"+c.name, func(t *testing.T) {
				id, base := setup(t)
				c.above(t, id)
				latest, _ := s.LatestVersion(bg, id)
				_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base, Exact: true})
				wantErrIs(t, err, ErrLateInput)
				if v, _ := s.LatestVersion(bg, id); v != latest {
					t.Fatalf("late input wrote something: latest %d, was %d", v, latest)
				}
			})
		}
		t.Run("exact/nothing-above", func(t *testing.T) {
			id, base := setup(t)
			r, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Base: &base, Exact: true})
			if err != nil || r.Version != 2 {
				t.Fatalf("landed at %d, %v; want 2", r.Version, err)
			}
		})
		t.Run("exact/no-base", func(t *testing.T) {
			id, _ := setup(t)
			_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("mine"), Exact: true})
			wantErrIs(t, err, ErrInvalid)
		})
		// Row 4: provisional / queueing vs anything: next free version,
		// renumbered.
		for _, typ := range []SnapshotType{Provisional, Queueing} {
			for _, above := range [][]SnapshotType{{Checkpoint}, {Provisional}, {Queueing}, {Checkpoint, Provisional, Checkpoint}} {
				t.Run(string(typ)+"/"+string(above[0])+strconv.Itoa(len(above)), func(t *testing.T) {
					id, base := setup(t, above...)
					r, err := s.Commit(bg, id, CommitRequest{Type: typ, Descriptors: descs("m1", "m2"), Base: &base})
					if err != nil {
						t.Fatal(err)
					}
					if want := uint32(2 + len(above)); r.Version != want {
						t.Fatalf("landed at %d, want %d", r.Version, want)
					}
					checkSeqs(t, allDescs(t, s, id), 1)
				})
			}
		}
	})
}

// §13.3: a writer that cannot make progress within the retry budget
// surfaces ErrRetriesExhausted. A try that finds its version taken costs
// one retry, whatever it inspects above it: with a budget of one, the
// versions landed since the base exhaust it.
func TestSection13_3_RetryCap(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, &Options{CommitRetries: 1})
		id := newSession(t, s)
		for i := range 5 {
			commit(t, s, id, Provisional, desc("p"+strconv.Itoa(i), "x"))
		}
		base := Position{Version: 0, LastSeq: 0}
		_, err := s.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("late"), Base: &base})
		wantErrIs(t, err, ErrRetriesExhausted)
		if v, _ := s.LatestVersion(bg, id); v != 5 {
			t.Fatalf("latest %d", v)
		}
		// With the default budget it lands after the provisionals.
		s2 := newStore(t, b, nil)
		r, err := s2.Commit(bg, id, CommitRequest{Type: Checkpoint, Descriptors: descs("late"), Base: &base})
		if err != nil || r.Version != 6 {
			t.Fatalf("%+v %v", r, err)
		}
		checkSeqs(t, allDescs(t, s, id), 1)
	})
}

// §6.1: versions are uint32; a session (or namespace) at 2^32-1 cannot
// take another snapshot, and says so instead of wrapping to 0.
func TestSection6_1_VersionSpaceExhausted(t *testing.T) {
	b := memBucket()
	s := newStore(t, b, nil)
	id := newSession(t, s)
	putSnapshot(t, b, id, 1<<32-1, map[string]string{MetaSnapshotType: "provisional"}, Descriptor{Name: "last", SequenceNumber: 1})
	if v, err := s.LatestVersion(bg, id); err != nil || v != 1<<32-1 {
		t.Fatalf("latest %d %v", v, err)
	}
	_, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("x"), Base: &Position{Version: 1<<32 - 1, LastSeq: 1}})
	wantErrIs(t, err, ErrInvalid)
	mk, _ := MemoryKey("full", 1<<32-1)
	putRaw(t, b, mk, mustEncode(t, descs("r")), nil)
	_, err = s.WriteMemory(bg, "full", MemoryWrite{Put: descs("s")})
	wantErrIs(t, err, ErrInvalid)
	// A fork record targeting its own session is refused (§11).
	self := desc("f", "x")
	self.Fork, self.TargetSession = true, id
	_, err = s.Commit(bg, id, CommitRequest{Descriptors: []Descriptor{self}})
	wantErrIs(t, err, ErrInvalid)
}

// TestCommitUnchanged: a commit that replaces a file it built on (an
// append, an edit in place) is refused with a *StaleError when a snapshot
// it would land above gives that file other bytes: the other writer's
// bytes would be lost under it (two mounts appending to one file kept
// one line). A removal, other files, or the same bytes with other
// metadata (a chmod) do not refuse it; with AnyChange (a chmod's copy of
// the file, a rename's removal of it) a removal and a chmod do.
func TestCommitUnchanged(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		orig := desc("f", "line 1\n")
		removed := []Descriptor{{Name: "f", Deleted: true, CreatedAt: testNow}}
		sameBytes := []Descriptor{func() Descriptor {
			d := desc("f", "line 1\n")
			d.Metadata = map[string]string{MetaPosixMode: "0600"}
			return d
		}()}
		for _, c := range []struct {
			name      string
			other     []Descriptor // what another writer commits meanwhile
			anyChange bool
			stale     bool
		}{
			{"rewritten", []Descriptor{desc("f", "line 1\nline 2\n")}, false, true},
			{"rewritten-among-others", []Descriptor{desc("a", "x"), desc("f", "other\n"), desc("z", "y")}, false, true},
			{"other-files", []Descriptor{desc("g", "x")}, false, false},
			{"removed", removed, false, false},
			{"same-bytes", sameBytes, false, false},
			{"removed-any-change", removed, true, true},
			{"rewritten-any-change", []Descriptor{desc("f", "other\n")}, true, true},
			{"same-bytes-any-change", sameBytes, true, true},
			{"other-files-any-change", []Descriptor{desc("g", "x")}, true, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				id := newSession(t, s)
				commit(t, s, id, Provisional, orig)
				base, _ := s.PositionAt(bg, id, 1)
				commit(t, s, id, Provisional, c.other...)
				commit(t, s, id, Provisional, desc("unrelated", "u")) // version 3
				mine := desc("f", "line 1\nmine\n")
				r, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: []Descriptor{mine}, Base: &base,
					Unchanged: map[string]FileBase{"f": {Digest: orig.Digest, Version: 1, AnyChange: c.anyChange}}})
				if !c.stale {
					if err != nil || r.Version != 4 {
						t.Fatalf("landed at %d, %v; want 4", r.Version, err)
					}
					return
				}
				var se *StaleError
				if !errors.As(err, &se) || !errors.Is(err, ErrChangedUnder) || !errors.Is(err, ErrConflict) {
					t.Fatalf("err %v, want a StaleError", err)
				}
				if !reflect.DeepEqual(se.Names, []string{"f"}) || !reflect.DeepEqual(se.Versions, []uint32{2}) {
					t.Fatalf("stale %v at %v, want f at 2", se.Names, se.Versions)
				}
				if v, _ := s.LatestVersion(bg, id); v != 3 {
					t.Fatalf("a refused commit wrote something: latest %d", v)
				}
			})
		}
		// What is at or below the file's own version is its history, not
		// a change under the writer, also when the commit's Base is older.
		t.Run("base-file-above-base", func(t *testing.T) {
			id := newSession(t, s)
			commit(t, s, id, Provisional, orig)
			base, _ := s.PositionAt(bg, id, 1)
			rewrite := desc("f", "rewritten\n")
			commit(t, s, id, Provisional, rewrite)
			r, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("f"), Base: &base,
				Unchanged: map[string]FileBase{"f": {Digest: rewrite.Digest, Version: 2}}})
			if err != nil || r.Version != 3 {
				t.Fatalf("landed at %d, %v; want 3", r.Version, err)
			}
		})
		t.Run("needs-a-base", func(t *testing.T) {
			id := newSession(t, s)
			_, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("f"), Unchanged: map[string]FileBase{"f": {Digest: orig.Digest}}})
			wantErrIs(t, err, ErrInvalid)
		})
	})
}

// TestCommitInherited: a file's new content committed from a view older
// than another writer's chmod or setfattr of it keeps those changes: the
// keys its writer did not change itself come from the newest descriptor
// of the name in the snapshots the commit lands above (audit 28: a `>`
// from a mount within its TTL put the old mode back). The writer's own
// changes win, a removal leaves the writer's metadata (also when another
// file of the name was made after it), and a descriptor at or below the
// version the writer read is what it read.
func TestCommitInherited(t *testing.T) {
	meta := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	with := func(d Descriptor, m map[string]string) Descriptor {
		d.Metadata = m
		return d
	}
	orig := with(desc("f", "one\n"), meta(MetaPosixMode, "0644", "k", "old"))
	for _, c := range []struct {
		name   string
		others [][]Descriptor // snapshots another writer commits above version 1
		base   uint32         // the version the writer read f at
		mine   map[string]string
		want   map[string]string
	}{
		{"chmod", [][]Descriptor{{with(desc("f", "one\n"), meta(MetaPosixMode, "0600", "k", "old"))}}, 1,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0600", "k", "old")},
		{"setfattr-and-chmod-in-turn", [][]Descriptor{
			{with(desc("f", "one\n"), meta(MetaPosixMode, "0600", "k", "old"))},
			{desc("g", "x")},
			{with(desc("f", "one\n"), meta(MetaPosixMode, "0600", "k", "new", "added", "1"))},
		}, 1, meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0600", "k", "new", "added", "1")},
		{"own-changes-win", [][]Descriptor{{with(desc("f", "one\n"), meta(MetaPosixMode, "0600", "k", "theirs"))}}, 1,
			meta(MetaPosixMode, "0700", "k", "old", "mine", "1"), meta(MetaPosixMode, "0700", "k", "theirs", "mine", "1")},
		{"their-removal-of-a-key", [][]Descriptor{{with(desc("f", "one\n"), meta(MetaPosixMode, "0644"))}}, 1,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0644")},
		{"their-mtime-is-not-kept", [][]Descriptor{{with(desc("f", "one\n"), meta(MetaPosixMode, "0644", "k", "old", MetaPosixMtime, "1577934245"))}}, 1,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0644", "k", "old")},
		{"removed", [][]Descriptor{{{Name: "f", Deleted: true, CreatedAt: testNow}}}, 1,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0644", "k", "old")},
		// Another file of the name, not the one the writer read (review 33).
		{"removed-then-made-again", [][]Descriptor{{{Name: "f", Deleted: true, CreatedAt: testNow}},
			{with(desc("f", "another file\n"), meta(MetaPosixMode, "0600", "owner", "b"))}}, 1,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0644", "k", "old")},
		{"read-at-or-above-the-change", [][]Descriptor{{with(desc("f", "one\n"), meta(MetaPosixMode, "0600"))}}, 2,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0644", "k", "old")},
		{"past-one-round-of-reads", append(slices.Repeat([][]Descriptor{{desc("g", "x")}}, stepReads+3),
			[]Descriptor{with(desc("f", "one\n"), meta(MetaPosixMode, "0600", "k", "old"))}), 1,
			meta(MetaPosixMode, "0644", "k", "old"), meta(MetaPosixMode, "0600", "k", "old")},
	} {
		for _, typ := range []SnapshotType{Provisional, Checkpoint} {
			t.Run(c.name+"/"+string(typ), func(t *testing.T) {
				s := newStore(t, memBucket(), nil)
				id := newSession(t, s)
				commit(t, s, id, Provisional, orig)
				base, _ := s.PositionAt(bg, id, 1)
				for _, ds := range c.others {
					commit(t, s, id, Provisional, ds...)
				}
				mine := with(desc("f", "two\n"), c.mine)
				req := CommitRequest{Type: typ, Descriptors: []Descriptor{mine}, Base: &base,
					Inherited: map[string]MetaBase{"f": {Version: c.base, Metadata: orig.Metadata}}}
				r, err := s.Commit(bg, id, req)
				if err != nil {
					t.Fatal(err)
				}
				if got := r.Descriptors[0].Metadata; !maps.Equal(got, c.want) {
					t.Errorf("committed metadata %v, want %v", got, c.want)
				}
				stored, err := s.ReadSnapshot(bg, id, r.Version)
				if err != nil || !maps.Equal(stored[0].Metadata, c.want) {
					t.Errorf("stored metadata %v (%v), want %v", stored, err, c.want)
				}
				if !maps.Equal(req.Descriptors[0].Metadata, c.mine) || req.Inherited["f"].Version != c.base {
					t.Errorf("the caller's request changed: %v, %v", req.Descriptors[0].Metadata, req.Inherited)
				}
			})
		}
	}
}

// TestCommitPathClash: with Paths, a commit is refused with a
// *StaleError naming its clashing names when a snapshot it would land
// above makes a file where it makes a directory, or the other way round
// (two mounts that both made x within the TTL, one as a file, one as a
// directory: the tree shows the file, and the other's files were hidden
// on every mount). Other names, a removal, or a snapshot at or below the
// base do not refuse it.
func TestCommitPathClash(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		for _, c := range []struct {
			name  string
			other []Descriptor // what another writer commits meanwhile
			mine  []Descriptor
			clash []string
		}{
			{"a file where it made a directory", descs("out/sub/f1", "out/sub/f2"), descs("out"), []string{"out"}},
			{"a directory where it made a file", descs("out"), descs("out/sub/f1", "out/g", "other"), []string{"out/sub/f1", "out/g"}},
			{"apart", descs("out/f"), descs("outer", "out2/f"), nil},
			{"removed", []Descriptor{{Name: "out", Deleted: true, CreatedAt: testNow}}, descs("out/f"), nil},
		} {
			t.Run(c.name, func(t *testing.T) {
				id := newSession(t, s)
				commit(t, s, id, Provisional, desc("first", "1"))
				base, _ := s.PositionAt(bg, id, 1)
				commit(t, s, id, Provisional, c.other...)
				r, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: c.mine, Base: &base, Paths: true})
				if c.clash == nil {
					if err != nil || r.Version != 3 {
						t.Fatalf("landed at %d, %v; want 3", r.Version, err)
					}
					return
				}
				var se *StaleError
				if !errors.As(err, &se) || !errors.Is(err, ErrChangedUnder) {
					t.Fatalf("err %v, want a StaleError", err)
				}
				if !reflect.DeepEqual(se.Names, c.clash) || !reflect.DeepEqual(se.Clashes, c.clash) {
					t.Fatalf("refused %v (clashes %v), want %v", se.Names, se.Clashes, c.clash)
				}
				if !strings.Contains(err.Error(), "clashes with a file or directory") {
					t.Errorf("error %q does not say it is a clash", err)
				}
				if v, _ := s.LatestVersion(bg, id); v != 2 {
					t.Fatalf("a refused commit wrote something: latest %d", v)
				}
			})
		}
		// The base's own snapshots are the caller's to check.
		t.Run("at-the-base", func(t *testing.T) {
			id := newSession(t, s)
			commit(t, s, id, Provisional, descs("out/f")...)
			base, _ := s.PositionAt(bg, id, 1)
			if r, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("out"), Base: &base, Paths: true}); err != nil || r.Version != 2 {
				t.Fatalf("landed at %d, %v; want 2", r.Version, err)
			}
		})
	})
}

// TestCommitStepsOverInOneRoundTrip: a provisional commit that finds its
// version taken reads that version's metadata (its own, after a lost
// reply?) and the snapshots from it up at once, and goes above the
// newest of them without listing: one round trip between its PUTs, as a
// mount committing back to back takes, where a listing and then the reads
// took three and another mount's chmod loop starved the commit (audit 5).
// When every version it read is taken, it lists. The guards (here
// Paths) are checked on what it read, and on the rest of the versions
// above when it lists.
func TestCommitStepsOverInOneRoundTrip(t *testing.T) {
	for _, c := range []struct {
		above int   // versions committed above the base
		paths bool  // the commit is guarded (Paths)
		lists int64 // LISTs the commit sends
	}{{3, false, 0}, {stepReads - 1, false, 0}, {stepReads + 2, false, 1}, {3, true, 0}, {stepReads + 4, true, 1}} {
		t.Run(fmt.Sprintf("%d,paths=%v", c.above, c.paths), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *blob.Bucket) {
				fb, inj, _ := faulty(t, b)
				s := newStore(t, fb, nil)
				id := newSession(t, s)
				commit(t, s, id, Provisional, desc("f", "x"))
				base, err := s.PositionAt(bg, id, 1)
				if err != nil {
					t.Fatal(err)
				}
				for i := range c.above {
					commit(t, s, id, Provisional, desc("o"+strconv.Itoa(i), "y"))
				}
				prefix, _ := SnapshotsPrefix(id)
				gate := faultblob.NewGate()
				inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: prefix}, Stall: gate})
				lists := inj.Stats().Ops[faultblob.OpList].Requests
				done := make(chan error, 1)
				var r CommitResult
				go func() {
					var err error
					r, err = s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("g"), Base: &base, Paths: c.paths})
					done <- err
				}()
				// The metadata of version 2 and the snapshots 2 to 9.
				want := 1 + stepReads
				for deadline := time.Now().Add(10 * time.Second); gate.Waiting() < want; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						n := gate.Waiting()
						gate.Release()
						<-done
						t.Fatalf("%d reads at once after the refused PUT, want %d", n, want)
					}
				}
				gate.Release()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				top := uint32(c.above + 2)
				if r.Version != top || r.Descriptors[0].SequenceNumber != int64(top) || r.Attempts != 2 {
					t.Fatalf("landed at version %d with sequence number %d after %d attempts, want %d, %d, 2",
						r.Version, r.Descriptors[0].SequenceNumber, r.Attempts, top, top)
				}
				if n := inj.Stats().Ops[faultblob.OpList].Requests - lists; n != c.lists {
					t.Fatalf("%d LISTs, want %d", n, c.lists)
				}
			})
		})
	}
}

// TestCommitStepsOverABadSnapshot: an unguarded commit that steps over a
// snapshot it cannot read (not the newest) lands above the newest, as it
// did when it read the newest alone; a guarded one, which must read
// them all, fails.
func TestCommitStepsOverABadSnapshot(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		id := newSession(t, s)
		commit(t, s, id, Provisional, desc("f", "x"))
		base, err := s.PositionAt(bg, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, id, Provisional, desc("g", "y"))
		key, _ := SnapshotKey(id, 3)
		putRaw(t, b, key, []byte("not a snapshot"), nil)
		if _, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("h"), Base: &Position{Version: 3, LastSeq: 5}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("k"), Base: &base, Paths: true}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("guarded commit over a bad snapshot: %v, want %v", err, ErrCorrupt)
		}
		r, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("k"), Base: &base})
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != 5 || r.Descriptors[0].SequenceNumber != 7 {
			t.Fatalf("landed at version %d with sequence number %d, want 5 and 7", r.Version, r.Descriptors[0].SequenceNumber)
		}
	})
}

// §7.3: sequence numbers are int64s; after another writer's snapshot
// that ends at the largest, a commit is refused (ErrInvalid, nothing
// written) where its numbers wrapped to the most negative (review 4).
func TestSection7_3_SequenceNumbersExhausted(t *testing.T) {
	b := memBucket()
	s := newStore(t, b, nil)
	id := newSession(t, s)
	d := desc("a", "x")
	d.SequenceNumber = math.MaxInt64
	putSnapshot(t, b, id, 1, map[string]string{MetaSnapshotType: "checkpoint", MetaTransactionID: "7"}, d)
	if r, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("b")}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("commit after sequence number %d: %+v, %v; want ErrInvalid", int64(math.MaxInt64), r, err)
	}
	if v, err := s.LatestVersion(bg, id); err != nil || v != 1 {
		t.Fatalf("latest version %d %v after the refused commit, want 1", v, err)
	}
}

// TestCommitCreateInFlight: a backend refuses a snapshot's create while
// another writer's create of the same version is in flight (versitygw
// with 412), and serves the version only once that one completes. The commit read the version once, found nothing, and failed
// ("inspect version 2: not found"; two mounts committing to one session
// at once lost 1-7% of their closes to failed/, audit 18). It now waits
// for the version, and steps over it, or, when it never appears (the
// other write failed), creates it itself.
func TestCommitCreateInFlight(t *testing.T) {
	shortInFlight(t, 50*time.Millisecond)
	for _, tc := range []struct {
		name  string
		typ   SnapshotType
		other bool  // the other writer's create lands
		err   error // what the create of version 2 is refused with, when the other's does not land
		want  uint32
	}{
		{"other lands", Provisional, true, nil, 3},
		{"other lands, checkpoint", Checkpoint, true, nil, 3},
		{"other fails, 412", Provisional, false, faultblob.PermanentError(gcerrors.FailedPrecondition), 2},
		{"other fails, checkpoint", Checkpoint, false, faultblob.PermanentError(gcerrors.FailedPrecondition), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb, inj, _ := faulty(t, memblob.OpenBucket(nil))
			s := newStore(t, fb, nil)
			id := newSession(t, s)
			commit(t, s, id, Provisional, desc("f", "x"))
			base, err := s.PositionAt(bg, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			key, _ := SnapshotKey(id, 2)
			if tc.other {
				commit(t, s, id, Provisional, desc("o", "y")) // version 2, another writer's
				// Not served yet, once: its create is still in flight.
				inj.Add(faultblob.Rule{Ops: faultblob.OpHead, Match: faultblob.Match{Glob: key}, FailFirst: 1,
					Err: faultblob.PermanentError(gcerrors.NotFound)})
			} else {
				inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Glob: key}, FailFirst: 1, Err: tc.err})
			}
			req := CommitRequest{Type: tc.typ, Descriptors: descs("g"), Base: &base}
			r, err := s.Commit(bg, id, req)
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			if r.Version != tc.want {
				t.Errorf("landed at version %d, want %d", r.Version, tc.want)
			}
		})
	}
}

// TestCommitRefusedNothingThere: a backend that refuses the create of a
// version every time, with nothing there. awaitTaken waits for such a
// version once; each of the hundred attempts waited again, the caller
// (a close, a rename holding the session) blocked for minutes before
// the retries ran out (review 17).
func TestCommitRefusedNothingThere(t *testing.T) {
	shortInFlight(t, 20*time.Millisecond)
	fb, inj, _ := faulty(t, memblob.OpenBucket(nil))
	s := newStore(t, fb, nil)
	id := newSession(t, s)
	commit(t, s, id, Provisional, desc("f", "x"))
	refuseCreate(t, inj, id, 2, true)
	heads := inj.Stats().Ops[faultblob.OpHead].Requests
	if _, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("g")}); err == nil {
		t.Fatal("a commit whose every create is refused landed")
	}
	// One wait: a few reads of the version's metadata, not a few a try.
	if n := inj.Stats().Ops[faultblob.OpHead].Requests - heads; n > 40 {
		t.Errorf("%d reads of the refused version, want one wait's few", n)
	}
}

// TestCommitSecondRefusalInFlight: another writer's create of version 2
// in flight longer than one wait: refused again, the version was not
// waited for again and the commit failed ("inspect version 2: not
// found", audit 18's symptom; review 18). A commit waits up to
// maxAwaits times.
func TestCommitSecondRefusalInFlight(t *testing.T) {
	shortInFlight(t, 100*time.Millisecond)
	mem := memblob.OpenBucket(nil)
	fb, inj, _ := faulty(t, mem)
	s := newStore(t, fb, nil)
	raw := newStore(t, mem, nil)
	id := newSession(t, s)
	commit(t, s, id, Provisional, desc("f", "x"))
	key, _ := SnapshotKey(id, 2)
	var puts atomic.Int32
	done := make(chan struct{})
	inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Glob: key}, FailFirst: 2,
		Err: faultblob.PermanentError(gcerrors.FailedPrecondition),
		While: func() bool {
			if puts.Add(1) == 2 {
				go func() { // the other writer's create completes just after
					defer close(done)
					time.Sleep(10 * time.Millisecond)
					if _, err := raw.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("other")}); err != nil {
						t.Errorf("other writer: %v", err)
					}
				}()
			}
			return true
		}})
	_, err := s.Commit(bg, id, CommitRequest{Type: Provisional, Descriptors: descs("g")})
	<-done
	if err != nil {
		t.Errorf("commit failed on the second refusal of an in-flight version: %v", err)
	}
}

// shortInFlight makes awaitTaken's wait d for the test.
func shortInFlight(t *testing.T, d time.Duration) {
	old := inFlightFor
	inFlightFor = d
	t.Cleanup(func() { inFlightFor = old })
}

// refuseCreate makes the create of version v of session id fail as
// taken (412) with nothing there: the first only, or every one.
func refuseCreate(t *testing.T, inj *faultblob.Injector, id SessionID, v uint32, every bool) {
	t.Helper()
	key, err := SnapshotKey(id, v)
	if err != nil {
		t.Fatal(err)
	}
	r := faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Glob: key}, FailFirst: 1, Err: faultblob.PermanentError(gcerrors.FailedPrecondition)}
	if every {
		r.FailFirst, r.FailProb = 0, 1
	}
	inj.Add(r)
}
