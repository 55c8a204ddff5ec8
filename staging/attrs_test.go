package staging

import (
	"maps"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// TestAttrChangeApply: what chmod and utimes write, and that a
// metadata-only change keeps the mtime the file showed.
func TestAttrChangeApply(t *testing.T) {
	mode, defMode := uint32(0o750), uint32(layout.DefaultFileMode)
	at := time.Date(2020, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	shown := time.Date(2025, 5, 5, 5, 5, 5, 5, time.UTC)
	for _, c := range []struct {
		name string
		c    AttrChange
		in   map[string]string
		keep time.Time
		want map[string]string
	}{
		{"chmod of content being written", AttrChange{Mode: &mode}, nil, time.Time{},
			map[string]string{layout.MetaPosixMode: "0750"}},
		{"chmod of committed content keeps its mtime", AttrChange{Mode: &mode}, map[string]string{"k": "v"}, shown,
			map[string]string{"k": "v", layout.MetaPosixMode: "0750", layout.MetaPosixMtime: "2025-05-05T05:05:05.000000005Z"}},
		{"chmod keeps a set mtime", AttrChange{Mode: &mode}, map[string]string{layout.MetaPosixMtime: "2001-01-01T00:00:00Z"}, shown,
			map[string]string{layout.MetaPosixMode: "0750", layout.MetaPosixMtime: "2001-01-01T00:00:00Z"}},
		{"utimes is UTC with nanoseconds", AttrChange{Mtime: &at}, nil, shown,
			map[string]string{layout.MetaPosixMtime: "2020-01-02T02:04:05.000000006Z"}},
		{"utimes to now drops posix-mtime", AttrChange{MtimeNow: true}, map[string]string{layout.MetaPosixMode: "0600", layout.MetaPosixMtime: "2001-01-01T00:00:00Z"}, shown,
			map[string]string{layout.MetaPosixMode: "0600"}},
		{"nothing left is nil", AttrChange{MtimeNow: true}, map[string]string{layout.MetaPosixMtime: "x"}, shown, nil},
		// Editors chmod after every save: to the mode the file has, it
		// changes nothing (and commits nothing).
		{"chmod to the default mode", AttrChange{Mode: &defMode}, nil, shown, nil},
		{"chmod to the mode set", AttrChange{Mode: &mode}, map[string]string{layout.MetaPosixMode: "0750"}, shown,
			map[string]string{layout.MetaPosixMode: "0750"}},
	} {
		got := c.c.Apply(maps.Clone(c.in), c.keep)
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
