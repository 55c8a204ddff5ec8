package blobcache

// Shapes: the immutable facts learned about a digest's content (what its
// head announces, its decoded sizes and digests), kept in a bounded LRU
// and persisted in the disk cache's info records, so that stat after a
// remount needs no fetch.

import "github.com/pugmark/pugfs/layout"

// blobShape holds the immutable facts learned about a digest's content.
// GUARDED_BY(Cache.mu): a shape in c.shapes is read and changed under c.mu
// only; copies go to the disk cache.
type blobShape struct {
	sniffed  bool
	sniff    blobSpace // the encoding the head announces
	sniffBad bool      // it announced one the body does not decode with
	// probed says probeRaw read the (unverified) head; probeRaw that it
	// had no magic number. Only Size uses them.
	probed, probeRaw bool
	dec              [blobSpaces]blobDecInfo
	// stored is the stored body's length, when storedEnd learned it
	// (0: not learned; kept in memory only, a ranged read tells it).
	stored int64
}

type blobDecInfo struct {
	known bool
	size  int64
	sum   layout.Digest // SHA-256 of the decoded body
}

// shapeLocked returns d's shape, creating it.
func (c *Cache) shapeLocked(d layout.Digest) *blobShape {
	sh, ok := c.shapes.Get(d)
	if !ok {
		sh = &blobShape{}
		c.shapes.Add(d, sh)
	}
	return sh
}

func (c *Cache) decInfo(d layout.Digest, space blobSpace) (blobDecInfo, bool) {
	c.mu.Lock()
	sh, ok := c.shapes.Get(d)
	var info blobDecInfo
	if ok {
		info = sh.dec[space]
	}
	c.mu.Unlock()
	if info.known {
		return info, true
	}
	if !ok && c.loadShape(d) {
		return c.decInfo(d, space)
	}
	return blobDecInfo{}, false
}

// loadShape fills d's shape from the disk cache's info record, if there is
// one; it reports whether it found one.
func (c *Cache) loadShape(d layout.Digest) bool {
	if c.disk == nil || !c.disk.enabled() {
		return false
	}
	rec, ok := c.disk.readInfo(d)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sh := c.shapeLocked(d)
	if !sh.sniffed && rec.sniffed {
		sh.sniffed, sh.sniff, sh.sniffBad = true, rec.sniff, rec.sniffBad
	}
	for s := blobGzip; s < blobSpaces; s++ {
		if !sh.dec[s].known && rec.dec[s].known {
			sh.dec[s] = rec.dec[s]
		}
	}
	return true
}

// persistShape writes d's shape to the disk cache.
func (c *Cache) persistShape(d layout.Digest) {
	if c.disk == nil || !c.disk.enabled() {
		return
	}
	c.mu.Lock()
	sh, ok := c.shapes.Peek(d)
	var rec blobShape
	if ok {
		rec = *sh
	}
	c.mu.Unlock()
	if ok {
		c.disk.writeInfo(d, rec)
	}
}
