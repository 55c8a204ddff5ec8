package fs

import (
	"encoding/binary"
	"strconv"
	"sync"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/readahead"
)

// inoOf returns a stable inode number for a node identity. Numbers stay in
// [2, 2^63): go-fuse reserves 0, 1 and ^0, and numbers its automatic
// inodes from 2^63 (engineering.md). The key names what makes the node
// distinct (a slot file's session, name and digest), so the same content
// under two names is two inodes with their own attributes.
func inoOf(parts ...string) uint64 {
	k := newInoHash()
	for _, p := range parts {
		k.str(p)
	}
	return k.ino()
}

// inoHash is FNV-1a over the parts of a node identity, each followed by a
// zero byte. It is inoOf without allocations: a listing computes one
// number per entry, and hash.Hash's Write made each part a heap copy.
type inoHash uint64

func newInoHash() inoHash { return 14695981039346656037 } // FNV-1a 64 offset basis

func (k *inoHash) byte(b byte) { *k = (*k ^ inoHash(b)) * 1099511628211 } // FNV-1a 64 prime

// str adds a part given as a string.
func (k *inoHash) str(s string) {
	for i := 0; i < len(s); i++ {
		k.byte(s[i])
	}
	k.byte(0)
}

// raw adds a part given as bytes.
func (k *inoHash) raw(b []byte) {
	for _, c := range b {
		k.byte(c)
	}
	k.byte(0)
}

// ino is the number: in [2, 2^63).
func (k inoHash) ino() uint64 {
	v := uint64(k) & (1<<63 - 1)
	if v < 2 {
		v += 2
	}
	return v
}

// liveView is viewKey's name for a session's live tree.
const liveView = "live"

// slotIno is the inode number of file e, named full, in session id's
// view (viewKey). The key holds the digest and sequence number, so new
// content is a new inode and old pages can stay cached
// (FOPEN_KEEP_CACHE) for the old one; but in the live tree of a session
// this mount writes, a new descriptor of the same bytes (a rename, a
// chmod, the commit of a file this mount created) keeps the number the
// kernel knows: a number that changes under a program is a different
// file to it (posixtest RenameOverwrite*).
func (f *FS) slotIno(id layout.SessionID, view, full string, e *layout.Entry) uint64 {
	ino, _ := f.slotNum(id, view, full, e)
	return ino
}

// slotNum is slotIno with the generation: a hard link's new name shows
// its source's number under a generation of its own while both show the
// same bytes (sessDirNode.Link, inoKeeper.linkedFor), and keeps both
// once written through (inoKeeper.written); any other file's is zero.
func (f *FS) slotNum(id layout.SessionID, view, full string, e *layout.Entry) (ino, gen uint64) {
	if view == liveView && f.sessionWritable(id) {
		if ino, gen, ok := f.inos.linkedFor(id, full, e.Digest); ok {
			return ino, gen
		}
		if kept, gen, ok := f.inos.forFile(id, full, e.Digest); ok {
			return kept, gen
		}
	}
	k := newInoHash()
	k.str("slot")
	k.raw(id[:])
	k.str(view)
	k.str(full)
	k.raw(e.Digest[:])
	var seq [8]byte
	k.raw(binary.BigEndian.AppendUint64(seq[:0], uint64(e.SequenceNumber)))
	return k.ino(), 0
}

// sdirIno is the inode number of directory path in session id's view.
func sdirIno(id layout.SessionID, view, path string) uint64 {
	return inoOf("sdir", id.String(), view, path)
}

// raInos tells read-ahead the inode numbers the mount shows in session
// trees, which GNU cp -r visits a directory's entries by.
type raInos struct{ f *FS }

var _ readahead.Inos = raInos{}

// raView is viewKey of read-ahead's view at (0: the live tree).
func raView(at uint32) string {
	if at == 0 {
		return liveView
	}
	return strconv.FormatUint(uint64(at), 10)
}

// File implements readahead.Inos.
func (r raInos) File(id layout.SessionID, at uint32, name string, e *layout.Entry) uint64 {
	return r.f.slotIno(id, raView(at), name, e)
}

// Dir implements readahead.Inos.
func (r raInos) Dir(id layout.SessionID, at uint32, path string) uint64 {
	return sdirIno(id, raView(at), path)
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
