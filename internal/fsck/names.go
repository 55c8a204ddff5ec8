package fsck

import "strings"

// MaxNameComponent is the longest path component a name can map to (the
// usual NAME_MAX).
const MaxNameComponent = 255

// NameIsPath reports whether a descriptor, memory or ref name can be a
// path in the mounted tree (decisions.md "Names as paths"): split on "/",
// no empty, "." or ".." component, no NUL byte, no component over 255
// bytes. Names that fail stay in the log and are reported, never shown.
// It is the same rule as the tree's (layout.NamePath); fsck keeps its own
// copy so that it checks the written rule, not whatever the tree does.
func NameIsPath(name string) bool {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return false
	}
	for _, p := range strings.Split(name, "/") {
		if p == "" || p == "." || p == ".." || len(p) > MaxNameComponent {
			return false
		}
	}
	return true
}
