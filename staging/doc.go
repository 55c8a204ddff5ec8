// Package staging is pugfs's write engine: it turns changes made through
// the mounted tree into commits of the storage layout, and it is the only
// code that does. It knows nothing of FUSE; package fs calls it once per
// operation and maps its errors to errnos (fs/errno.go).
//
// # Where a write goes
//
// open(2) for writing stages the file (Writer.Open, OpenFrom): a File, a
// spill file in the staging directory. Unless the open truncates, the File
// holds the committed content lazily: reads go to its blob, and the first
// write (or a cut to another size than nothing) copies it into the spill
// file; a File closed with its bytes unfetched (touch, chmod) commits a
// descriptor of the same blob. write(2), truncate(2) and setxattr change the
// File; its running SHA-256 follows appends, so a commit hashes only what
// was written elsewhere. close(2) commits it (Writer.Flush, then Release):
// the blob is stored from the spill file (layout.Store.PutBlobFile: on a
// local bucket on the same file system the spill file, an O_TMPFILE, is
// linked into the bucket as the blob, and the File copies its bytes to a
// new spill file before any later change: File.unshareLocked), and
// its descriptor joins the session's group commit: commits of one session
// that arrive within the group window share one snapshot (§4). After the
// snapshot landed, the Writer folds it into the session cache
// (States.Committed) and tells the front end which names changed (the
// kernel's caches are dropped from there). With CommitOnFsync, changes
// wait for fsync(2) and land as one snapshot; a file closed meanwhile is
// parked (park.go): its spill file gets a name and gives its descriptor
// back, so a batch may hold any number of files, and a crashed mount's
// closed files are kept by the next mount.
//
// rename(2), unlink(2) and chmod/utimes of committed files are snapshots
// of descriptors only (tombstones, re-pointed or re-described
// descriptors, §7): no blob is uploaded again. Directories made by mkdir
// stay local until a file is written below them: the layout stores
// files, not directories.
//
// A change is never dropped silently: a commit that fails returns its
// error to close(2) or fsync(2), and content whose commit failed for good
// (or was still staged at unmount) is kept under the failed directory.
//
// # Locks
//
// The lock order is written where Writer is declared: a session's
// fsyncMu, nsMu and commitMu, then Writer.mu, then File.mu; the session
// cache's locks come after all of them.
package staging
