package fs

import (
	"hash/fnv"
	"strconv"
	"sync"
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

// movedInos are the inode numbers of memory records and refs renamed on
// this mount. Their numbers are derived from their names (a record's
// with its digest), and a rename moves the node, the kernel keeping it
// under the new name: a later lookup of the old name must not derive
// the moved node's number, or go-fuse would hand that node, now another
// name, to it, and the old name's reads and writes would go to the new.
// (A session's files carry a sequence number in theirs, which a rename
// changes: inokeep.go.)
//
// LOCK ORDERING: mu is a leaf.
type movedInos struct {
	mu sync.Mutex
	m  map[uint64]bool // GUARDED_BY(mu)
}

// add notes that the node numbered ino was renamed.
func (o *movedInos) add(ino uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[uint64]bool{}
	}
	o.m[ino] = true
}

// avoid returns ino, or the number derived from it (the same at every
// call) that no renamed node has.
func (o *movedInos) avoid(ino uint64) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.m[ino] {
		ino = inoOf("moved", strconv.FormatUint(ino, 10))
	}
	return ino
}
