package layout

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/blob"
)

func fullDescriptor() Descriptor {
	body := []byte("inline body")
	return Descriptor{
		Digest:          DigestOf(body),
		Size:            int64(len(body)),
		CreatedAt:       time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC),
		ContentType:     "text/plain",
		ContentEncoding: "gzip",
		CacheControl:    "no-store",
		SchemaURL:       "https://example.com/schema.json",
		Name:            "dir/file.txt",
		Metadata:        map[string]string{"k": "v", "K2": "V2"},
		SequenceNumber:  42,
		Data:            body,
		TargetSession:   NewSessionID(testNow),
		SourceSession:   NewSessionID(testNow),
		SourceVersion:   7,
		Fork:            true,
		Deleted:         true,
		Commit:          &MemoryCommit{Session: NewSessionID(testNow), Version: 3, Transaction: 99},
		Extra:           map[string]json.RawMessage{"x-future": json.RawMessage(`{"a":[1,2]}`)},
	}
}

func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// §7: every field round-trips under its schema name.
func TestSection7_DescriptorRoundTrip(t *testing.T) {
	d := fullDescriptor()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"digest", "size", "created-at", "content-type", "content-encoding", "cache-control",
		"schema-url", "name", "metadata", "sequence-number", "data", "target-session", "source-session",
		"source-version", "fork", "deleted", "commit", "x-future"}
	got := jsonKeys(t, b)
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for _, k := range want {
		if !bytes.Contains(b, []byte(`"`+k+`":`)) {
			t.Fatalf("key %q missing from %s", k, b)
		}
	}
	// Known fields in schema order, unknown ones after.
	if !bytes.HasPrefix(b, []byte(`{"digest":`)) || !bytes.HasSuffix(b, []byte(`"x-future":{"a":[1,2]}}`)) {
		t.Fatalf("order: %s", b)
	}
	if !bytes.Contains(b, []byte(`"created-at":"2024-05-06T07:08:09.123456789Z"`)) {
		t.Fatalf("created-at: %s", b)
	}
	if !bytes.Contains(b, []byte(`"data":"aW5saW5lIGJvZHk="`)) {
		t.Fatalf("data is not standard base64: %s", b)
	}
	var back Descriptor
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, d)
	}
}

// decisions.md: optional fields are omitted when zero. The sequence
// number is not one (§7.3: every descriptor of a snapshot carries it): a
// session whose first-sequence-number is 0 wrote its first descriptor
// without one (audit 24). A memory record is in no sequence.
func TestSection7_DescriptorOmitsZeroFields(t *testing.T) {
	b, err := json.Marshal(Descriptor{})
	if err != nil || string(b) != `{"sequence-number":0}` {
		t.Fatalf("zero descriptor = %s %v", b, err)
	}
	b, err = json.Marshal(Descriptor{Name: "r", Commit: &MemoryCommit{Version: 1, Transaction: 2}})
	if err != nil || strings.Contains(string(b), "sequence-number") {
		t.Fatalf("memory record = %s %v, want no sequence-number", b, err)
	}
	d := Descriptor{Name: "n", Metadata: map[string]string{}, Data: nil, CreatedAt: time.Time{}}
	b, _ = json.Marshal(d)
	if string(b) != `{"name":"n","sequence-number":0}` {
		t.Fatalf("got %s", b)
	}
	// Created-at is written in UTC whatever the location, with all nine
	// digits of nanoseconds (decisions.md; RFC3339Nano dropped trailing
	// zeros, and a whole second's fraction: audit 16).
	for _, tc := range []struct {
		ns   int
		want string
	}{{0, "2024-01-02T02:04:05.000000000Z"}, {392553230, "2024-01-02T02:04:05.392553230Z"}, {7, "2024-01-02T02:04:05.000000007Z"}} {
		d = Descriptor{CreatedAt: time.Date(2024, 1, 2, 3, 4, 5, tc.ns, time.FixedZone("x", 3600))}
		b, _ = json.Marshal(d)
		if want := `{"created-at":"` + tc.want + `","sequence-number":0}`; string(b) != want {
			t.Errorf("got %s, want %s", b, want)
		}
	}
	// size is not an optional field: a blob of 0 bytes says so. A
	// tombstone, which names no blob, has none (audit 16).
	b, _ = json.Marshal(Descriptor{Name: "e", Digest: DigestOf(nil)})
	if want := `{"digest":"` + DigestOf(nil).String() + `","size":0,"name":"e","sequence-number":0}`; string(b) != want {
		t.Errorf("empty blob: got %s, want %s", b, want)
	}
	b, _ = json.Marshal(Descriptor{Name: "e", Deleted: true})
	if want := `{"name":"e","sequence-number":0,"deleted":true}`; string(b) != want {
		t.Errorf("tombstone: got %s, want %s", b, want)
	}
	var back Descriptor
	if err := json.Unmarshal([]byte(`{"created-at":"2024-01-02T03:04:05.5+01:00","metadata":{},"data":"","source-version":0,"fork":false}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.CreatedAt.Location() != time.UTC || back.CreatedAt.Hour() != 2 || back.Metadata != nil || back.Data != nil {
		t.Fatalf("got %+v", back)
	}
}

// §7.2: the legacy fork-session-id form reads as fork=true, target=<id>;
// writes use the new form.
func TestSection7_2_LegacyForkSessionID(t *testing.T) {
	id := NewSessionID(testNow)
	for _, in := range []string{
		`{"name":"f","fork-session-id":"` + strings.ToUpper(id.String()) + `"}`,
		`{"name":"f","fork-session-id":"` + id.String() + `","fork":false}`,
		`{"fork-session-id":"` + id.String() + `","name":"f"}`,
	} {
		var d Descriptor
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !d.Fork || d.TargetSession != id || d.Extra != nil {
			t.Fatalf("%s: got %+v", in, d)
		}
		out, _ := json.Marshal(d)
		if bytes.Contains(out, []byte("fork-session-id")) || !bytes.Contains(out, []byte(`"target-session":"`+id.String()+`"`)) || !bytes.Contains(out, []byte(`"fork":true`)) {
			t.Fatalf("re-encoded %s", out)
		}
	}
	for _, in := range []string{`{"fork-session-id":""}`, `{"fork-session-id":"00000000000000000000000000000000"}`, `{"fork-session-id":null}`} {
		var d Descriptor
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.Fork || !d.TargetSession.IsZero() {
			t.Fatalf("%s: %+v %v", in, d, err)
		}
	}
	for _, in := range []string{`{"fork-session-id":"xyz"}`, `{"fork-session-id":7}`, `{"fork-session-id":"` + id.String() + `0"}`} {
		var d Descriptor
		err := json.Unmarshal([]byte(in), &d)
		wantErrIs(t, err, ErrCorrupt)
	}
}

// decisions.md: a zero digest is absent, empty, or sha256: and 64 zeros.
func TestSection10_ZeroDigestForms(t *testing.T) {
	for _, in := range []string{`{"name":"x","deleted":true}`, `{"name":"x","deleted":true,"digest":""}`,
		`{"name":"x","deleted":true,"digest":"sha256:` + strings.Repeat("0", 64) + `"}`} {
		var d Descriptor
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !d.Digest.IsZero() || !d.Deleted {
			t.Fatalf("%s: %+v", in, d)
		}
		out, _ := json.Marshal(d)
		if string(out) != `{"name":"x","sequence-number":0,"deleted":true}` {
			t.Fatalf("%s re-encoded as %s", in, out)
		}
	}
}

// §18 / decisions.md: unknown fields are kept verbatim by key; known keys
// match exactly (JSON field names are case-sensitive).
func TestSection18_UnknownFieldsPreserved(t *testing.T) {
	in := `{"name":"a","zeta":1,"alpha":{"nested":[true,null]},"NAME":"shadow","Digest":"nope"}`
	var d Descriptor
	if err := json.Unmarshal([]byte(in), &d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "a" || !d.Digest.IsZero() {
		t.Fatalf("a differently-cased key was read as a schema field: %+v", d)
	}
	if len(d.Extra) != 4 || string(d.Extra["alpha"]) != `{"nested":[true,null]}` || string(d.Extra["NAME"]) != `"shadow"` {
		t.Fatalf("extra = %v", d.Extra)
	}
	out, _ := json.Marshal(d)
	if string(out) != `{"name":"a","sequence-number":0,"Digest":"nope","NAME":"shadow","alpha":{"nested":[true,null]},"zeta":1}` {
		t.Fatalf("got %s", out)
	}
	// The last of duplicate keys wins, on every path.
	var dup Descriptor
	if err := json.Unmarshal([]byte(`{"NAME":"b","name":"a"}`), &dup); err != nil || dup.Name != "a" {
		t.Fatalf("%+v %v", dup, err)
	}
	// A schema key in Extra never shadows the field.
	d = Descriptor{Name: "real", Extra: map[string]json.RawMessage{"name": json.RawMessage(`"fake"`)}}
	out, _ = json.Marshal(d)
	if string(out) != `{"name":"real","sequence-number":0}` {
		t.Fatalf("got %s", out)
	}
	// Clone is deep.
	c := fullDescriptor()
	cl := c.Clone()
	cl.Metadata["k"] = "changed"
	cl.Data[0] = 'X'
	cl.Commit.Version = 100
	cl.Extra["x-future"][0] = '['
	if c.Metadata["k"] != "v" || c.Data[0] != 'i' || c.Commit.Version != 3 || c.Extra["x-future"][0] != '{' {
		t.Fatal("Clone shares memory with the original")
	}
}

// §7: a descriptor's digest in upper-case hex names the same blob (keys
// are lower case, §3); it reads, and is written back in lower case.
func TestSection7_DescriptorUpperCaseDigest(t *testing.T) {
	sum := DigestOf([]byte("x"))
	var d Descriptor
	if err := json.Unmarshal([]byte(`{"name":"f","digest":"sha256:`+strings.ToUpper(sum.Hex())+`"}`), &d); err != nil || d.Digest != sum {
		t.Fatalf("%+v %v", d, err)
	}
	ds, err := DecodeDescriptors([]byte(`[{"name":"f","digest":"sha256:`+strings.ToUpper(sum.Hex())+`"}]`), "", 1<<20)
	if err != nil || len(ds) != 1 || ds[0].Digest != sum {
		t.Fatalf("%+v %v", ds, err)
	}
	if b, _ := json.Marshal(d); !strings.Contains(string(b), sum.String()) {
		t.Fatalf("written back as %s", b)
	}
}

// §7: a descriptor whose object, name or log-shaping fields cannot be
// read makes its snapshot corrupt as a whole.
func TestSection7_DescriptorCorrupt(t *testing.T) {
	for _, in := range []string{
		`null`, `[]`, `1`, `"x"`, `{`, `{"target-session":"abc"}`,
		`{"source-session":"` + strings.Repeat("g", 32) + `"}`,
		`{"fork":"yes"}`, `{"deleted":1}`, `{"sequence-number":"1"}`,
		`{"commit":{"session":"zz"}}`, `{"name":5}`, `{"fork-session-id":"zz"}`,
		// Damage elsewhere does not hide a corrupt log field.
		`{"digest":"bad","deleted":"yes"}`,
	} {
		var d Descriptor
		err := json.Unmarshal([]byte(in), &d)
		if err == nil {
			t.Errorf("Unmarshal(%s) = %+v, want error", in, d)
			continue
		}
		// Through DecodeDescriptors the error is ErrCorrupt.
		_, err = DecodeDescriptors([]byte("["+in+"]"), "", 1<<20)
		wantErrIs(t, err, ErrCorrupt)
	}
}

// A field the log can do without that cannot be read is the descriptor's
// Damage: the descriptor decodes (its snapshot with it), the field is
// zero, its stored value is kept and written back, and only damage to
// digest, size or content-encoding makes the body unreadable.
func TestDescriptorDamage(t *testing.T) {
	for _, c := range []struct {
		in     string
		fields []string
		body   bool
		check  func(d Descriptor) bool
	}{
		{`{"name":"f","size":-1}`, []string{"size"}, true, nil},
		{`{"name":"f","size":"1"}`, []string{"size"}, true, nil},
		{`{"name":"f","digest":"sha256:abc"}`, []string{"digest"}, true, nil},
		{`{"name":"f","digest":"SHA256:` + strings.Repeat("a", 64) + `"}`, []string{"digest"}, true, nil},
		{`{"name":"f","content-encoding":7}`, []string{"content-encoding"}, true, nil},
		{`{"name":"f","size":3,"created-at":"yesterday"}`, []string{"created-at"}, false,
			func(d Descriptor) bool { return d.Size == 3 && d.CreatedAt.IsZero() }},
		{`{"name":"f","created-at":"2024-01-01"}`, []string{"created-at"}, false, nil},
		// Year 10000 in UTC: not writable as RFC 3339.
		{`{"name":"f","created-at":"9999-12-31T23:59:59-01:00"}`, []string{"created-at"}, false, nil},
		{`{"name":"f","data":"***","size":3}`, []string{"data"}, false,
			func(d Descriptor) bool { return d.Data == nil && d.Size == 3 }},
		{`{"name":"f","source-version":-1}`, []string{"source-version"}, false, nil},
		{`{"name":"f","source-version":4294967296}`, []string{"source-version"}, false, nil},
		{`{"name":"f","source-version":1.5}`, []string{"source-version"}, false, nil},
		{`{"name":"f","metadata":[1]}`, []string{"metadata"}, false,
			func(d Descriptor) bool { return d.Metadata == nil }},
		{`{"name":"f","content-type":1,"schema-url":{},"cache-control":[]}`, []string{"content-type", "cache-control", "schema-url"}, false, nil},
		{`{"name":"f","created-at":"x","digest":"y","sequence-number":7}`, []string{"digest", "created-at"}, true,
			func(d Descriptor) bool { return d.SequenceNumber == 7 && d.Name == "f" }},
	} {
		var d Descriptor
		if err := json.Unmarshal([]byte(c.in), &d); err != nil {
			t.Errorf("Unmarshal(%s): %v", c.in, err)
			continue
		}
		if d.Damage == nil || !reflect.DeepEqual(d.Damage.Fields, c.fields) || d.Damage.Body != c.body || d.Damage.Name != "f" {
			t.Errorf("Unmarshal(%s): damage %+v, want fields %q body %v", c.in, d.Damage, c.fields, c.body)
			continue
		}
		if c.check != nil && !c.check(d) {
			t.Errorf("Unmarshal(%s) = %+v", c.in, d)
		}
		if !errors.Is(d.Damage, ErrCorrupt) || !strings.Contains(d.Damage.Error(), `"f"`) {
			t.Errorf("Unmarshal(%s): damage error %q", c.in, d.Damage)
		}
		// In a snapshot, the descriptor keeps its place.
		ds, err := DecodeDescriptors([]byte(`[{"name":"ok"},`+c.in+`]`), "", 1<<20)
		if err != nil || len(ds) != 2 || ds[1].Damage == nil || ds[0].Damage != nil {
			t.Errorf("DecodeDescriptors(%s) = %+v, %v", c.in, ds, err)
		}
		// Written back, the stored values come back as they were.
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var again Descriptor
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, d) {
			t.Errorf("%s written back as %s, read as %+v (%v)", c.in, b, again, err)
		}
	}
	// A field set anew replaces the stored value.
	var d Descriptor
	if err := json.Unmarshal([]byte(`{"name":"f","created-at":"yesterday","metadata":"x"}`), &d); err != nil {
		t.Fatal(err)
	}
	d.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d.Metadata = map[string]string{"posix-mode": "0600"}
	b, _ := json.Marshal(d)
	if want := `{"created-at":"2026-01-02T03:04:05.000000000Z","name":"f","metadata":{"posix-mode":"0600"},"sequence-number":0}`; string(b) != want {
		t.Errorf("set anew: %s, want %s", b, want)
	}
	// Metadata values of another JSON type are shown as their JSON text.
	if err := json.Unmarshal([]byte(`{"name":"f","metadata":{"n":3,"o":{"a":[true]},"s":"x","z":null}}`), &d); err != nil || d.Damage != nil {
		t.Fatalf("%+v %v", d, err)
	}
	if want := map[string]string{"n": "3", "o": `{"a":[true]}`, "s": "x", "z": ""}; !reflect.DeepEqual(d.Metadata, want) {
		t.Errorf("metadata %q, want %q", d.Metadata, want)
	}
}

// §3.1 / §7.1 / decisions.md: inline data is used only when it matches.
func TestSection7_1_InlineData(t *testing.T) {
	d := desc("a", "hello")
	if !d.InlineOK() {
		t.Fatal("matching inline data rejected")
	}
	bad := d.Clone()
	bad.Data[0] = 'j'
	if bad.InlineOK() {
		t.Fatal("mismatching inline data accepted")
	}
	short := d.Clone()
	short.Size = 4
	if short.InlineOK() {
		t.Fatal("size mismatch accepted")
	}
	none := d.Clone()
	none.Data = nil
	if none.InlineOK() {
		t.Fatal("absent data accepted")
	}
}

// decisions.md "Which descriptors are named slots".
func TestSection10_IsSlot(t *testing.T) {
	id := NewSessionID(testNow)
	for _, tc := range []struct {
		d    Descriptor
		slot bool
	}{
		{Descriptor{Name: "a"}, true},
		{Descriptor{Name: "a", Deleted: true}, true},
		{Descriptor{}, false},
		{Descriptor{Name: "a", Fork: true, TargetSession: id}, false},
		{Descriptor{Name: "a", TargetSession: id}, false},
		{Descriptor{Name: "a", Fork: true}, false},
		{Descriptor{Name: "a", SourceSession: id, SourceVersion: 3}, true},
	} {
		if tc.d.IsSlot() != tc.slot {
			t.Errorf("%+v: IsSlot = %v", tc.d, !tc.slot)
		}
	}
}

// §5: manifest schema.
func TestSection5_ManifestCodec(t *testing.T) {
	m := &Manifest{
		Session: NewSessionID(testNow), Parent: &ParentRef{Session: NewSessionID(testNow), Version: 4},
		Name: "n", Agent: "ag", Handler: "h", Metadata: map[string]string{"a": "b"}, FirstSequenceNumber: 17,
	}
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"session", "parent", "name", "agent", "handler", "metadata", "first-sequence-number"} {
		if !bytes.Contains(b, []byte(`"`+k+`":`)) {
			t.Fatalf("key %q missing: %s", k, b)
		}
	}
	back, err := DecodeManifest(b)
	if err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip %+v %v", back, err)
	}
	// Optional fields are omitted; first-sequence-number is always written.
	b, _ = EncodeManifest(&Manifest{Session: m.Session})
	if got := jsonKeys(t, b); len(got) != 2 {
		t.Fatalf("minimal manifest %s", b)
	}
	// A zero parent reads as no parent; unknown fields are ignored (§18).
	back, err = DecodeManifest([]byte(`{"session":"` + strings.ToUpper(m.Session.String()) + `","parent":{"session":"00000000000000000000000000000000","version":0},"future":1}`))
	if err != nil || back.Parent != nil || back.Session != m.Session {
		t.Fatalf("%+v %v", back, err)
	}
	// Names match exactly: one in another case is an unknown field
	// ("Parent" made another session the parent, its files shown as
	// this one's: review 4). A name given twice, the last wins, and
	// invalid UTF-8 reads, as encoding/json had them.
	back, err = DecodeManifest([]byte(`{"session":"` + m.Session.String() + `","name":"mine","Name":"not-a-name","Parent":{"session":"` + m.Parent.Session.String() + `","version":1},"parent":{"Session":"` + m.Parent.Session.String() + `","version":2}}`))
	if err != nil || back.Name != "mine" || back.Parent != nil {
		t.Fatalf("names in another case: %+v %v", back, err)
	}
	back, err = DecodeManifest([]byte(`{"session":"` + m.Session.String() + `","name":"first","name":"` + "last\xff" + `"}`))
	if err != nil || back.Name != "last\ufffd" {
		t.Fatalf("a name twice, invalid UTF-8: %+v %v", back, err)
	}
	if _, err := EncodeManifest(&Manifest{}); err == nil {
		t.Fatal("encoded a manifest without a session")
	}
	// What describes the session without shaping its log is read
	// leniently: another JSON type is left out, metadata values that
	// are not strings read as their JSON text.
	back, err = DecodeManifest([]byte(`{"session":"` + m.Session.String() + `","agent":5,"handler":{"x":1},"metadata":{"n":3,"s":"t","z":null,"o":[true]},"first-sequence-number":4}`))
	if err != nil || back.Agent != "" || back.Handler != "" || back.FirstSequenceNumber != 4 ||
		!reflect.DeepEqual(back.Metadata, map[string]string{"n": "3", "s": "t", "z": "", "o": "[true]"}) {
		t.Fatalf("lenient fields: %+v %v", back, err)
	}
	if back, err = DecodeManifest([]byte(`{"session":"` + m.Session.String() + `","metadata":"x","agent":"a"}`)); err != nil || back.Metadata != nil || back.Agent != "a" {
		t.Fatalf("metadata not an object: %+v %v", back, err)
	}
	for _, in := range []string{``, `null`, `[]`, `{}`, `{"session":""}`, `{"session":"xyz"}`,
		`{"session":"00000000000000000000000000000000"}`,
		`{"session":"` + m.Session.String() + `","parent":{"session":"` + m.Session.String() + `","version":1}}`,
		`{"session":"` + m.Session.String() + `","first-sequence-number":"1"}`,
		`{"session":"` + m.Session.String() + `","name":5}`,
		`{"session":"` + m.Session.String() + `","parent":{"session":"` + m.Parent.Session.String() + `","version":-1}}`,
	} {
		_, err := DecodeManifest([]byte(in))
		wantErrIs(t, err, ErrCorrupt)
	}
}

// §6.2 / §15: snapshot bodies are zstd; readers sniff gzip, zstd and plain.
func TestSection15_Sniffing(t *testing.T) {
	ds := descs("a", "b")
	z, err := EncodeDescriptors(ds)
	if err != nil {
		t.Fatal(err)
	}
	if Sniff(z) != EncodingZstd {
		t.Fatalf("EncodeDescriptors is not zstd: % x", z[:4])
	}
	plain, _ := json.Marshal(ds)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	for _, tc := range []struct {
		name string
		body []byte
		enc  string
	}{
		{"zstd sniffed", z, ""},
		{"zstd declared", z, "zstd"},
		{"gzip sniffed", gz.Bytes(), ""},
		{"gzip declared", gz.Bytes(), "gzip"},
		{"plain", plain, ""},
		{"identity", plain, "identity"},
		{"plain with whitespace", append([]byte(" \n"), plain...), ""},
	} {
		got, err := DecodeDescriptors(tc.body, tc.enc, 1<<20)
		if err != nil || len(got) != 2 || got[1].Name != "b" {
			t.Errorf("%s: %v %v", tc.name, got, err)
		}
	}
	for _, tc := range []struct {
		head []byte
		want string
	}{
		{[]byte{0x1f, 0x8b}, EncodingGzip}, {[]byte{0x1f, 0x8b, 8}, EncodingGzip},
		{[]byte{0x28, 0xb5, 0x2f, 0xfd}, EncodingZstd}, {[]byte{0x28, 0xb5, 0x2f}, EncodingNone},
		{[]byte{0x1f}, EncodingNone}, {nil, EncodingNone}, {[]byte("[]"), EncodingNone},
	} {
		if got := Sniff(tc.head); got != tc.want {
			t.Errorf("Sniff(% x) = %q, want %q", tc.head, got, tc.want)
		}
	}
	if ds, err := DecodeDescriptors(mustEncode(t, nil), "", 100); err != nil || ds == nil || len(ds) != 0 {
		t.Fatalf("empty snapshot: %v %v", ds, err)
	}
}

func mustEncode(t *testing.T, ds []Descriptor) []byte {
	b, err := EncodeDescriptors(ds)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Garbage and truncated bodies are ErrCorrupt, never a panic.
func TestSection15_CorruptBodies(t *testing.T) {
	z := mustEncode(t, descs("a", "b", "c"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`[{"name":"a"}]`))
	zw.Close()
	for _, tc := range []struct {
		name string
		body []byte
		enc  string
	}{
		{"not json", []byte("{not json"), ""},
		{"object", []byte(`{"name":"a"}`), ""},
		{"null", []byte("null"), ""},
		{"numbers", []byte("[1,2]"), ""},
		{"null element", []byte("[null]"), ""},
		{"empty", nil, ""},
		{"truncated zstd", z[:len(z)/2], ""},
		{"zstd magic only", z[:4], ""},
		{"zstd junk", append(append([]byte{}, z[:4]...), bytes.Repeat([]byte{0xAA}, 40)...), ""},
		{"truncated gzip", gz.Bytes()[:gz.Len()-6], ""},
		{"gzip junk", []byte{0x1f, 0x8b, 1, 2, 3, 4, 5}, ""},
		{"declared zstd but plain", []byte("[]"), "zstd"},
		{"declared gzip but plain", []byte("[]"), "gzip"},
		{"unknown encoding", []byte("[]"), "br"},
		{"trailing garbage", append([]byte(`[{"name":"a"}]`), 'x'), ""},
	} {
		_, err := DecodeDescriptors(tc.body, tc.enc, 1<<20)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		wantErrIs(t, err, ErrCorrupt)
	}
}

// Bounded decompression: a small object that expands past the limit is
// ErrTooLarge, without allocating the expansion.
func TestSection15_DecompressionBomb(t *testing.T) {
	const expanded = 64 << 20
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	zbomb := enc.EncodeAll(append(append([]byte("["), bytes.Repeat([]byte(" "), expanded)...), ']'), nil)
	// A streamed frame (no content size in the header) as well.
	var streamed bytes.Buffer
	zs, _ := zstd.NewWriter(&streamed)
	zs.Write([]byte("["))
	zs.Write(bytes.Repeat([]byte(" "), expanded))
	zs.Write([]byte("]"))
	zs.Close()
	var gz bytes.Buffer
	gw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	gw.Write(bytes.Repeat([]byte(" "), expanded))
	gw.Close()
	t.Logf("bombs: zstd %d bytes, streamed zstd %d bytes, gzip %d bytes, each expanding to %d", len(zbomb), streamed.Len(), gz.Len(), expanded)
	if len(zbomb) > 64<<10 || streamed.Len() > 64<<10 {
		t.Fatalf("bomb too big to be a bomb")
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{{"zstd", zbomb}, {"zstd streamed", streamed.Bytes()}, {"gzip", gz.Bytes()}} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := DecodeDescriptors(tc.body, "", 1<<20)
		runtime.ReadMemStats(&after)
		wantErrIs(t, err, ErrTooLarge)
		t.Logf("%s: allocated %d KB", tc.name, (after.TotalAlloc-before.TotalAlloc)>>10)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 48<<20 {
			t.Errorf("%s: decoding allocated %d MB", tc.name, alloc>>20)
		}
	}
	// A tiny frame that declares a huge window (64 MiB): decoded without
	// allocating that window (TestZstdWindows).
	windowBomb := zstdFrame(26, []byte("[]"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ds, err := DecodeDescriptors(windowBomb, "", 1<<20)
	runtime.ReadMemStats(&after)
	if err != nil || len(ds) != 0 {
		t.Errorf("window bomb: %v, %v; want no descriptor", ds, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("window bomb: decoding allocated %d MB", alloc>>20)
	}
	// The same bound through a Store (Options.MaxDecoded).
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, &Options{MaxDecoded: 1 << 20})
		id := newSession(t, s)
		key, _ := SnapshotKey(id, 1)
		putRaw(t, b, key, zbomb, nil)
		_, err := s.ReadSnapshot(bg, id, 1)
		wantErrIs(t, err, ErrTooLarge)
		mk, _ := MemoryKey("bomb", 1)
		putRaw(t, b, mk, streamed.Bytes(), nil)
		_, err = s.ReadMemory(bg, "bomb", 1)
		wantErrIs(t, err, ErrTooLarge)
		// Plain bodies past the bound are refused before they are read.
		big := append(append([]byte("["), bytes.Repeat([]byte(" "), 2<<20)...), ']')
		key2, _ := SnapshotKey(id, 2)
		putRaw(t, b, key2, big, nil)
		_, err = s.ReadSnapshot(bg, id, 2)
		wantErrIs(t, err, ErrTooLarge)
	})
}

// TestDescriptorNameNotUTF8 checks that a name another writer stored with
// bytes that are not UTF-8 keeps them, in a descriptor alone and in a
// snapshot body: two such names that differ only there are two files, not
// one name with U+FFFD where the later hid the earlier (audit 13 C3).
func TestDescriptorNameNotUTF8(t *testing.T) {
	for _, tc := range []struct {
		stored string // the name's JSON string literal as stored
		want   string
	}{
		{`"caf` + "\xe9" + `.txt"`, "caf\xe9.txt"},
		{`"caf` + "\xea" + `.txt"`, "caf\xea.txt"},
		{`"caf\ufffd.txt"`, "caf\uFFFD.txt"},
		{`"` + "\xff\xfe" + `"`, "\xff\xfe"},
		{`"a\u00e9` + "\xe9" + `\n"`, "a\u00e9\xe9\n"},
		{`"` + "\xe9" + `\ud83d\ude00/b"`, "\xe9\U0001F600/b"},
		{`"x` + "\xe2\x82" + `"`, "x\xe2\x82"},
		{`"d\u00e9j\u00e0 vu"`, "d\u00e9j\u00e0 vu"},
		{`"plain/name.txt"`, "plain/name.txt"},
	} {
		var d Descriptor
		if err := json.Unmarshal([]byte(`{"name":`+tc.stored+`,"size":0}`), &d); err != nil {
			t.Fatalf("%q: %v", tc.stored, err)
		}
		if d.Name != tc.want {
			t.Errorf("%q: name %q, want %q", tc.stored, d.Name, tc.want)
		}
		// Written back (a memory merge carries others' records), the
		// name keeps its bytes.
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Descriptor
		if err := json.Unmarshal(b, &back); err != nil || back.Name != tc.want {
			t.Errorf("%q written as %s reads back as %q, %v", tc.stored, b, back.Name, err)
		}
	}
	body := "[" + `{"name":"caf` + "\xe9" + `.txt","sequence-number":1}` + "," +
		`{"name":"caf` + "\xea" + `.txt","sequence-number":2}` + "]"
	ds, err := DecodeDescriptors([]byte(body), EncodingNone, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Name != "caf\xe9.txt" || ds[1].Name != "caf\xea.txt" {
		t.Fatalf("snapshot body: names %q", []string{ds[0].Name, ds[len(ds)-1].Name})
	}
}

// TestDescriptorDamagedSizeOnce: a size that could not be read (another
// writer's -1, a string) is written back as stored, and once: since every
// blob's size is written, the object carried "size" twice, which strict
// JSON readers refuse (review 16).
func TestDescriptorDamagedSizeOnce(t *testing.T) {
	dg := DigestOf([]byte("x")).String()
	for _, raw := range []string{`-1`, `"12"`, `1.5`} {
		in := `{"digest":"` + dg + `","size":` + raw + `,"name":"f"}`
		var d Descriptor
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), `"size":`); n != 1 || !strings.Contains(string(b), `"size":`+raw) {
			t.Errorf("%s written back as %s: %d size keys, want the stored one", in, b, n)
		}
	}
}
