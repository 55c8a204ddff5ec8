package fs

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// setxattr is bounded per value, in total and in keys; replacing a value
// counts the new one only, and derived attributes (digest, size...) do
// not count against the user.
func TestXattrBound(t *testing.T) {
	many := map[string]string{}
	for i := 0; i < maxXattrKeys; i++ {
		many[fmt.Sprintf("user.pugmark.meta.k%03d", i)] = "v"
	}
	big := map[string]string{
		"user.pugmark.meta.a": strings.Repeat("a", maxXattrValue),
		"user.pugmark.meta.b": strings.Repeat("b", maxXattrValue),
		"user.pugmark.meta.c": strings.Repeat("c", maxXattrValue),
		"user.pugmark.digest": strings.Repeat("d", maxXattrValue), // derived: not counted
	}
	for _, tc := range []struct {
		name string
		cur  map[string]string
		attr string
		val  string
		want syscall.Errno
	}{
		{"small", nil, "user.pugmark.meta.k", "v", 0},
		{"one value at the bound", nil, "user.pugmark.meta.k", strings.Repeat("x", maxXattrValue), 0},
		{"one value over", nil, "user.pugmark.meta.k", strings.Repeat("x", maxXattrValue+1), syscall.E2BIG},
		{"fourth big value", big, "user.pugmark.meta.d", strings.Repeat("x", maxXattrValue), syscall.ENOSPC},
		{"replacing a big value", big, "user.pugmark.meta.a", strings.Repeat("x", maxXattrValue), 0},
		{"content type beside big values", big, "user.pugmark.content-type", "text/plain", 0},
		{"one key too many", many, "user.pugmark.meta.new", "v", syscall.ENOSPC},
		{"replacing with many keys", many, "user.pugmark.meta.k000", "w", 0},
		{"schema with many keys", many, "user.pugmark.schema-url", "https://x", 0},
	} {
		if got := xattrBound(tc.cur, tc.attr, tc.val); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
