package layout

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// InlineLimit is the largest body carried inline in a descriptor (§3.1).
const InlineLimit = 1024

// Descriptor is the in-snapshot reference to a blob (§7). Zero fields are
// omitted on output (decisions.md). Fields the schema does not know yet are
// kept in Extra and written back, so read-modify-write paths (memory merges)
// preserve them (§18).
type Descriptor struct {
	Digest          Digest
	Size            int64
	CreatedAt       time.Time
	ContentType     string
	ContentEncoding string
	CacheControl    string
	SchemaURL       string
	Name            string
	Metadata        map[string]string
	SequenceNumber  int64
	// Data is the inline body (§7.1); nil when absent.
	Data          []byte
	TargetSession SessionID
	SourceSession SessionID
	SourceVersion uint32
	Fork          bool
	Deleted       bool
	// Commit is the commit envelope of a memory record (§8.2); nil elsewhere.
	Commit *MemoryCommit
	// Extra holds unknown fields verbatim, by JSON key.
	Extra map[string]json.RawMessage
	// Damage is nil unless some field of the descriptor as stored could
	// not be read; see [Damage].
	Damage *Damage
}

// Damage is what a descriptor read from a bucket holds that pugfs cannot
// read, in fields the log can do without: the descriptor keeps its place
// (its name and sequence number), so one bad descriptor costs its own
// file, never its whole snapshot (tree.md: EIO for what depends on it).
// Fields that shape the log itself (name, sequence-number, deleted, fork,
// target-session, source-session, fork-session-id, commit) are never
// damage: a snapshot with one of them unreadable is corrupt as a whole.
//
// Each damaged field is zero in the Descriptor and kept here as stored,
// so that writing the descriptor back (a rename, a memory merge) writes
// what was there unless the writer sets the field anew: a reader loses
// nothing it could not read. A Damage is immutable once decoded.
type Damage struct {
	// Name is the descriptor's name, for messages.
	Name string
	// Key is the object the descriptor was read from, when known.
	Key string
	// Fields are the JSON keys of the unreadable fields, in schema order.
	Fields []string
	// Raw holds each of those fields as stored (compact JSON).
	Raw map[string]json.RawMessage
	// Body reports that the body cannot be located or checked (digest,
	// size or content-encoding unreadable): the file cannot be read.
	// Other damage (created-at, content-type, cache-control, schema-url,
	// metadata, data, source-version) leaves the body readable.
	Body bool
}

// Error says which fields could not be read and what they hold.
func (d *Damage) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: descriptor %q", ErrCorrupt, truncate(d.Name))
	if d.Key != "" {
		fmt.Fprintf(&b, " in %s", d.Key)
	}
	b.WriteString(": unreadable")
	for i, k := range d.Fields {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %s", k, truncate(string(d.Raw[k])))
	}
	return b.String()
}

// Unwrap makes a damaged descriptor's error an ErrCorrupt.
func (d *Damage) Unwrap() error { return ErrCorrupt }

// bodyFields are the fields without which a body cannot be served.
var bodyFields = map[string]bool{"digest": true, "size": true, "content-encoding": true}

// addDamage records field key of d as unreadable, holding raw as stored;
// a later call for the same key replaces the value.
func addDamage(d *Descriptor, key string, raw json.RawMessage) {
	if d.Damage == nil {
		d.Damage = &Damage{Raw: map[string]json.RawMessage{}}
	}
	if _, ok := d.Damage.Raw[key]; !ok {
		d.Damage.Fields = append(d.Damage.Fields, key)
	}
	d.Damage.Raw[key] = raw
	d.Damage.Body = d.Damage.Body || bodyFields[key]
}

// finishDamage orders the damaged fields and names the descriptor.
func finishDamage(d *Descriptor) {
	if d.Damage == nil {
		return
	}
	d.Damage.Name = d.Name
	sort.Slice(d.Damage.Fields, func(i, j int) bool {
		return descFieldOf(d.Damage.Fields[i]) < descFieldOf(d.Damage.Fields[j])
	})
}

// damagedIn names key as the object that damaged descriptors of ds were
// read from, for their errors, and counts them; ds was just decoded and
// is not shared.
func (s *Store) damagedIn(ds []Descriptor, key string) {
	for i := range ds {
		if ds[i].Damage != nil {
			ds[i].Damage.Key = key
			s.st.damaged.Add(1)
		}
	}
}

// rawString is a string field's value as stored, for Damage.Raw.
func rawString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// damagedStillZero reports whether the field key of d is still zero, so
// that MarshalJSON writes its stored value back.
// damaged reports whether key of d could not be read and is still
// unset, to be written back as it was stored.
func damaged(d *Descriptor, key string) bool {
	return d.Damage != nil && slices.Contains(d.Damage.Fields, key) && damagedStillZero(d, key)
}

func damagedStillZero(d *Descriptor, key string) bool {
	switch key {
	case "digest":
		return d.Digest.IsZero()
	case "size":
		return d.Size == 0
	case "created-at":
		return d.CreatedAt.IsZero()
	case "content-type":
		return d.ContentType == ""
	case "content-encoding":
		return d.ContentEncoding == ""
	case "cache-control":
		return d.CacheControl == ""
	case "schema-url":
		return d.SchemaURL == ""
	case "metadata":
		return d.Metadata == nil
	case "data":
		return d.Data == nil
	case "source-version":
		return d.SourceVersion == 0
	}
	return false
}

// MemoryCommit identifies the session write that produced a memory record
// (§8.2).
type MemoryCommit struct {
	Session     SessionID `json:"session"`
	Version     uint32    `json:"version"`
	Transaction uint64    `json:"transaction"`
	// Extra holds the envelope's unknown fields verbatim, by JSON key:
	// a memory merge writes another writer's records back as they were
	// (decisions.md), their envelopes included.
	Extra map[string]json.RawMessage `json:"-"`
}

// memoryCommitFields is MemoryCommit's known fields, for encoding/json.
type memoryCommitFields MemoryCommit

// UnmarshalJSON reads the known fields with encoding/json's rules and
// keeps the others in Extra.
func (c *MemoryCommit) UnmarshalJSON(b []byte) error {
	// version and transaction are read as IntegralNumber reads a
	// descriptor's integers: a writer whose numbers are floats (a
	// memory merge by a tool that decodes JSON numbers as doubles)
	// writes 1.0 and 1.2345678901234567e+19.
	var fields struct {
		memoryCommitFields
		Version     json.RawMessage `json:"version"`
		Transaction json.RawMessage `json:"transaction"`
	}
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	known := fields.memoryCommitFields
	if v := fields.Version; v != nil && string(v) != "null" {
		n, ok := IntegralNumber(string(v))
		if !ok || n < 0 || n > math.MaxUint32 {
			return fmt.Errorf("commit version %s is not a uint32", truncate(string(v)))
		}
		known.Version = uint32(n)
	}
	if v := fields.Transaction; v != nil && string(v) != "null" {
		n, ok := integralUint64(string(v))
		if !ok {
			return fmt.Errorf("commit transaction %s is not a uint64", truncate(string(v)))
		}
		known.Transaction = n
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k, v := range all {
		if strings.EqualFold(k, "session") || strings.EqualFold(k, "version") || strings.EqualFold(k, "transaction") {
			continue
		}
		if known.Extra == nil {
			known.Extra = make(map[string]json.RawMessage)
		}
		known.Extra[k] = canonicalRaw(v)
	}
	*c = MemoryCommit(known)
	return nil
}

// MarshalJSON writes the known fields, then the unknown ones sorted by
// key.
func (c MemoryCommit) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(memoryCommitFields(c))
	if err != nil || len(c.Extra) == 0 {
		return b, err
	}
	keys := slices.Sorted(maps.Keys(c.Extra))
	out := bytes.TrimSuffix(b, []byte("}"))
	for _, k := range keys {
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		out = append(append(append(append(out, ','), kb...), ':'), c.Extra[k]...)
	}
	return append(out, '}'), nil
}

// IsSlot reports whether d occupies a named slot in the live tree
// (decisions.md "Which descriptors are named slots"): a name, not a fork
// record and not a cross-session write record. Tombstones are slot
// operations too; callers check Deleted.
func (d *Descriptor) IsSlot() bool {
	return d.Name != "" && !d.Fork && d.TargetSession.IsZero()
}

// Clone returns a deep copy of d.
func (d Descriptor) Clone() Descriptor {
	c := d
	if d.Metadata != nil {
		c.Metadata = make(map[string]string, len(d.Metadata))
		for k, v := range d.Metadata {
			c.Metadata[k] = v
		}
	}
	if d.Data != nil {
		c.Data = append([]byte(nil), d.Data...)
	}
	if d.Commit != nil {
		cm := *d.Commit
		if cm.Extra != nil {
			cm.Extra = make(map[string]json.RawMessage, len(d.Commit.Extra))
			for k, v := range d.Commit.Extra {
				cm.Extra[k] = append(json.RawMessage(nil), v...)
			}
		}
		c.Commit = &cm
	}
	if d.Extra != nil {
		c.Extra = make(map[string]json.RawMessage, len(d.Extra))
		for k, v := range d.Extra {
			c.Extra[k] = append(json.RawMessage(nil), v...)
		}
	}
	return c
}

// InlineOK reports whether d.Data is present and matches the digest; a
// reader uses inline data only then (decisions.md).
func (d *Descriptor) InlineOK() bool {
	return d.Data != nil && int64(len(d.Data)) == d.Size && DigestOf(d.Data) == d.Digest
}

// descriptorJSON mirrors the wire schema; pointers and omitempty give the
// "omit when zero" rule.
type descriptorJSON struct {
	Digest          string            `json:"digest,omitempty"`
	Size            *int64            `json:"size,omitempty"`
	CreatedAt       string            `json:"created-at,omitempty"`
	ContentType     string            `json:"content-type,omitempty"`
	ContentEncoding string            `json:"content-encoding,omitempty"`
	CacheControl    string            `json:"cache-control,omitempty"`
	SchemaURL       string            `json:"schema-url,omitempty"`
	Name            storedName        `json:"name,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	SequenceNumber  *int64            `json:"sequence-number,omitempty"`
	Data            string            `json:"data,omitempty"`
	TargetSession   string            `json:"target-session,omitempty"`
	SourceSession   string            `json:"source-session,omitempty"`
	SourceVersion   uint32            `json:"source-version,omitempty"`
	Fork            bool              `json:"fork,omitempty"`
	Deleted         bool              `json:"deleted,omitempty"`
	Commit          *MemoryCommit     `json:"commit,omitempty"`
}

// storedName is a descriptor name as written: bytes of it that are not
// UTF-8, which only another writer's snapshot or memory file can hold
// (unquoteName; pugfs refuses to make such a name, ErrNotUTF8), are
// written back as they were read. encoding/json writes U+FFFD for each:
// a memory write carrying another writer's records "caf\xe9" and
// "caf\xea" forward made them one name (review 11).
type storedName string

// MarshalJSON quotes n as encoding/json does, but for those bytes.
func (n storedName) MarshalJSON() ([]byte, error) {
	s := string(n)
	if utf8.ValidString(s) {
		return json.Marshal(s)
	}
	out := []byte{'"'}
	splitUTF8(s, func(valid, invalid string) {
		if valid != "" {
			q, _ := json.Marshal(valid) // a string always marshals
			out = append(out, q[1:len(q)-1]...)
		}
		out = append(out, invalid...)
	})
	return append(out, '"'), nil
}

var knownDescriptorKeys = map[string]bool{
	"digest": true, "size": true, "created-at": true, "content-type": true,
	"content-encoding": true, "cache-control": true, "schema-url": true,
	"name": true, "metadata": true, "sequence-number": true, "data": true,
	"target-session": true, "source-session": true, "source-version": true,
	"fork": true, "deleted": true, "commit": true, "fork-session-id": true,
}

// MarshalJSON writes the known fields in schema order, then unknown ones
// sorted by key.
func (d Descriptor) MarshalJSON() ([]byte, error) {
	j := descriptorJSON{
		Digest:          d.Digest.String(),
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		CacheControl:    d.CacheControl,
		SchemaURL:       d.SchemaURL,
		Name:            storedName(d.Name),
		Metadata:        d.Metadata,
		SourceVersion:   d.SourceVersion,
		Fork:            d.Fork,
		Deleted:         d.Deleted,
		Commit:          d.Commit,
	}
	if len(j.Metadata) == 0 {
		j.Metadata = nil
	}
	if (d.Size != 0 || !d.Digest.IsZero()) && !damaged(&d, "size") {
		// A blob's size is written when it is 0 too: decisions.md omits
		// zero values of optional fields only, and size is not one; a
		// tombstone (no blob) has none (audit 16). A size that could
		// not be read is written back as stored, below, and once
		// (review 16: twice, which strict readers refuse).
		j.Size = &d.Size
	}
	if d.SequenceNumber != 0 || d.Commit == nil {
		// Every descriptor of a snapshot carries its number (§7.3), 0
		// too: a session whose first-sequence-number is 0 (another
		// writer's) wrote its first descriptor without one (audit 24). A
		// memory record (commit set) is in no session's sequence.
		j.SequenceNumber = &d.SequenceNumber
	}
	if !d.CreatedAt.IsZero() {
		t := d.CreatedAt.UTC()
		if y := t.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("%w: descriptor %q: created-at %v is outside years 0000-9999", ErrInvalid, truncate(d.Name), t)
		}
		// All nine digits of nanoseconds (decisions.md), as posix-mtime:
		// RFC3339Nano drops trailing zeros (audit 16).
		j.CreatedAt = t.Format(nanoLayout)
	}
	if d.Data != nil {
		j.Data = base64.StdEncoding.EncodeToString(d.Data)
	}
	if !d.TargetSession.IsZero() {
		j.TargetSession = d.TargetSession.String()
	}
	if !d.SourceSession.IsZero() {
		j.SourceSession = d.SourceSession.String()
	}
	b, err := json.Marshal(j)
	if err != nil || (len(d.Extra) == 0 && d.Damage == nil) {
		return b, err
	}
	// Then what could not be read, as it was stored (unless set anew),
	// and the unknown fields sorted by key.
	type field struct {
		key string
		val json.RawMessage
	}
	var extra []field
	if d.Damage != nil {
		for _, k := range d.Damage.Fields {
			if damagedStillZero(&d, k) {
				extra = append(extra, field{k, d.Damage.Raw[k]})
			}
		}
	}
	keys := make([]string, 0, len(d.Extra))
	for k := range d.Extra {
		if !knownDescriptorKeys[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		extra = append(extra, field{k, d.Extra[k]})
	}
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	first := len(b) == 2 // "{}"
	for _, kv := range extra {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(kv.key)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(kv.val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the schema, the legacy fork-session-id form (§7.2),
// and keeps unknown fields. Keys match exactly: JSON object keys are
// case-sensitive, so "Name" is an unknown field, not the name (encoding/json
// would match it case-insensitively). Of duplicate keys the last wins.
// Unknown values are kept compacted, in the form MarshalJSON writes them
// back, so that decode-encode-decode is stable.
func (d *Descriptor) UnmarshalJSON(b []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsonOptions...)
	if err := readDescriptor(dec, d); err != nil {
		if isSyntax(err) {
			return fmt.Errorf("%w: descriptor: %v", ErrCorrupt, err)
		}
		return err
	}
	return nil
}

// canonicalRaw returns v compacted and HTML-escaped, which is what
// json.Marshal makes of a Marshaler's output.
func canonicalRaw(v json.RawMessage) json.RawMessage {
	var c, out bytes.Buffer
	if err := json.Compact(&c, v); err != nil {
		return append(json.RawMessage(nil), v...)
	}
	json.HTMLEscape(&out, c.Bytes())
	return out.Bytes()
}

func parseOptionalID(s string) (SessionID, error) {
	if s == "" {
		return SessionID{}, nil
	}
	return ParseSessionID(s)
}
