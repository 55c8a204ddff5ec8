package layout

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets: parsers never panic, and whatever they accept survives a
// round trip through the matching formatter.

func FuzzParseSessionID(f *testing.F) {
	for _, s := range []string{"0123456789abcdef0123456789abcdef", "0123456789ABCDEF0123456789ABCDEF", "", "xyz",
		strings.Repeat("0", 32), strings.Repeat("g", 32), strings.Repeat("F", 31)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSessionID(s)
		if err != nil {
			return
		}
		if id.String() != strings.ToLower(s) {
			t.Fatalf("ParseSessionID(%q).String() = %q", s, id)
		}
		if back, err := ParseSessionID(id.String()); err != nil || back != id {
			t.Fatalf("round trip of %q: %v %v", s, back, err)
		}
	})
}

func FuzzParseSessionKey(f *testing.F) {
	id := NewSessionID(testNow)
	dir, _ := SessionDir(id)
	for _, s := range []string{dir + "manifest.json", dir + "snapshots/FFFFFFFF.json", dir,
		"sessions/year=2024/month=02/day=30/hour=00/" + tail24 + "/manifest.json",
		"sessions/year=1970/month=01/day=01/hour=00/" + strings.Repeat("0", 24) + "/x",
		"sessions/year=9999/month=12/day=31/hour=23/" + tail24 + "/", "sessions/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		sk, err := ParseSessionKey(key)
		if err != nil {
			return
		}
		if sk.ID.IsZero() {
			t.Fatalf("ParseSessionKey(%q) returned the zero ID", key)
		}
		d, err := SessionDir(sk.ID)
		if err != nil || d+sk.Rest != key {
			t.Fatalf("ParseSessionKey(%q) = %+v, which formats as %q (%v)", key, sk, d+sk.Rest, err)
		}
	})
}

func FuzzParseVersionFileName(f *testing.F) {
	for _, s := range []string{"FFFFFFFF.json", "00000001.json", "00000000.json", "ffffffff.json", "FFFFFFF0.json", ".json", "+FFFFFFF.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, err := ParseVersionFileName(name)
		if err != nil {
			return
		}
		if v == 0 || VersionFileName(v) != name {
			t.Fatalf("ParseVersionFileName(%q) = %d, which formats as %q", name, v, VersionFileName(v))
		}
	})
}

func FuzzParseMemoryKey(f *testing.F) {
	for _, s := range []string{"memories/a/FFFFFFFF.json", "memories/user/123/alice/FFFFFFFE.json", "memories//FFFFFFFF.json",
		"memories/a/../FFFFFFFF.json", "memories/FFFFFFFF.json", "memories/a/00000000.json", "memories/a\x00/FFFFFFFF.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		ns, v, err := ParseMemoryKey(key)
		if err != nil {
			return
		}
		k, err := MemoryKey(ns, v)
		if err != nil || k != key {
			t.Fatalf("ParseMemoryKey(%q) = %q %d, which formats as %q (%v)", key, ns, v, k, err)
		}
		if d, _ := MemoryDir(ns); !strings.HasPrefix(key, d) || strings.Contains(key[len(d):], "/") {
			t.Fatalf("namespace %q of %q is not everything up to the last /", ns, key)
		}
	})
}

func FuzzValidateRefName(f *testing.F) {
	for _, s := range []string{"foo", "sessions/foo", "a/b/c", "", "/", "..", "a\nb", "sessions/", "a//b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateRefName(name) != nil {
			return
		}
		if strings.Count(name, "/") > 1 {
			t.Fatalf("%q has more than one /", name)
		}
		for _, p := range strings.Split(name, "/") {
			if p == "" || p == "." || p == ".." || strings.IndexByte(p, 0) >= 0 {
				t.Fatalf("%q has a bad component %q", name, p)
			}
		}
		if k, err := RefKey(name); err != nil || k != RefsPrefix+name {
			t.Fatalf("RefKey(%q) = %q %v", name, k, err)
		}
	})
}

func descriptorSeeds(f *testing.F) {
	full, _ := json.Marshal(fullDescriptor())
	for _, s := range []string{string(full), `{}`, `{"name":"a","deleted":true}`, `{"fork-session-id":"` + strings.Repeat("A", 32) + `"}`,
		`{"NAME":"b","name":"a","x":[1, 2 ,3]}`, `{"created-at":"2024-01-02T03:04:05.123+05:30"}`, `{"data":"aGk=\n"}`,
		`{"x":"<&>\u2028"}`, `{"commit":{}}`, `{"commit":{"SESSION":"` + strings.Repeat("b", 32) + `"}}`,
		`{"metadata":{}}`, `{"digest":"sha256:` + strings.Repeat("0", 64) + `"}`, `null`, `[]`, `{"size":1e3}`} {
		f.Add([]byte(s))
	}
}

func FuzzDescriptorJSON(f *testing.F) {
	descriptorSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var d1 Descriptor
		if err := json.Unmarshal(b, &d1); err != nil {
			return
		}
		e1, err := json.Marshal(d1)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode %+v: %v", b, d1, err)
		}
		var d2 Descriptor
		if err := json.Unmarshal(e1, &d2); err != nil {
			t.Fatalf("cannot decode our own encoding %s of %q: %v", e1, b, err)
		}
		if !reflect.DeepEqual(d1, d2) {
			t.Fatalf("decode-encode-decode of %q changed it:\n%+v\n%+v\nvia %s", b, d1, d2, e1)
		}
		e2, _ := json.Marshal(d2)
		if !bytes.Equal(e1, e2) {
			t.Fatalf("encoding not stable: %s vs %s", e1, e2)
		}
	})
}

func FuzzDecodeDescriptors(f *testing.F) {
	z, _ := EncodeDescriptors([]Descriptor{fullDescriptor(), {Name: "t", Deleted: true}})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`[{"name":"a"},{"name":"b","size":3}]`))
	zw.Close()
	for _, s := range [][]byte{z, z[:len(z)/2], gz.Bytes(), []byte(`[]`), []byte(`null`), []byte(`[null]`), []byte(`[{"name":"a"}]`), {0x28, 0xb5, 0x2f, 0xfd}, {0x1f, 0x8b}} {
		f.Add(s, "")
	}
	f.Add(z, "zstd")
	f.Add(gz.Bytes(), "gzip")
	f.Add([]byte(`[]`), "br")
	const max = 1 << 16
	f.Fuzz(func(t *testing.T, body []byte, enc string) {
		ds, err := DecodeDescriptors(body, enc, max)
		if err != nil {
			return
		}
		if ds == nil {
			t.Fatal("nil slice without an error")
		}
		z, err := EncodeDescriptors(ds)
		if err != nil {
			t.Fatalf("cannot re-encode %+v: %v", ds, err)
		}
		back, err := DecodeDescriptors(z, "", 64*max)
		if err != nil || !reflect.DeepEqual(back, ds) {
			t.Fatalf("re-decoded %+v %v, want %+v", back, err, ds)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	m, _ := EncodeManifest(&Manifest{Session: NewSessionID(testNow), Parent: &ParentRef{NewSessionID(testNow), 3}, Name: "n",
		Agent: "a", Handler: "h", Metadata: map[string]string{"k": "v"}, FirstSequenceNumber: 9})
	for _, s := range []string{string(m), `{"session":"` + strings.Repeat("a", 32) + `","metadata":{}}`,
		`{"session":"` + strings.Repeat("a", 32) + `","parent":{"session":"` + strings.Repeat("0", 32) + `"}}`,
		`{"session":"` + strings.Repeat("a", 32) + `","parent":{"session":"` + strings.Repeat("a", 32) + `"}}`,
		`{"SESSION":"` + strings.Repeat("b", 32) + `"}`, `{}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m1, err := DecodeManifest(body)
		if err != nil {
			return
		}
		if m1.Session.IsZero() || (m1.Parent != nil && (m1.Parent.Session.IsZero() || m1.Parent.Session == m1.Session)) {
			t.Fatalf("accepted %+v", m1)
		}
		e, err := EncodeManifest(m1)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeManifest(e)
		if err != nil || !reflect.DeepEqual(m1, m2) {
			t.Fatalf("round trip of %q: %+v vs %+v (%v)", body, m1, m2, err)
		}
		if !utf8.Valid(e) {
			t.Fatalf("encoded manifest is not UTF-8: %q", e)
		}
	})
}
