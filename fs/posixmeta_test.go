package fs

import (
	"testing"
	"time"
)

// TestModeOf: posix-mode is bucket data; only 1 to 4 octal digits count,
// and setuid, setgid and sticky are never shown.
func TestModeOf(t *testing.T) {
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
		{"", true, 0o644},
		{"10000", true, 0o644},
		{"0o755", true, 0o644},
		{"+755", true, 0o644},
		{"-1", true, 0o644},
		{"0789", true, 0o644},
		{"0755 ", true, 0o644},
		{"rwxr-xr-x", true, 0o644},
	} {
		meta := map[string]string{}
		if c.set {
			meta[metaMode] = c.v
		}
		if got := modeOf(meta, 0o644); got != c.want {
			t.Errorf("modeOf(%q) = %o, want %o", c.v, got, c.want)
		}
	}
}

// TestMtimeOf: posix-mtime is RFC 3339; anything else is ignored and the
// created-at answers.
func TestMtimeOf(t *testing.T) {
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
		if got := mtimeOf(map[string]string{metaMtime: c.v}, created); !got.Equal(c.want) {
			t.Errorf("mtimeOf(%q) = %v, want %v", c.v, got, c.want)
		}
	}
	if got := mtimeOf(nil, created); !got.Equal(created) {
		t.Errorf("mtimeOf(nil) = %v", got)
	}
}

// TestAttrChangeApply: what chmod and utimes write, and that a
// metadata-only change keeps the mtime the file showed.
func TestAttrChangeApply(t *testing.T) {
	mode := uint32(0o750)
	at := time.Date(2020, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	shown := time.Date(2025, 5, 5, 5, 5, 5, 5, time.UTC)
	for _, c := range []struct {
		name string
		c    attrChange
		in   map[string]string
		keep time.Time
		want map[string]string
	}{
		{"chmod of content being written", attrChange{mode: &mode}, nil, time.Time{},
			map[string]string{metaMode: "0750"}},
		{"chmod of committed content keeps its mtime", attrChange{mode: &mode}, map[string]string{"k": "v"}, shown,
			map[string]string{"k": "v", metaMode: "0750", metaMtime: "2025-05-05T05:05:05.000000005Z"}},
		{"chmod keeps a set mtime", attrChange{mode: &mode}, map[string]string{metaMtime: "2001-01-01T00:00:00Z"}, shown,
			map[string]string{metaMode: "0750", metaMtime: "2001-01-01T00:00:00Z"}},
		{"utimes is UTC with nanoseconds", attrChange{mtime: &at}, nil, shown,
			map[string]string{metaMtime: "2020-01-02T02:04:05.000000006Z"}},
		{"utimes to now drops posix-mtime", attrChange{mtimeTo: true}, map[string]string{metaMode: "0600", metaMtime: "2001-01-01T00:00:00Z"}, shown,
			map[string]string{metaMode: "0600"}},
		{"nothing left is nil", attrChange{mtimeTo: true}, map[string]string{metaMtime: "x"}, shown, nil},
	} {
		got := c.c.apply(cloneMap(c.in), c.keep)
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}
