package layout

import (
	"fmt"
	"strconv"
	"time"
)

// Descriptor metadata keys for what a filesystem keeps and §7 has no
// field for (decisions.md "POSIX metadata in descriptors").
const (
	MetaPosixMode  = "posix-mode"
	MetaPosixMtime = "posix-mtime"
)

// DefaultFileMode is the mode of a file whose descriptor has no
// posix-mode (tree.md "Reading"); a create with it writes no key.
const DefaultFileMode = 0o644

// KeptModeBits are the mode bits posix-mode stores and a reader shows.
// Setuid, setgid and sticky are neither: a bucket is untrusted input, and
// a file a bucket marks setuid would become a setuid program of whoever
// copies it out with cp -a or rsync -a (often root).
const KeptModeBits = 0o777

// PosixMode returns the permission bits a descriptor's metadata gives, or
// def without one. The value is bucket data: anything but 1 to 4 octal
// digits is never half-used; it fails closed, to def's owner bits alone.
// Its writer meant some mode, maybe a private one ("0o600" from another
// tool), and def (0644) showed such a file to every user of a shared
// mount (audit 14).
func PosixMode(meta map[string]string, def uint32) uint32 {
	v, ok := meta[MetaPosixMode]
	if !ok {
		return def
	}
	if !ValidPosixMode(v) {
		return def & 0o700
	}
	m, _ := strconv.ParseUint(v, 8, 32)
	return uint32(m) & KeptModeBits
}

// ValidPosixMode reports whether v is a posix-mode value: 1 to 4 octal
// digits (strconv alone would take a sign or a 0o prefix).
func ValidPosixMode(v string) bool {
	if len(v) == 0 || len(v) > 4 {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '7' {
			return false
		}
	}
	return true
}

// PosixMtime returns a descriptor's modification time: its posix-mtime
// when that parses as RFC 3339 (bucket data: anything else is ignored),
// else created, the time the content was written.
func PosixMtime(meta map[string]string, created time.Time) time.Time {
	if v, ok := meta[MetaPosixMtime]; ok {
		if t, err := ParseRFC3339(v); err == nil {
			return t.UTC()
		}
	}
	return created
}

// ShownMtime is the modification time a descriptor shows (tree.md): its
// posix-mtime, else its created-at, else born. §7 does not require
// created-at; born is then the session's hour (SessionID.Time), the same
// on every mount, so rsync and make see a stable time.
func ShownMtime(meta map[string]string, created, born time.Time) time.Time {
	if t := PosixMtime(meta, created); !t.IsZero() {
		return t
	}
	return born
}

// FormatPosixMode is how posix-mode is written: 4 octal digits.
func FormatPosixMode(m uint32) string { return fmt.Sprintf("%04o", m&KeptModeBits) }

// FormatPosixMtime is how posix-mtime is written: RFC 3339 with
// nanoseconds, UTC, all nine digits of them (decisions.md). Go's
// RFC3339Nano drops trailing zeros, and a whole second had no fraction
// at all: a reader that expects nanoseconds would not find them.
func FormatPosixMtime(t time.Time) string { return t.UTC().Format(nanoLayout) }

// nanoLayout is RFC 3339 with all nine digits of nanoseconds.
const nanoLayout = "2006-01-02T15:04:05.000000000Z07:00"
