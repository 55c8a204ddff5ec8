package blobcache

// The stored end of a large plain body. stat shows a plain body's size
// from its descriptor, and a tool that archives a file pads a read that
// fails up to the size stat gave: GNU tar writes zeros to it. A
// descriptor of another writer's claiming 2^62 bytes for a 5-byte blob
// made `tar c` and `rsync -a` of the whole mount run for ever (audit 24).
// From endProbeFrom bytes on, Size checks the claim once against the
// length of the stored body: known when the body was verified, when the
// disk tier holds a copy of that length (kept by an earlier mount, or
// adopted from this mount's upload), or else from the answer to a
// one-byte ranged read. Below it, what a lie costs such a tool is seconds.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pugmark/pugfs/layout"
)

const (
	// endProbeFrom is the size from which a plain body's stored length
	// is checked before Size answers.
	endProbeFrom = 1 << 30
	// endProbePatience bounds the one-byte read: with the bucket down,
	// stat shows the size claimed after this, not after every retry of
	// the store (minutes).
	endProbePatience = 5 * time.Second
)

// storedEnd checks that the stored body of d, plain, is as long as d
// says when d claims endProbeFrom bytes or more. It returns the error of
// a body stored shorter (remembered, as any failed verification) or
// missing; nil when the body is long enough, and when the bucket did not
// answer (a read of the file says why).
func (c *Cache) storedEnd(ctx context.Context, d *layout.Descriptor) error {
	if d.Size < c.endFrom || d.InlineOK() {
		return nil
	}
	if n := c.storedLen(d); n >= d.Size {
		return nil
	} else if n > 0 {
		return c.shortBody(d, n)
	}
	if err := c.badErr(d.Digest, d.Size, blobRaw); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, endProbePatience)
	defer cancel()
	c.st.backendReads.Add(1)
	c.st.inFlight.Add(1)
	rc, err := c.src.OpenBlob(pctx, d.Digest, 0, 1)
	c.st.inFlight.Add(-1)
	if errors.Is(err, layout.ErrBlobMissing) {
		return fmt.Errorf("cache: descriptor %q: %w", d.Name, err)
	}
	if err != nil {
		return nil
	}
	n := c.learnStored(d.Digest, rc)
	rc.Close()
	if n > 0 && n < d.Size {
		return c.shortBody(d, n)
	}
	return nil
}

// shortBody is the error of d, whose body is stored as n bytes.
func (c *Cache) shortBody(d *layout.Descriptor, n int64) error {
	return c.corrupt(d.Digest, d.Size, blobRaw, fmt.Sprintf("stored body is %d bytes, descriptor size is %d", n, d.Size))
}

// learnStored remembers the stored length of digest dg that rc, a ranged
// read of it, says (layout.Store's readers do), and returns it; 0 when
// rc does not say.
func (c *Cache) learnStored(dg layout.Digest, rc io.Reader) int64 {
	sized, ok := rc.(interface{ Size() int64 })
	if !ok {
		return 0
	}
	n := sized.Size()
	if n > 0 {
		c.mu.Lock()
		c.shapeLocked(dg).stored = n
		c.mu.Unlock()
	}
	return n
}

// storedLen returns the stored length of d's body as far as it is known
// without a request (0: not known): the size it was verified at, the
// length a ranged read said (learnStored), or d.Size when the disk tier
// holds a copy of that size (its bytes are verified when read; a copy of
// another size says nothing, a torn write may have cut it).
func (c *Cache) storedLen(d *layout.Descriptor) int64 {
	c.mu.Lock()
	if m, ok := c.metas.Peek(d.Digest); ok {
		c.mu.Unlock()
		return m.size
	}
	sh, ok := c.shapes.Peek(d.Digest)
	stored := int64(0)
	if ok {
		stored = sh.stored
	}
	c.mu.Unlock()
	if stored > 0 {
		return stored
	}
	if c.disk != nil {
		if f, ok := c.disk.openEntry(d.Digest, -1); ok {
			fi, err := f.Stat()
			f.Close()
			if err == nil && fi.Size() == d.Size {
				return d.Size
			}
		}
	}
	return 0
}
