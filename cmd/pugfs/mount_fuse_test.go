package main

import (
	"errors"
	"strings"
	"testing"
)

// TestMountError: a failed FUSE mount says what to do, and does not
// point at /dev/fuse when fusermount3 gave its own reason (audit 4:
// --allow-other without user_allow_other got the /dev/fuse hint).
func TestMountError(t *testing.T) {
	tests := []struct{ in, want, not string }{
		{"mount /m: fusermount exited with code 256\n", "mount /m: fusermount3 refused it; its reason is the line above", "/dev/fuse"},
		{`mount /m: exec: "fusermount": executable file not found in $PATH`, "install fuse3", "/dev/fuse"},
		{"mount /m: no such device", "mount /m: no such device (is /dev/fuse there", "fusermount3 refused"},
	}
	for _, tt := range tests {
		got := mountError(errors.New(tt.in)).Error()
		if !strings.Contains(got, tt.want) || strings.Contains(got, tt.not) {
			t.Errorf("mountError(%q) = %q, want it to say %q and not %q", tt.in, got, tt.want, tt.not)
		}
	}
}
