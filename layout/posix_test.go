package layout

import (
	"strings"
	"testing"
	"time"
)

// TestPosixMode: posix-mode is bucket data; only 1 to 4 octal digits count,
// and setuid, setgid and sticky are never shown. Any other value fails
// closed, to the default's owner bits (audit 14: its writer may have meant
// a private mode).
func TestPosixMode(t *testing.T) {
	for _, c := range []struct {
		v    string
		set  bool
		want uint32
	}{
		{set: false, want: 0o644},
		{"0755", true, 0o755},
		{"755", true, 0o755},
		{"0640", true, 0o640},
		{"0", true, 0},
		{"4755", true, 0o755},
		{"7777", true, 0o777},
		{"", true, 0o600},
		{"10000", true, 0o600},
		{"0o755", true, 0o600},
		{"+755", true, 0o600},
		{"-1", true, 0o600},
		{"0789", true, 0o600},
		{"0755 ", true, 0o600},
		{"rwxr-xr-x", true, 0o600},
	} {
		meta := map[string]string{}
		if c.set {
			meta[MetaPosixMode] = c.v
		}
		if got := PosixMode(meta, 0o644); got != c.want {
			t.Errorf("PosixMode(%q) = %o, want %o", c.v, got, c.want)
		}
	}
}

// TestPosixMtime: posix-mtime is RFC 3339; anything else is ignored and the
// created-at answers.
func TestPosixMtime(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Time
	}{
		{"2020-01-02T03:04:05.123456789Z", time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)},
		{"2020-01-02T03:04:05Z", time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"2020-01-02T04:04:05+01:00", time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"", created},
		{"yesterday", created},
		{"1577934245", created},
		{"2020-13-02T03:04:05Z", created},
	} {
		if got := PosixMtime(map[string]string{MetaPosixMtime: c.v}, created); !got.Equal(c.want) {
			t.Errorf("PosixMtime(%q) = %v, want %v", c.v, got, c.want)
		}
	}
	if got := PosixMtime(nil, created); !got.Equal(created) {
		t.Errorf("PosixMtime(nil) = %v", got)
	}
}

// posix-mtime is written with all nine digits of nanoseconds, in UTC,
// and reads back as the same instant.
func TestFormatPosixMtime(t *testing.T) {
	for _, c := range []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC), "2026-12-04T12:00:00.000000000Z"},
		{time.Date(2026, 12, 4, 12, 0, 0, 120000000, time.UTC), "2026-12-04T12:00:00.120000000Z"},
		{time.Date(2026, 12, 4, 13, 0, 0, 1, time.FixedZone("CET", 3600)), "2026-12-04T12:00:00.000000001Z"},
	} {
		got := FormatPosixMtime(c.in)
		if got != c.want {
			t.Errorf("FormatPosixMtime(%v) = %s, want %s", c.in, got, c.want)
		}
		if back := PosixMtime(map[string]string{MetaPosixMtime: got}, time.Time{}); !back.Equal(c.in) {
			t.Errorf("%s reads back as %v, want %v", got, back, c.in)
		}
	}
}

// TestParseRFC3339: the timestamps RFC 3339 allows that Go's layout
// refuses (lower-case t and z, a leap second) parse; what the RFC does
// not allow stays refused. Another writer's created-at of that form made
// the file show its session's hour, and fsck call the descriptor
// unreadable (the conformance audit).
func TestParseRFC3339(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2026-01-02T03:04:05Z", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), true},
		{"2026-01-02t03:04:05z", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), true},
		{"2026-01-02t03:04:05.25+01:00", time.Date(2026, 1, 2, 2, 4, 5, 250e6, time.UTC), true},
		{"2016-12-31T23:59:60Z", time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"2016-12-31T23:59:61Z", time.Time{}, false},
		{"2026-01-02 03:04:05Z", time.Time{}, false},
		{"yesterday", time.Time{}, false},
	} {
		got, err := ParseRFC3339(c.in)
		if (err == nil) != c.ok || (c.ok && !got.Equal(c.want)) {
			t.Errorf("ParseRFC3339(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
	d := `{"digest":"sha256:` + strings.Repeat("0", 64) + `","size":0,"name":"f","created-at":"2026-01-02t03:04:05z","sequence-number":1}`
	ds, err := DecodeDescriptors([]byte("["+d+"]"), EncodingNone, 1<<20)
	if err != nil || len(ds) != 1 || !ds[0].CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("descriptor with a lower-case created-at: %+v, %v", ds, err)
	}
}
