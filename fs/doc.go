// Package fs is the go-fuse node tree of a pugfs mount (tree.md): it maps
// each FUSE operation on a path to a call of the read side (package cache
// for session states, package blobcache for blob bodies) or of the write
// engine (package staging), and maps the errors back to errnos. It never
// builds a bucket key, never updates a cache after a write (the write
// engine does), and every errno it returns comes from errnoOf
// (errno.go), whose ordered table is the whole mapping.
//
// # Files, by tree path
//
//	fs.go          the mount: Config, FS, Mount, the root directory
//	root.go        /.pugmark/ (bucket, flags, stats)
//	sessions.go    sessions/ and a session's directories, read side
//	slots.go       the live session tree, writable: create, write, rename,
//	               unlink, setattr, xattrs, each a call of staging.Writer
//	history.go     sessions/<id>/.pugmark/: snapshots/, at/, seq/, forks/
//	byhour.go      by-hour/<hour>/<id>
//	names.go       names/<name>, symlinks from refs/sessions/
//	refs.go        refs/, read and written as one-line files
//	memories.go    memories/<namespace>/<record>, merged on close (§8.3)
//	buffered.go    the whole-file write handles of memory records and refs
//	objects.go     objects/sha256:<hex>, raw blobs
//	failed.go      .pugmark/failed/: the bytes of commits that failed for good
//	node.go        the generic directory, file and link nodes the above share
//	noopen.go      read-only mounts without OPEN (the kernel's no_open), and
//	               the snapshots of changing files that it needs
//	pinned.go      reads from verified disk copies: spliced READ replies and
//	               FUSE passthrough, and the kernel's rules for it
//	xattroff.go    --xattrs=off: every extended attribute request ENOSYS
//	kernelstats.go the kernel request counters of .pugmark/stats
//	errno.go       the errno table; interrupts.go, why FUSE INTERRUPT is ignored
//
// What programs look up, list and read is also told to package readahead,
// which fetches ahead of traversals (a session's files, a name across
// sessions).
//
// # Where a write goes
//
// A write to a session file is slotFile/whandle (slots.go) calling
// staging.Writer: see package staging for the path from close(2) to the
// bucket, the group commit and the lock order. After a commit the writer
// calls FS.notifyChanged, which tells the kernel, from a background queue
// (notify.go), which names changed. Memory records and refs are written
// here (memories.go, refs.go) as one layout call each on close.
//
// # Locks
//
// The nodes hold little state of their own. memWrites (memories.go)
// documents its two leaf locks; a bufHandle's commitMu is taken before
// its mu and never across another node's lock; inoKeeper.mu is taken
// before a staged file's (a link's source is asked for its digest:
// inoKeeper.sharesLocked), and the notifier's lock is a leaf. The write
// engine's locks are staging's.
package fs
