package layout

import "strings"

// MaxNameComponent is the longest path component a name may map to (the
// usual NAME_MAX).
const MaxNameComponent = 255

// NamePath maps a descriptor name to path components (decisions.md "Names
// as paths"): split on "/"; a name with an empty, "." or ".." component, a
// NUL byte, or a component over 255 bytes has no path (ok=false). Bucket
// names are data, not trusted paths: nothing this returns can climb out of
// the directory it is resolved in.
func NamePath(name string) (parts []string, ok bool) {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return nil, false
	}
	parts = strings.Split(name, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || len(p) > MaxNameComponent {
			return nil, false
		}
	}
	return parts, true
}
