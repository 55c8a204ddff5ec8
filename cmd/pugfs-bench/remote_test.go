package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/s3test"
)

// Every cold or fresh pugfs run of the remote preset starts from an empty
// cache directory of its own (the mounter empties it before each start),
// so that no run finds what an earlier one left on disk; only the
// cache-directory row shares one, on purpose, through its flags. Seen
// failing: with no --cache-dir the mounts shared the default one, and the
// runs after the first of each "cold" row were warm.
func TestRemoteRowsStartCold(t *testing.T) {
	c, err := parseFlags([]string{"-preset", "remote", "-install=false"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: &c, scratch: t.TempDir(), s3: &s3test.Server{Endpoint: "http://127.0.0.1:1"},
		tools: &tools{rclone: "rclone", why: map[string]string{}}, goalOf: map[*row]remoteGoal{}}
	base := t.TempDir()
	ds := sets{sessions: newDataset(base, kindHourSessions, 20, 0), small: newDataset(base, kindSmall, 20, 0)}
	vers := []*dataset{newDataset(base, kindVersions, 20, 0)}
	p := &delayProxy{Endpoint: "http://127.0.0.1:2"}
	b.buildRemoteRows(ds, vers, nil, map[*dataset]string{ds.sessions: "plain", ds.small: "plain"}, p, p)

	dirs := map[string]string{}
	for _, r := range b.rows {
		pt := r.cells[colPugfs]
		if pt == nil {
			t.Fatalf("row %q has no pugfs cell", r.name)
		}
		shared := slices.Contains(pt.args, "--cache-dir")
		switch {
		case strings.Contains(r.name, "cache directory of an earlier mount"):
			if !shared || pt.cacheDir != "" {
				t.Errorf("row %q: args %v, emptied dir %q; want a shared --cache-dir that is never emptied", r.name, pt.args, pt.cacheDir)
			}
		case shared || pt.cacheDir == "":
			t.Errorf("row %q: args %v, emptied dir %q; want an emptied cache directory of its own", r.name, pt.args, pt.cacheDir)
		case dirs[pt.cacheDir] != "" && dirs[pt.cacheDir] != pt.key:
			t.Errorf("targets %s and %s share the cache directory %s", dirs[pt.cacheDir], pt.key, pt.cacheDir)
		default:
			dirs[pt.cacheDir] = pt.key
		}
	}
	if len(dirs) < 3 {
		t.Errorf("only %d pugfs targets with a cache directory of their own", len(dirs))
	}
}
