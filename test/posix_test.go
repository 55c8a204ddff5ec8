package e2e

import (
	"context"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// posixRead are the checks of go-fuse's posixtest that test the read side:
// listings (size, seek, consistency across opens), reads (short reads at
// EOF, ReadAt, O_DIRECT), lseek SEEK_HOLE/SEEK_DATA and openat (fd leaks:
// TestPosixFdLeak).
// Each writes its own files first; they run in a fresh session directory
// of a read-write mount, so the files are committed through pugfs and read
// back from the bucket. posixtest runs in this process and uses package
// os; that is safe because the mount is a subprocess.
var posixRead = []string{
	"DirSeek",
	"DirectIO",
	"FileLarge",
	"LseekEnxioCheck",
	"LseekHoleSeeksToEOF",
	"OpenAt",
	"ReadDirBasic",
	"ReadDirConsistency",
}

// posixNotRead are the other checks of posixtest.All, and why they do not
// apply to a read-only view of a bucket.
var posixNotRead = map[string]string{
	// Counts this process's file descriptors: run alone.
	"FdLeak": "run alone (TestPosixFdLeak): it counts this process's descriptors, which parallel tests open too",
	// The write side: a read-only view refuses them (EROFS); on a
	// read-write mount they pass and the write-side tests cover them.
	"AppendWrite":                "write side: O_APPEND writes",
	"TruncateFile":               "write side: ftruncate",
	"TruncateNoFile":             "write side: truncate(2)",
	"ParallelFileOpen":           "write side: concurrent O_RDWR writers of one file",
	"MkdirRmdir":                 "write side: mkdir/rmdir of a local directory",
	"RenameOpenDir":              "write side: rename of directories",
	"RenameOverwriteDestNoExist": "write side: rename (TestPosixSessionDirs)",
	"RenameOverwriteDestExist":   "write side: rename over an existing name keeps the source inode (TestPosixSessionDirs)",
	"NlinkZero":                  "write side: nlink of an open file whose name was replaced by a rename (TestReliabilityPosixWriteSide)",
	"FstatDeleted":               "write side: nlink of open files after unlink (TestPosixSessionDirs)",
	"FileBasic":                  "write side: the create mode, kept as posix-mode (TestPosixSessionDirs)",
	// Not in the model: a name is one descriptor slot with no links and
	// no locks.
	"Link":                "hard links: a name is a descriptor slot; a link is a file of its own with one link",
	"LinkUnlinkRename":    "hard links (a link is a file of its own with one link)",
	"Fallocate":           "fallocate: a blob has no preallocated space",
	"FallocateKeepSize":   "fallocate",
	"FcntlFlockSetLk":     "POSIX locks: nothing in a bucket to lock",
	"FcntlFlockLocksFile": "POSIX locks",
	"Tmpfile":             "O_TMPFILE: an unnamed file cannot be a descriptor",
	// Symbolic links in a session are URL ingestion (tree.md: ln -s
	// s3://bucket/key name); the links the tree shows (names/, parent,
	// forks/) are read-only.
	"SymlinkReadlink": "symlink(2) ingests the URL it names; /foobar is not one",
	"SetattrSymlink":  "symlink(2) to an arbitrary target, and lutimes on it",
	"OpenSymlinkRace": "needs symlink(2) to /etc/passwd in the tree",
	// Extended attributes are the descriptor's (user.pugmark.*).
	"XAttr":      "sets user.* attributes of its own; only user.pugmark.* exist",
	"XAttrLarge": "large arbitrary xattrs",
}

func TestPosix(t *testing.T) {
	t.Parallel()
	classified := map[string]bool{}
	for _, n := range posixRead {
		classified[n] = true
	}
	for n := range posixNotRead {
		if classified[n] {
			t.Errorf("posixtest %s is listed as applicable and as not", n)
		}
		classified[n] = true
	}
	for n := range posixtest.All {
		if !classified[n] {
			t.Errorf("posixtest %s is new: add it to posixRead or posixNotRead", n)
		}
	}
	for n := range classified {
		if posixtest.All[n] == nil {
			t.Errorf("posixtest has no %s any more", n)
		}
	}

	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	for _, n := range posixRead {
		id := newSession(t, bk)
		t.Run(n, func(t *testing.T) {
			posixtest.All[n](t, m.Dir+"/"+sess(id))
			// What the test wrote is in the bucket and reads back
			// the same through a listing of the session.
			if n == "ReadDirBasic" {
				v := latest(t, bk, id)
				if got := len(slots(t, bk, id)); v == 0 || got != 110 {
					t.Errorf("the bucket has %d slots at version %d, want 110", got, v)
				}
			}
		})
	}

	// Read-only views: listings are consistent across opens wherever
	// nothing can write.
	ro := mount(t, bk, "--read-only")
	id := newSession(t, bk)
	d := putDescNoFail(t, bk, "x/y.txt")
	if _, err := bk.Store.Commit(context.Background(), id, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", "sessions", sess(id), sess(id) + "/x", meta(id), meta(id) + "/at", meta(id) + "/at/1",
		meta(id) + "/at/1/x", meta(id) + "/snapshots", meta(id) + "/seq", "objects", ".pugmark"} {
		t.Run("ReadDirConsistency read-only /"+dir, func(t *testing.T) {
			posixtest.ReadDirConsistency(t, ro.Dir+"/"+dir)
		})
	}
}

func putDescNoFail(t *testing.T, bk *Bucket, name string) layout.Descriptor {
	t.Helper()
	defer rdCatch(t)
	return rdPutDesc(t, bk.Store, name, "text/plain", "", []byte("content of "+name+"\n"), fixT1)
}

// posixSession are the checks of go-fuse's posixtest that pass whole on a
// fresh session directory of a read-write mount (issue 16): reads, writes,
// create modes, renames that keep the inode, nlink of unlinked open files.
var posixSession = []string{
	"AppendWrite",
	"DirSeek",
	"FileBasic",
	"FileLarge",
	"FstatDeleted",
	"MkdirRmdir",
	"OpenAt",
	"ParallelFileOpen",
	"ReadDirBasic",
	"ReadDirConsistency",
	"RenameOverwriteDestExist",
	"RenameOverwriteDestNoExist",
	"TruncateFile",
	"TruncateNoFile",
}

// TestPosixFdLeak runs posixtest's FdLeak in a fresh session of a
// read-write mount, alone: it counts this process's open file descriptors
// before and after 100 reads through the mount, so a parallel test that
// opens a file or a socket meanwhile fails it (seen in CI: 24 descriptors
// of other tests). A top-level test without t.Parallel runs before the
// parallel ones are let go.
func TestPosixFdLeak(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	posixtest.All["FdLeak"](t, m.Dir+"/"+sess(newSession(t, bk)))
}

// TestPosixSessionDirs runs posixSession, each in a session of its own on
// one mount. posixtest runs in this process; the mount is a subprocess,
// so the two cannot deadlock each other (engineering.md).
func TestPosixSessionDirs(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	for _, n := range posixSession {
		if posixtest.All[n] == nil {
			t.Errorf("posixtest has no %s any more", n)
			continue
		}
		id := newSession(t, bk)
		t.Run(n, func(t *testing.T) { posixtest.All[n](t, m.Dir+"/"+sess(id)) })
	}
}
