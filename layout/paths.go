package layout

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The four top-level prefixes pugmark owns (§1). Everything else in a bucket
// belongs to the user and is never listed or touched.
const (
	ObjectsPrefix  = "objects/"
	SessionsPrefix = "sessions/"
	MemoriesPrefix = "memories/"
	RefsPrefix     = "refs/"
)

const (
	manifestName     = "manifest.json"
	snapshotsDir     = "snapshots/"
	versionFileExt   = ".json"
	sessionRefPrefix = "sessions/"
)

// BlobKey is the key of a blob: objects/sha256:<hex> (§3).
func BlobKey(d Digest) string { return ObjectsPrefix + digestPrefix + d.Hex() }

// ParseBlobKey is the inverse of BlobKey.
func ParseBlobKey(key string) (Digest, error) {
	rest, ok := strings.CutPrefix(key, ObjectsPrefix)
	if !ok {
		return Digest{}, fmt.Errorf("%w: blob key %q: not under objects/", ErrInvalid, truncate(key))
	}
	d, err := ParseDigest(rest)
	if err != nil {
		return Digest{}, err
	}
	if d.IsZero() {
		return Digest{}, fmt.Errorf("%w: blob key %q: zero digest", ErrInvalid, truncate(key))
	}
	return d, nil
}

// SessionDir is the key prefix of a session, ending in "/" (§4.2):
// sessions/year=YYYY/month=MM/day=DD/hour=HH/<last 12 bytes, upper hex>/.
// It fails for IDs whose hour lies past year 9999, which no path can hold.
func SessionDir(id SessionID) (string, error) {
	t := id.Time()
	if t.Year() > 9999 {
		return "", fmt.Errorf("%w: session %s: hour counter %d is past year 9999", ErrInvalid, id, id.Hour())
	}
	return fmt.Sprintf("%syear=%04d/month=%02d/day=%02d/hour=%02d/%s/", SessionsPrefix,
		t.Year(), int(t.Month()), t.Day(), t.Hour(), strings.ToUpper(hex.EncodeToString(id[4:]))), nil
}

// ManifestKey is the key of a session's manifest (§4.2).
func ManifestKey(id SessionID) (string, error) {
	dir, err := SessionDir(id)
	return dir + manifestName, err
}

// SnapshotsPrefix is the listing prefix of a session's snapshots (§6.3).
func SnapshotsPrefix(id SessionID) (string, error) {
	dir, err := SessionDir(id)
	return dir + snapshotsDir, err
}

// SnapshotKey is the key of snapshot version v >= 1 of a session (§4.3).
func SnapshotKey(id SessionID, v uint32) (string, error) {
	if v == 0 {
		return "", fmt.Errorf("%w: snapshot version 0 has no file", ErrInvalid)
	}
	p, err := SnapshotsPrefix(id)
	return p + VersionFileName(v), err
}

// VersionFileName is the reverse-hex file name of version v >= 1 (§6.1):
// %08X of 0xFFFFFFFF-(v-1), plus ".json". Version 1 is FFFFFFFF.json.
func VersionFileName(v uint32) string {
	return fmt.Sprintf("%08X%s", ^(v - 1), versionFileExt)
}

// ParseVersionFileName is the inverse of VersionFileName. It accepts exactly
// eight uppercase hex digits and ".json"; 00000000.json (which would be
// version 2^32) and every other shape is rejected, so readers can skip them.
func ParseVersionFileName(name string) (uint32, error) {
	hexPart, ok := strings.CutSuffix(name, versionFileExt)
	if !ok || len(hexPart) != 8 {
		return 0, fmt.Errorf("%w: version file %q: want 8 uppercase hex digits and .json", ErrInvalid, truncate(name))
	}
	for _, c := range hexPart {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'F') {
			return 0, fmt.Errorf("%w: version file %q: want 8 uppercase hex digits and .json", ErrInvalid, truncate(name))
		}
	}
	n, err := strconv.ParseUint(hexPart, 16, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: version file %q: out of range", ErrInvalid, truncate(name))
	}
	return ^uint32(n) + 1, nil
}

// SessionKey is a parsed key under a session's directory.
type SessionKey struct {
	ID SessionID
	// Rest is what follows the session directory: "manifest.json",
	// "snapshots/FFFFFFFF.json", or anything else found there.
	Rest string
}

// ParseSessionKey splits a key under sessions/ into the session ID and the
// remainder, checking every partition component's format and range (§4.2)
// and that the partition names a real hour (Feb 30 does not exist). The
// all-zero ID is rejected: it means "no session".
func ParseSessionKey(key string) (SessionKey, error) {
	bad := func(why string) (SessionKey, error) {
		return SessionKey{}, fmt.Errorf("%w: session key %q: %s", ErrInvalid, truncate(key), why)
	}
	rest, ok := strings.CutPrefix(key, SessionsPrefix)
	if !ok {
		return bad("not under sessions/")
	}
	parts := strings.SplitN(rest, "/", 6)
	if len(parts) < 6 {
		// The session component is a directory: at least ".../<tail>/".
		return bad("too few components")
	}
	fields := [4]struct {
		name   string
		width  int
		lo, hi int
		val    int
	}{{"year", 4, 1970, 9999, 0}, {"month", 2, 1, 12, 0}, {"day", 2, 1, 31, 0}, {"hour", 2, 0, 23, 0}}
	for i := range fields {
		f := &fields[i]
		v, ok := strings.CutPrefix(parts[i], f.name+"=")
		if !ok || len(v) != f.width || !allDigits(v) {
			return bad(fmt.Sprintf("component %d: want %s=<%d digits>", i+1, f.name, f.width))
		}
		f.val, _ = strconv.Atoi(v)
		if f.val < f.lo || f.val > f.hi {
			return bad(fmt.Sprintf("%s=%s out of range %d..%d", f.name, v, f.lo, f.hi))
		}
	}
	t := time.Date(fields[0].val, time.Month(fields[1].val), fields[2].val, fields[3].val, 0, 0, 0, time.UTC)
	if t.Day() != fields[2].val {
		return bad("no such date")
	}
	tail := parts[4]
	if len(tail) != 24 || strings.ToUpper(tail) != tail {
		return bad("session component: want 24 uppercase hex digits")
	}
	var id SessionID
	if _, err := hex.Decode(id[4:], []byte(tail)); err != nil {
		return bad("session component: not hex")
	}
	hour := t.Unix() / 3600
	id[0], id[1], id[2], id[3] = byte(hour>>24), byte(hour>>16), byte(hour>>8), byte(hour)
	if id.IsZero() {
		// The all-zero ID is "no session" (decisions.md §4.1): no key names it.
		return bad("the zero session ID names no session")
	}
	return SessionKey{ID: id, Rest: parts[5]}, nil
}

// ParseManifestKey returns the session of a manifest key (the body of a
// session ref, §9.1).
func ParseManifestKey(key string) (SessionID, error) {
	sk, err := ParseSessionKey(key)
	if err != nil {
		return SessionID{}, err
	}
	if sk.Rest != manifestName {
		return SessionID{}, fmt.Errorf("%w: %q is not a manifest key", ErrInvalid, truncate(key))
	}
	return sk.ID, nil
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// MemoryDir is the key prefix of a memory namespace (§8.1), ending in "/".
func MemoryDir(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return MemoriesPrefix + ns + "/", nil
}

// MemoryKey is the key of version v >= 1 of namespace ns (§8.1).
func MemoryKey(ns string, v uint32) (string, error) {
	if v == 0 {
		return "", fmt.Errorf("%w: memory version 0 has no file", ErrInvalid)
	}
	dir, err := MemoryDir(ns)
	return dir + VersionFileName(v), err
}

// ParseMemoryKey splits memories/<ns>/<reverse-hex>.json; the namespace is
// everything between memories/ and the last "/" (§8.1).
func ParseMemoryKey(key string) (ns string, v uint32, err error) {
	rest, ok := strings.CutPrefix(key, MemoriesPrefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 {
		return "", 0, fmt.Errorf("%w: memory key %q: want memories/<namespace>/<version>.json", ErrInvalid, truncate(key))
	}
	ns = rest[:i]
	if err := ValidateNamespace(ns); err != nil {
		return "", 0, err
	}
	v, err = ParseVersionFileName(rest[i+1:])
	return ns, v, err
}

// ValidateNamespace checks that ns is a usable memory namespace: non-empty
// "/"-separated components, none empty, "." or "..", no NUL.
func ValidateNamespace(ns string) error {
	if ns == "" {
		return fmt.Errorf("%w: empty memory namespace", ErrInvalid)
	}
	if !utf8.ValidString(ns) {
		return fmt.Errorf("%w: memory namespace %q is not UTF-8", ErrInvalid, truncate(ns))
	}
	for _, c := range strings.Split(ns, "/") {
		if c == "" || c == "." || c == ".." || strings.IndexByte(c, 0) >= 0 {
			return fmt.Errorf("%w: memory namespace %q: bad component %q", ErrInvalid, truncate(ns), c)
		}
	}
	return nil
}

// RefKey is the key of ref name (§9): "foo" or "<kind>/foo", at most one "/".
func RefKey(name string) (string, error) {
	if err := ValidateRefName(name); err != nil {
		return "", err
	}
	return RefsPrefix + name, nil
}

// SessionRefName is the ref name that names a session: sessions/<name> (§9.1).
func SessionRefName(name string) string { return sessionRefPrefix + name }

// ValidateRefName checks §9's rule: a name, or a kind and a name separated by
// one "/"; no empty, "." or ".." parts, no NUL (which no path can hold).
// Other control characters are names like any other (§9 restricts only
// "/"): another writer's refs/sessions/<name> with a newline in it was
// hidden from names/ and refs/, and fsck called its session unnamed.
func ValidateRefName(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: ref name %q is not UTF-8", ErrInvalid, truncate(name))
	}
	parts := strings.Split(name, "/")
	if len(parts) > 2 {
		return fmt.Errorf("%w: ref name %q: at most one / (kind/name)", ErrInvalid, truncate(name))
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("%w: ref name %q: bad component %q", ErrInvalid, truncate(name), p)
		}
	}
	return nil
}
