package layout

import (
	"encoding/json"
	"fmt"
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

// DecodeManifest parses a manifest body. A parent of all zeros is read as
// no parent. The caller checks the ID against the key (DecodeManifestAt).
func DecodeManifest(body []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
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
