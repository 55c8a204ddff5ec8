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

// getBuf returns a buffer of n bytes, pooled when it is a whole chunk.
func (c *Cache) getBuf(n int64) []byte {
	if n == c.cs {
		if p, ok := c.bufs.Get().(*[]byte); ok {
			return (*p)[:n]
		}
	}
	return make([]byte, n)
}

// putBuf returns a buffer that nobody references any more to the pool.
func (c *Cache) putBuf(b []byte) {
	if int64(cap(b)) == c.cs {
		b = b[:c.cs]
		c.bufs.Put(&b)
	}
}
