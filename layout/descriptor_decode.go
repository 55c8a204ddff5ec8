package layout

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Descriptors are decoded from a token stream (jsontext, the tokenizer of
// encoding/json/v2) rather than through encoding/json's reflection: a
// snapshot of 2,000 files is decoded on the path of a session's first
// listing, and decoding each object once, without an intermediate map of
// raw values, is several times faster. The rules are encoding/json's as
// the schema uses them, which FuzzDescriptorDecoderOracle checks against
// encoding/json itself: keys match exactly, the last of duplicate keys
// wins, null leaves a field zero, invalid UTF-8 becomes U+FFFD (but in a
// name: unquoteName), unknown keys are kept. Where encoding/json would
// fail, a field the log can do without becomes the descriptor's Damage
// instead (descriptor.go), and a metadata value that is not a string
// becomes its JSON text.

// jsonOptions are the tokenizer's rules made encoding/json's.
var jsonOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// descField numbers the schema's fields in the order their errors are
// reported.
type descField int

const (
	fDigest descField = iota
	fSize
	fCreatedAt
	fContentType
	fContentEncoding
	fCacheControl
	fSchemaURL
	fMetadata
	fSequenceNumber
	fData
	fTargetSession
	fSourceSession
	fSourceVersion
	fFork
	fDeleted
	fCommit
	fForkSessionID
	fName
	nFields
)

// descFieldKeys are the JSON keys of the descField values.
var descFieldKeys = [nFields]string{
	"digest", "size", "created-at", "content-type", "content-encoding",
	"cache-control", "schema-url", "metadata", "sequence-number", "data",
	"target-session", "source-session", "source-version", "fork", "deleted",
	"commit", "fork-session-id", "name",
}

// descFieldOf returns the field of a JSON key, or -1 for an unknown one.
func descFieldOf(key string) descField {
	switch key {
	case "digest":
		return fDigest
	case "size":
		return fSize
	case "created-at":
		return fCreatedAt
	case "content-type":
		return fContentType
	case "content-encoding":
		return fContentEncoding
	case "cache-control":
		return fCacheControl
	case "schema-url":
		return fSchemaURL
	case "metadata":
		return fMetadata
	case "sequence-number":
		return fSequenceNumber
	case "data":
		return fData
	case "target-session":
		return fTargetSession
	case "source-session":
		return fSourceSession
	case "source-version":
		return fSourceVersion
	case "fork":
		return fFork
	case "deleted":
		return fDeleted
	case "commit":
		return fCommit
	case "fork-session-id":
		return fForkSessionID
	case "name":
		return fName
	}
	return -1
}

// errWrongType is a field's value of the wrong JSON kind; the caller
// names the field.
type errWrongType struct{ want, got string }

func (e *errWrongType) Error() string { return "want " + e.want + ", got " + e.got }

// kindName names a JSON kind for errors.
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "nothing"
}

// damageable reports whether an unreadable value of field is damage to
// the descriptor alone (Damage) rather than to its whole snapshot.
func damageable(field descField) bool {
	switch field {
	case fDigest, fSize, fCreatedAt, fContentType, fContentEncoding, fCacheControl,
		fSchemaURL, fMetadata, fData, fSourceVersion:
		return true
	}
	return false
}

// descriptorFields is one descriptor object as read: the raw strings and
// numbers of the last occurrence of each key, and that occurrence's type
// error if it had one, with its value as stored.
type descriptorFields struct {
	str      [nFields]string
	num      [nFields]int64
	flag     [nFields]bool
	metadata map[string]string
	commit   *MemoryCommit
	extra    map[string]json.RawMessage
	errs     [nFields]error
	raw      [nFields]json.RawMessage
}

// readDescriptor reads one descriptor object from dec into d. A syntax or
// read error of the stream is returned as is; what the object says
// wrongly is ErrCorrupt.
func readDescriptor(dec *jsontext.Decoder, d *Descriptor) error {
	switch k := dec.PeekKind(); k {
	case '{':
	case 'n':
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		return fmt.Errorf("%w: descriptor is null", ErrCorrupt)
	default:
		if err := dec.SkipValue(); err != nil {
			return err
		}
		return fmt.Errorf("%w: descriptor is %s, not an object", ErrCorrupt, kindName(k))
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	var f descriptorFields
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		// tok.String() does not allocate where the string does not
		// escape: only an unknown key is copied.
		field := descFieldOf(tok.String())
		if field < 0 {
			key := tok.String()
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			if f.extra == nil {
				f.extra = make(map[string]json.RawMessage)
			}
			f.extra[key] = canonicalRaw(json.RawMessage(v))
			continue
		}
		if err := f.read(dec, field); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	out, err := f.descriptor()
	if err != nil {
		return err
	}
	*d = out
	return nil
}

// read reads the value of field, replacing what an earlier occurrence of
// the key left (the last one wins, errors included).
func (f *descriptorFields) read(dec *jsontext.Decoder, field descField) error {
	f.errs[field], f.raw[field] = nil, nil
	f.str[field], f.num[field], f.flag[field] = "", 0, false
	k := dec.PeekKind()
	if k == 'n' {
		// null: the field stays zero, as encoding/json leaves it.
		_, err := dec.ReadToken()
		if field == fMetadata {
			f.metadata = nil
		} else if field == fCommit {
			f.commit = nil
		}
		return err
	}
	var want string
	switch field {
	case fSize, fSequenceNumber, fSourceVersion:
		want = "a number"
		if k == '0' {
			tok, err := dec.ReadToken()
			if err != nil {
				return err
			}
			// A whole number in range, however it is written: JSON has
			// no integer type (RFC 8259 §6), and a writer whose numbers
			// are floats writes 8 as 8.0 or 8e0 (IntegralNumber).
			v, ok := IntegralNumber(tok.String())
			if field == fSourceVersion {
				if !ok || v < 0 || v > math.MaxUint32 {
					f.errs[field] = fmt.Errorf("%s is not a uint32", truncate(tok.String()))
					v = 0
				}
			} else if !ok {
				f.errs[field] = fmt.Errorf("%s is not an int64", truncate(tok.String()))
			}
			f.num[field] = v
			if f.errs[field] != nil {
				f.raw[field] = json.RawMessage(tok.String())
			}
			return nil
		}
	case fFork, fDeleted:
		want = "a boolean"
		if k == 't' || k == 'f' {
			_, err := dec.ReadToken()
			f.flag[field] = k == 't'
			return err
		}
	case fMetadata:
		want = "an object"
		if k == '{' {
			return f.readMetadata(dec)
		}
	case fCommit:
		// Rare (memory records) and with encoding/json's struct rules
		// (case-insensitive keys): decoded by encoding/json.
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		var c *MemoryCommit
		if err := json.Unmarshal(v, &c); err != nil {
			f.errs[field] = err
			c = nil
		}
		f.commit = c
		return nil
	default:
		want = "a string"
		if k == '"' && field == fName {
			v, err := dec.ReadValue()
			if err != nil {
				// A stream that ends inside the name (a torn
				// snapshot) gives no value to unquote: unquoting
				// the empty one panicked and took the mount down.
				return err
			}
			f.str[field] = unquoteName(v)
			return nil
		}
		if k == '"' {
			tok, err := dec.ReadToken()
			f.str[field] = tok.String()
			return err
		}
	}
	f.errs[field] = &errWrongType{want: want, got: kindName(k)}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	f.raw[field] = canonicalRaw(json.RawMessage(v))
	return nil
}

// unquoteName decodes the JSON string literal v of a descriptor name,
// keeping bytes that are not UTF-8 as they are where encoding/json makes
// each U+FFFD: another writer's "caf\xe9.txt" and "caf\xea.txt" were one
// name, the later hiding the other, and a name with a real U+FFFD in it
// could hide either. Such a name is a path like any other (decisions.md
// "Names as paths"), readable under its own bytes; pugfs cannot write it
// back, since JSON cannot carry it (staging.ErrNotUTF8), and fsck reports
// it. Only literal bytes can be invalid: an escape (\uXXXX) is ASCII, and
// a lone surrogate escape is U+FFFD as encoding/json has it.
func unquoteName(v jsontext.Value) string {
	if utf8.Valid(v) {
		if bytes.IndexByte(v, '\\') < 0 {
			return string(v[1 : len(v)-1])
		}
		b, _ := jsontext.AppendUnquote(nil, v)
		return string(b)
	}
	out := make([]byte, 0, len(v))
	quoted := make([]byte, 0, len(v))
	splitUTF8(string(v[1:len(v)-1]), func(valid, invalid string) {
		// A valid run is unquoted as JSON; the bytes that are not UTF-8
		// stay as stored.
		if valid != "" {
			quoted = append(append(append(quoted[:0], '"'), valid...), '"')
			out, _ = jsontext.AppendUnquote(out, quoted)
		}
		out = append(out, invalid...)
	})
	return string(out)
}

// splitUTF8 calls fn with each run of s that is UTF-8 and the run of
// bytes that are not after it (either may be empty), in order.
func splitUTF8(s string, fn func(valid, invalid string)) {
	for len(s) > 0 {
		n := 0
		for n < len(s) {
			r, size := utf8.DecodeRuneInString(s[n:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			n += size
		}
		m := n
		for m < len(s) {
			if r, size := utf8.DecodeRuneInString(s[m:]); r != utf8.RuneError || size != 1 {
				break
			}
			m++
		}
		fn(s[:n], s[n:m])
		s = s[m:]
	}
}

// readMetadata reads the metadata object: string values, null as "", and
// any other value as its JSON text (the schema says strings; a number or
// an object from another writer is shown rather than lost).
func (f *descriptorFields) readMetadata(dec *jsontext.Decoder) error {
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	m := map[string]string{}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		key := tok.String()
		switch k := dec.PeekKind(); k {
		case '"', 'n':
			v, err := dec.ReadToken()
			if err != nil {
				return err
			}
			if k == 'n' {
				m[key] = ""
			} else {
				m[key] = v.String()
			}
		default:
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			m[key] = string(canonicalRaw(json.RawMessage(v)))
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	f.metadata = m
	return nil
}

// descriptor checks and converts the fields read.
func (f *descriptorFields) descriptor() (Descriptor, error) {
	name := f.str[fName]
	if err := f.errs[fName]; err != nil {
		return Descriptor{}, fmt.Errorf("%w: descriptor: name: %v", ErrCorrupt, err)
	}
	bad := func(field descField, err error) error {
		return fmt.Errorf("%w: descriptor %q: %s: %v", ErrCorrupt, truncate(name), descFieldKeys[field], err)
	}
	var out Descriptor
	for field, err := range f.errs {
		if err != nil && !damageable(descField(field)) {
			return out, bad(descField(field), err)
		}
	}
	for field, err := range f.errs {
		if err != nil {
			addDamage(&out, descFieldKeys[field], f.raw[field])
		}
	}
	out.Size, out.SequenceNumber = f.num[fSize], f.num[fSequenceNumber]
	out.SourceVersion = uint32(f.num[fSourceVersion])
	var err error
	if out.Digest, err = parseDescriptorDigest(f.str[fDigest]); err != nil {
		addDamage(&out, "digest", rawString(f.str[fDigest]))
	}
	if out.Size < 0 {
		addDamage(&out, "size", json.RawMessage(strconv.FormatInt(out.Size, 10)))
		out.Size = 0
	}
	if s := f.str[fCreatedAt]; s != "" {
		if out.CreatedAt, err = parseCreatedAt(s); err != nil {
			addDamage(&out, "created-at", rawString(s))
		}
	}
	out.Name = name
	out.ContentType, out.ContentEncoding = f.str[fContentType], f.str[fContentEncoding]
	out.CacheControl, out.SchemaURL = f.str[fCacheControl], f.str[fSchemaURL]
	if f.errs[fMetadata] == nil && len(f.metadata) > 0 {
		out.Metadata = f.metadata
	}
	if s := f.str[fData]; s != "" {
		if out.Data, err = base64.StdEncoding.DecodeString(s); err != nil {
			// Inline data only spares a fetch (§7.1): the body is
			// still in objects/.
			out.Data = nil
			addDamage(&out, "data", rawString(s))
		}
	}
	if out.TargetSession, err = parseOptionalID(f.str[fTargetSession]); err != nil {
		return out, bad(fTargetSession, err)
	}
	if out.SourceSession, err = parseOptionalID(f.str[fSourceSession]); err != nil {
		return out, bad(fSourceSession, err)
	}
	out.Fork, out.Deleted, out.Commit = f.flag[fFork], f.flag[fDeleted], f.commit
	// §7.2: a non-zero legacy fork-session-id means fork = true, target =
	// that session.
	id, err := parseOptionalID(f.str[fForkSessionID])
	if err != nil {
		return out, bad(fForkSessionID, err)
	}
	if !id.IsZero() {
		out.Fork, out.TargetSession = true, id
	}
	out.Extra = f.extra
	finishDamage(&out)
	return out, nil
}

// parseCreatedAt reads an RFC 3339 time, in UTC; one whose UTC form falls
// outside years 0000-9999 (an offset can push it there) could not be
// written back, and is refused.
func parseCreatedAt(s string) (time.Time, error) {
	t, err := ParseRFC3339(s)
	if err != nil {
		return time.Time{}, err
	}
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("created-at %q is outside years 0000-9999 in UTC", truncate(s))
	}
	return t, nil
}

// ParseRFC3339 parses an RFC 3339 timestamp (§7 created-at, posix-mtime)
// as the RFC has it, which Go's time.RFC3339 layout is stricter than:
// the 't' and 'z' may be lower case (RFC 3339 §5.6), and a leap second
// (:60) is the second after :59. Another writer may write either; both
// were refused, and the file showed its session's hour.
func ParseRFC3339(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err == nil || len(s) < 20 {
		return t, err
	}
	b := []byte(s)
	if b[10] == 't' {
		b[10] = 'T'
	}
	if b[len(b)-1] == 'z' {
		b[len(b)-1] = 'Z'
	}
	leap := b[17] == '6' && b[18] == '0'
	if leap {
		b[18] = '9'
		b[17] = '5'
	}
	t, err2 := time.Parse(time.RFC3339Nano, string(b))
	if err2 != nil {
		return time.Time{}, err // the original error names the input
	}
	if leap {
		t = t.Add(time.Second)
	}
	return t, nil
}

// isSyntax reports whether err is the tokenizer's own (malformed JSON or a
// failed read), as opposed to a descriptor's ErrCorrupt.
func isSyntax(err error) bool {
	return err != nil && !errors.Is(err, ErrCorrupt)
}

// IntegralNumber reads a JSON number literal as an int64 when its value is
// a whole number within range, whether it is written 8, 8.0, 0.8e1 or
// 800e-2: §5 and §7 call for integers, and JSON has no integer type
// (RFC 8259 §6), so a writer whose numbers are floats (JavaScript,
// Python's float, Gson's doubles) writes integers so. encoding/json
// refused them, and one "sequence-number": 1.0 made a whole session
// unreadable. ok is false for a fraction, a value outside int64 or text
// that is not a number.
func IntegralNumber(s string) (v int64, ok bool) {
	dec, ok := integralDecimal(s)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(dec, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// integralUint64 is IntegralNumber for a uint64 (a transaction ID, §13.2).
func integralUint64(s string) (uint64, bool) {
	dec, ok := integralDecimal(s)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(dec, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// integralDecimal is the JSON number s in plain decimal when it is a whole
// number of at most 20 digits (past any int64 or uint64), else ok false.
func integralDecimal(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	mant, exp := strings.TrimPrefix(s, "-"), 0
	huge := false // an exponent past int: only zero is whole and in range
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		e, err := strconv.Atoi(mant[i+1:])
		if errors.Is(err, strconv.ErrRange) {
			huge, err = true, nil
		}
		if err != nil {
			return "", false
		}
		mant, exp = mant[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	if whole == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return "", false
	}
	// The value is digits × 10^exp, with no leading or trailing zeros.
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	switch {
	case digits == "":
		return "0", true
	case huge || exp < 0 || exp > 20 || len(digits)+exp > 20:
		return "", false
	}
	digits += strings.Repeat("0", exp)
	if neg {
		digits = "-" + digits
	}
	return digits, true
}
