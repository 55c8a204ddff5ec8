package blobwrap

import "testing"

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"bucket x is not usable: blob (code=Unknown): blob (code=Unknown): blob (code=Unknown): dial tcp: connection refused",
			"bucket x is not usable: dial tcp: connection refused"},
		{"bucket x is not usable: blob (code=PermissionDenied): blob (code=PermissionDenied): StatusCode: 403",
			"bucket x is not usable: permission denied: StatusCode: 403"},
		// The first code that says something is the one shown.
		{"read k: blob (code=Unknown): blob (code=NotFound): no such key",
			"read k: not found: no such key"},
		{"blob (code=DeadlineExceeded): context deadline exceeded", "timed out: context deadline exceeded"},
		// A full disk under a local bucket is no "too many requests"
		// (audit 27).
		{`store blob k: blob (key "k") (code=ResourceExhausted): localblob: write "k": no space left on device`,
			`store blob k: resource exhausted: localblob: write "k": no space left on device`},
		// A call with a key: the prefix names it each time, the caller once.
		{`put sessions/a "b".json: blob (key "sessions/a \"b\".json") (code=Unknown): blob (key "sessions/a \"b\".json") (code=PermissionDenied): StatusCode: 403`,
			`put sessions/a "b".json: permission denied: StatusCode: 403`},
		// Named by the prefix alone, the key stays, once.
		{`bucket x: blob (key "k/1") (code=NotFound): blob (key "k/1") (code=NotFound): gone`,
			`bucket x: not found: k/1: gone`},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}
