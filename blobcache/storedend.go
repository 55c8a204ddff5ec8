package blobcache

// The stored end of a large plain body. stat shows a plain body's size
// from its descriptor, and a tool that archives a file pads a read that
// fails up to the size stat gave: GNU tar writes zeros to it. A
// descriptor of another writer's claiming 2^62 bytes for a 5-byte blob
// made `tar c` and `rsync -a` of the whole mount run for ever (audit 24).
// From endProbeFrom bytes on, Size checks the claim once against the
// length of the stored body, which the answer to a one-byte ranged read
// says; below it, what a lie costs such a tool is seconds.

import (
	"context"
	"errors"
	"fmt"

	"github.com/pugmark/pugfs/layout"
)

// endProbeFrom is the size from which a plain body's stored length is
// checked before Size answers.
const endProbeFrom = 1 << 30

// storedEnd checks that the stored body of d, plain, is as long as d
// says when d claims endProbeFrom bytes or more. It returns the error of
// a body stored shorter (remembered, as any failed verification) or
// missing; nil when the body is long enough, and when the bucket did not
// answer (a read of the file says why).
func (c *Cache) storedEnd(ctx context.Context, d *layout.Descriptor) error {
	if d.Size < c.endFrom || d.InlineOK() || c.endProven(d) {
		return nil
	}
	if err := c.badErr(d.Digest, d.Size, blobRaw); err != nil {
		return err
	}
	c.st.backendReads.Add(1)
	c.st.inFlight.Add(1)
	rc, err := c.src.OpenBlob(ctx, d.Digest, 0, 1)
	c.st.inFlight.Add(-1)
	if errors.Is(err, layout.ErrBlobMissing) {
		return fmt.Errorf("cache: descriptor %q: %w", d.Name, err)
	}
	if err != nil {
		return nil
	}
	rc.Close()
	sized, ok := rc.(interface{ Size() int64 })
	if !ok {
		return nil // a Source that does not say
	}
	n := sized.Size()
	if n < d.Size {
		return c.corrupt(d.Digest, d.Size, blobRaw, fmt.Sprintf("stored body is %d bytes, descriptor size is %d", n, d.Size))
	}
	c.mu.Lock()
	c.shapeLocked(d.Digest).stored = n
	c.mu.Unlock()
	return nil
}

// endProven reports whether the stored body of d is known to be as long
// as d says: verified at that size, or its length learned (storedEnd).
func (c *Cache) endProven(d *layout.Descriptor) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.metas.Peek(d.Digest); ok && m.size == d.Size {
		return true
	}
	sh, ok := c.shapes.Peek(d.Digest)
	return ok && sh.stored >= d.Size
}
