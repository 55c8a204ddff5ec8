package fs

import (
	"strconv"
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
//
// Two names share a number only while both show the bytes a hard link
// gave them (linked): a write through either ends that (written).
type inoKeeper struct {
	mu sync.Mutex
	m  map[inoKey]inoRec // GUARDED_BY(mu)
	// linkedInos holds the numbers links were given to share (linked),
	// so that a write of a file whose number no link has needs no pass
	// over m (written). It may name numbers no link shares any longer.
	linkedInos map[uint64]bool // GUARDED_BY(mu)
}

type inoKey struct {
	id   layout.SessionID
	name string
}

// inoRec is a kept number and what it stands for: the staged file it was
// created with (whose commits it follows) or a committed digest. A hard
// link's new name (linked) has its source's number under a generation
// of its own (gen, never zero) and names its source (src) while it
// shares that number; written, it keeps number and generation, those of
// its node, as a file of its own (src empty). was is the number the
// name had before a link's new name written kept it (written).
type inoRec struct {
	ino    uint64
	s      *staging.File
	digest layout.Digest
	gen    uint64
	src    string
	was    uint64
}

// created keeps the number of a file made by create(2).
func (k *inoKeeper) created(id layout.SessionID, name string, ino uint64, s *staging.File) {
	k.put(id, name, inoRec{ino: ino, s: s})
}

// linked keeps, for name, a hard link's new name, the number ino of its
// source src, both showing digest d, under generation gen (linkedFor).
func (k *inoKeeper) linked(id layout.SessionID, name, src string, ino, gen uint64, d layout.Digest) {
	k.mu.Lock()
	if r, ok := k.m[inoKey{id, src}]; ok && r.src != "" && r.ino == ino {
		// A link of a link: its number is the first source's, and so
		// is the file whose writes end the sharing (review 26).
		src = r.src
	}
	if k.linkedInos == nil {
		k.linkedInos = map[uint64]bool{}
	}
	k.linkedInos[ino] = true
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

// forFile returns the kept number and generation of name when it stands
// for a file with digest d: kept for d, or for the staged file that
// became d.
func (k *inoKeeper) forFile(id layout.SessionID, name string, d layout.Digest) (ino, gen uint64, ok bool) {
	k.mu.Lock()
	r, ok := k.m[inoKey{id, name}]
	k.mu.Unlock()
	if !ok || r.src != "" {
		return 0, 0, false // a link's number: linkedFor
	}
	return r.ino, r.gen, r.shows(d)
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

// holds reports whether the file r stands for holds digest d's bytes
// now. Unlike shows, a staged file written since it was staged holds
// what it was staged from no longer: a link's source being written
// (with --commit=fsync, until its fsync) shows other bytes than its new
// name, and must not share its number.
func (r inoRec) holds(d layout.Digest) bool {
	if r.s == nil {
		return r.digest == d
	}
	got, clean := r.s.CleanDigest()
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
	if !ok || r.src == "" || r.digest != d {
		return 0, 0, false
	}
	if !k.sharesLocked(id, r) {
		return 0, 0, false // the source was written since
	}
	return r.ino, r.gen, true
}

// sharesLocked reports whether link record r still shares its number:
// its source either holds the linked bytes too or has another number
// by now. k.mu is held.
func (k *inoKeeper) sharesLocked(id layout.SessionID, r inoRec) bool {
	src, ok := k.m[inoKey{id, r.src}]
	return !ok || src.ino != r.ino || src.holds(r.digest)
}

// forStaged returns the kept number and generation of name when it
// stands for staged file s.
func (k *inoKeeper) forStaged(id layout.SessionID, name string, s *staging.File) (ino, gen uint64, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.m[inoKey{id, name}]
	return r.ino, r.gen, ok && r.s == s
}

// written keeps, for name, the number of the node (ino, gen) that staged
// file s is being written through (slotFile.writesThrough), and ends its
// sharing with other names: the bytes differ from now on, and programs
// that compare st_ino took the two for one file (cp f c refused, "are
// the same file"; rsync -H and tar merged them; audit 41). The name
// written keeps its node's number, which its writer's inode has; the
// names that shared it get another, and are returned: the kernel must
// drop their entries (its own until the metadata TTL) so that their
// next stat looks them up. ok is false for a node whose number is not
// the name's any longer (a link's new name whose sharing ended before);
// the caller then keeps another number for s.
func (k *inoKeeper) written(id layout.SessionID, name string, ino, gen uint64, s *staging.File) (parted []string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := inoKey{id, name}
	r, had := k.m[key]
	if k.m == nil {
		k.m = map[inoKey]inoRec{}
	}
	if gen == 0 {
		if had && r.was == ino && r.ino != ino {
			// A node of the name from before a link's new name that was
			// written kept its number: the name's new number stands.
			ino = r.ino
		}
		k.m[key] = inoRec{ino: ino, s: s, was: r.was}
		if !k.linkedInos[ino] {
			return nil, true
		}
		// A link's source: its links show the bytes it had, under
		// numbers of their own from now on (for good: a source that
		// comes back to those bytes is another file all the same).
		for key2, r2 := range k.m {
			if key2.id == id && r2.src != "" && r2.ino == ino {
				delete(k.m, key2)
				parted = append(parted, key2.name)
			}
		}
		delete(k.linkedInos, ino)
		return parted, true
	}
	switch {
	case had && r.src == "" && r.ino == ino && r.gen == gen:
		k.m[key] = inoRec{ino: ino, gen: gen, s: s} // written before
		return nil, true
	case !had || r.src == "" || r.ino != ino || r.gen != gen || !k.sharesLocked(id, r):
		return nil, false
	}
	// A link's new name that shares its source's number: it keeps the
	// number, and its source and the source's other links, which still
	// show the linked bytes, share another.
	moved := inoOf("parted", id.String(), r.src, strconv.FormatUint(stagedSeq.Add(1), 10))
	if _, ok := k.m[inoKey{id, r.src}]; !ok {
		// Numbered by its descriptor until now (slotNum): kept for
		// the linked bytes from now on.
		k.m[inoKey{id, r.src}] = inoRec{ino: ino, digest: r.digest}
	}
	for key2, r2 := range k.m {
		if key2.id != id || key2 == key || r2.ino != ino {
			continue
		}
		r2.ino = moved
		if r2.src == "" {
			r2.was = ino
		} else {
			k.linkedInos[moved] = true
		}
		k.m[key2] = r2
		parted = append(parted, key2.name)
	}
	delete(k.linkedInos, ino)
	k.m[key] = inoRec{ino: ino, gen: gen, s: s}
	return parted, true
}
