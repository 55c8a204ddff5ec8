package layout

import (
	"bytes"
	"encoding/json"
	"maps"
	"strconv"
	"testing"

	"gocloud.dev/blob"
)

func recNames(ds []Descriptor) string {
	var b bytes.Buffer
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d.Name)
	}
	return b.String()
}

func writeMem(t *testing.T, s *Store, ns string, w MemoryWrite) MemoryResult {
	t.Helper()
	r, err := s.WriteMemory(bg, ns, w)
	if err != nil {
		t.Fatalf("write memory %s: %v", ns, err)
	}
	return r
}

// §8.3 / §13.4: a write reads the latest version, drops records whose name
// is written, appends the new ones in call order and writes the next
// version; an identical write writes nothing; removal drops a name.
func TestSection8_3_MergeSemantics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		const ns = "team/notes"
		if v, err := s.LatestMemoryVersion(bg, ns); err != nil || v != 0 {
			t.Fatalf("empty namespace: %d %v", v, err)
		}
		sess := NewSessionID(testNow)
		r := writeMem(t, s, ns, MemoryWrite{Put: descs("a", "b"), Commit: MemoryCommit{Session: sess, Version: 3}})
		if r.Version != 1 || !r.Changed || recNames(r.Records) != "a,b" {
			t.Fatalf("v1 %+v", r)
		}
		for _, rec := range r.Records {
			if rec.Commit == nil || rec.Commit.Session != sess || rec.Commit.Version != 3 || rec.Commit.Transaction == 0 {
				t.Fatalf("commit envelope %+v", rec.Commit)
			}
		}
		a2 := desc("a", "new a")
		r = writeMem(t, s, ns, MemoryWrite{Put: []Descriptor{desc("c", "c"), a2}})
		if r.Version != 2 || recNames(r.Records) != "b,c,a" || string(r.Records[2].Data) != "new a" {
			t.Fatalf("v2 %+v", recNames(r.Records))
		}
		// Identical record: no new version.
		r = writeMem(t, s, ns, MemoryWrite{Put: []Descriptor{a2}})
		if r.Changed || r.Version != 2 {
			t.Fatalf("identical write %+v", r)
		}
		if v, _ := s.LatestMemoryVersion(bg, ns); v != 2 {
			t.Fatalf("identical write made version %d", v)
		}
		// Removing a missing name changes nothing either.
		if r = writeMem(t, s, ns, MemoryWrite{Remove: []string{"zzz"}}); r.Changed {
			t.Fatalf("%+v", r)
		}
		r = writeMem(t, s, ns, MemoryWrite{Remove: []string{"b"}})
		if r.Version != 3 || recNames(r.Records) != "c,a" {
			t.Fatalf("remove %+v", recNames(r.Records))
		}
		// The last record of a name in one call wins; remove-then-put keeps the put.
		r = writeMem(t, s, ns, MemoryWrite{Put: []Descriptor{desc("d", "1"), desc("e", "e"), desc("d", "2")}, Remove: []string{"c", "e"}})
		if recNames(r.Records) != "a,d,e" || string(r.Records[1].Data) != "2" {
			t.Fatalf("dup %s %q", recNames(r.Records), r.Records[1].Data)
		}
		got, err := s.ReadMemory(bg, ns, r.Version)
		if err != nil || recNames(got) != "a,d,e" {
			t.Fatalf("read back %s %v", recNames(got), err)
		}
		// Old versions stay readable.
		if v1, err := s.ReadMemory(bg, ns, 1); err != nil || recNames(v1) != "a,b" {
			t.Fatalf("v1 %s %v", recNames(v1), err)
		}
		// §8.2: the file is written like a snapshot.
		key, _ := MemoryKey(ns, r.Version)
		a, err := b.Attributes(bg, key)
		if err != nil || a.ContentType != "application/json" || a.ContentEncoding != "zstd" || a.CacheControl != CacheImmutable || a.Metadata[MetaTransactionID] == "" {
			t.Fatalf("attributes %+v %v", a, err)
		}
	})
}

// MergeMemory as a pure function: "identical" ignores created-at, sequence
// number and the envelope but not content fields.
func TestSection8_3_MergeMemoryPure(t *testing.T) {
	base := []Descriptor{desc("a", "1"), desc("b", "2")}
	same := desc("a", "1")
	same.CreatedAt = same.CreatedAt.Add(1)
	same.SequenceNumber = 9
	if _, changed := MergeMemory(base, MemoryWrite{Put: []Descriptor{same}}); changed {
		t.Fatal("a record differing only in created-at changed the namespace")
	}
	for name, mut := range map[string]func(*Descriptor){
		"digest":        func(d *Descriptor) { d.Digest = DigestOf([]byte("x")) },
		"content-type":  func(d *Descriptor) { d.ContentType = "x/y" },
		"metadata":      func(d *Descriptor) { d.Metadata = map[string]string{"k": "v"} },
		"cache-control": func(d *Descriptor) { d.CacheControl = "no-store" },
		"schema-url":    func(d *Descriptor) { d.SchemaURL = "u" },
		"extra":         func(d *Descriptor) { d.Extra = map[string]json.RawMessage{"x": json.RawMessage("1")} },
	} {
		d := desc("a", "1")
		mut(&d)
		merged, changed := MergeMemory(base, MemoryWrite{Put: []Descriptor{d}})
		if !changed || recNames(merged) != "b,a" {
			t.Errorf("%s change: changed=%v %s", name, changed, recNames(merged))
		}
	}
	// Put X' then X (X equal to the current record): the call's last
	// record is the current one, so nothing changes.
	changedA := desc("a", "other")
	if m, changed := MergeMemory(base, MemoryWrite{Put: []Descriptor{changedA, desc("a", "1")}}); changed {
		t.Fatalf("net no-op changed the namespace: %s", recNames(m))
	}
	if merged, _ := MergeMemory(base, MemoryWrite{Put: descs("c")}); len(base) != 2 || recNames(merged) != "a,b,c" {
		t.Fatal("MergeMemory modified its input")
	}
	// Another writer's records whose names §8.3 forbids are not carried
	// into the version written (audit 24: "sl/ash" and "" were); ".."
	// breaks no MUST of the layout and stays.
	bad := append(descs("sl/ash", "", ".."), base...)
	if merged, changed := MergeMemory(bad, MemoryWrite{Put: descs("c")}); !changed || recNames(merged) != "..,a,b,c" {
		t.Fatalf("merged over forbidden names: changed=%v %s", changed, recNames(merged))
	}
	if _, changed := MergeMemory(bad, MemoryWrite{Put: []Descriptor{desc("a", "1")}}); changed {
		t.Fatal("a write that changes nothing wrote a version to leave forbidden names out")
	}
}

// §8.3 naming: non-empty, no "/".
func TestSection8_3_NameRules(t *testing.T) {
	s := newStore(t, memBucket(), nil)
	for _, n := range []string{"", "a/b", "/", ".", "..", "a\x00b"} {
		if err := ValidateMemoryName(n); err == nil {
			t.Errorf("ValidateMemoryName(%q) ok", n)
		}
		_, err := s.WriteMemory(bg, "ns", MemoryWrite{Put: []Descriptor{{Name: n}}})
		wantErrIs(t, err, ErrInvalid)
		_, err = s.WriteMemory(bg, "ns", MemoryWrite{Remove: []string{n}})
		wantErrIs(t, err, ErrInvalid)
	}
	for _, n := range []string{"a", "a.b", "...", "with space", "ü"} {
		if err := ValidateMemoryName(n); err != nil {
			t.Errorf("ValidateMemoryName(%q): %v", n, err)
		}
	}
	for _, ns := range []string{"", "a//b", "/a", "a/", "..", "a/./b"} {
		_, err := s.WriteMemory(bg, ns, MemoryWrite{Put: descs("x")})
		wantErrIs(t, err, ErrInvalid)
	}
	if v, _ := s.LatestMemoryVersion(bg, "ns"); v != 0 {
		t.Fatal("an invalid write landed")
	}
}

// §8.4 discovery: list memories/ recursively, group by namespace, latest
// per namespace; nested namespaces are separate, also when their directory
// sorts before the parent's version files.
func TestSection8_4_Discovery(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		for ns, n := range map[string]int{"a": 2, "a/0sub": 1, "a/b": 3, "a/b/c": 1, "z": 1, "only/nested": 2} {
			for i := range n {
				writeMem(t, s, ns, MemoryWrite{Put: descs("r" + strconv.Itoa(i))})
			}
		}
		putRaw(t, b, "memories/a/junk.txt", []byte("x"), nil)
		putRaw(t, b, "memories/a/00000000.json", []byte("x"), nil)
		var bad []string
		nss, err := s.ListNamespaces(bg, func(k string, err error) { bad = append(bad, k) })
		if err != nil {
			t.Fatal(err)
		}
		want := []Namespace{{"a", 2}, {"a/0sub", 1}, {"a/b", 3}, {"a/b/c", 1}, {"only/nested", 2}, {"z", 1}}
		if len(nss) != len(want) {
			t.Fatalf("namespaces %+v", nss)
		}
		for i := range want {
			if nss[i] != want[i] {
				t.Fatalf("namespaces %+v, want %+v", nss, want)
			}
		}
		if len(bad) != 2 {
			t.Fatalf("bad keys %v", bad)
		}
		for ns, v := range map[string]uint32{"a": 2, "a/0sub": 1, "a/b": 3, "a/b/c": 1, "only": 0, "only/nested": 2, "missing": 0} {
			before := s.Stats().Lists
			got, err := s.LatestMemoryVersion(bg, ns)
			if err != nil || got != v {
				t.Errorf("LatestMemoryVersion(%q) = %d %v, want %d", ns, got, err, v)
			}
			if ns == "a/b" && s.Stats().Lists-before != 1 {
				t.Errorf("latest of a/b took %d lists", s.Stats().Lists-before)
			}
		}
		if ds, err := s.ReadMemory(bg, "a", 2); err != nil || recNames(ds) != "r0,r1" {
			t.Fatalf("a@2 %s %v", recNames(ds), err)
		}
		_, err = s.ReadMemory(bg, "a", 3)
		wantErrIs(t, err, ErrNotFound)
	})
}

// decisions.md: unknown fields, and fields that could not be read,
// survive read-modify-write (memory merges).
func TestSection8_UnknownFieldsSurviveMerge(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		// "odd" is damaged (Damage): its unreadable fields are written
		// back as stored, not dropped.
		body := `[{"name":"kept","digest":"sha256:` + DigestOf([]byte("k")).Hex() + `","x-future":{"deep":[1,"two"]},"commit":{"session":"` + NewSessionID(testNow).String() + `","version":1,"transaction":5,"x-env":{"host":"h1"}}},` +
			`{"name":"odd","digest":"sha256:nothex","size":"12","created-at":"yesterday"}]`
		key, _ := MemoryKey("ns", 1)
		putRaw(t, b, key, []byte(body), nil) // plain JSON: sniffed (§15)
		writeMem(t, s, "ns", MemoryWrite{Put: descs("new")})
		key2, _ := MemoryKey("ns", 2)
		raw, err := b.ReadAll(bg, key2)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := DecodeBody(raw, "", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		// The commit envelope's own unknown fields too (audit 7).
		if !bytes.Contains(plain, []byte(`"x-future":{"deep":[1,"two"]}`)) || !bytes.Contains(plain, []byte(`"transaction":5,"x-env":{"host":"h1"}`)) {
			t.Fatalf("unknown field lost: %s", plain)
		}
		for _, f := range []string{`"digest":"sha256:nothex"`, `"size":"12"`, `"created-at":"yesterday"`} {
			if !bytes.Contains(plain, []byte(f)) {
				t.Fatalf("damaged field %s lost: %s", f, plain)
			}
		}
	})
}

// §8.5: longest-prefix resolution of <namespace>/<name>.
func TestSection8_5_LongestPrefix(t *testing.T) {
	mounted := []string{"a", "a/b", "a/bc", "x/y/z", "a/b/c/d"}
	for _, tc := range []struct {
		key, ns, name string
		ok            bool
	}{
		{"a/b/c", "a/b", "c", true},
		{"a/bc/d", "a/bc", "d", true},
		{"a/bcd", "a", "bcd", true},
		{"a/b", "a", "b", true},
		{"a/b/c/d/e", "a/b/c/d", "e", true},
		{"x/y/z/w", "x/y/z", "w", true},
		{"x/y/w", "", "", false},
		{"a", "", "", false},
		{"q/r", "", "", false},
		{"a/", "", "", false},        // empty name (§8.3)
		{"a/b/", "", "", false},      // empty name
		{"a/b/c/e/f", "", "", false}, // "c/e/f" is no record name (§8.3)
		{"", "", "", false},
	} {
		ns, name, ok := ResolveMemoryKey(mounted, tc.key)
		if ok != tc.ok || ns != tc.ns || name != tc.name {
			t.Errorf("ResolveMemoryKey(%q) = %q %q %v, want %q %q %v", tc.key, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
	// Order of the mounted list does not matter.
	if ns, _, _ := ResolveMemoryKey([]string{"a/b", "a"}, "a/b/c"); ns != "a/b" {
		t.Fatalf("got %q", ns)
	}
	if ns, _, _ := ResolveMemoryKey([]string{"a", "a/b"}, "a/b/c"); ns != "a/b" {
		t.Fatalf("got %q", ns)
	}
}

// TestMemoryWriteUnchanged: a record written on the one it read (an
// append) is not merged over another writer's newer record of the name:
// ErrChangedUnder, nothing written. The same record, or none (removed
// meanwhile), lets it through.
func TestMemoryWriteUnchanged(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		const ns = "team/log"
		orig := desc("log.md", "line 1\n")
		writeMem(t, s, ns, MemoryWrite{Put: []Descriptor{orig}})
		mine := desc("log.md", "line 1\nmine\n")
		guard := map[string]Digest{"log.md": orig.Digest}
		// Nothing changed: it lands.
		if r := writeMem(t, s, ns, MemoryWrite{Put: []Descriptor{mine}, Unchanged: guard}); r.Version != 2 {
			t.Fatalf("unchanged base: version %d", r.Version)
		}
		// Another writer's record since: refused.
		_, err := s.WriteMemory(bg, ns, MemoryWrite{Put: []Descriptor{desc("log.md", "line 1\nother\n")}, Unchanged: guard})
		wantErrIs(t, err, ErrChangedUnder)
		wantErrIs(t, err, ErrConflict)
		if v, _ := s.LatestMemoryVersion(bg, ns); v != 2 {
			t.Fatalf("a refused write made version %d", v)
		}
		// Removed meanwhile: written anew.
		writeMem(t, s, ns, MemoryWrite{Remove: []string{"log.md"}})
		if r := writeMem(t, s, ns, MemoryWrite{Put: []Descriptor{mine}, Unchanged: guard}); r.Version != 4 {
			t.Fatalf("removed base: version %d", r.Version)
		}
	})
}

// TestMemoryMergeKeepsNamesNotUTF8: another writer's memory version holds
// records named "caf\xe9" and "caf\xea" (raw bytes, not UTF-8). A merge
// by pugfs of another record writes them back as they were: written as
// encoding/json writes, both became "caf\ufffd", one name hiding the
// other in the next version (review 11).
func TestMemoryMergeKeepsNamesNotUTF8(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		body := `[{"name":"caf` + "\xe9" + `","digest":"sha256:` + DigestOf([]byte("1")).Hex() + `","size":1},` +
			`{"name":"caf` + "\xea" + `","digest":"sha256:` + DigestOf([]byte("2")).Hex() + `","size":1}]`
		key, _ := MemoryKey("ns", 1)
		putRaw(t, b, key, []byte(body), nil)
		if _, err := s.WriteMemory(bg, "ns", MemoryWrite{Put: descs("new")}); err != nil {
			t.Fatal(err)
		}
		v2, err := s.ReadMemory(bg, "ns", 2)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := recNames(v2), "caf\xe9,caf\xea,new"; got != want {
			t.Errorf("version 2 holds %q, want %q", got, want)
		}
	})
}

// TestMemoryRewriteKeepsOthersMetadata: a record written whole over the
// one its writer read keeps the metadata another writer gave it since,
// but for what the writer changed itself: a > from a mount whose view was
// older than another mount's chmod or setfattr put the old mode back
// (audit 28).
func TestMemoryRewriteKeepsOthersMetadata(t *testing.T) {
	tests := []struct {
		name               string
		read, mine, theirs map[string]string
		want               map[string]string
	}{
		{"another chmod and setfattr kept",
			map[string]string{"posix-mode": "0644"}, map[string]string{"posix-mode": "0644"},
			map[string]string{"posix-mode": "0600", "reviewed": "yes"},
			map[string]string{"posix-mode": "0600", "reviewed": "yes"}},
		{"the writer's own chmod wins",
			map[string]string{"posix-mode": "0644"}, map[string]string{"posix-mode": "0700"},
			map[string]string{"posix-mode": "0600"},
			map[string]string{"posix-mode": "0700"}},
		{"a key removed by the other stays removed",
			map[string]string{"k": "v"}, map[string]string{"k": "v"}, nil, nil},
		{"the content write's cleared mtime stays cleared",
			map[string]string{"posix-mtime": "2020-01-01T00:00:00Z"}, nil,
			map[string]string{"posix-mtime": "2021-01-01T00:00:00Z"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, memBucket(), nil)
			put := func(md map[string]string, body string, inherited map[string]string) {
				t.Helper()
				d, err := s.PutBody(bg, "r", []byte(body), BlobOptions{})
				if err != nil {
					t.Fatal(err)
				}
				d.Metadata = md
				w := MemoryWrite{Put: []Descriptor{d}}
				if inherited != nil {
					w.Inherited = map[string]map[string]string{"r": inherited}
				}
				if _, err := s.WriteMemory(bg, "ns", w); err != nil {
					t.Fatal(err)
				}
			}
			put(tt.read, "one", nil)   // what the writer read
			put(tt.theirs, "one", nil) // another writer's change since
			read := tt.read
			if read == nil {
				read = map[string]string{}
			}
			put(tt.mine, "two", read) // the rewrite
			v, err := s.LatestMemoryVersion(bg, "ns")
			if err != nil {
				t.Fatal(err)
			}
			recs, err := s.ReadMemory(bg, "ns", v)
			if err != nil || len(recs) != 1 {
				t.Fatalf("%v, %d records", err, len(recs))
			}
			if got := recs[0].Metadata; !maps.Equal(got, tt.want) || string(recs[0].Data) != "two" {
				t.Fatalf("record %q with metadata %v, want two with %v", recs[0].Data, got, tt.want)
			}
		})
	}
}
