package blobcache

// Bodies this process stored: a commit's upload leaves the body in the
// staged file it was read from, and reading back what was just written
// (a copy checked with md5sum, a handler's output read by the next step)
// fetched it all again from the bucket (audit 23). AdoptStored copies it
// into the disk tier instead, in the kernel (copy_file_range) from pages
// just written. The copy is trusted as any entry is: hashed whole at its
// first use in a process, its chunks checked when read again.

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/layout"
)

// adoptMax bounds the bodies AdoptStored copies: the copy delays the
// commit it is part of (about 0.1 s for 256 MiB, in the kernel), and
// reading a larger body back is bound by bandwidth more than by requests.
const adoptMax = 256 << 20

// AdoptStored keeps a copy of the first size bytes of f, the body of
// digest d that this process has just stored in the bucket, in the disk
// tier. Best effort: nothing when the tier would not keep a body of that
// size or has it already, or the copy fails; nothing for a body small
// enough to be inline in its descriptor (read from there) or above
// adoptMax. The caller keeps f's bytes from changing meanwhile.
func (c *Cache) AdoptStored(d layout.Digest, size int64, f *os.File) {
	if size <= layout.InlineLimit || size > adoptMax || !c.diskKeeps(size) {
		return
	}
	if e, ok := c.disk.openEntry(d, size); ok {
		e.Close()
		return
	}
	tmp := c.disk.createReserved(diskData, d.Hex(), size)
	if tmp == nil {
		return
	}
	if err := copyBody(tmp.f, f, size); err != nil {
		c.disk.fail("copy", tmp.rel, err)
		tmp.abort()
		return
	}
	tmp.n = size
	if tmp.commit(d) {
		c.st.adopted.Add(1)
	}
	tmp.f.Close()
}

// copyBody copies src[0:size) to dst, in the kernel where it can,
// leaving src's offset alone.
func copyBody(dst, src *os.File, size int64) error {
	var off int64
	for off < size {
		n, err := unix.CopyFileRange(int(src.Fd()), &off, int(dst.Fd()), nil, int(size-off), 0)
		if err != nil || n == 0 {
			if off == 0 && (errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
				// Another file system, or one without it: through here.
				_, err = io.Copy(dst, io.NewSectionReader(src, 0, size))
				return err
			}
			if err == nil {
				err = io.ErrUnexpectedEOF // src ended before size
			}
			return err
		}
	}
	return nil
}
