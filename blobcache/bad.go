package blobcache

// Bad-blob tracking: a body that failed verification or decoding is
// answered with its error for blobBadTTL, without backend reads, so that a
// reader retrying in a loop does not re-download a corrupt object each
// time. The failure is logged once per window.

import (
	"fmt"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// blobBadKey identifies a body of a claimed size in one view: the key of
// remembered failures (blobRaw: the stored bytes are bad; else the
// decoding failed) and of decode flights.
type blobBadKey struct {
	d     layout.Digest
	size  int64
	space blobSpace
}

type blobBad struct {
	until time.Time
	err   error
}

// corrupt reports a mismatch in backend data for the body (d, size): the
// error names the key, is logged once per bad window, and is remembered so
// that readers do not hammer the backend.
func (c *Cache) corrupt(d layout.Digest, size int64, space blobSpace, detail string) error {
	err := fmt.Errorf("%s: %w: %s", layout.BlobKey(d), layout.ErrCorrupt, detail)
	c.markBad(d, size, space, err)
	return err
}

func (c *Cache) markBad(d layout.Digest, size int64, space blobSpace, err error) {
	if space == blobRaw {
		c.st.verifyFailures.Add(1)
	}
	k := blobBadKey{d, size, space}
	now := c.now()
	c.mu.Lock()
	old, had := c.bad[k]
	fresh := !had || !now.Before(old.until)
	if len(c.bad) >= blobMaxBad {
		for bk, b := range c.bad {
			if !now.Before(b.until) || len(c.bad) >= blobMaxBad {
				delete(c.bad, bk)
			}
		}
	}
	c.bad[k] = blobBad{until: now.Add(blobBadTTL), err: err}
	c.mu.Unlock()
	if fresh {
		msg := "cache: blob failed verification; reads fail with EIO"
		if space != blobRaw {
			msg = "cache: blob does not decode; reads fail with EIO"
		}
		c.log.Error(msg, "key", layout.BlobKey(d), "encoding", space.encoding(), "err", err)
	}
}

// badErr returns the remembered failure of (d, size) in space, if any.
func (c *Cache) badErr(d layout.Digest, size int64, space blobSpace) error {
	k := blobBadKey{d, size, space}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.bad[k]
	if !ok {
		return nil
	}
	if !c.now().Before(b.until) {
		delete(c.bad, k)
		return nil
	}
	return b.err
}
