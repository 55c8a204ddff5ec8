package layout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const tail24 = "0123456789ABCDEF01234567"

// §4.1: parsers accept either case and emit lowercase; exactly 32 hex.
func TestSection4_1_SessionIDText(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef", true},
		{"0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcdef", true},
		{"0123456789AbCdEf0123456789aBcDeF", "0123456789abcdef0123456789abcdef", true},
		{"00000000000000000000000000000000", "00000000000000000000000000000000", true},
		{"", "", false},
		{"0123456789abcdef0123456789abcde", "", false},   // 31
		{"0123456789abcdef0123456789abcdef0", "", false}, // 33
		{"0123456789abcdef0123456789abcdeg", "", false},  // non-hex
		{"0x23456789abcdef0123456789abcdef", "", false},
		{" 123456789abcdef0123456789abcdef", "", false},
		{"0123456789abcdef-123456789abcdef", "", false},
		{"０123456789abcdef0123456789abcde", "", false}, // full-width digit, 32+ bytes
	} {
		id, err := ParseSessionID(tc.in)
		if tc.ok != (err == nil) {
			t.Errorf("ParseSessionID(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if !tc.ok {
			wantErrIs(t, err, ErrInvalid)
			continue
		}
		if id.String() != tc.want {
			t.Errorf("ParseSessionID(%q).String() = %q, want %q", tc.in, id, tc.want)
		}
		b, _ := id.MarshalText()
		if string(b) != tc.want {
			t.Errorf("MarshalText = %q", b)
		}
		var back SessionID
		if err := json.Unmarshal([]byte(`"`+tc.in+`"`), &back); err != nil || back != id {
			t.Errorf("json round trip of %q: %v %v", tc.in, back, err)
		}
	}
}

// §4.1 / decisions.md: bytes 0..3 are hours since the epoch, the rest random.
func TestSection4_1_NewSessionIDLayout(t *testing.T) {
	now := time.Date(2031, 12, 24, 18, 59, 59, 999, time.UTC)
	a, b := NewSessionID(now), NewSessionID(now)
	if a.Hour() != uint32(now.Unix()/3600) || b.Hour() != a.Hour() {
		t.Fatalf("hour = %d, want %d", a.Hour(), now.Unix()/3600)
	}
	if !a.Time().Equal(now.Truncate(time.Hour)) {
		t.Fatalf("Time() = %v", a.Time())
	}
	if a == b || a.IsZero() {
		t.Fatalf("IDs not random: %s %s", a, b)
	}
	if !(SessionID{}).IsZero() {
		t.Fatal("zero ID not zero")
	}
}

// §4.2: the partition is derived from the ID's first four bytes, the tail is
// the last 12 bytes in uppercase hex, and parsing reconstructs the ID.
func TestSection4_2_SessionPathRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		when time.Time
		dir  string
	}{
		{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), "sessions/year=1970/month=01/day=01/hour=00/"},
		{time.Date(2024, 2, 29, 23, 30, 0, 0, time.UTC), "sessions/year=2024/month=02/day=29/hour=23/"},
		{time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), "sessions/year=2024/month=05/day=06/hour=07/"},
		{time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC), "sessions/year=9999/month=12/day=31/hour=23/"},
	} {
		id := NewSessionID(tc.when)
		dir, err := SessionDir(id)
		if err != nil {
			t.Fatalf("%v: %v", tc.when, err)
		}
		wantTail := strings.ToUpper(id.String()[8:]) + "/"
		if dir != tc.dir+wantTail {
			t.Fatalf("SessionDir = %q, want %q", dir, tc.dir+wantTail)
		}
		for _, rest := range []string{"manifest.json", "snapshots/FFFFFFFF.json", "other", ""} {
			sk, err := ParseSessionKey(dir + rest)
			if err != nil || sk.ID != id || sk.Rest != rest {
				t.Fatalf("ParseSessionKey(%q) = %+v, %v", dir+rest, sk, err)
			}
		}
		mk, _ := ManifestKey(id)
		if mk != dir+"manifest.json" {
			t.Fatalf("ManifestKey = %q", mk)
		}
		if got, err := ParseManifestKey(mk); err != nil || got != id {
			t.Fatalf("ParseManifestKey = %v %v", got, err)
		}
		sp, _ := SnapshotsPrefix(id)
		if sp != dir+"snapshots/" {
			t.Fatalf("SnapshotsPrefix = %q", sp)
		}
		sk, _ := SnapshotKey(id, 2)
		if sk != dir+"snapshots/FFFFFFFE.json" {
			t.Fatalf("SnapshotKey = %q", sk)
		}
	}
	// An hour counter past 9999-12-31T23 has no path.
	last := NewSessionID(time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC))
	var past SessionID
	copy(past[:], last[:])
	h := last.Hour() + 1
	past[0], past[1], past[2], past[3] = byte(h>>24), byte(h>>16), byte(h>>8), byte(h)
	if _, err := SessionDir(past); err == nil {
		t.Fatal("SessionDir accepted an hour past year 9999")
	}
	var max SessionID
	for i := range max {
		max[i] = 0xff
	}
	_, err := ManifestKey(max)
	wantErrIs(t, err, ErrInvalid)
}

// §4.2: parsers MUST reject numeric components outside the valid ranges,
// wrong widths, dates that do not exist, and a tail that is not 24
// uppercase hex digits.
func TestSection4_2_PartitionRangeChecks(t *testing.T) {
	key := func(y, m, d, h, tail string) string {
		return "sessions/year=" + y + "/month=" + m + "/day=" + d + "/hour=" + h + "/" + tail + "/manifest.json"
	}
	good := []string{
		key("1970", "01", "01", "00", tail24),
		key("9999", "12", "31", "23", tail24),
		key("2024", "02", "29", "12", tail24), // leap day
		key("2000", "02", "29", "12", tail24), // leap century
		key("2023", "04", "30", "05", tail24),
		key("2023", "12", "31", "23", strings.Repeat("F", 24)),
	}
	for _, k := range good {
		if _, err := ParseSessionKey(k); err != nil {
			t.Errorf("ParseSessionKey(%q): %v", k, err)
		}
	}
	bad := []string{
		key("1969", "12", "31", "23", tail24), // year < 1970
		key("0000", "01", "01", "00", tail24),
		key("10000", "01", "01", "00", tail24), // width 5
		key("202", "01", "01", "00", tail24),   // width 3
		key("02024", "01", "01", "00", tail24),
		key("2024", "00", "01", "00", tail24),
		key("2024", "13", "01", "00", tail24),
		key("2024", "1", "01", "00", tail24),
		key("2024", "001", "01", "00", tail24),
		key("2024", "01", "00", "00", tail24),
		key("2024", "01", "32", "00", tail24),
		key("2024", "01", "1", "00", tail24),
		key("2024", "01", "01", "24", tail24),
		key("2024", "01", "01", "0", tail24),
		key("2024", "01", "01", "-1", tail24),
		key("2024", "01", "01", "+1", tail24),
		key("2023", "02", "29", "00", tail24), // not a leap year
		key("2024", "02", "30", "00", tail24), // Feb 30
		key("1900", "02", "29", "00", tail24),
		key("2024", "04", "31", "00", tail24), // Apr 31
		key("2024", "06", "31", "00", tail24),
		key("2024", "01", "01", "00", strings.ToLower(tail24)), // lowercase tail
		key("2024", "01", "01", "00", "0123456789ABCDEF0123456a"),
		key("2024", "01", "01", "00", tail24[:23]),
		key("2024", "01", "01", "00", tail24+"8"),
		key("2024", "01", "01", "00", "0123456789ABCDEF0123456G"),
		key("2024", "01", "01", "00", ""),
		key("٢٠٢٤", "01", "01", "00", tail24),
		key("1970", "01", "01", "00", strings.Repeat("0", 24)), // the zero ID is "no session"
		"sessions/month=01/year=2024/day=01/hour=00/" + tail24 + "/manifest.json",
		"sessions/yr=2024/month=01/day=01/hour=00/" + tail24 + "/manifest.json",
		"sessions/year=2024/month=01/day=01/" + tail24 + "/manifest.json",
		"sessions/year=2024/month=01/day=01/hour=00",
		"sessions/year=2024/month=01/day=01/hour=00/" + tail24, // the session is a directory
		"session/year=2024/month=01/day=01/hour=00/" + tail24 + "/manifest.json",
		"/sessions/year=2024/month=01/day=01/hour=00/" + tail24 + "/manifest.json",
		"",
	}
	for _, k := range bad {
		if sk, err := ParseSessionKey(k); err == nil {
			t.Errorf("ParseSessionKey(%q) = %+v, want error", k, sk)
		} else {
			wantErrIs(t, err, ErrInvalid)
		}
	}
	if _, err := ParseManifestKey(key("2024", "01", "01", "00", tail24)[:len(key("2024", "01", "01", "00", tail24))-len("manifest.json")] + "snapshots/FFFFFFFF.json"); err == nil {
		t.Error("ParseManifestKey accepted a snapshot key")
	}
}

// §6.1 and the decisions.md table: the file name is %08X of
// 0xFFFFFFFF-(v-1); anything else is not a version file.
func TestSection6_1_ReverseHex(t *testing.T) {
	for _, tc := range []struct {
		v    uint32
		name string
	}{
		{1, "FFFFFFFF.json"},
		{2, "FFFFFFFE.json"},
		{16, "FFFFFFF0.json"},
		{17, "FFFFFFEF.json"},
		{256, "FFFFFF00.json"},
		{0x7FFFFFFF, "80000001.json"},
		{4294967294, "00000002.json"},
		{4294967295, "00000001.json"},
	} {
		if got := VersionFileName(tc.v); got != tc.name {
			t.Errorf("VersionFileName(%d) = %q, want %q", tc.v, got, tc.name)
		}
		if got, err := ParseVersionFileName(tc.name); err != nil || got != tc.v {
			t.Errorf("ParseVersionFileName(%q) = %d, %v, want %d", tc.name, got, err, tc.v)
		}
	}
	for _, name := range []string{
		"00000000.json", // would be version 2^32
		"ffffffff.json", "FFFFFFFf.json", "fFFFFFFF.json",
		"FFFFFFF.json", "FFFFFFFFF.json", "0FFFFFFFF.json",
		"FFFFFFFF.JSON", "FFFFFFFF", "FFFFFFFF.json.tmp", "FFFFFFFF.jso",
		"FFFFFFFF..json", ".json", "", "GFFFFFFF.json", "+FFFFFFF.json",
		" FFFFFFF.json", "FFFF FFF.json", "-0000001.json", "0x000001.json",
		"FFFFFFFF.json/", "a/FFFFFFFF.json", "ＦFFFFFF.json",
	} {
		if v, err := ParseVersionFileName(name); err == nil {
			t.Errorf("ParseVersionFileName(%q) = %d, want error", name, v)
		} else {
			wantErrIs(t, err, ErrInvalid)
		}
	}
	// Newer versions sort first (the O(1) latest lookup, §6.1, §2.4).
	prev := VersionFileName(1)
	for _, v := range []uint32{2, 3, 15, 16, 17, 255, 256, 65536, 1 << 31, 1<<32 - 1} {
		n := VersionFileName(v)
		if !(n < prev) {
			t.Errorf("VersionFileName(%d) = %q does not sort before %q", v, n, prev)
		}
		prev = n
	}
	// §4.3 / §6.1: version 0 has no file.
	id := NewSessionID(testNow)
	if _, err := SnapshotKey(id, 0); err == nil {
		t.Error("SnapshotKey(0) succeeded")
	}
	if _, err := MemoryKey("ns", 0); err == nil {
		t.Error("MemoryKey(0) succeeded")
	}
}

// §3: blob keys are objects/sha256:<64 lowercase hex>; the zero digest
// (decisions.md) is "" or sha256:000...0, never a key.
func TestSection3_BlobKeys(t *testing.T) {
	d := DigestOf([]byte("hello"))
	const hexHello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	if BlobKey(d) != "objects/sha256:"+hexHello {
		t.Fatalf("BlobKey = %q", BlobKey(d))
	}
	if d.String() != "sha256:"+hexHello || d.Hex() != hexHello {
		t.Fatalf("String/Hex = %q %q", d.String(), d.Hex())
	}
	if got, err := ParseBlobKey(BlobKey(d)); err != nil || got != d {
		t.Fatalf("ParseBlobKey = %v %v", got, err)
	}
	for _, k := range []string{
		"objects/sha256:" + strings.ToUpper(hexHello),
		"objects/sha256:" + hexHello[:63],
		"objects/sha256:" + hexHello + "0",
		"objects/sha512:" + hexHello,
		"objects/SHA256:" + hexHello,
		"objects/" + hexHello,
		"sha256:" + hexHello,
		"objects/sha256:" + strings.Repeat("0", 64),
		"objects/sha256:",
		"objects/",
		"objects/sha256:" + hexHello[:62] + "zz",
		"objects/sha256:" + hexHello + "/",
	} {
		if _, err := ParseBlobKey(k); err == nil {
			t.Errorf("ParseBlobKey(%q) succeeded", k)
		} else {
			wantErrIs(t, err, ErrInvalid)
		}
	}
	for _, s := range []string{"", "sha256:" + strings.Repeat("0", 64)} {
		z, err := ParseDigest(s)
		if err != nil || !z.IsZero() {
			t.Errorf("ParseDigest(%q) = %v, %v; want the zero digest", s, z, err)
		}
	}
	if (Digest{}).String() != "" {
		t.Error("zero digest String() not empty")
	}
	for _, s := range []string{"sha256:", "sha256", strings.Repeat("0", 64), "sha256:" + strings.ToUpper(hexHello), "md5:" + hexHello} {
		if _, err := ParseDigest(s); err == nil {
			t.Errorf("ParseDigest(%q) succeeded", s)
		}
	}
}

// §8.1: memories/<namespace>/<reverse-hex>.json, the namespace being
// everything up to the last "/", which may itself contain "/".
func TestSection8_1_MemoryKeys(t *testing.T) {
	for _, tc := range []struct {
		key string
		ns  string
		v   uint32
	}{
		{"memories/notes/FFFFFFFF.json", "notes", 1},
		{"memories/user/123/alice/FFFFFFFE.json", "user/123/alice", 2},
		{"memories/a/b/c/d/e/00000001.json", "a/b/c/d/e", 4294967295},
		{"memories/FFFFFFFF.json/FFFFFFF0.json", "FFFFFFFF.json", 16},
		{"memories/team notes/FFFFFFFF.json", "team notes", 1},
	} {
		ns, v, err := ParseMemoryKey(tc.key)
		if err != nil || ns != tc.ns || v != tc.v {
			t.Errorf("ParseMemoryKey(%q) = %q %d %v, want %q %d", tc.key, ns, v, err, tc.ns, tc.v)
			continue
		}
		if k, err := MemoryKey(ns, v); err != nil || k != tc.key {
			t.Errorf("MemoryKey(%q, %d) = %q %v", ns, v, k, err)
		}
	}
	for _, k := range []string{
		"memories/FFFFFFFF.json",
		"memories//FFFFFFFF.json",
		"memories/a//FFFFFFFF.json",
		"memories//a/FFFFFFFF.json",
		"memories/a/./FFFFFFFF.json",
		"memories/a/../FFFFFFFF.json",
		"memories/../FFFFFFFF.json",
		"memories/a/ffffffff.json",
		"memories/a/00000000.json",
		"memories/a/FFFFFFFF.json/",
		"memories/a/",
		"memories/a",
		"memories/",
		"memory/a/FFFFFFFF.json",
		"a/FFFFFFFF.json",
		"memories/a\x00b/FFFFFFFF.json",
	} {
		if ns, v, err := ParseMemoryKey(k); err == nil {
			t.Errorf("ParseMemoryKey(%q) = %q %d, want error", k, ns, v)
		} else {
			wantErrIs(t, err, ErrInvalid)
		}
	}
	for _, ns := range []string{"", "/", "a/", "/a", "a//b", ".", "..", "a/./b", "a/../b", "a\x00"} {
		if _, err := MemoryDir(ns); err == nil {
			t.Errorf("MemoryDir(%q) succeeded", ns)
		}
	}
	if d, err := MemoryDir("user/123"); err != nil || d != "memories/user/123/" {
		t.Errorf("MemoryDir = %q %v", d, err)
	}
}

// §9: a ref name is a name or kind/name, at most one "/".
func TestSection9_RefNames(t *testing.T) {
	for _, n := range []string{"foo", "sessions/foo", "a b", "x.y", "sessions/my-session_1", "UPPER", "ünïcode",
		"a\nb", "a\rb", "sessions/tab\there", "sessions/nl\nname"} {
		if err := ValidateRefName(n); err != nil {
			t.Errorf("ValidateRefName(%q): %v", n, err)
		}
		if k, err := RefKey(n); err != nil || k != "refs/"+n {
			t.Errorf("RefKey(%q) = %q %v", n, k, err)
		}
	}
	for _, n := range []string{
		"", "/", "foo/bar/baz", "sessions/a/b", "/foo", "foo/", "a//b", ".", "..",
		"sessions/.", "sessions/..", "./x", "a\x00b", "sessions/\x00",
	} {
		if err := ValidateRefName(n); err == nil {
			t.Errorf("ValidateRefName(%q) succeeded", n)
		} else {
			wantErrIs(t, err, ErrInvalid)
		}
		if _, err := RefKey(n); err == nil {
			t.Errorf("RefKey(%q) succeeded", n)
		}
	}
	if SessionRefName("demo") != "sessions/demo" {
		t.Error("SessionRefName")
	}
}

// TestParseDigestCases: keys and ParseDigest take lower-case hex only,
// a descriptor's digest field (parseDescriptorDigest, §7) either case;
// both refuse anything else whole, and neither allocates on success (a
// snapshot's descriptors are parsed by the thousand).
func TestParseDigestCases(t *testing.T) {
	const hexHello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	want, err := ParseDigest("sha256:" + hexHello)
	if err != nil || want.Hex() != hexHello {
		t.Fatalf("ParseDigest(sha256:%s) = %v, %v", hexHello, want, err)
	}
	mixed := strings.ToUpper(hexHello[:10]) + hexHello[10:]
	for _, c := range []struct {
		in              string
		key, descriptor bool // accepted by ParseDigest, by parseDescriptorDigest
	}{
		{"sha256:" + hexHello, true, true},
		{"sha256:" + strings.ToUpper(hexHello), false, true},
		{"sha256:" + mixed, false, true},
		{"SHA256:" + hexHello, false, false},
		{"sha256:" + hexHello[:63], false, false},
		{"sha256:" + hexHello + "0", false, false},
		{"sha256:" + hexHello[:63] + "g", false, false},
		{"sha256:" + hexHello[:63] + "G", false, false},
		{"sha256:" + hexHello[:62] + " 0", false, false},
		{"sha256:" + hexHello[:63] + "\x00", false, false},
	} {
		for _, p := range []struct {
			name   string
			parse  func(string) (Digest, error)
			accept bool
		}{{"ParseDigest", ParseDigest, c.key}, {"parseDescriptorDigest", parseDescriptorDigest, c.descriptor}} {
			got, err := p.parse(c.in)
			switch {
			case p.accept && (err != nil || got != want):
				t.Errorf("%s(%q) = %v, %v; want %s", p.name, c.in, got, err, want)
			case !p.accept && err == nil:
				t.Errorf("%s(%q) = %v; want an error", p.name, c.in, got)
			case !p.accept && (!errors.Is(err, ErrInvalid) || !got.IsZero()):
				t.Errorf("%s(%q) = %v, %v; want the zero digest and ErrInvalid", p.name, c.in, got, err)
			}
		}
	}
	upper := "sha256:" + strings.ToUpper(hexHello)
	if n := testing.AllocsPerRun(100, func() { _, _ = parseDescriptorDigest(upper) }); n != 0 {
		t.Errorf("parseDescriptorDigest allocates %v times a call, want 0", n)
	}
}
