package blobcache

// Views and sniffing: how a descriptor's body is shown (decoded with its
// declared content-encoding, or as stored), and the §15 sniffing of lost
// encodings when Options.SniffEncoding is on.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pugmark/pugfs/layout"
)

// viewOf is blobViewOf under the cache's sniffing option.
func (c *Cache) viewOf(d *layout.Descriptor) (blobSpace, bool, error) {
	return blobViewOf(d, c.opts.SniffEncoding)
}

// blobViewOf says how d's body is shown: decoded with its declared
// content-encoding, or as stored, after sniffing for a lost encoding
// (§15) only when sniffing is on.
func blobViewOf(d *layout.Descriptor, sniffing bool) (space blobSpace, sniff bool, err error) {
	switch enc := strings.ToLower(strings.TrimSpace(d.ContentEncoding)); enc {
	case "":
		return blobRaw, sniffing && blobSniffCandidate(d), nil
	case "identity":
		return blobRaw, false, nil
	case "gzip", "x-gzip":
		return blobGzip, false, nil
	case "zstd":
		return blobZstd, false, nil
	default:
		return 0, false, fmt.Errorf("%s: %w: unsupported content-encoding %q", layout.BlobKey(d.Digest), layout.ErrCorrupt, enc)
	}
}

// blobSniffCandidate reports whether a body without content-encoding should
// be sniffed: only bodies that ought to be text, so that binary formats
// starting with the magic bytes by chance, and files that are meant to be
// compressed archives (.gz, .zst), are shown as stored.
func blobSniffCandidate(d *layout.Descriptor) bool {
	name := strings.ToLower(d.Name)
	for _, ext := range []string{".gz", ".tgz", ".zst", ".zstd"} {
		if strings.HasSuffix(name, ext) {
			return false
		}
	}
	ct := strings.ToLower(strings.TrimSpace(d.ContentType))
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	switch {
	case ct == "", strings.HasPrefix(ct, "text/"), ct == "application/json", ct == "application/x-ndjson",
		strings.HasSuffix(ct, "+json"), strings.HasSuffix(ct, "+xml"):
		return true
	}
	return false
}

// resolveSniff decides whether a sniff candidate is shown decoded: from
// what is already known, from inline data for free, else from the head of
// a verify pass (which then decodes in the same stream).
func (c *Cache) resolveSniff(ctx context.Context, d *layout.Descriptor, want int64) (blobSpace, error) {
	if s, ok := c.knownSniff(d.Digest); ok {
		return s, nil
	}
	if d.InlineOK() {
		s := blobSpaceOf(layout.Sniff(d.Data))
		c.recordSniff(d.Digest, d.Data, false)
		return s, nil
	}
	if c.loadShape(d.Digest) {
		if s, ok := c.knownSniff(d.Digest); ok {
			return s, nil
		}
	}
	meta, pass, err := c.verified(ctx, d.Digest, d.Size, blobPassMode{sniff: true}, want)
	if err != nil {
		return 0, err
	}
	c.recordSniff(d.Digest, meta.head, true)
	if pass != nil && pass.decSpace != blobRaw && pass.decErr != nil {
		// The pass decoded what the head announced and failed: settle it
		// now rather than fetch the body again to fail again.
		var de *blobDecodeError
		switch {
		case errors.As(pass.decErr, &de):
			c.mu.Lock()
			c.shapeLocked(d.Digest).sniffBad = true
			c.mu.Unlock()
			c.persistShape(d.Digest)
		case errors.Is(pass.decErr, layout.ErrTooLarge):
			c.markBad(d.Digest, d.Size, pass.decSpace, pass.decErr)
		}
	}
	s, _ := c.knownSniff(d.Digest)
	return s, nil
}

// blobProbeLen is how many head bytes probeRaw reads: enough for every
// magic number Sniff knows.
const blobProbeLen = 4

// probeRaw reports, for Size, whether a body not sniffed yet starts with
// no magic number, so that it is shown as stored and its size is the
// descriptor's. It reads the first bytes with one small ranged read and
// does not verify them: stat(2) of a large text file must not download
// the whole body. Reads still verify everything, so a body that does not
// match its digest is an error then, never bytes. When the answer is not
// "as stored" (a magic number, an error) the caller takes the verified
// way, which a decoded size needs anyway.
func (c *Cache) probeRaw(ctx context.Context, d *layout.Descriptor) bool {
	if d.Size == 0 {
		return true // nothing to sniff (and a 0-byte range cannot be asked for)
	}
	if d.InlineOK() {
		return false // resolveSniff sniffs the inline bytes, verified
	}
	if _, ok := c.knownSniff(d.Digest); ok {
		return false
	}
	c.mu.Lock()
	sh, ok := c.shapes.Get(d.Digest)
	probed, raw := ok && sh.probed, ok && sh.probeRaw
	c.mu.Unlock()
	if probed {
		return raw
	}
	if c.loadShape(d.Digest) {
		if _, ok := c.knownSniff(d.Digest); ok {
			return false
		}
	}
	n := min(int64(blobProbeLen), d.Size)
	c.st.backendReads.Add(1)
	c.st.inFlight.Add(1)
	rc, err := c.src.OpenBlob(ctx, d.Digest, 0, n)
	var head []byte
	if err == nil {
		head = make([]byte, n)
		var k int
		k, err = io.ReadFull(rc, head)
		c.st.bytesFetched.Add(int64(k))
		if d.Size >= c.endFrom {
			c.learnStored(d.Digest, rc) // the answer says it: storedEnd asks nothing more
		}
		rc.Close()
	}
	c.st.inFlight.Add(-1)
	if err != nil {
		return false
	}
	raw = layout.Sniff(head) == layout.EncodingNone
	c.mu.Lock()
	sh = c.shapeLocked(d.Digest)
	sh.probed, sh.probeRaw = true, raw
	c.mu.Unlock()
	return raw
}

func (c *Cache) knownSniff(d layout.Digest) (blobSpace, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sh, ok := c.shapes.Get(d)
	if !ok || !sh.sniffed {
		return 0, false
	}
	if sh.sniffBad {
		return blobRaw, true
	}
	return sh.sniff, true
}

// recordSniff remembers what head announces; persist writes it to the disk
// cache too, so that a remount can show sizes without a fetch.
func (c *Cache) recordSniff(d layout.Digest, head []byte, persist bool) {
	c.mu.Lock()
	sh := c.shapeLocked(d)
	changed := !sh.sniffed
	sh.sniffed = true
	sh.sniff = blobSpaceOf(layout.Sniff(head))
	c.mu.Unlock()
	if persist && changed {
		c.persistShape(d)
	}
}
