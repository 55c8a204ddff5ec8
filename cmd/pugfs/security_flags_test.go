package main

import (
	"strings"
	"testing"
)

// --metrics-addr without a host listens on loopback only, not on every
// interface as net.Listen would take ":9090"; an explicit non-loopback
// host is allowed and flagged, so the mount can warn.
func TestMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		in, addr string
		public   bool
		bad      bool
	}{
		{in: ":9090", addr: "127.0.0.1:9090"},
		{in: "localhost:9090", addr: "localhost:9090"},
		{in: "127.0.0.1:0", addr: "127.0.0.1:0"},
		{in: "[::1]:9090", addr: "[::1]:9090"},
		{in: "0.0.0.0:9090", addr: "0.0.0.0:9090", public: true},
		{in: "[::]:9090", addr: "[::]:9090", public: true},
		{in: "10.1.2.3:9090", addr: "10.1.2.3:9090", public: true},
		{in: "metrics.example:9090", addr: "metrics.example:9090", public: true},
		{in: "nonsense", bad: true},
		{in: "localhost:", bad: true},
	} {
		addr, public, err := metricsAddr(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("metricsAddr(%q) = %q, want an error", tc.in, addr)
		case !tc.bad && (err != nil || addr != tc.addr || public != tc.public):
			t.Errorf("metricsAddr(%q) = %q, %v, %v; want %q, %v", tc.in, addr, public, err, tc.addr, tc.public)
		}
	}
}

// A --ingest-from prefix that would hand out more than it says is a
// usage error, one line, exit 2, naming the flag.
func TestIngestFromUsage(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"file:///", "/srv/shared", "fault+file:///srv/", "file:///srv/../etc/", "s3:///k/", "http://example.com/in/"} {
		r := pugfs(t, "mount", "--ingest-from="+v, dir, dir)
		if r.code != 2 || strings.Count(r.err, "\n") != 1 || !strings.Contains(r.err, "--ingest-from") {
			t.Errorf("--ingest-from=%s: want exit 2 and one line naming the flag: %s", v, r)
		}
	}
}
