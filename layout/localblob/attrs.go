package localblob

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// xattrName holds an object's metadata as one JSON document. One attribute
// instead of one per field so that it is set with a single fsetxattr and
// can never be seen half-written.
const xattrName = "user.pugfs.attrs"

// attrsVersion is bumped if the JSON changes incompatibly; readers treat an
// unknown version as "no metadata" rather than misreading it.
const attrsVersion = 1

// storedAttrs is what the driver persists per object, in the xattr or, on
// filesystems without user xattrs, in a sidecar.
type storedAttrs struct {
	V int `json:"v"`
	// Token is random per write; it makes the ETag change on every write
	// even when the body, size and (coarse) mtime do not.
	Token              string            `json:"token"`
	ContentType        string            `json:"content-type,omitempty"`
	ContentEncoding    string            `json:"content-encoding,omitempty"`
	CacheControl       string            `json:"cache-control,omitempty"`
	ContentDisposition string            `json:"content-disposition,omitempty"`
	ContentLanguage    string            `json:"content-language,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	MD5                []byte            `json:"md5,omitempty"`

	// Sidecar binding: a sidecar is named after the inode it describes and
	// is believed only if the inode still has this size and mtime, which
	// guards against inode-number reuse after an object was deleted behind
	// the driver's back.
	Ino   uint64 `json:"ino,omitempty"`
	Size  int64  `json:"size,omitempty"`
	Mtime int64  `json:"mtime-ns,omitempty"`
}

func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; a time-based token keeps the
		// ETag changing if it ever does.
		binary.BigEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
	}
	return hex.EncodeToString(b[:])
}

// etag derives the ETag from the per-write token and the inode's identity
// and content stamp. The token alone would miss an in-place edit by some
// other program; the stat fields alone can repeat (inode numbers are
// reused, mtime granularity is coarse). Files without stored metadata
// (copied in with cp) still get an ETag from the stat fields.
func etag(a *storedAttrs, st *unix.Stat_t) string {
	h := sha256.New()
	token := ""
	if a != nil {
		token = a.Token
	}
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d", token, st.Ino, st.Mtim.Nano(), st.Size)
	return `"` + hex.EncodeToString(h.Sum(nil)[:16]) + `"`
}

// sameETag compares ETags, tolerating a missing pair of quotes so callers
// may pass either the quoted form returned by Attributes or a bare value.
func sameETag(a, b string) bool {
	unq := func(s string) string {
		if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
			return s[1 : len(s)-1]
		}
		return s
	}
	return unq(a) == unq(b)
}

func modTime(st *unix.Stat_t) time.Time {
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
}

// contentType returns the stored type or, for files without metadata, a
// guess from the name: gocloud requires a non-empty Content-Type.
func contentType(a *storedAttrs, key string) string {
	if a != nil && a.ContentType != "" {
		return a.ContentType
	}
	if t := mime.TypeByExtension(path.Ext(key)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func sidecarName(ino uint64) string { return strconv.FormatUint(ino, 16) }

// readAttrs loads the metadata of the open file fd (with stat st). It
// returns nil, nil for a file that has none. Reading through the fd that
// also serves the body is what makes body and metadata a consistent pair.
func (b *bucket) readAttrs(fd int, st *unix.Stat_t) (*storedAttrs, error) {
	buf := make([]byte, 2048)
	for {
		n, err := unix.Fgetxattr(fd, xattrName, buf)
		if err == nil {
			return decodeAttrs(buf[:n])
		}
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Fgetxattr(fd, xattrName, nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, sz+64)
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
			return b.readSidecar(st)
		}
		return nil, err
	}
}

func decodeAttrs(data []byte) (*storedAttrs, error) {
	var a storedAttrs
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("corrupt %s: %w", xattrName, err)
	}
	if a.V != attrsVersion {
		return nil, nil
	}
	return &a, nil
}

func (b *bucket) readSidecar(st *unix.Stat_t) (*storedAttrs, error) {
	mfd, err := b.metaDir(false)
	if err != nil || mfd < 0 {
		return nil, err
	}
	fd, err := openBeneath(mfd, sidecarName(st.Ino), unix.O_RDONLY)
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fd), sidecarName(st.Ino))
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return nil, err
	}
	a, err := decodeAttrs(data)
	if err != nil || a == nil {
		return a, err
	}
	if a.Ino != st.Ino || a.Size != st.Size || a.Mtime != st.Mtim.Nano() {
		return nil, nil // belongs to an earlier inode with the same number
	}
	return a, nil
}

// writeAttrs attaches a to the unpublished temp file f. It returns the
// sidecar name if the metadata went to a sidecar, so that the caller can
// remove it if the write is abandoned.
func (b *bucket) writeAttrs(f *os.File, a *storedAttrs) (sidecar string, err error) {
	a.V = attrsVersion
	if !b.noXattr.Load() {
		data, err := json.Marshal(a)
		if err != nil {
			return "", err
		}
		err = retryEINTR(func() error { return unix.Fsetxattr(int(f.Fd()), xattrName, data, 0) })
		switch {
		case err == nil:
			return "", nil
		case errors.Is(err, unix.ENOTSUP):
			// The filesystem has no user xattrs: every write on this
			// bucket goes to sidecars from now on.
			b.noXattr.Store(true)
		case errors.Is(err, unix.E2BIG), errors.Is(err, unix.ENOSPC), errors.Is(err, unix.ERANGE):
			// Too large for the inode's xattr space (about 4 KiB on ext4):
			// this one object's metadata goes to a sidecar.
		default:
			return "", err
		}
	}
	return b.writeSidecar(f, a)
}

// writeSidecar stores a in <root>/.pugfs-meta/<inode>, durably, before the
// body is published, so publication still exposes body and metadata
// together.
func (b *bucket) writeSidecar(f *os.File, a *storedAttrs) (string, error) {
	st, err := fstat(int(f.Fd()))
	if err != nil {
		return "", err
	}
	a.Ino, a.Size, a.Mtime = st.Ino, st.Size, st.Mtim.Nano()
	data, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	tfd, err := b.tmpDir()
	if err != nil {
		return "", err
	}
	mfd, err := b.metaDir(true)
	if err != nil {
		return "", err
	}
	tmp, tf, err := createTemp(tfd, ".meta")
	if err != nil {
		return "", err
	}
	_, err = tf.Write(data)
	if err == nil {
		err = tf.Sync()
	}
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	name := sidecarName(st.Ino)
	if err == nil {
		err = retryEINTR(func() error { return unix.Renameat(tfd, tmp, mfd, name) })
	}
	if err != nil {
		_ = unix.Unlinkat(tfd, tmp, 0)
		return "", err
	}
	return name, fsyncFD(mfd)
}

// removeSidecar deletes the sidecar of an inode that no longer backs an
// object. Best effort: a leftover sidecar is ignored by readers because its
// binding no longer matches.
// victim is an object a write or a delete is about to unlink, held open
// (O_PATH) until its sidecar is gone: the sidecar is named by the inode
// number, which the file system gives to the next new file once the
// inode is freed, so removed after the unlink it could be another
// writer's new sidecar (review 5: new objects published without their
// metadata). The zero victim holds nothing.
type victim struct {
	ino uint64
	fd  int // 0: none (never stdin: an O_PATH open gets a higher number)
}

// pinVictim holds the object base of dfd (its directory lock held) when
// it may have a sidecar: a metadata directory exists and the object has
// no other link.
func (b *bucket) pinVictim(dfd int, base string) victim {
	if mfd, _ := b.metaDir(false); mfd < 0 {
		return victim{}
	}
	var fd int
	err := retryEINTR(func() error {
		var err error
		fd, err = unix.Openat(dfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return victim{}
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !isReg(&st) || st.Nlink != 1 {
		unix.Close(fd)
		return victim{}
	}
	return victim{ino: st.Ino, fd: fd}
}

// unpin lets v's inode go, keeping its sidecar (it was not unlinked).
func (v victim) unpin() {
	if v.fd > 0 {
		unix.Close(v.fd)
	}
}

// dropVictim removes the sidecar of v, unlinked now, then lets its inode
// go.
func (b *bucket) dropVictim(v victim) {
	if v.fd > 0 {
		b.removeSidecar(v.ino)
		unix.Close(v.fd)
	}
}

func (b *bucket) removeSidecar(ino uint64) {
	mfd, err := b.metaDir(false)
	if err != nil || mfd < 0 {
		return
	}
	_ = unix.Unlinkat(mfd, sidecarName(ino), 0)
}

// createTemp creates a new, empty, uniquely named file in the temp dir.
func createTemp(tmpfd int, suffix string) (string, *os.File, error) {
	for {
		name := strconv.Itoa(os.Getpid()) + "-" + newToken()[:16] + suffix
		var fd int
		err := retryEINTR(func() error {
			var err error
			fd, err = unix.Openat(tmpfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
			return err
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, &os.PathError{Op: "create", Path: tmpDirName + "/" + name, Err: err}
		}
		return name, os.NewFile(uintptr(fd), name), nil
	}
}
