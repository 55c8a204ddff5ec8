package blobcache

// The stager: chunks fetched by a verify pass wait here, with their share
// of the memory budget reserved, until the whole digest matched; only then
// are they published to the chunk LRU, so no unverified byte is cached.

// blobStager holds chunks of a pass, with their share of the budget
// reserved, until the pass proved them good.
type blobStager struct {
	c      *Cache
	lo, hi int64 // chunk indexes [lo, hi) are wanted
	keys   []blobChunkKey
	bufs   [][]byte
	bytes  int64
}

func (c *Cache) newStager(want int64) *blobStager {
	return &blobStager{c: c, lo: want, hi: want + c.stageChunks}
}

func (s *blobStager) wants(idx int64) bool { return s != nil && idx >= s.lo && idx < s.hi }

// offer stages buf if its chunk is wanted and the budget allows; it reports
// whether it took ownership of buf.
func (s *blobStager) offer(k blobChunkKey, buf []byte) bool {
	if !s.wants(k.idx) {
		return false
	}
	return s.take(k, buf)
}

// take stages buf regardless of the wanted window.
func (s *blobStager) take(k blobChunkKey, buf []byte) bool {
	s.c.mu.Lock()
	ok := s.c.reserveLocked(int64(len(buf)))
	s.c.mu.Unlock()
	if !ok {
		return false
	}
	s.keys = append(s.keys, k)
	s.bufs = append(s.bufs, buf)
	s.bytes += int64(len(buf))
	return true
}

// publishLocked moves the staged chunks into the LRU and returns the one
// with index want, if staged. A nil stager staged nothing.
func (s *blobStager) publishLocked(want int64) []byte {
	if s == nil {
		return nil
	}
	var got []byte
	s.c.reserved -= s.bytes
	for i, k := range s.keys {
		if k.idx == want {
			got = s.bufs[i]
		}
		s.c.addChunkLocked(k, s.bufs[i])
	}
	s.keys, s.bufs, s.bytes = nil, nil, 0
	return got
}

// abort releases the reservations of whatever is still staged.
func (s *blobStager) abort() {
	if s == nil || s.bytes == 0 {
		return
	}
	s.c.mu.Lock()
	s.c.reserved -= s.bytes
	s.c.mu.Unlock()
	s.keys, s.bufs, s.bytes = nil, nil, 0
}
