package blobcache

import (
	"context"
	"fmt"
	"os"

	"github.com/pugmark/pugfs/layout"
)

// The verified files: disk copies of stored bodies that this process
// hashed whole, because a verify pass wrote them (the bytes it hashed are
// the bytes it wrote) or read them, kept open. Reads of such a blob are
// served straight from its file, without a chunk cache in memory and
// without checking each chunk again: after the pass the file is trusted
// as the chunks in memory are, so the bytes were hashed once. What the
// trust rests on: the file is private to the mount's user (disk.go), it
// is never written after its pass, and the open descriptor keeps the
// inode that was hashed even if the name is replaced. A file no longer
// open here is opened again by name and its chunks are checked against
// their proofs (diskChunk). The same trust is what Pin hands out, for a
// zero-copy read or FUSE passthrough: reads through the kernel are not
// checked again either.
//
// Bounded (blobMaxOpenFiles): an eviction closes the file once nobody has
// it pinned, after c.mu is released.

// blobMaxOpenFiles bounds the verified files kept open (pinned files
// beyond it stay open until unpinned).
const blobMaxOpenFiles = 64

// blobFile is one verified file. pins and gone are guarded by Cache.mu.
type blobFile struct {
	f    *os.File
	size int64
	pins int
	gone bool // left c.files: close at the last unpin
}

// addVerifiedLocked keeps f as the verified file of (d, size), taking
// ownership of it.
func (c *Cache) addVerifiedLocked(d layout.Digest, size int64, f *os.File) {
	if c.closed {
		c.closeQ = append(c.closeQ, f)
		return
	}
	if old, ok := c.files.Peek(d); ok && old.f != f {
		c.files.Remove(d) // retires old (evictFileLocked)
	}
	c.files.Add(d, &blobFile{f: f, size: size})
}

// evictFileLocked retires a file that left c.files.
func (c *Cache) evictFileLocked(bf *blobFile) {
	bf.gone = true
	if bf.pins == 0 {
		c.closeQ = append(c.closeQ, bf.f)
	}
}

// pinFile returns the verified file of (d, size), pinned open, if there
// is one; unpin it with unpinFile.
func (c *Cache) pinFile(d layout.Digest, size int64) (*blobFile, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bf, ok := c.files.Get(d)
	if !ok || bf.size != size {
		return nil, false
	}
	bf.pins++
	return bf, true
}

func (c *Cache) unpinFile(bf *blobFile) {
	c.mu.Lock()
	bf.pins--
	if bf.pins == 0 && bf.gone {
		c.closeQ = append(c.closeQ, bf.f)
	}
	c.unlock()
}

// readVerified reads [off, off+len(p)) of a verified body from its file;
// ok is false when there is no usable file (read the chunks instead).
func (c *Cache) readVerified(d layout.Digest, meta *blobMeta, p []byte, off int64) (int, bool) {
	bf, ok := c.pinFile(d, meta.size)
	if !ok {
		return 0, false
	}
	defer c.unpinFile(bf)
	if off >= meta.size {
		return 0, false
	}
	want := min(int64(len(p)), meta.size-off)
	n, err := bf.f.ReadAt(p[:want], off)
	if int64(n) != want {
		c.fileFailed(d, bf, err)
		return 0, false
	}
	c.st.fileReads.Add(1)
	return n, true
}

// verifiedChunk reads chunk idx of a verified body from its file.
func (c *Cache) verifiedChunk(d layout.Digest, meta *blobMeta, idx int64) ([]byte, bool) {
	off := idx * c.cs
	buf := make([]byte, min(c.cs, meta.size-off))
	if _, ok := c.readVerified(d, meta, buf, off); !ok {
		return nil, false
	}
	return buf, true
}

// fileFailed forgets a verified file that could not be read.
func (c *Cache) fileFailed(d layout.Digest, bf *blobFile, err error) {
	c.log.Warn("cache: reading a verified copy failed; reading chunks instead", "key", layout.BlobKey(d), "path", bf.f.Name(), "err", err)
	c.mu.Lock()
	if cur, ok := c.files.Peek(d); ok && cur == bf {
		c.files.Remove(d)
	}
	c.unlock()
}

// Pinned is a verified local copy of a file's content, held open for the
// caller: f may be read (pread, splice, FUSE passthrough of a dup) until
// Release, and must not be closed or written.
type Pinned struct {
	F    *os.File
	Size int64 // the content's size: F's
	c    *Cache
	b    *blobFile
}

// Release gives the file back; it may be closed after this.
func (p *Pinned) Release() {
	if p != nil && p.b != nil {
		p.c.unpinFile(p.b)
		p.b = nil
	}
}

// Pin returns the verified local copy of the content of d, verifying the
// blob first if this process has not (a whole verify pass: the time to
// the first byte of a never-read blob). It is for plain bodies only: the
// stored bytes are what the file shows. It returns nil, with no error,
// when there is no such copy: an encoded (or, with SniffEncoding, maybe
// encoded) body, inline data, no disk cache, or a blob the disk cache
// does not keep; read with ReadAt then.
func (c *Cache) Pin(ctx context.Context, d *layout.Descriptor) (*Pinned, error) {
	if err := c.checkDescriptor(d); err != nil {
		return nil, err
	}
	space, sniff, err := c.viewOf(d)
	if err != nil || space != blobRaw || sniff || d.InlineOK() {
		return nil, err
	}
	return c.PinRaw(ctx, d.Digest, d.Size)
}

// PinRaw is Pin for the stored bytes of a blob (the objects/ view).
func (c *Cache) PinRaw(ctx context.Context, digest layout.Digest, size int64) (*Pinned, error) {
	if c.isClosed() {
		return nil, errBlobClosed
	}
	if !c.CanPinRaw(size) {
		return nil, nil
	}
	if _, _, err := c.verified(ctx, digest, size, blobPassMode{}, 0); err != nil {
		return nil, err
	}
	bf, ok := c.pinFile(digest, size)
	if !ok {
		return nil, nil
	}
	// Checked at each pin (a READ pins): a copy cut short under a running
	// mount was spliced as a short read, and cat got 1,000 bytes of a
	// file stat said had 204,800, with no error (audit 25). A copy
	// changed in place at its length is trusted, as the package doc says.
	if fi, err := bf.f.Stat(); err != nil || fi.Size() != size {
		if err == nil {
			err = fmt.Errorf("the copy is %d bytes, verified at %d", fi.Size(), size)
		}
		c.unpinFile(bf)
		c.fileFailed(digest, bf, err)
		return nil, nil
	}
	return &Pinned{F: bf.f, Size: size, c: c, b: bf}, nil
}

// CanPin reports whether Pin of d can return a copy at all: a plain
// body that the disk cache can keep. It costs no I/O.
func (c *Cache) CanPin(d *layout.Descriptor) bool {
	if c.checkDescriptor(d) != nil || d.InlineOK() || !c.CanPinRaw(d.Size) {
		return false
	}
	space, sniff, err := c.viewOf(d)
	return err == nil && space == blobRaw && !sniff
}

// CanPinRaw is CanPin for the stored bytes of a blob of this size: one
// the disk cache keeps (not past its entry bound, not under DiskMinBytes).
func (c *Cache) CanPinRaw(size int64) bool {
	return size > 0 && c.diskKeeps(size)
}

// diskKeeps reports whether a verify pass copies a stored body of this
// size into the disk cache, and so whether a copy of it is looked for.
func (c *Cache) diskKeeps(size int64) bool {
	return c.disk != nil && c.disk.enabled() && size <= c.disk.maxEntry() && size >= c.opts.DiskMinBytes
}
