package blobcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pugmark/pugfs/layout"
)

// Kept objects: the disk tier also keeps the bodies of snapshots and
// manifests for layout.Store (layout.Keeper), which uses one only when a
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
	name := layout.DigestOf([]byte(key))
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

// Keep stores body as the copy of key with stamp st (layout.Keeper). A
// failure only costs a GET later.
func (c *Cache) Keep(key string, st layout.Stamp, body []byte) {
	dc := c.disk
	if dc == nil || len(body) > keptMax || !dc.enabled() {
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
