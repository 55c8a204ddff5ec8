package fsck

import (
	"context"
	"crypto/sha256"
	"io"
	"sort"
	"strconv"
	"strings"

	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/layout"
)

// checkBlobs reads every blob once: headers (§3 Cache-Control, §15
// Content-Encoding) and the body, hashed as it streams, against the digest
// in its key (§3). Skipped entirely with NoBlobs.
func (c *checker) checkBlobs(ctx context.Context) error {
	if c.opts.NoBlobs {
		return nil
	}
	ds := make([]layout.Digest, 0, len(c.blobs))
	for d := range c.blobs {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return c.blobs[ds[i]].key < c.blobs[ds[j]].key })
	return c.parallel(ctx, len(ds), func(i int) { c.checkBlob(ctx, ds[i], c.blobs[ds[i]]) })
}

func (c *checker) checkBlob(ctx context.Context, d layout.Digest, be *blobEntry) {
	key := be.key
	var attrs = struct {
		cc, enc string
		meta    bool
	}{}
	err := retry(ctx, func() error {
		a, err := c.b.Attributes(ctx, key)
		if err != nil {
			return err
		}
		attrs.cc, attrs.enc, attrs.meta = a.CacheControl, a.ContentEncoding, hasMetadata(a)
		return nil
	})
	if err != nil {
		c.readFailed(ctx, key, err)
		return
	}
	if !attrs.meta {
		c.warnf("§2.3", key, "blob has no stored metadata (a bucket copied without it?); its headers cannot be checked")
	} else if attrs.cc == "" {
		c.warnf("§16", key, "blob has no Cache-Control; want %q", layout.CacheImmutable)
	} else if !immutableCC(attrs.cc) {
		c.errorf("§16", key, "blob has Cache-Control %q; §3 wants max-age=<long>, immutable", attrs.cc)
	}
	var head [4]byte
	var n int64
	var decErr error
	h := sha256.New()
	err = retry(ctx, func() error {
		h.Reset()
		n = 0
		r, err := c.b.NewReader(ctx, key, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		// An encoding, the object's or else the one its first bytes
		// announce (a descriptor may declare it), is decoded in the same
		// pass: a body cut short still matches its digest (the digest
		// names the stored bytes) and no reader can decode it.
		m, err := io.ReadFull(r, head[:])
		n += int64(m)
		enc := attrs.enc
		if enc == layout.EncodingNone {
			enc = layout.Sniff(head[:m])
		}
		var w io.Writer = h
		var dc *decodeCheck
		if enc == layout.EncodingGzip || enc == layout.EncodingZstd {
			dc = newDecodeCheck(enc)
			w = io.MultiWriter(h, dc)
		}
		w.Write(head[:m])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = nil // shorter than the head: all of it
		} else if err == nil {
			var k int64
			k, err = io.Copy(w, r)
			n += k
		}
		if dc != nil {
			decErr = dc.Close()
		}
		return err
	})
	c.nByte.Add(n)
	if err != nil {
		c.readFailed(ctx, key, err)
		return
	}
	c.nChecked.Add(1)
	c.stats.blobsRead.Add(1)
	be.read = true
	be.sniff = layout.Sniff(head[:min(int(n), 4)])
	be.objEnc, be.decodeErr = attrs.enc, decErr
	var got layout.Digest
	copy(got[:], h.Sum(nil))
	if got != d {
		c.errorf("§3", key, "blob body does not match its key: it hashes to %s (bit rot or a bad write)", got)
	}
	if n != be.size {
		c.errorf("§3", key, "blob read %d bytes but was listed with %d (changed during the check?)", n, be.size)
	}
	switch attrs.enc {
	case layout.EncodingNone, "identity":
	case layout.EncodingGzip, layout.EncodingZstd:
		if be.sniff != attrs.enc {
			c.errorf("§15", key, "blob has Content-Encoding %s but its body does not start with the %s magic", attrs.enc, attrs.enc)
		} else if decErr != nil && got == d {
			c.errorf("§15", key, "blob has Content-Encoding %s but its body does not decode (cut short?): %v", attrs.enc, decErr)
		}
	default:
		c.errorf("§15", key, "blob has Content-Encoding %q; want empty, gzip or zstd", attrs.enc)
	}
}

func (c *checker) readFailed(ctx context.Context, key string, err error) {
	switch {
	case gcerrors.Code(err) == gcerrors.NotFound:
		c.errorf("read", key, "listed but gone when read (deleted during the check?)")
	case ctx.Err() == nil:
		c.errorf("read", key, "cannot read: %v", oneLine(err))
	}
}

// immutableCC reports whether a Cache-Control value has a positive
// max-age and the immutable directive (§3: "max-age=<long>, immutable").
func immutableCC(v string) bool {
	var age, imm bool
	for _, p := range strings.Split(v, ",") {
		p = strings.ToLower(strings.TrimSpace(p))
		if p == "immutable" {
			imm = true
		}
		if s, ok := strings.CutPrefix(p, "max-age="); ok {
			n, err := strconv.ParseInt(s, 10, 64)
			age = err == nil && n > 0
		}
	}
	return age && imm
}

// checkOrphanBlobs reports blobs nothing references: harmless (blobs are
// shared and never deleted by pugmark), but worth knowing.
func (c *checker) checkOrphanBlobs() {
	var n int
	var first string
	for _, be := range c.blobs {
		if be.refs.Load() == 0 {
			n++
			if first == "" || be.key < first {
				first = be.key
			}
		}
	}
	if n > 0 {
		c.infof("§3", first, "%d blob(s) are referenced by no descriptor or memory record (this is the first); harmless, pugmark never deletes blobs", n)
	}
}

// decodeCheck decodes what is written to it as a body of one encoding,
// on a goroutine, and says at Close whether it decoded to its end.
type decodeCheck struct {
	pw   *io.PipeWriter
	done chan error
}

func newDecodeCheck(enc string) *decodeCheck {
	pr, pw := io.Pipe()
	d := &decodeCheck{pw: pw, done: make(chan error, 1)}
	go func() {
		dec, err := layout.NewDecoder(pr, enc)
		if err == nil {
			_, err = io.Copy(io.Discard, dec)
			dec.Close()
		}
		io.Copy(io.Discard, pr) // what the decoder left: writes never block
		d.done <- err
	}()
	return d
}

func (d *decodeCheck) Write(p []byte) (int, error) { return d.pw.Write(p) }

// Close ends the body and returns the decoder's error, if any.
func (d *decodeCheck) Close() error {
	d.pw.Close()
	return <-d.done
}
