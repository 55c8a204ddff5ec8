package fs

import (
	"hash/fnv"
)

// inoOf returns a stable inode number for a node identity. Numbers stay in
// [2, 2^63): go-fuse reserves 0, 1 and ^0, and numbers its automatic
// inodes from 2^63 (engineering.md). The key names what makes the node
// distinct (a slot file's session, name and digest), so the same content
// under two names is two inodes with their own attributes.
func inoOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	v := h.Sum64() & (1<<63 - 1)
	if v < 2 {
		v += 2
	}
	return v
}
