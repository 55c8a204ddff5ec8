package blobcache

// The memory budget: the chunk LRU, the bytes reserved by stagers, and the
// pool of chunk buffers. Cached plus reserved bytes stay within
// Options.MemBytes; everything here that ends in Locked runs under c.mu.

// lookup returns a cached chunk, counting the hit or miss.
func (c *Cache) lookup(k blobChunkKey) ([]byte, bool) {
	c.mu.Lock()
	buf, ok := c.chunks.Get(k)
	c.mu.Unlock()
	if ok {
		c.st.hits.Add(1)
	} else {
		c.st.misses.Add(1)
	}
	return buf, ok
}

// peek returns a cached chunk without counting (re-checks inside flights).
func (c *Cache) peek(k blobChunkKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chunks.Get(k)
}

// addChunkLocked caches buf (taking ownership), evicting the least recently
// used chunks to stay within the budget. A chunk that cannot fit is not
// cached; its caller still gets it.
func (c *Cache) addChunkLocked(k blobChunkKey, buf []byte) {
	n := int64(len(buf))
	if c.closed || c.chunks.Contains(k) || !c.makeRoomLocked(n) {
		return
	}
	c.chunks.Add(k, buf)
	c.memBytes += n
	c.notePeakLocked()
}

// makeRoomLocked evicts until n more bytes fit in the budget.
func (c *Cache) makeRoomLocked(n int64) bool {
	for c.memBytes+c.reserved+n > c.opts.MemBytes {
		_, old, ok := c.chunks.RemoveOldest()
		if !ok {
			return false
		}
		c.memBytes -= int64(len(old))
		c.st.evictions.Add(1)
	}
	return true
}

// reserveLocked sets n bytes of the budget aside for a staged chunk.
func (c *Cache) reserveLocked(n int64) bool {
	if c.closed || !c.makeRoomLocked(n) {
		return false
	}
	c.reserved += n
	c.notePeakLocked()
	return true
}

func (c *Cache) notePeakLocked() {
	if cur := c.memBytes + c.reserved; cur > c.st.memPeak.Load() {
		c.st.memPeak.Store(cur)
	}
}

// blobFreeBufs bounds the free chunk buffers kept for reuse. A pass
// cycles buffers through its window: reusing them, rather than handing
// them to the collector (as a sync.Pool does at every GC, which a soft
// memory limit makes frequent), saves a fresh allocation, its zeroing and
// a page fault per 4 KiB for every chunk. The kept buffers sit outside
// MemBytes: at most this many chunks.
const blobFreeBufs = 16

// getBuf returns a buffer of n bytes, reused when it is a whole chunk.
func (c *Cache) getBuf(n int64) []byte {
	if n == c.cs {
		select {
		case b := <-c.free:
			return b[:n]
		default:
		}
	}
	return make([]byte, n)
}

// putBuf returns a buffer that nobody references any more for reuse.
func (c *Cache) putBuf(b []byte) {
	if int64(cap(b)) == c.cs {
		select {
		case c.free <- b[:c.cs]:
		default:
		}
	}
}

// blobRing recycles the chunk buffers of one verify pass: a pass cycles
// through as many buffers as its window holds, and reusing them (rather
// than a bounded free list shared by everything) keeps a pass from
// allocating, zeroing and faulting in a fresh buffer for every chunk,
// page faults being dear on a virtual machine. The buffers count in the
// pass's window, which is reserved from MemBytes; when the pass ends they
// go to the shared free list or to the collector.
type blobRing struct {
	c    *Cache
	free chan []byte
}

func (c *Cache) newRing(chunks int64) *blobRing {
	return &blobRing{c: c, free: make(chan []byte, chunks)}
}

// get returns a buffer of n bytes.
func (r *blobRing) get(n int64) []byte {
	if n == r.c.cs {
		select {
		case b := <-r.free:
			return b[:n]
		default:
		}
	}
	return r.c.getBuf(n)
}

// put takes a buffer back (nil is nothing).
func (r *blobRing) put(b []byte) {
	if b == nil {
		return
	}
	if int64(cap(b)) == r.c.cs {
		select {
		case r.free <- b[:r.c.cs]:
			return
		default:
		}
	}
	r.c.putBuf(b)
}

// close hands what the ring holds to the shared free list.
func (r *blobRing) close() {
	for {
		select {
		case b := <-r.free:
			r.c.putBuf(b)
		default:
			return
		}
	}
}
