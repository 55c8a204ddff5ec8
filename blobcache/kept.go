package blobcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Kept objects: the disk tier also keeps the bodies of snapshots,
// manifests and memory versions for layout.Store (layout.Keeper), which uses one only when a
// listing has shown the object with the stamp it was kept with. They live
// under kept/<2 hex>/<64 hex>, named by the SHA-256 of the object key,
// beside the blobs and within the same bound; each file is
//
//	pugfs-kept 1\n<key>\n<size> <mod>\n<SHA-256 of the body, hex>\n<body>
//
// so that a damaged, torn or foreign file is detected (and removed)
// rather than believed.

const (
	keptMagic = "pugfs-kept 1"
	// keptMax is the largest body kept: snapshots and manifests are a
	// few KiB; one of megabytes costs a GET a mount, not a disk copy.
	keptMax = 8 << 20
)

var _ layout.Keeper = (*Cache)(nil)

// Kept returns the body kept for key under stamp st (layout.Keeper).
func (c *Cache) Kept(key string, st layout.Stamp) ([]byte, bool) {
	dc := c.disk
	if dc == nil {
		return nil, false
	}
	c.busy()
	if it, ok := c.pendingKept(key); ok {
		if it.st != st {
			return nil, false
		}
		c.st.keptHits.Add(1)
		return it.body, true
	}
	name := layout.DigestOf([]byte(key))
	if !dc.keptSeen.Load() {
		// A cache directory with no copies (a first mount): asked for
		// every snapshot the mount reads, an open that fails would
		// cost more than the lookup. Once there are copies, any may be
		// there (another mount sharing the directory may have written
		// it since this one's scan).
		return nil, false
	}
	f, ok := dc.openFile(diskKept, name, -1)
	if !ok {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, keptMax+int64(len(key))+256))
	if err != nil {
		return nil, false
	}
	gotKey, gotSt, body, ok := keptDecode(data)
	if !ok || gotKey != key {
		dc.log.Warn("cache: disk cache copy of a snapshot or manifest is damaged; removing it", "dir", dc.dir, "key", key)
		dc.drop(diskKept, name)
		return nil, false
	}
	if gotSt != st {
		return nil, false // the bucket's object is another one now; Keep replaces it
	}
	c.st.keptHits.Add(1)
	return body, true
}

// Has reports whether a copy of key is kept, whatever its stamp
// (layout.Keeper): one lookup in the queue or one stat.
func (c *Cache) Has(key string) bool {
	dc := c.disk
	if dc == nil {
		return false
	}
	if _, ok := c.pendingKept(key); ok {
		return true
	}
	if !dc.keptSeen.Load() {
		return false
	}
	h := layout.DigestOf([]byte(key)).Hex()
	fi, err := dc.root.Lstat(path.Join(diskKept, h[:2], h))
	return err == nil && fi.Mode().IsRegular()
}

// keptQueue holds the copies offered to Keep until the cache has been
// idle for keptIdle (no copy offered or asked for, no blob read, size or
// prefetch: Cache.busy) or holds keptQueueMax bytes, and then writes
// them. Each is a file to create, write and rename: some 100 µs
// of CPU, 0.1-0.2 s for the 2,000 snapshots of a cold ls -l sessions/ on
// a machine of two cores, which the command itself should not wait for;
// written after it, they cost the next mount nothing. Copies not yet
// written are lost with the process (a GET later) and written by Close.
type keptQueue struct {
	// flushMu serialises flushes; taken before mu.
	flushMu  sync.Mutex
	finished bool // GUARDED_BY(flushMu): Close flushed; nothing is written after
	// mu guards the fields below (GUARDED_BY(mu)); never held across I/O.
	mu      sync.Mutex
	pending map[string]keptItem
	bytes   int64
	timer   *time.Timer
	closed  bool
}

type keptItem struct {
	st   layout.Stamp
	body []byte
}

const (
	keptIdle     = time.Second
	keptQueueMax = 16 << 20
)

// Keep offers body as the copy of key with stamp st (layout.Keeper); it
// is written to disk a moment later (keptQueue). A failure only costs a
// GET later.
func (c *Cache) Keep(key string, st layout.Stamp, body []byte) {
	dc := c.disk
	if dc == nil || len(body) > keptMax || !dc.enabled() {
		return
	}
	c.busy()
	q := &c.kept
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.pending == nil {
		q.pending = make(map[string]keptItem)
	}
	first := len(q.pending) == 0
	if old, ok := q.pending[key]; ok {
		q.bytes -= int64(len(old.body))
	}
	q.pending[key] = keptItem{st, bytes.Clone(body)}
	q.bytes += int64(len(body))
	switch {
	case q.bytes >= keptQueueMax:
		if q.timer != nil {
			q.timer.Stop()
		}
		go c.flushKeptIdle(true)
	case first:
		// Armed by the first copy of each batch: armed once per
		// process, the copies after the first flush waited for 16 MiB
		// more of them or the unmount, and a crash lost them.
		if q.timer == nil {
			q.timer = time.AfterFunc(keptIdle, func() { c.flushKeptIdle(false) })
		} else {
			q.timer.Reset(keptIdle)
		}
	}
}

// busy records that the cache is serving something now: kept copies wait
// until it has not been for keptIdle.
func (c *Cache) busy() { c.active.Store(time.Now().UnixNano()) }

// flushKeptIdle writes the copies Keep holds once the cache has been idle
// for keptIdle (at once with now), else waits again for the rest of it.
func (c *Cache) flushKeptIdle(now bool) {
	if since := time.Duration(time.Now().UnixNano() - c.active.Load()); !now && since < keptIdle {
		c.kept.mu.Lock()
		if !c.kept.closed {
			c.kept.timer.Reset(keptIdle - since)
		}
		c.kept.mu.Unlock()
		return
	}
	c.flushKept()
}

// pendingKept returns the copy of key that Keep holds, not yet written.
func (c *Cache) pendingKept(key string) (keptItem, bool) {
	c.kept.mu.Lock()
	defer c.kept.mu.Unlock()
	it, ok := c.kept.pending[key]
	return it, ok
}

// flushKept writes the copies Keep holds.
func (c *Cache) flushKept() {
	q := &c.kept
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	if !q.finished {
		c.writeAllKept()
	}
}

// closeKept writes what Keep holds and stops keeping (Close, before the
// disk tier closes).
func (c *Cache) closeKept() {
	q := &c.kept
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	c.writeAllKept()
	q.finished = true
}

// writeAllKept writes the pending copies; the caller holds flushMu.
func (c *Cache) writeAllKept() {
	q := &c.kept
	q.mu.Lock()
	items := q.pending
	q.pending, q.bytes = nil, 0
	q.mu.Unlock()
	for key, it := range items {
		c.writeKept(key, it.st, it.body)
	}
}

// writeKept writes one copy to the disk tier.
func (c *Cache) writeKept(key string, st layout.Stamp, body []byte) {
	dc := c.disk
	if !dc.enabled() {
		return
	}
	name := layout.DigestOf([]byte(key)).Hex()
	t, err := dc.createFor(diskKept, name)
	if err != nil {
		return
	}
	if err := t.write(keptEncode(key, st, body)); err != nil {
		t.abort()
		return
	}
	t.done = true
	t.f.Close()
	rel, err := dc.install(t.rel, diskKept, name)
	if err != nil {
		dc.fail("rename", rel, err)
		_ = dc.root.Remove(t.rel)
		return
	}
	dc.added(rel, t.n)
	dc.keptSeen.Store(true)
	c.st.keptWrites.Add(1)
}

func keptEncode(key string, st layout.Stamp, body []byte) []byte {
	sum := sha256.Sum256(body)
	var b bytes.Buffer
	b.Grow(len(key) + len(body) + 128)
	fmt.Fprintf(&b, "%s\n%s\n%d %d\n%s\n", keptMagic, key, st.Size, st.Mod, hex.EncodeToString(sum[:]))
	b.Write(body)
	return b.Bytes()
}

// keptDecode parses a file of keptEncode, checking the body's hash.
func keptDecode(data []byte) (key string, st layout.Stamp, body []byte, ok bool) {
	var lines [4]string
	rest := data
	for i := range lines {
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return "", st, nil, false
		}
		lines[i], rest = string(rest[:j]), rest[j+1:]
	}
	size, mod, found := strings.Cut(lines[2], " ")
	n, err1 := strconv.ParseInt(size, 10, 64)
	m, err2 := strconv.ParseInt(mod, 10, 64)
	sum := sha256.Sum256(rest)
	if lines[0] != keptMagic || !found || err1 != nil || err2 != nil || lines[3] != hex.EncodeToString(sum[:]) {
		return "", st, nil, false
	}
	return lines[1], layout.Stamp{Size: n, Mod: m}, rest, true
}
