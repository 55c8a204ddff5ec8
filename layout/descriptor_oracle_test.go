package layout

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// oracleDescriptor is the descriptor decoder pugfs had before the token
// decoder: encoding/json into a map of raw values, then each known field
// by encoding/json. It is kept as the oracle that the token decoder must
// agree with (FuzzDescriptorDecoderOracle): same error or not, same
// descriptor, same damage (an unreadable field that the log can do
// without is Damage, not an error).
type oracleDescriptor Descriptor

func (d *oracleDescriptor) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("%w: descriptor: %v", ErrCorrupt, err)
	}
	if raw == nil {
		return fmt.Errorf("%w: descriptor is null", ErrCorrupt)
	}
	// Whole numbers written with a fraction or an exponent are integers
	// (IntegralNumber), which encoding/json refuses: given to it in
	// plain decimal.
	for _, k := range []string{"size", "sequence-number", "source-version"} {
		if v, ok := raw[k]; ok {
			if n, ok := IntegralNumber(string(v)); ok && (k != "source-version" || n >= 0) {
				raw[k] = json.RawMessage(strconv.FormatInt(n, 10))
			}
		}
	}
	var j descriptorJSON
	var name string
	var size int64 // descriptorJSON's is a pointer, for writing
	var out Descriptor
	if v, ok := raw["name"]; ok {
		// Decoded first so that the other errors can name the descriptor.
		if err := json.Unmarshal(v, &name); err != nil {
			return fmt.Errorf("%w: descriptor: name: %v", ErrCorrupt, err)
		}
	}
	for _, f := range []struct {
		key string
		dst any
	}{
		{"digest", &j.Digest}, {"size", &size}, {"created-at", &j.CreatedAt},
		{"content-type", &j.ContentType}, {"content-encoding", &j.ContentEncoding},
		{"cache-control", &j.CacheControl}, {"schema-url", &j.SchemaURL},
		{"sequence-number", &j.SequenceNumber}, {"data", &j.Data},
		{"target-session", &j.TargetSession}, {"source-session", &j.SourceSession},
		{"source-version", &j.SourceVersion}, {"fork", &j.Fork}, {"deleted", &j.Deleted},
		{"commit", &j.Commit},
	} {
		v, ok := raw[f.key]
		if !ok {
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			if !oracleDamageable[f.key] {
				return fmt.Errorf("%w: descriptor %q: %s: %v", ErrCorrupt, truncate(name), f.key, err)
			}
			addDamage(&out, f.key, canonicalRaw(v))
		}
	}
	// metadata: string values, null as "", anything else as its JSON
	// text; not an object is damage.
	if v, ok := raw["metadata"]; ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(v, &m); err != nil {
			addDamage(&out, "metadata", canonicalRaw(v))
		} else if len(m) > 0 {
			j.Metadata = map[string]string{}
			for k, mv := range m {
				var s *string
				if json.Unmarshal(mv, &s) == nil {
					if s != nil {
						j.Metadata[k] = *s
					} else {
						j.Metadata[k] = ""
					}
				} else {
					j.Metadata[k] = string(canonicalRaw(mv))
				}
			}
		}
	}
	j.Name = storedName(name)
	var err error
	if out.Digest, err = parseDescriptorDigest(j.Digest); err != nil {
		addDamage(&out, "digest", rawString(j.Digest))
	}
	if size < 0 {
		addDamage(&out, "size", json.RawMessage(strconv.FormatInt(size, 10)))
		size = 0
	}
	out.Size = size
	if j.CreatedAt != "" {
		if out.CreatedAt, err = time.Parse(time.RFC3339Nano, j.CreatedAt); err != nil {
			addDamage(&out, "created-at", rawString(j.CreatedAt))
		} else if out.CreatedAt = out.CreatedAt.UTC(); out.CreatedAt.Year() < 0 || out.CreatedAt.Year() > 9999 {
			// An offset can push the UTC form out of RFC 3339's range;
			// such a time could not be written back.
			out.CreatedAt = time.Time{}
			addDamage(&out, "created-at", rawString(j.CreatedAt))
		}
	}
	out.ContentType, out.ContentEncoding, out.CacheControl = j.ContentType, j.ContentEncoding, j.CacheControl
	out.SchemaURL, out.Name = j.SchemaURL, name
	if j.SequenceNumber != nil {
		out.SequenceNumber = *j.SequenceNumber
	}
	if len(j.Metadata) > 0 {
		out.Metadata = j.Metadata
	}
	if j.Data != "" {
		if out.Data, err = base64.StdEncoding.DecodeString(j.Data); err != nil {
			out.Data = nil
			addDamage(&out, "data", rawString(j.Data))
		}
	}
	if out.TargetSession, err = parseOptionalID(j.TargetSession); err != nil {
		return fmt.Errorf("%w: descriptor %q: target-session: %v", ErrCorrupt, truncate(name), err)
	}
	if out.SourceSession, err = parseOptionalID(j.SourceSession); err != nil {
		return fmt.Errorf("%w: descriptor %q: source-session: %v", ErrCorrupt, truncate(name), err)
	}
	out.SourceVersion, out.Fork, out.Deleted, out.Commit = j.SourceVersion, j.Fork, j.Deleted, j.Commit
	if legacy, ok := raw["fork-session-id"]; ok {
		var s string
		if err := json.Unmarshal(legacy, &s); err != nil {
			return fmt.Errorf("%w: descriptor %q: fork-session-id: %v", ErrCorrupt, truncate(name), err)
		}
		id, err := parseOptionalID(s)
		if err != nil {
			return fmt.Errorf("%w: descriptor %q: fork-session-id: %v", ErrCorrupt, truncate(name), err)
		}
		// §7.2: a non-zero legacy ID means fork = true, target = id.
		if !id.IsZero() {
			out.Fork, out.TargetSession = true, id
		}
	}
	for k, v := range raw {
		if !knownDescriptorKeys[k] {
			if out.Extra == nil {
				out.Extra = make(map[string]json.RawMessage)
			}
			out.Extra[k] = canonicalRaw(v)
		}
	}
	finishDamage(&out)
	*d = oracleDescriptor(out)
	return nil
}

// oracleDamageable are the keys whose unreadable value is Damage.
var oracleDamageable = map[string]bool{
	"digest": true, "size": true, "created-at": true, "content-type": true,
	"content-encoding": true, "cache-control": true, "schema-url": true,
	"data": true, "source-version": true,
}

// descriptorOracleCases are objects where encoding/json's rules are easy
// to get wrong: duplicates, nulls, escapes, invalid UTF-8, numbers.
var descriptorOracleCases = []string{
	`{}`, `null`, `[]`, `1`, `"x"`, `{"name":"a","name":"b"}`, `{"name":5,"name":"b"}`,
	`{"name":"b","name":5}`, `{"name":null}`, `{"size":null}`, `{"size":1e3}`, `{"size":1.0}`,
	`{"size":-0}`, `{"size":9223372036854775808}`, `{"size":-9223372036854775808}`,
	`{"source-version":4294967295}`, `{"source-version":4294967296}`, `{"source-version":-0}`,
	`{"metadata":{"a":null,"b":"x","a":"y"}}`, `{"metadata":{}}`, `{"metadata":null}`,
	`{"metadata":{"a":1}}`, `{"metadata":{"a":"x"},"metadata":{"b":"y"}}`, `{"metadata":[]}`,
	`{"name":"\ud800x"}`, `{"name":"\u00e9\u2028"}`, "{\"name\":\"\xff\xfe\"}", "{\"x\xff\":1}",
	`{"fork":true,"fork":null}`, `{"deleted":false}`, `{"deleted":"true"}`,
	`{"commit":{"SESSION":"` + strings.Repeat("b", 32) + `","Version":3}}`, `{"commit":null}`,
	`{"commit":{"session":"zz"}}`, `{"commit":[]}`, `{"commit":{"version":1},"commit":null}`,
	`{"fork-session-id":"` + strings.Repeat("c", 32) + `"}`, `{"fork-session-id":"` + strings.Repeat("0", 32) + `"}`,
	`{"x-future":{"a":[1, 2,{"<":">"}]},"x-future":"last"}`, `{"Name":"upper is unknown"}`,
	`{"data":"aGVsbG8=","size":5}`, `{"data":""}`, `{"data":null}`, `{"data":"***"}`,
	`{"created-at":"2024-01-01T00:00:00.5+02:00"}`, `{"created-at":"9999-12-31T23:59:59-01:00"}`,
	`{"digest":"sha256:` + strings.Repeat("0", 64) + `"}`, `{"digest":"sha256:abc"}`,
	`{"digest":"sha256:` + strings.Repeat("Ab", 32) + `"}`,
	`{"target-session":"` + strings.Repeat("A", 32) + `"}`, `{"source-session":"abc"}`,
	// Damage: each unreadable field alone, several, and a damaged field
	// that a later duplicate makes good.
	`{"name":"a","digest":"sha256:zz"}`, `{"name":"a","digest":5}`, `{"name":"a","size":"12"}`,
	`{"name":"a","size":-3}`, `{"name":"a","created-at":"yesterday"}`, `{"name":"a","created-at":5}`,
	`{"name":"a","content-type":[1]}`, `{"name":"a","content-encoding":{}}`, `{"name":"a","cache-control":true}`,
	`{"name":"a","schema-url":1}`, `{"name":"a","metadata":"x"}`, `{"name":"a","metadata":{"n":3,"o":{"p":[1,"<"]},"s":"t"}}`,
	`{"name":"a","data":5}`, `{"name":"a","source-version":-1}`, `{"name":"a","source-version":"1"}`,
	`{"name":"a","digest":"x","size":"y","created-at":"z","sequence-number":4}`, `{"size":"x","size":3}`,
	`{"digest":"bad","deleted":"yes"}`, `{"size":"x","sequence-number":"y"}`,
	// Past both decoders' nesting limit (10,000): an error, not a crash.
	`{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
	`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
}

func FuzzDescriptorDecoderOracle(f *testing.F) {
	descriptorSeeds(f)
	for _, s := range descriptorOracleCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDescriptorOracle(t, b)
	})
}

// TestDescriptorDecoderOracle runs the oracle cases and the fuzz seeds in
// every `go test`.
func TestDescriptorDecoderOracle(t *testing.T) {
	for _, s := range descriptorOracleCases {
		checkDescriptorOracle(t, []byte(s))
	}
}

func checkDescriptorOracle(t *testing.T, b []byte) {
	t.Helper()
	var want oracleDescriptor
	wantErr := json.Unmarshal(b, &want)
	var got Descriptor
	gotErr := json.Unmarshal(b, &got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%q: encoding/json says %v, the token decoder %v", b, wantErr, gotErr)
	}
	if wantErr == nil {
		oracleName(t, b, &want, &got)
	}
	if wantErr == nil && !reflect.DeepEqual(Descriptor(want), got) {
		t.Fatalf("%q: encoding/json decodes\n%+v\nthe token decoder\n%+v", b, Descriptor(want), got)
	}
	// The same object inside a snapshot body.
	ds, err := DecodeDescriptors(append(append([]byte("["), b...), ']'), EncodingNone, 1<<20)
	if (wantErr == nil) != (err == nil) {
		if wantErr == nil || json.Valid(b) {
			t.Fatalf("%q in an array: encoding/json says %v, DecodeDescriptors %v", b, wantErr, err)
		}
	}
	if wantErr == nil && err == nil && len(ds) == 1 {
		oracleName(t, b, &want, &ds[0])
	}
	if wantErr == nil && !reflect.DeepEqual([]Descriptor{Descriptor(want)}, ds) {
		t.Fatalf("%q in an array: encoding/json decodes\n%+v\nDecodeDescriptors\n%+v", b, Descriptor(want), ds)
	}
}

// oracleName checks the one rule where the token decoder departs from
// encoding/json: a name keeps its bytes that are not UTF-8 (unquoteName),
// where encoding/json makes each of them U+FFFD. got's name must be
// encoding/json's once those bytes are replaced, and is then set to it so
// that the rest of the descriptor can be compared whole.
func oracleName(t *testing.T, b []byte, want *oracleDescriptor, got *Descriptor) {
	t.Helper()
	if utf8.ValidString(got.Name) {
		return
	}
	var mangled strings.Builder
	for i := 0; i < len(got.Name); {
		r, size := utf8.DecodeRuneInString(got.Name[i:])
		if r == utf8.RuneError && size == 1 {
			mangled.WriteRune(utf8.RuneError)
		} else {
			mangled.WriteString(got.Name[i : i+size])
		}
		i += size
	}
	if mangled.String() != want.Name {
		t.Fatalf("%q: name %q is %q with U+FFFD for its bytes that are not UTF-8, encoding/json says %q", b, got.Name, mangled.String(), want.Name)
	}
	got.Name = want.Name
	if got.Damage != nil {
		d := *got.Damage
		d.Name = want.Name
		got.Damage = &d
	}
}
