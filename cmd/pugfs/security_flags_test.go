package main

import (
	"strings"
	"testing"
)

// A --ingest-from prefix that would hand out more than it says is a
// usage error, one line, exit 2, naming the flag.
func TestIngestFromUsage(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"file:///", "/srv/shared", "fault+file:///srv/", "file:///srv/../etc/", "s3:///k/"} {
		r := pugfs(t, "mount", "--ingest-from="+v, dir, dir)
		if r.code != 2 || strings.Count(r.err, "\n") != 1 || !strings.Contains(r.err, "--ingest-from") {
			t.Errorf("--ingest-from=%s: want exit 2 and one line naming the flag: %s", v, r)
		}
	}
}
