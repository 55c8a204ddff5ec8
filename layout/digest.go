package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Digest is the SHA-256 of a blob body as stored (§3). The zero value is the
// "no blob" digest that tombstones carry (§10).
type Digest [32]byte

const digestPrefix = "sha256:"

// DigestOf returns the digest of body.
func DigestOf(body []byte) Digest { return Digest(sha256.Sum256(body)) }

// ParseDigest parses "sha256:<64 lowercase hex>". The empty string and
// sha256: followed by 64 zeros both give the zero digest (decisions.md).
// Uppercase hex is rejected: blob keys are lowercase (§3), so an uppercase
// digest would name a key that cannot exist.
func ParseDigest(s string) (Digest, error) { return parseDigest(s, false) }

// parseDescriptorDigest parses a descriptor's digest field. Keys spell a
// digest in lower case (§3), and a descriptor's "sha256:<64-hex>" (§7)
// names the same blob in either case: as for session IDs (§4.1), upper
// case is accepted on input, and lower case is what pugfs writes.
func parseDescriptorDigest(s string) (Digest, error) { return parseDigest(s, true) }

// parseDigest is ParseDigest, with upper-case hex accepted if upper. It
// decodes in place: a snapshot's descriptors are parsed by the
// thousand, and the lower-cased copy and the []byte conversion the
// strings and hex packages needed were each an allocation per digest.
func parseDigest(s string, upper bool) (Digest, error) {
	var d Digest
	if s == "" {
		return d, nil
	}
	hexPart, ok := strings.CutPrefix(s, digestPrefix)
	if !ok || len(hexPart) != 2*len(d) {
		return d, fmt.Errorf("%w: digest %q: want sha256:<64 lowercase hex>", ErrInvalid, truncate(s))
	}
	for i := range d {
		hi, okHi := fromHex(hexPart[2*i], upper)
		lo, okLo := fromHex(hexPart[2*i+1], upper)
		if !okHi || !okLo {
			return Digest{}, fmt.Errorf("%w: digest %q: want sha256:<64 lowercase hex>", ErrInvalid, truncate(s))
		}
		d[i] = hi<<4 | lo
	}
	return d, nil
}

// fromHex is the value of one hex digit; A-F only if upper.
func fromHex(c byte, upper bool) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case upper && 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// String returns "sha256:<hex>", or "" for the zero digest.
func (d Digest) String() string {
	if d.IsZero() {
		return ""
	}
	return digestPrefix + hex.EncodeToString(d[:])
}

// Hex returns the 64 lowercase hex digits.
func (d Digest) Hex() string { return hex.EncodeToString(d[:]) }

// IsZero reports whether d is the zero ("no blob") digest.
func (d Digest) IsZero() bool { return d == Digest{} }
