package layout

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// SessionID is a 128-bit session identifier (§4.1): bytes 0..3 are the hours
// since the Unix epoch (big-endian), bytes 4..15 come from a CSPRNG. The zero
// value means "no session" and is what zero descriptor fields decode to.
type SessionID [16]byte

// NewSessionID returns a fresh ID for the hour containing now.
func NewSessionID(now time.Time) SessionID {
	var id SessionID
	binary.BigEndian.PutUint32(id[:4], uint32(now.Unix()/3600))
	if _, err := rand.Read(id[4:]); err != nil {
		// crypto/rand never fails on supported platforms; an ID without
		// randomness would collide, so refuse to continue.
		panic("layout: crypto/rand failed: " + err.Error())
	}
	return id
}

// ParseSessionID parses the 32-hex text form in any letter case (§4.1).
func ParseSessionID(s string) (SessionID, error) {
	var id SessionID
	if len(s) != 32 {
		return id, fmt.Errorf("%w: session ID %q: want 32 hex digits", ErrInvalid, truncate(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return SessionID{}, fmt.Errorf("%w: session ID %q: not hex", ErrInvalid, truncate(s))
	}
	return id, nil
}

// String returns the canonical lowercase 32-hex form.
func (id SessionID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the all-zero "no session" value.
func (id SessionID) IsZero() bool { return id == SessionID{} }

// Compare orders IDs by their bytes, which is the order of their keys
// (§4.2: the hour partition, then the session component in upper hex):
// -1, 0 or +1 as id sorts before, with or after o.
func (id SessionID) Compare(o SessionID) int { return bytes.Compare(id[:], o[:]) }

// Hour returns the hours-since-epoch counter in the ID's first four bytes.
func (id SessionID) Hour() uint32 { return binary.BigEndian.Uint32(id[:4]) }

// Time returns the start of the hour encoded in the ID, the canonical
// creation timestamp of the session (§4.2).
func (id SessionID) Time() time.Time { return time.Unix(int64(id.Hour())*3600, 0).UTC() }

// MarshalText implements encoding.TextMarshaler (lowercase hex).
func (id SessionID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (any case).
func (id *SessionID) UnmarshalText(b []byte) error {
	v, err := ParseSessionID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
