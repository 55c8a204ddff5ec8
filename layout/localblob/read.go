package localblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"time"

	"gocloud.dev/blob/driver"
	"golang.org/x/sys/unix"
)

// ObjectInfo is everything the driver knows about one object, taken from
// the same open file as the body. Readers expose it through
// blob.Reader.As(*ObjectInfo), which gives a body and its ETag as one
// consistent pair (what an If-Match read-modify-write needs), and
// Attributes through blob.Attributes.As(*ObjectInfo).
type ObjectInfo struct {
	// ETag changes on every write; pass it as WriteOptions.IfMatch.
	ETag string
	// Size is the body length in bytes.
	Size int64
	// ModTime is the file's modification time.
	ModTime time.Time
	// ContentType is the stored type, or a guess for files without
	// metadata.
	ContentType string
	// ContentEncoding, CacheControl, ContentDisposition and
	// ContentLanguage are as written; empty for files without metadata.
	ContentEncoding    string
	CacheControl       string
	ContentDisposition string
	ContentLanguage    string
	// Metadata is the user metadata, keys as gocloud passed them
	// (lower-case); nil if none.
	Metadata map[string]string
	// MD5 is the body's MD5 if the writer supplied ContentMD5, else nil.
	MD5 []byte
	// HasMetadata is false for a file the driver did not write (for
	// example one copied in with cp -r): its metadata fields are then
	// defaults, and callers should fall back accordingly.
	HasMetadata bool
}

func makeInfo(a *storedAttrs, st *unix.Stat_t, key string) ObjectInfo {
	info := ObjectInfo{
		ETag:        etag(a, st),
		Size:        st.Size,
		ModTime:     modTime(st),
		ContentType: contentType(a, key),
		HasMetadata: a != nil,
	}
	if a != nil {
		info.ContentEncoding = a.ContentEncoding
		info.CacheControl = a.CacheControl
		info.ContentDisposition = a.ContentDisposition
		info.ContentLanguage = a.ContentLanguage
		if len(a.Metadata) > 0 {
			info.Metadata = maps.Clone(a.Metadata)
		}
		if len(a.MD5) > 0 {
			info.MD5 = append([]byte(nil), a.MD5...)
		}
	}
	return info
}

// openObject opens key's file and loads its metadata from the same fd.
func (b *bucket) openObject(key, op string) (*os.File, unix.Stat_t, *storedAttrs, error) {
	kp, err := mapKey(key)
	if err != nil {
		return nil, unix.Stat_t{}, nil, err
	}
	return b.openObjectAt(b.rootfd, kp.rel(), key, op)
}

func (b *bucket) openObjectAt(dirfd int, rel, key, op string) (*os.File, unix.Stat_t, *storedAttrs, error) {
	for attempt := 0; ; attempt++ {
		fd, st, err := b.openFileAt(dirfd, rel, key, op)
		if err != nil {
			return nil, st, nil, err
		}
		a, err := b.readAttrs(fd, &st)
		if err != nil {
			closeFD(fd)
			return nil, st, nil, newError(codeUnknown, op, key, err)
		}
		if a == nil && st.Nlink == 0 && attempt < 3 {
			// The object was replaced or deleted after we opened it, and a
			// sidecar may have gone with it: look again so the caller gets
			// a body and metadata that belong together.
			closeFD(fd)
			continue
		}
		return os.NewFile(uintptr(fd), key), st, a, nil
	}
}

// openFileAt opens the regular file of an object, in blocking mode.
func (b *bucket) openFileAt(dirfd int, rel, key, op string) (int, unix.Stat_t, error) {
	// O_NONBLOCK so that a FIFO planted in the bucket cannot hang the
	// open; it is cleared once fstat shows a regular file.
	fd, err := openBeneath(dirfd, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		if notFound(err) {
			return -1, unix.Stat_t{}, newError(codeNotFound, op, key, err)
		}
		return -1, unix.Stat_t{}, newError(codeUnknown, op, key, err)
	}
	st, err := fstat(fd)
	if err == nil && !isReg(&st) {
		closeFD(fd)
		return -1, st, newError(codeNotFound, op, key, errNotObject)
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		closeFD(fd)
		return -1, st, newError(codeUnknown, op, key, err)
	}
	return fd, st, nil
}

// statObjectAt returns the info of the object name in dirfd (used under a
// directory lock for If-Match).
func (b *bucket) statObjectAt(dirfd int, name, key string) (ObjectInfo, error) {
	f, st, a, err := b.openObjectAt(dirfd, name, key, "stat")
	if err != nil {
		return ObjectInfo{}, err
	}
	f.Close()
	return makeInfo(a, &st, key), nil
}

// Attributes implements driver.Bucket.
func (b *bucket) Attributes(_ context.Context, key string) (*driver.Attributes, error) {
	if err := b.enter("attributes", key); err != nil {
		return nil, err
	}
	defer b.leave()
	f, st, a, err := b.openObject(key, "attributes")
	if err != nil {
		return nil, err
	}
	f.Close()
	info := makeInfo(a, &st, key)
	return &driver.Attributes{
		CacheControl:       info.CacheControl,
		ContentDisposition: info.ContentDisposition,
		ContentEncoding:    info.ContentEncoding,
		ContentLanguage:    info.ContentLanguage,
		ContentType:        info.ContentType,
		Metadata:           info.Metadata,
		ModTime:            info.ModTime,
		Size:               info.Size,
		MD5:                info.MD5,
		ETag:               info.ETag,
		AsFunc:             infoAs(info),
	}, nil
}

func infoAs(info ObjectInfo) func(any) bool {
	return func(i any) bool {
		p, ok := i.(*ObjectInfo)
		if ok {
			*p = info
			p.Metadata = maps.Clone(info.Metadata)
		}
		return ok
	}
}

// NewRangeReader implements driver.Bucket. The object's metadata are
// read from the reader's own descriptor when first asked for (Attributes,
// As), not at the open: a read of the body alone, which is what a mount
// reading content-addressed blobs does, never reads the attribute xattr.
// On a cold page cache that xattr is a block of its own on disk, and it
// was a sixth of the CPU of a cold grep -r through a mount.
func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	if err := b.enter("read", key); err != nil {
		return nil, err
	}
	defer b.leave()
	kp, err := mapKey(key)
	if err != nil {
		return nil, err
	}
	fd, st, err := b.openFileAt(b.rootfd, kp.rel(), key, "read")
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), key)
	if opts.BeforeRead != nil {
		if err := opts.BeforeRead(func(any) bool { return false }); err != nil {
			f.Close()
			return nil, err
		}
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, newError(codeUnknown, "read", key, err)
		}
	}
	var r io.Reader = f
	if length >= 0 {
		r = io.LimitReader(f, length)
	}
	return &reader{ctx: ctx, b: b, key: key, f: f, r: r, st: st}, nil
}

// reader reads from the file it opened, so a concurrent overwrite or
// delete of the key never changes the bytes it returns, nor the metadata
// it reports: they are read from the same descriptor.
type reader struct {
	ctx context.Context
	b   *bucket
	key string
	f   *os.File
	r   io.Reader
	st  unix.Stat_t // of f, at the open

	// once loads info and attrs, at the first Attributes or As.
	once  sync.Once
	info  ObjectInfo
	ok    bool // info is the object's; else its metadata are unknown
	attrs driver.ReaderAttributes
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (r *reader) Close() error { return r.f.Close() }

// load reads the metadata through the reader's descriptor. When they
// cannot be known (the xattr is unreadable or corrupt, or the object was
// deleted or replaced since the open and its sidecar went with it), the
// attributes are the stat's with a content type guessed from the key,
// and As(*ObjectInfo) reports false rather than a body and metadata that
// do not belong together.
func (r *reader) load() {
	r.once.Do(func() {
		a, err := r.b.readAttrs(int(r.f.Fd()), &r.st)
		if err == nil && a == nil {
			var now unix.Stat_t
			if err = unix.Fstat(int(r.f.Fd()), &now); err == nil && now.Nlink == 0 {
				err = errors.New("deleted or replaced while open")
			}
		}
		r.ok = err == nil
		if !r.ok {
			a = nil
		}
		r.info = makeInfo(a, &r.st, r.key)
		r.attrs = driver.ReaderAttributes{ContentType: r.info.ContentType, ModTime: r.info.ModTime, Size: r.info.Size}
	})
}

// Attributes implements driver.Reader.
func (r *reader) Attributes() *driver.ReaderAttributes {
	r.load()
	return &r.attrs
}

// As exposes *ObjectInfo (ETag and metadata of the object being read).
func (r *reader) As(i any) bool {
	if _, ok := i.(*ObjectInfo); !ok {
		return false
	}
	r.load()
	return r.ok && infoAs(r.info)(i)
}

// Delete implements driver.Bucket. It takes the directory lock, so a
// delete and an If-Match write of the same key are ordered, then prunes
// directories the delete left empty.
func (b *bucket) Delete(_ context.Context, key string, opts *driver.DeleteOptions) error {
	var dopts DeleteOptions
	if opts.BeforeDelete != nil {
		err := opts.BeforeDelete(func(i any) bool {
			switch p := i.(type) {
			case *DeleteOptions:
				if p.IfMatch != "" {
					dopts.IfMatch = p.IfMatch
				}
				return true
			case **DeleteOptions:
				*p = &dopts
				return true
			}
			return false
		})
		if err != nil {
			return err
		}
	}
	kp, err := mapKey(key)
	if err != nil {
		return err
	}
	if err := b.enter("delete", key); err != nil {
		return err
	}
	defer b.leave()
	fds, err := b.walk(kp.dirs, false)
	if err != nil {
		if notFound(err) || errors.Is(err, ErrKeyConflict) {
			return newError(codeNotFound, "delete", key, err)
		}
		return newError(codeUnknown, "delete", key, err)
	}
	defer closeAll(fds)
	dfd := fds[len(fds)-1]
	if err := lockDir(dfd); err != nil {
		return newError(codeUnknown, "delete", key, fmt.Errorf("lock: %w", err))
	}
	gone, err := b.deleteLocked(dfd, kp.base, key, dopts)
	unlockDir(dfd)
	if err != nil {
		return err
	}
	defer b.dropVictim(gone)
	if err := fsyncFD(dfd); err != nil {
		return newError(codeUnknown, "delete", key, fmt.Errorf("fsync directory: %w", err))
	}
	pruneDirs(fds, kp.dirs)
	return nil
}

// deleteLocked removes the object base in dfd (its directory lock held)
// and returns it pinned (dropVictim).
func (b *bucket) deleteLocked(dfd int, base, key string, dopts DeleteOptions) (victim, error) {
	st, err := fstatat(dfd, base)
	if err != nil {
		if notFound(err) {
			return victim{}, newError(codeNotFound, "delete", key, err)
		}
		return victim{}, newError(codeUnknown, "delete", key, err)
	}
	if !isReg(&st) {
		return victim{}, newError(codeNotFound, "delete", key, errNotObject)
	}
	if dopts.IfMatch != "" {
		info, err := b.statObjectAt(dfd, base, key)
		if err != nil {
			if hasCode(err, codeNotFound) {
				return victim{}, newError(codePrecondition, "delete", key, fmt.Errorf("%w: If-Match: no object", ErrPreconditionFailed))
			}
			return victim{}, err
		}
		if !sameETag(info.ETag, dopts.IfMatch) {
			return victim{}, newError(codePrecondition, "delete", key, fmt.Errorf("%w: If-Match %s, current ETag %s", ErrPreconditionFailed, dopts.IfMatch, info.ETag))
		}
	}
	v := b.pinVictim(dfd, base)
	if err := unix.Unlinkat(dfd, base, 0); err != nil {
		v.unpin()
		if notFound(err) {
			return victim{}, newError(codeNotFound, "delete", key, err)
		}
		return victim{}, newError(codeUnknown, "delete", key, err)
	}
	return v, nil
}
