package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Manifest is a session's manifest (§5).
type Manifest struct {
	Session             SessionID         `json:"session"`
	Parent              *ParentRef        `json:"parent,omitempty"`
	Name                string            `json:"name,omitempty"`
	Agent               string            `json:"agent,omitempty"`
	Handler             string            `json:"handler,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	FirstSequenceNumber int64             `json:"first-sequence-number"`
	// Stored is the manifest document as the bucket holds it (decoded,
	// fields this version does not know included, §18), when it was
	// loaded from the bucket; nil for a manifest built in memory.
	Stored json.RawMessage `json:"-"`
}

// ParentRef points at the snapshot a fork was taken from (§5, §11.2).
type ParentRef struct {
	Session SessionID `json:"session"`
	Version uint32    `json:"version"`
}

// EncodeManifest returns the manifest's JSON body.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if m.Session.IsZero() {
		return nil, fmt.Errorf("%w: manifest without a session ID", ErrInvalid)
	}
	return json.MarshalIndent(m, "", "  ")
}

// Document returns the manifest for display, indented and ending in a
// newline: the document as the bucket holds it when it was loaded from
// the bucket (fields this version does not know included, §18), with its
// session IDs ("session", "parent"."session") in lower case, as §4.1
// wants every emitted ID whatever case its writer stored; a manifest
// built in memory, or a stored one that does not read as a token stream,
// is encoded from its fields.
func (m *Manifest) Document() ([]byte, error) {
	if m.Stored != nil {
		if b, err := m.storedDocument(); err == nil {
			return b, nil
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	return append(b, '\n'), err
}

// storedDocument re-indents m.Stored token by token, its strings as they
// are written, lower-casing the session IDs.
func (m *Manifest) storedDocument() ([]byte, error) {
	var out bytes.Buffer
	dec := jsontext.NewDecoder(bytes.NewReader(m.Stored), jsonOptions...)
	enc := jsontext.NewEncoder(&out, append(jsonOptions, jsontext.WithIndent("  "), jsontext.PreserveRawStrings(true))...)
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		if tok.Kind() == '"' && objectValue(dec) {
			switch dec.StackPointer() {
			case "/session", "/parent/session":
				if id, err := ParseSessionID(tok.String()); err == nil {
					tok = jsontext.String(id.String())
				}
			}
		}
		if err := enc.WriteToken(tok); err != nil {
			return nil, err
		}
	}
}

// objectValue reports whether the token dec read last is a member's value
// (not its name): an object's members are read name, value, name, ...
func objectValue(dec *jsontext.Decoder) bool {
	kind, n := dec.StackIndex(dec.StackDepth())
	return kind == '{' && n%2 == 0
}

// DecodeManifest parses a manifest body. A parent of all zeros is read as
// no parent. The caller checks the ID against the key (DecodeManifestAt).
//
// The fields that describe the session without shaping its log (agent,
// handler, metadata) are read leniently, as a descriptor's are: one of
// another JSON type is left out (a metadata value that is not a string
// reads as its JSON text), so a foreign writer's odd annotation does not
// make its whole session unreadable; the document as stored stays in
// Stored. The session, parent, name and first-sequence-number must read.
func DecodeManifest(body []byte) (*Manifest, error) {
	return guardDecode("manifest", func() (*Manifest, error) { return decodeManifest(body) })
}

func decodeManifest(body []byte) (*Manifest, error) {
	var m Manifest
	// The loose fields, one level up, shadow the Manifest's own: they
	// are taken as raw values and read below.
	var doc struct {
		*Manifest
		Agent    json.RawMessage `json:"agent"`
		Handler  json.RawMessage `json:"handler"`
		Metadata json.RawMessage `json:"metadata"`
	}
	doc.Manifest = &m
	// JSON names match exactly, as a descriptor's do (descriptor.go):
	// encoding/json matched them in any case, so an unknown "Parent" or
	// "Name" (§18: additive fields are ignored) became the session's
	// parent, and its chain was shown as the session's files (review 4).
	// What encoding/json let by stays readable: invalid UTF-8, and a name
	// given twice (the last wins).
	if err := jsonv2.Unmarshal(body, &doc, jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true),
		jsonv2.WithUnmarshalers(manifestNumbers)); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	m.Agent, m.Handler = looseString(doc.Agent), looseString(doc.Handler)
	m.Metadata = looseMetadata(doc.Metadata)
	if m.Session.IsZero() {
		return nil, fmt.Errorf("%w: manifest has no session ID", ErrCorrupt)
	}
	if m.Parent != nil && m.Parent.Session.IsZero() {
		m.Parent = nil
	}
	if len(m.Metadata) == 0 {
		m.Metadata = nil // {} and absent are the same (and encode alike)
	}
	if m.Parent != nil && m.Parent.Session == m.Session {
		return nil, fmt.Errorf("%w: manifest of %s names itself as parent", ErrCorrupt, m.Session)
	}
	return &m, nil
}

// manifestNumbers read the manifest's integers (first-sequence-number,
// parent.version) as a descriptor's are read (IntegralNumber): 1.0 and
// 1e0 are the integer 1, which a writer whose numbers are floats writes.
var manifestNumbers = jsonv2.JoinUnmarshalers(
	jsonv2.UnmarshalFunc(func(b []byte, v *int64) error {
		n, err := manifestInteger(b, math.MinInt64, math.MaxInt64)
		*v = n
		return err
	}),
	jsonv2.UnmarshalFunc(func(b []byte, v *uint32) error {
		n, err := manifestInteger(b, 0, math.MaxUint32)
		*v = uint32(n)
		return err
	}),
)

// manifestInteger is the whole number b, within [lo, hi]; null is 0.
func manifestInteger(b []byte, lo, hi int64) (int64, error) {
	if string(b) == "null" {
		return 0, nil
	}
	n, ok := IntegralNumber(string(b))
	if !ok || n < lo || n > hi {
		return 0, fmt.Errorf("%s is not an integer in [%d, %d]", truncate(string(b)), lo, hi)
	}
	return n, nil
}

// looseString is a JSON string's value, or "" for any other value.
func looseString(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// looseMetadata reads an object's values as strings: null as "", any
// other non-string as its JSON text; not an object reads as none.
func looseMetadata(v json.RawMessage) map[string]string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(v, &raw) != nil || len(raw) == 0 {
		return nil
	}
	m := make(map[string]string, len(raw))
	for k, mv := range raw {
		var s *string
		switch {
		case json.Unmarshal(mv, &s) != nil:
			m[k] = string(canonicalRaw(mv))
		case s != nil:
			m[k] = *s
		default:
			m[k] = ""
		}
	}
	return m
}
