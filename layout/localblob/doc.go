// Package localblob is a gocloud.dev/blob driver for a pugmark bucket in a
// local directory that several processes (two pugfs mounts, a mount and a
// CLI) may write at once. It meets storage-layout.txt §2 the way S3 does:
// atomic create-if-absent, If-Match compare-and-swap, SHA-256 checked on
// PUT, metadata that appears together with the body, and listings in byte
// order.
//
// gocloud's own fileblob is not enough for that: its IfNotExist is a stat
// followed by a rename under an in-process mutex, and its .attrs sidecar is
// written before the rename, so concurrent processes both "win" a create
// and overwrite each other's metadata (see the fileblobrace test).
//
// Open a bucket with OpenBucket, or with blob.OpenBucket and a URL
// file:///abs/path (add ?create_dir=true to create it). Importing this
// package registers the "file" scheme, so it cannot be linked into a
// binary together with gocloud.dev/blob/fileblob. Linux only.
//
// # Layout
//
// Key K is the file <root>/K, its body stored as-is, so the directory is
// browsable and `cp -r` of a bucket is a valid bucket (whose objects then
// have no metadata; ObjectInfo.HasMetadata tells callers to fall back).
// Keys are split on "/" into directories. A few components cannot be file
// names as they are and are encoded instead: control bytes, DEL and '%'
// become %XX; an empty component (leading, doubled or trailing "/") is the
// name "%"; the components "." and ".." become %2E and %2E%2E; a root-level
// component starting with ".pugfs-" gets its dot encoded. Hence no key can
// name a path outside the root or alias another key; such keys are
// encoded, not rejected, because gocloud's conformance suite requires keys
// like "a/../b" and NUL bytes to round-trip. Keys of letters, digits and
// / - _ . = : (including "objects/sha256:<hex>") map to themselves; KeyPath
// gives the mapping. A file cannot also be a directory, so "a" and "a/b"
// cannot both exist: the second write fails with ErrKeyConflict.
//
// Root-level names starting with ".pugfs-" belong to the driver and never
// appear in listings: .pugfs-tmp holds unpublished writes, .pugfs-meta
// holds sidecars (below). Symlinks, FIFOs and devices are not objects; the
// driver resolves every path with openat2(RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS) relative to the root it opened, so nothing planted
// in the bucket can redirect it elsewhere.
//
// # Writes
//
// A write streams into a new temp file in .pugfs-tmp. Close checks
// ContentMD5 and WriteOptions.SHA256 (a mismatch publishes nothing), stores
// the metadata in the temp file's extended attribute user.pugfs.attrs (one
// JSON document: Content-Type, Content-Encoding, Cache-Control,
// Content-Disposition, Content-Language, user metadata with its exact keys,
// MD5, and a random per-write token), fsyncs the file, and only then
// publishes it. Because the metadata travels with the inode, publication
// exposes body and metadata together and a writer can never overwrite
// another writer's metadata.
//
// Publication holds flock(2) on the key's parent directory (every writer
// and deleter of that directory takes it, in any process; the kernel
// releases it if the holder dies):
//
//   - IfNotExist: link(2) from the temp name to the key. The kernel fails it
//     with EEXIST if the key exists, atomically across processes; that is
//     reported as gcerrors.FailedPrecondition (ErrPreconditionFailed).
//   - WriteOptions.IfMatch: compare the current ETag, then rename(2) over
//     the key, both under the lock, so no other write or delete can land in
//     between. Mismatch or absence is FailedPrecondition.
//   - Otherwise: rename(2) over the key.
//
// Then the directory is fsynced (and the parent of any directory the write
// created, as it is created), so a nil error from Close means the object is
// durable. A directory removed by a concurrent Delete's pruning makes the
// link/rename fail with ENOENT, and the writer walks and creates the path
// again. A failed or cancelled write removes its temp file; a crashed
// writer's temp file is invisible (it is not under a key) and is removed by
// the next OpenBucket once older than Options.StaleTempAge.
//
// WriteOptions.Link publishes a file the caller already has (a mount's
// staged file) instead of the bytes written: it is linked into the temp
// directory and published from there like any write, so a large body is
// never copied. The caller vouches for its SHA-256 (it hashed the file as
// it was written); a file that cannot be linked here is copied through
// the ordinary path and checked.
//
// Driver-specific options are reached the usual gocloud way, through
// BeforeWrite/BeforeDelete and As: see WriteOptions, DeleteOptions and
// ObjectInfo.
//
// # ETags
//
// The ETag hashes the per-write token with the inode number, mtime and
// size, so it changes on every write through the driver (even of identical
// bytes) and on in-place edits by other programs. Files without metadata
// get an ETag from the stat fields alone. Attributes returns it; a Reader
// gives it via As(*ObjectInfo), taken from the same open file as the body,
// which is the pair an If-Match read-modify-write needs.
//
// # Reads and listings
//
// A reader holds the file it opened, so concurrent overwrites or deletes
// never change the bytes it returns. It reads the metadata through that
// file only when asked (Attributes, As): reading a body alone costs no
// xattr read. If they cannot be read then (a corrupt xattr, or a sidecar
// gone with an object replaced since the open), the reader reports the
// stat's size and time with a content type guessed from the key, and
// As(*ObjectInfo) reports false. List returns keys in byte order,
// honours Prefix, Delimiter (any string), PageSize and PageToken, and reads
// only the directories the prefix and page need; a directory is a common
// prefix only if it holds at least one object. MD5 is not reported in
// listings (it costs an xattr read per entry); Attributes reports it when
// the writer supplied ContentMD5. Listing is strongly consistent with
// writes, which §2.5 does not even require.
//
// Delete returns NotFound for a missing key (blob's portable type lets
// callers treat that as success) and prunes directories it leaves empty,
// best effort, up to the root.
//
// # Filesystems without user xattrs
//
// If setting the xattr fails with ENOTSUP (some FUSE or network
// filesystems, or tmpfs before Linux 6.6), or the metadata is too large for
// the inode's xattr space (about 4 KiB on ext4), the metadata goes to a
// sidecar, .pugfs-meta/<inode number in hex>, written and fsynced before the
// body is published, so publication still exposes both together and
// concurrent writers (distinct temp inodes) still cannot clobber each
// other's metadata. The guarantee is weaker in three ways: it relies on
// stable inode numbers (overlayfs copy-up or some FUSE filesystems break
// it, and metadata is then lost, not mixed up: a sidecar records the size
// and mtime of its inode and is ignored if they differ); a crash can leave
// orphan sidecars (harmless, ignored by that check); and moving or copying
// an object by hand drops its metadata, as it does for cp -r without
// xattrs. Readers always look at the xattr first and the sidecar second.
//
// Locking needs flock(2) on directories, which local filesystems (ext4,
// xfs, btrfs, tmpfs) provide; network filesystems are not supported.
package localblob
