package layout

import (
	"strconv"
	"strings"
	"testing"

	"gocloud.dev/blob"
)

// §5.1: manifests are created once with If-None-Match; a second creation
// with the same ID loads the existing manifest instead of overwriting it.
func TestSection5_1_ManifestAtomicCreate(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		m := s.NewRootManifest()
		m.Agent, m.Metadata = "first", map[string]string{"k": "v"}
		got, created, err := s.CreateSession(bg, m)
		if err != nil || !created || got.Agent != "first" {
			t.Fatalf("create: %+v %v %v", got, created, err)
		}
		if m.FirstSequenceNumber != 1 {
			t.Fatalf("root first-sequence-number %d, want 1 (decisions.md)", m.FirstSequenceNumber)
		}
		again := *m
		again.Agent = "second"
		got, created, err = s.CreateSession(bg, &again)
		if err != nil || created || got.Agent != "first" {
			t.Fatalf("second create: %+v %v %v", got, created, err)
		}
		loaded, err := s.LoadManifest(bg, m.Session)
		if err != nil || loaded.Agent != "first" || loaded.Metadata["k"] != "v" {
			t.Fatalf("manifest overwritten: %+v %v", loaded, err)
		}
		key, _ := ManifestKey(m.Session)
		a, err := b.Attributes(bg, key)
		if err != nil {
			t.Fatal(err)
		}
		// §16 / decisions.md §16.
		if a.CacheControl != CacheImmutable || !strings.HasPrefix(a.ContentType, "application/json") {
			t.Fatalf("manifest attributes: cache %q type %q", a.CacheControl, a.ContentType)
		}
		if _, _, err := s.CreateSession(bg, &Manifest{}); err == nil {
			t.Fatal("created a session with the zero ID")
		}
		if ok, err := s.SessionExists(bg, m.Session); !ok || err != nil {
			t.Fatalf("exists: %v %v", ok, err)
		}
		if ok, err := s.SessionExists(bg, NewSessionID(testNow)); ok || err != nil {
			t.Fatalf("exists(other): %v %v", ok, err)
		}
	})
}

// §5 / §6.5: a manifest whose ID disagrees with its path is corrupt, as is
// an unparsable one; a missing one is ErrSessionNotFound.
func TestSection5_ManifestValidation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		a, other := NewSessionID(testNow), NewSessionID(testNow)
		_, err := s.LoadManifest(bg, a)
		wantErrIs(t, err, ErrSessionNotFound)
		wantErrIs(t, err, ErrNotFound)
		body, _ := EncodeManifest(&Manifest{Session: other, FirstSequenceNumber: 1})
		key, _ := ManifestKey(a)
		putRaw(t, b, key, body, nil)
		_, err = s.LoadManifest(bg, a)
		wantErrIs(t, err, ErrCorrupt)
		_, err = s.FullLog(bg, a, 0)
		wantErrIs(t, err, ErrCorrupt)
		c := NewSessionID(testNow)
		ckey, _ := ManifestKey(c)
		putRaw(t, b, ckey, []byte("{garbage"), nil)
		_, err = s.LoadManifest(bg, c)
		wantErrIs(t, err, ErrCorrupt)
		// A field this version does not know is kept in Stored (§18).
		d := NewSessionID(testNow)
		dkey, _ := ManifestKey(d)
		doc := `{"session":"` + d.String() + `","first-sequence-number":1,"x-future":true}`
		putRaw(t, b, dkey, []byte(doc), nil)
		m, err := s.LoadManifest(bg, d)
		if err != nil || string(m.Stored) != doc || m.FirstSequenceNumber != 1 {
			t.Fatalf("%+v %v", m, err)
		}
	})
}

// §6.3: the latest version comes from one LIST with max-keys=1; an empty
// listing is version 0 if the manifest exists and not-found otherwise.
func TestSection6_3_LatestVersion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		_, err := s.LatestVersion(bg, NewSessionID(testNow))
		wantErrIs(t, err, ErrSessionNotFound)
		id := newSession(t, s)
		if v, err := s.LatestVersion(bg, id); err != nil || v != 0 {
			t.Fatalf("empty session: %d %v", v, err)
		}
		for i := 1; i <= 18; i++ { // past 16 so the listing crosses FFFFFFF0
			commit(t, s, id, Provisional, desc("f"+strconv.Itoa(i), "x"))
		}
		before := s.Stats()
		v, err := s.LatestVersion(bg, id)
		if err != nil || v != 18 {
			t.Fatalf("latest = %d %v", v, err)
		}
		st := s.Stats()
		if st.Lists-before.Lists != 1 || st.Gets != before.Gets || st.Heads != before.Heads {
			t.Fatalf("LatestVersion made %d lists, %d gets, %d heads; want one LIST", st.Lists-before.Lists, st.Gets-before.Gets, st.Heads-before.Heads)
		}
		vs, err := s.SnapshotVersions(bg, id)
		if err != nil || len(vs) != 18 || vs[0] != 18 || vs[17] != 1 {
			t.Fatalf("versions %v %v", vs, err)
		}
	})
}

// §6.1 / decisions.md: files in snapshots/ that are not version files are
// skipped (00000000.json, lowercase, other shapes, subdirectories), even
// when they sort first.
func TestSection6_3_StrayFilesSkipped(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		id := newSession(t, s)
		prefix, _ := SnapshotsPrefix(id)
		strays := []string{"00000000.json", "0-notes.txt", "0000000.json", "00000001.JSON", "0dir/FFFFFFFF.json",
			"FFFFFFFE.json.tmp", "ffffffff.json", "README", "zzz"}
		for _, k := range strays {
			putRaw(t, b, prefix+k, []byte("junk"), nil)
		}
		if v, err := s.LatestVersion(bg, id); err != nil || v != 0 {
			t.Fatalf("only strays: latest %d %v", v, err)
		}
		if v, ok, err := s.LatestCheckpoint(bg, id); err != nil || ok || v != 0 {
			t.Fatalf("only strays: checkpoint %d %v %v", v, ok, err)
		}
		commit(t, s, id, Checkpoint, desc("a", "1"))
		commit(t, s, id, Checkpoint, desc("b", "2"))
		if v, err := s.LatestVersion(bg, id); err != nil || v != 2 {
			t.Fatalf("latest %d %v", v, err)
		}
		if v, ok, err := s.LatestCheckpoint(bg, id); err != nil || !ok || v != 2 {
			t.Fatalf("checkpoint %d %v %v", v, ok, err)
		}
		vs, err := s.SnapshotVersions(bg, id)
		if err != nil || len(vs) != 2 {
			t.Fatalf("versions %v %v", vs, err)
		}
		// A stray directory in sessions/ does not break ListSessions.
		putRaw(t, b, "sessions/year=2024/month=13/day=01/hour=00/"+tail24+"/manifest.json", []byte("{}"), nil)
		var bad []string
		ids, err := s.ListSessions(bg, func(k string, err error) { bad = append(bad, k) })
		if err != nil || len(ids) != 1 || ids[0] != id || len(bad) != 1 {
			t.Fatalf("ListSessions = %v %v, bad %v", ids, err, bad)
		}
	})
}

// §6.3 latest checkpoint: provisional and queueing snapshots are skipped; a
// session without checkpoints is a distinct outcome from not found; §6.2: a
// snapshot without the type key is a checkpoint.
func TestSection6_3_LatestCheckpoint(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		_, _, err := s.LatestCheckpoint(bg, NewSessionID(testNow))
		wantErrIs(t, err, ErrSessionNotFound)
		id := newSession(t, s)
		if v, ok, err := s.LatestCheckpoint(bg, id); err != nil || ok || v != 0 {
			t.Fatalf("empty: %d %v %v", v, ok, err)
		}
		commit(t, s, id, Provisional, desc("p", "1"))
		commit(t, s, id, Queueing, desc("q", "2"))
		if v, ok, err := s.LatestCheckpoint(bg, id); err != nil || ok || v != 0 {
			t.Fatalf("no checkpoint yet: %d %v %v", v, ok, err)
		}
		commit(t, s, id, Checkpoint, desc("c", "3"))
		commit(t, s, id, Provisional, desc("p2", "4"))
		commit(t, s, id, Queueing, desc("q2", "5"))
		commit(t, s, id, Provisional, desc("p3", "6"))
		if v, ok, err := s.LatestCheckpoint(bg, id); err != nil || !ok || v != 3 {
			t.Fatalf("checkpoint: %d %v %v", v, ok, err)
		}
		// Version 7 without any type metadata: a legacy checkpoint.
		putSnapshot(t, b, id, 7, map[string]string{MetaTransactionID: "5"}, desc("legacy", "7"))
		m, err := s.ReadSnapshotMeta(bg, id, 7)
		if err != nil || m.Type != Checkpoint || !m.TypeMissing || m.TransactionID != 5 {
			t.Fatalf("legacy meta %+v %v", m, err)
		}
		if v, ok, err := s.LatestCheckpoint(bg, id); err != nil || !ok || v != 7 {
			t.Fatalf("legacy checkpoint: %d %v %v", v, ok, err)
		}
	})
}

// §6.2 metadata parsing: only decimal transaction IDs count.
func TestSection6_2_MetaParsing(t *testing.T) {
	for _, tc := range []struct {
		txn  string
		want uint64
	}{{"12345", 12345}, {"18446744073709551615", 1<<64 - 1}, {"", 0}, {"0x10", 0}, {"12abc", 0}, {"-1", 0}, {" 7", 0}, {"1_000", 0}} {
		m := parseSnapshotMeta(map[string]string{MetaTransactionID: tc.txn, MetaSnapshotType: "provisional"})
		if m.TransactionID != tc.want || m.Type != Provisional || m.TypeMissing {
			t.Errorf("txn %q: %+v", tc.txn, m)
		}
	}
	for _, typ := range []string{"checkpoint", "provisional", "queueing"} {
		if got, err := ParseSnapshotType(typ); err != nil || string(got) != typ {
			t.Errorf("ParseSnapshotType(%q) = %q %v", typ, got, err)
		}
	}
	if _, err := ParseSnapshotType("draft"); err == nil {
		t.Error("accepted an unknown snapshot type")
	}
	// A type outside the closed set counts as a checkpoint, as a missing
	// one does, and says what it was.
	for _, tc := range []struct {
		md      map[string]string
		typ     SnapshotType
		missing bool
		invalid string
	}{
		{map[string]string{MetaSnapshotType: "weird"}, Checkpoint, false, "weird"},
		{map[string]string{MetaSnapshotType: "Provisional"}, Provisional, false, ""},
		{map[string]string{}, Checkpoint, true, ""},
	} {
		if m := parseSnapshotMeta(tc.md); m.Type != tc.typ || m.TypeMissing != tc.missing || m.TypeInvalid != tc.invalid {
			t.Errorf("%v: %+v, want type %s, missing %v, invalid %q", tc.md, m, tc.typ, tc.missing, tc.invalid)
		}
	}
}
