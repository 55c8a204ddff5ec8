package localblob

import (
	"strings"
)

// Key <-> path mapping.
//
// A key is split on "/" and every component becomes one path element, so
// all keys that share a prefix ending in "/" live in the same directory.
// That locality is what lets List read only the directories a prefix
// names. A component is stored as-is unless the filesystem cannot hold it
// or it would mean something else to the filesystem:
//
//   - bytes 0x00-0x1f, 0x7f and '%' itself are written as %XX (upper-case
//     hex), so NUL is representable and names stay printable;
//   - the empty component (from a leading "/", "//" or a trailing "/") is
//     the name "%", which no other component can produce because a literal
//     '%' is always escaped;
//   - the components "." and ".." become "%2E" and "%2E%2E", so no key can
//     resolve outside the root or alias another key ("a/../b" is not "b");
//   - at the root, a component starting with ".pugfs-" has its dot escaped,
//     keeping that namespace for the driver's own files.
//
// Everything else, including ':', '=', '\\', spaces and non-ASCII UTF-8, is
// kept byte for byte: "objects/sha256:ab.." is the file objects/sha256:ab..
// A name found on disk is an object only if it is the canonical encoding of
// its decoded form; other names (a stray "100%" copied in by hand) are not
// part of the bucket's namespace and are skipped by List.

const (
	// reservedPrefix marks root-level names that belong to the driver.
	reservedPrefix = ".pugfs-"
	// maxNameLen is NAME_MAX on Linux filesystems.
	maxNameLen = 255
	// maxPathLen keeps every relative path usable with a single openat
	// (PATH_MAX including the terminating NUL).
	maxPathLen = 4095
)

const hexUpper = "0123456789ABCDEF"

func needsEscape(c byte) bool { return c < 0x20 || c == 0x7f || c == '%' }

// escapeComp returns the file name for one key component.
func escapeComp(c string, atRoot bool) string {
	switch c {
	case "":
		return "%"
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	var sb strings.Builder
	start := 0
	if atRoot && strings.HasPrefix(c, reservedPrefix) {
		sb.WriteString("%2E")
		start = 1
	}
	for i := start; i < len(c); i++ {
		b := c[i]
		if needsEscape(b) {
			sb.WriteByte('%')
			sb.WriteByte(hexUpper[b>>4])
			sb.WriteByte(hexUpper[b&15])
			continue
		}
		sb.WriteByte(b)
	}
	return sb.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unescapeComp decodes a file name into a key component. ok is false for
// names that are not the canonical encoding of any component; such files
// are not objects.
func unescapeComp(name string, atRoot bool) (comp string, ok bool) {
	if name == "%" {
		return "", true
	}
	if !strings.Contains(name, "%") {
		comp = name
	} else {
		var sb strings.Builder
		for i := 0; i < len(name); i++ {
			if name[i] != '%' {
				sb.WriteByte(name[i])
				continue
			}
			if i+2 >= len(name) {
				return "", false
			}
			hi, ok1 := unhex(name[i+1])
			lo, ok2 := unhex(name[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			sb.WriteByte(hi<<4 | lo)
			i += 2
		}
		comp = sb.String()
	}
	if escapeComp(comp, atRoot) != name {
		return "", false
	}
	return comp, true
}

// keyPath is a key resolved to its location under the root.
type keyPath struct {
	dirs []string // escaped directory components, root first
	base string   // escaped final component
}

// rel returns the path relative to the root.
func (p keyPath) rel() string {
	if len(p.dirs) == 0 {
		return p.base
	}
	return strings.Join(p.dirs, "/") + "/" + p.base
}

// mapKey resolves key to its path, or fails with InvalidArgument for keys
// that have no file: the empty key, and keys whose encoding exceeds the
// filesystem's name or path limits.
func mapKey(key string) (keyPath, error) {
	if key == "" {
		return keyPath{}, newError(codeInvalid, "map", key, errEmptyKey)
	}
	comps := strings.Split(key, "/")
	names := make([]string, len(comps))
	total := len(comps) - 1
	for i, c := range comps {
		n := escapeComp(c, i == 0)
		if len(n) > maxNameLen {
			return keyPath{}, newError(codeInvalid, "map", key, errNameTooLong)
		}
		names[i] = n
		total += len(n)
	}
	if total > maxPathLen {
		return keyPath{}, newError(codeInvalid, "map", key, errNameTooLong)
	}
	return keyPath{dirs: names[:len(names)-1], base: names[len(names)-1]}, nil
}

// KeyPath returns the path, relative to the bucket root, of the file that
// holds key, using the package's key encoding (see the package
// documentation). It lets tools and tests find an object's file without
// reimplementing the encoding; for ordinary keys the result is the key
// itself.
func KeyPath(key string) (string, error) {
	p, err := mapKey(key)
	if err != nil {
		return "", err
	}
	return p.rel(), nil
}
