package localblob

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"strconv"

	"gocloud.dev/blob/driver"
	"golang.org/x/sys/unix"
)

// WriteOptions are the driver-specific parts of a write, reached through
// blob.WriterOptions.BeforeWrite. The callback's asFunc accepts either
//
//   - a *WriteOptions, whose non-zero fields are copied into the write:
//     as(&localblob.WriteOptions{IfMatch: etag}); or
//   - a **WriteOptions, which is pointed at the write's own options for
//     the callback to fill in (the gocloud convention for As).
//
// Both are checked when the writer is closed, before anything is
// published.
type WriteOptions struct {
	// IfMatch makes the write a compare-and-swap: it is published only if
	// the key currently holds an object whose ETag equals IfMatch (as
	// returned by Attributes or ObjectInfo, quoted or not). Otherwise the
	// write fails with ErrPreconditionFailed (gcerrors.FailedPrecondition)
	// and nothing changes. Cannot be combined with IfNotExist.
	IfMatch string
	// SHA256, if set, is the expected 32-byte SHA-256 digest of the body.
	// A mismatch fails the write with ErrChecksumMismatch
	// (gcerrors.InvalidArgument) and nothing is published.
	SHA256 []byte
	// Link, if set, is a file that holds the whole body: Close publishes
	// that file itself, linked into the bucket, instead of bytes written
	// to the writer (none may be), so a large body is not copied. The
	// caller vouches for its content: SHA256, when set, is what the
	// caller hashed, and the driver does not read the file to check it.
	// The file must be linkable (a named file, or an O_TMPFILE opened
	// without O_EXCL) and is the object's body from then on: it must
	// never be written again. One on another file system (EXDEV), or
	// that cannot be linked, is copied instead (and then checked).
	Link *os.File
}

// DeleteOptions are the driver-specific parts of a delete, reached through
// blob.DeleteOptions.BeforeDelete the same two ways as WriteOptions.
type DeleteOptions struct {
	// IfMatch deletes only if the current object's ETag equals IfMatch;
	// otherwise the delete fails with ErrPreconditionFailed and the object
	// stays.
	IfMatch string
}

type writer struct {
	b    *bucket
	ctx  context.Context
	key  string
	kp   keyPath
	tfd  int // temp dir
	tmp  string
	f    *os.File
	size int64

	attrs      storedAttrs
	wopts      WriteOptions
	ifNotExist bool
	wantMD5    []byte
	md5h, sha  hash.Hash
	sidecar    string
	closed     bool
	published  bool // the key names our inode; never undo from here on
	linked     bool // the temp name is WriteOptions.Link's file (adopt)
}

// NewTypedWriter implements driver.Bucket. The body goes to a temp file in
// <root>/.pugfs-tmp as it is written; nothing is visible at the key until
// Close publishes it.
func (b *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	kp, err := mapKey(key)
	if err != nil {
		return nil, err
	}
	attrs := storedAttrs{
		ContentType:        contentType,
		ContentEncoding:    opts.ContentEncoding,
		CacheControl:       opts.CacheControl,
		ContentDisposition: opts.ContentDisposition,
		ContentLanguage:    opts.ContentLanguage,
	}
	if len(opts.Metadata) > 0 {
		attrs.Metadata = maps.Clone(opts.Metadata)
	}
	w := &writer{b: b, ctx: ctx, key: key, kp: kp, attrs: attrs, ifNotExist: opts.IfNotExist}
	if len(opts.ContentMD5) > 0 {
		w.wantMD5 = opts.ContentMD5
		w.md5h = md5.New()
	}
	if opts.BeforeWrite != nil {
		if err := opts.BeforeWrite(w.as); err != nil {
			return nil, err
		}
	}
	if w.wopts.IfMatch != "" && w.ifNotExist {
		return nil, newError(codeInvalid, "write", key, errors.New("IfMatch and IfNotExist cannot both hold"))
	}
	if w.wopts.SHA256 != nil {
		if len(w.wopts.SHA256) != sha256.Size {
			return nil, newError(codeInvalid, "write", key, fmt.Errorf("SHA256 must be %d bytes, got %d", sha256.Size, len(w.wopts.SHA256)))
		}
		w.sha = sha256.New()
	}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// open takes a bucket reference and creates the temp file.
func (w *writer) open() error {
	if err := w.b.enter("write", w.key); err != nil {
		return err
	}
	tfd, err := w.b.tmpDir()
	if err == nil {
		w.tfd = tfd
		w.tmp, w.f, err = createTemp(tfd, ".tmp")
	}
	if err != nil {
		w.b.leave()
		return newError(codeUnknown, "write", w.key, err)
	}
	return nil
}

func (w *writer) as(i any) bool {
	switch p := i.(type) {
	case *WriteOptions:
		if p.IfMatch != "" {
			w.wopts.IfMatch = p.IfMatch
		}
		if p.SHA256 != nil {
			w.wopts.SHA256 = p.SHA256
		}
		if p.Link != nil {
			w.wopts.Link = p.Link
		}
		return true
	case **WriteOptions:
		*p = &w.wopts
		return true
	}
	return false
}

// Write implements io.Writer. A cancelled context fails the write; Close
// then cleans up.
func (w *writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, newError(codeUnknown, "write", w.key, os.ErrClosed)
	}
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.write(p)
}

// write adds p to the body.
func (w *writer) write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.size += int64(n)
	if w.md5h != nil {
		w.md5h.Write(p[:n])
	}
	if w.sha != nil {
		w.sha.Write(p[:n])
	}
	return n, err
}

// Close verifies the digests, attaches the metadata to the temp file,
// makes it durable and publishes it. On any failure, including a
// cancelled context, the temp file (and sidecar) are removed and the key
// is untouched.
func (w *writer) Close() (err error) {
	if w.closed {
		return newError(codeUnknown, "write", w.key, os.ErrClosed)
	}
	w.closed = true
	defer w.b.leave()
	defer func() {
		if !w.published {
			w.abort()
		} else if w.ifNotExist {
			// linkat left the temp name as a second link; it is no longer
			// needed (a crash here leaves it for the stale sweep,
			// harmlessly).
			_ = unix.Unlinkat(w.tfd, w.tmp, 0)
		}
	}()
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.wopts.Link != nil {
		if err := w.adopt(w.wopts.Link); err != nil {
			return err
		}
	}
	if w.md5h != nil {
		if got := w.md5h.Sum(nil); !bytes.Equal(got, w.wantMD5) {
			return newError(codeInvalid, "write", w.key, fmt.Errorf("%w: body MD5 %x, want %x", ErrChecksumMismatch, got, w.wantMD5))
		}
		w.attrs.MD5 = w.wantMD5
	}
	if w.sha != nil && !w.linked {
		if got := w.sha.Sum(nil); !bytes.Equal(got, w.wopts.SHA256) {
			return newError(codeInvalid, "write", w.key, fmt.Errorf("%w: body SHA-256 %x, want %x", ErrChecksumMismatch, got, w.wopts.SHA256))
		}
	}
	w.attrs.Token = newToken()
	if w.sidecar, err = w.b.writeAttrs(w.f, &w.attrs); err != nil {
		return newError(codeUnknown, "write", w.key, fmt.Errorf("store metadata: %w", err))
	}
	if w.b.opts.beforeSync != nil {
		w.b.opts.beforeSync()
	}
	if err := w.f.Sync(); err != nil {
		return newError(codeUnknown, "write", w.key, err)
	}
	if err := w.f.Close(); err != nil {
		return newError(codeUnknown, "write", w.key, err)
	}
	w.f = nil
	// No look at the context here: the body is durable, and publishing
	// it is one rename. A deadline that ran out during the fsync
	// (deadlineblob bounds silence, and an fsync reports no progress)
	// threw a durable write away, and each retry of it the same way: a
	// body of GiBs on a slow disk never landed (review 5). A write
	// cancelled before its Close is refused above.
	replaced, err := w.publish()
	w.b.dropVictim(replaced)
	// An error after publication (a failed directory fsync) is still
	// reported: the object is visible but its durability is unknown.
	return err
}

// adopt makes the caller's file the body (WriteOptions.Link): it takes
// the place of the empty temp file under a temp name of its own, with the
// temp file's permissions. A file that cannot be linked here is copied
// through Write instead, which checks it like any body.
func (w *writer) adopt(link *os.File) error {
	if w.size != 0 {
		return newError(codeInvalid, "write", w.key, errors.New("bytes written to a write with Link"))
	}
	st, err := fstat(int(w.f.Fd()))
	if err != nil {
		return newError(codeUnknown, "write", w.key, err)
	}
	var name string
	for {
		name = strconv.Itoa(os.Getpid()) + "-" + newToken()[:16] + ".tmp"
		err = retryEINTR(func() error {
			return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(link.Fd())), w.tfd, name, unix.AT_SYMLINK_FOLLOW)
		})
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		// Another file system, or a file that was unlinked: copy it.
		lst, serr := fstat(int(link.Fd()))
		if serr != nil {
			return newError(codeUnknown, "write", w.key, serr)
		}
		if _, err := io.Copy(writeFunc(w.write), io.NewSectionReader(link, 0, lst.Size)); err != nil {
			return newError(codeUnknown, "write", w.key, fmt.Errorf("copy the linked file: %w", err))
		}
		return nil
	}
	fd, err := unix.FcntlInt(link.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unlinkat(w.tfd, name, 0)
		return newError(codeUnknown, "write", w.key, err)
	}
	body := os.NewFile(uintptr(fd), name)
	if err := body.Chmod(os.FileMode(st.Mode & 0o777)); err != nil {
		body.Close()
		_ = unix.Unlinkat(w.tfd, name, 0)
		return newError(codeUnknown, "write", w.key, err)
	}
	lst, err := fstat(fd)
	if err != nil {
		body.Close()
		_ = unix.Unlinkat(w.tfd, name, 0)
		return newError(codeUnknown, "write", w.key, err)
	}
	if w.md5h != nil {
		if _, err := io.Copy(w.md5h, io.NewSectionReader(body, 0, lst.Size)); err != nil {
			body.Close()
			_ = unix.Unlinkat(w.tfd, name, 0)
			return newError(codeUnknown, "write", w.key, err)
		}
	}
	w.f.Close()
	_ = unix.Unlinkat(w.tfd, w.tmp, 0)
	w.f, w.tmp, w.size, w.linked = body, name, lst.Size, true
	return nil
}

// writeFunc is a function as an io.Writer.
type writeFunc func([]byte) (int, error)

func (f writeFunc) Write(p []byte) (int, error) { return f(p) }

// abort removes everything an unpublished write created.
func (w *writer) abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	_ = unix.Unlinkat(w.tfd, w.tmp, 0)
	if w.sidecar != "" {
		if mfd, err := w.b.metaDir(false); err == nil && mfd >= 0 {
			_ = unix.Unlinkat(mfd, w.sidecar, 0)
		}
	}
}

// errRetry means the target directory was removed (by a concurrent Delete
// pruning empty directories) between opening and publishing into it.
var errRetry = errors.New("directory vanished; retry")

// publish moves the temp file to the key under the directory's flock, so
// that the If-Match comparison and the publication are one atomic step
// with respect to every other writer and deleter of the same directory, in
// this process or any other. It returns the replaced object, pinned,
// whose sidecar should go (dropVictim).
func (w *writer) publish() (replaced victim, err error) {
	for attempt := 0; attempt < 32; attempt++ {
		// A compare-and-swap needs an existing object, hence existing
		// directories: do not create them just to fail.
		fds, err := w.b.walk(w.kp.dirs, w.wopts.IfMatch == "")
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			if errors.Is(err, ErrKeyConflict) {
				return victim{}, newError(codeInvalid, "write", w.key, err)
			}
			if w.wopts.IfMatch != "" && notFound(err) {
				return victim{}, newError(codePrecondition, "write", w.key, fmt.Errorf("%w: If-Match: no object", ErrPreconditionFailed))
			}
			return victim{}, newError(codeUnknown, "write", w.key, err)
		}
		dfd := fds[len(fds)-1]
		if err := lockDir(dfd); err != nil {
			closeAll(fds)
			return victim{}, newError(codeUnknown, "write", w.key, fmt.Errorf("lock: %w", err))
		}
		replaced, err = w.commitLocked(dfd)
		unlockDir(dfd)
		w.published = err == nil
		if errors.Is(err, errRetry) {
			closeAll(fds)
			continue
		}
		if err == nil {
			if err = fsyncFD(dfd); err != nil {
				err = newError(codeUnknown, "write", w.key, fmt.Errorf("fsync directory: %w", err))
			}
		} else {
			// Best effort: drop directories that are empty because this
			// write failed (e.g. a lost IfNotExist race never leaves them
			// empty, but a conflict might).
			pruneDirs(fds, w.kp.dirs)
		}
		closeAll(fds)
		return replaced, err
	}
	return victim{}, newError(codeUnknown, "write", w.key, errors.New("target directory kept disappearing"))
}

func (w *writer) commitLocked(dfd int) (replaced victim, err error) {
	base := w.kp.base
	if w.wopts.IfMatch != "" {
		info, err := w.b.statObjectAt(dfd, base, w.key)
		if err != nil {
			if hasCode(err, codeNotFound) {
				return victim{}, newError(codePrecondition, "write", w.key, fmt.Errorf("%w: If-Match: no object", ErrPreconditionFailed))
			}
			return victim{}, err
		}
		if !sameETag(info.ETag, w.wopts.IfMatch) {
			return victim{}, newError(codePrecondition, "write", w.key, fmt.Errorf("%w: If-Match %s, current ETag %s", ErrPreconditionFailed, w.wopts.IfMatch, info.ETag))
		}
	}
	if w.ifNotExist {
		// link(2) fails with EEXIST if the name exists, atomically, in
		// every process: this is the create-if-absent primitive.
		err := retryEINTR(func() error { return unix.Linkat(w.tfd, w.tmp, dfd, base, 0) })
		switch {
		case err == nil:
			return victim{}, nil
		case errors.Is(err, unix.EEXIST):
			if st, serr := fstatat(dfd, base); serr == nil && !isReg(&st) {
				return victim{}, newError(codeInvalid, "write", w.key, ErrKeyConflict)
			}
			return victim{}, newError(codePrecondition, "write", w.key, fmt.Errorf("%w: object exists", ErrPreconditionFailed))
		}
		return victim{}, w.publishErr(err)
	}
	replaced = w.b.pinVictim(dfd, base)
	err = retryEINTR(func() error { return unix.Renameat(w.tfd, w.tmp, dfd, base) })
	if err != nil {
		replaced.unpin()
		return victim{}, w.publishErr(err)
	}
	return replaced, nil
}

// publishErr classifies a failed link or rename.
func (w *writer) publishErr(err error) error {
	switch {
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return newError(codeInvalid, "write", w.key, ErrKeyConflict)
	case errors.Is(err, unix.ENOENT):
		// Either our temp file was swept as stale, or the directory we
		// hold was removed under us (ENOENT is what linkat/renameat into
		// a deleted directory return).
		if _, serr := fstatat(w.tfd, w.tmp); serr != nil {
			return newError(codeUnknown, "write", w.key, errTempGone)
		}
		return errRetry
	}
	return newError(codeUnknown, "write", w.key, err)
}

// Copy implements driver.Bucket: the source's body and metadata are copied
// into a temp file (copy_file_range where the kernel can) and published
// like a write, so the destination appears complete or not at all. The
// copy gets its own ETag.
func (b *bucket) Copy(ctx context.Context, dstKey, srcKey string, opts *driver.CopyOptions) error {
	if opts.BeforeCopy != nil {
		if err := opts.BeforeCopy(func(any) bool { return false }); err != nil {
			return err
		}
	}
	kp, err := mapKey(dstKey)
	if err != nil {
		return err
	}
	if err := b.enter("copy", srcKey); err != nil {
		return err
	}
	defer b.leave()
	src, _, a, err := b.openObject(srcKey, "copy")
	if err != nil {
		return err
	}
	defer src.Close()
	w := &writer{b: b, ctx: ctx, key: dstKey, kp: kp}
	if a != nil {
		w.attrs = *a
		w.attrs.Metadata = maps.Clone(a.Metadata)
		w.attrs.Ino, w.attrs.Size, w.attrs.Mtime = 0, 0, 0
	}
	if err := w.open(); err != nil {
		return err
	}
	if _, err := w.f.ReadFrom(src); err != nil {
		w.closed = true
		w.abort()
		w.b.leave()
		return newError(codeUnknown, "copy", srcKey, err)
	}
	return w.Close()
}
