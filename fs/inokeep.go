package fs

import (
	"strings"
	"sync"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// inoKeeper remembers, for the files of live sessions this mount created,
// renamed or changed, which inode number a file has, so that the number
// outlives the descriptor it was first given for: a rename or a chmod
// commits a new descriptor (a new sequence number) of the same bytes, and
// a committed file was created under a number its digest did not give.
// A program that compares st_ino (rsync, tar, posixtest RenameOverwrite*)
// then sees one file, also after the kernel forgot the inode and looks it
// up again.
//
// A number is kept only for the bytes it was given for (the digest, or
// the staged file being written): new content from elsewhere is a new
// inode, so pages cached for the old content are never shown for the new
// (FOPEN_KEEP_CACHE, slotChild). It lives as long as the mount; unlink
// drops it.
type inoKeeper struct {
	mu sync.Mutex
	m  map[inoKey]inoRec
}

type inoKey struct {
	id   layout.SessionID
	name string
}

// inoRec is a kept number and what it stands for: the staged file it was
// created with (whose commits it follows) or a committed digest. A hard
// link's new name (linked) has its source's number under a generation
// of its own (gen, never zero) and names its source (src).
type inoRec struct {
	ino    uint64
	s      *staging.File
	digest layout.Digest
	gen    uint64
	src    string
}

// created keeps the number of a file made by create(2).
func (k *inoKeeper) created(id layout.SessionID, name string, ino uint64, s *staging.File) {
	k.put(id, name, inoRec{ino: ino, s: s})
}

// linked keeps, for name, a hard link's new name, the number ino of its
// source src, both showing digest d, under generation gen (linkedFor).
func (k *inoKeeper) linked(id layout.SessionID, name, src string, ino, gen uint64, d layout.Digest) {
	k.mu.Lock()
	if r, ok := k.m[inoKey{id, src}]; ok && r.gen != 0 && r.ino == ino {
		// A link of a link: its number is the first source's, and so
		// is the file whose writes end the sharing (review 26).
		src = r.src
	}
	k.mu.Unlock()
	k.put(id, name, inoRec{ino: ino, gen: gen, digest: d, src: src})
}

// committed keeps the number of a file that shows digest d.
func (k *inoKeeper) committed(id layout.SessionID, name string, ino uint64, d layout.Digest) {
	k.put(id, name, inoRec{ino: ino, digest: d})
}

func (k *inoKeeper) put(id layout.SessionID, name string, r inoRec) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[inoKey]inoRec{}
	}
	k.m[inoKey{id, name}] = r
}

// forget drops the number of a removed name.
func (k *inoKeeper) forget(id layout.SessionID, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, inoKey{id, name})
}

// renamed moves the numbers of from, or of everything under from/, to
// to: what rename(2) moved keeps its numbers, what it replaced loses its.
func (k *inoKeeper) renamed(id layout.SessionID, from, to string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	moved := map[inoKey]inoRec{}
	for key, r := range k.m {
		if key.id != id {
			continue
		}
		if key.name == to || strings.HasPrefix(key.name, to+"/") {
			delete(k.m, key)
			continue
		}
		if r.src == from {
			r.src = to // a link's source moved
			k.m[key] = r
		} else if rest, ok := strings.CutPrefix(r.src, from+"/"); ok {
			r.src = to + "/" + rest
			k.m[key] = r
		}
		if key.name == from {
			moved[inoKey{id, to}] = r
			delete(k.m, key)
		} else if rest, ok := strings.CutPrefix(key.name, from+"/"); ok {
			moved[inoKey{id, to + "/" + rest}] = r
			delete(k.m, key)
		}
	}
	for key, r := range moved {
		k.m[key] = r
	}
}

// forFile returns the kept number of name when it stands for a file with
// digest d: kept for d, or for the staged file that became d.
func (k *inoKeeper) forFile(id layout.SessionID, name string, d layout.Digest) (uint64, bool) {
	k.mu.Lock()
	r, ok := k.m[inoKey{id, name}]
	k.mu.Unlock()
	if !ok || r.gen != 0 {
		return 0, false // a link's number: linkedFor
	}
	return r.ino, r.shows(d)
}

// shows reports whether the file r stands for shows digest d.
func (r inoRec) shows(d layout.Digest) bool {
	if r.s == nil {
		return r.digest == d
	}
	got, clean := r.s.CleanDigest()
	if c := r.s.Committed(); !clean && c != nil {
		got, clean = c.Digest, true
	}
	return clean && got == d
}

// linkedFor returns the number and generation of name when it is a hard
// link's new name that shows digest d, the bytes it was linked with, and
// its source either shows them too or has another number by now: two
// names under one number show the same bytes.
func (k *inoKeeper) linkedFor(id layout.SessionID, name string, d layout.Digest) (ino, gen uint64, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.m[inoKey{id, name}]
	if !ok || r.gen == 0 || r.digest != d {
		return 0, 0, false
	}
	if src, ok := k.m[inoKey{id, r.src}]; ok && src.ino == r.ino && !src.shows(d) {
		return 0, 0, false // the source was written since
	}
	return r.ino, r.gen, true
}

// forStaged returns the kept number of name when it stands for staged
// file s.
func (k *inoKeeper) forStaged(id layout.SessionID, name string, s *staging.File) (uint64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.m[inoKey{id, name}]
	return r.ino, ok && r.s == s
}
