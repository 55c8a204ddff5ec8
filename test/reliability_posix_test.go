package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/pugmark/pugfs/layout"
)

// The write side of go-fuse's posixtest suite, on a writable session
// directory of a read-write mount. TestPosix (posix_test.go) runs the
// read side; the two lists below and relPosixReadSide account for every
// entry of posixtest.All.

// relPosixWrite are the write-side checks that apply, and pass.
var relPosixWrite = []string{
	"AppendWrite",      // O_APPEND writes land at the end
	"TruncateFile",     // ftruncate through a handle
	"TruncateNoFile",   // truncate(2) by path
	"ParallelFileOpen", // concurrent O_RDWR writers of one file
	"MkdirRmdir",       // local directories
	"RenameOpenDir",    // rename of a directory with an open handle
	"FcntlFlockSetLk",  // F_SETLK on a file (the kernel's local locks)
	"FileBasic",        // the create mode, kept as posix-mode
	"FstatDeleted",     // nlink 0 of unlinked open files, the rest of stat unchanged
	"NlinkZero",        // nlink 0 of an open file replaced by a rename
	// rename keeps the inode number (inoKeeper)
	"RenameOverwriteDestExist",
	"RenameOverwriteDestNoExist",
}

// relPosixWriteNotApplicable are the write-side checks that do not apply
// to a bucket of descriptors, and why.
var relPosixWriteNotApplicable = map[string]string{
	"Link":                "hard links: a name is one descriptor slot; a link is a file of its own with one link",
	"LinkUnlinkRename":    "hard links (a link is a file of its own with one link)",
	"Fallocate":           "fallocate(2): a blob has no preallocated space (ENOTSUP)",
	"FallocateKeepSize":   "fallocate(2) (ENOTSUP)",
	"FcntlFlockLocksFile": "expects a lock held through one open file to block another open of it; locks are not part of the bucket model",
	"Tmpfile":             "O_TMPFILE: an unnamed file cannot be a descriptor (ENOTSUP)",
	"SymlinkReadlink":     "symlink(2) in a session ingests the URL it names (tree.md); /foobar is not one (EINVAL)",
	"SetattrSymlink":      "symlink(2) to an arbitrary target (EINVAL), then lutimes",
	"OpenSymlinkRace":     "symlink(2) to arbitrary targets (EINVAL)",
	"XAttr":               "sets arbitrary user.* attributes; only user.pugmark.meta.*, .content-type and .schema-url can be set (ENOTSUP)",
	"XAttrLarge":          "large arbitrary user.* attributes (ENOTSUP)",
}

// relPosixReadSide are run on the read side, by TestPosix (FdLeak by
// TestPosixFdLeak, alone).
var relPosixReadSide = []string{"DirSeek", "DirectIO", "FdLeak", "FileLarge", "LseekEnxioCheck",
	"LseekHoleSeeksToEOF", "OpenAt", "ReadDirBasic", "ReadDirConsistency"}

// TestReliabilityPosixWriteSide runs relPosixWrite, each in a fresh
// session, and then checks that what each left in its directory is what
// the bucket committed: every file visible reads the same as its slot,
// and no slot is missing from the directory.
//
// What it protects: POSIX write semantics as go-fuse's suite defines
// them. Breaking O_APPEND offsets, truncation of staged files, concurrent
// writers, directory rename with open handles or rename over a file fails
// the suite; committing something other than what the tree shows fails
// the bucket check.
func TestReliabilityPosixWriteSide(t *testing.T) {
	seen := map[string]string{}
	for _, n := range relPosixWrite {
		seen[n] = "write"
	}
	for n := range relPosixWriteNotApplicable {
		if seen[n] != "" {
			t.Errorf("%s is both applicable and not", n)
		}
		seen[n] = "n/a"
	}
	for _, n := range relPosixReadSide {
		seen[n] = "read"
	}
	for n := range posixtest.All {
		if seen[n] == "" {
			t.Errorf("posixtest %s is new: classify it", n)
		}
	}
	for n := range seen {
		if posixtest.All[n] == nil {
			t.Errorf("posixtest has no %s any more", n)
		}
	}
	bk := relLocalBucket(t)
	mnt := mount(t, bk)
	for _, n := range relPosixWrite {
		id := relSession(t, bk)
		dir := filepath.Join(mnt.Dir, "sessions", id.String())
		t.Run(n, func(t *testing.T) {
			posixtest.All[n](t, dir)
			if t.Failed() {
				return
			}
			// Files closed by the test's deferred closes are committed by
			// their release, just after: poll until the bucket agrees.
			var problems []string
			deadline := time.Now().Add(10 * time.Second)
			for {
				problems = relPosixAgree(t, bk, id, dir)
				if len(problems) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
	for n, why := range relPosixWriteNotApplicable {
		t.Logf("not applicable: %s: %s", n, why)
	}
}

// relPosixAgree compares what dir shows with what the bucket committed.
func relPosixAgree(t *testing.T, bk *Bucket, id layout.SessionID, dir string) []string {
	var problems []string
	slots := relLiveSlots(t, bk, id)
	shown := map[string]bool{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		shown[rel] = true
		got, err := os.ReadFile(p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("read %s: %v", rel, err))
			return nil
		}
		e, ok := slots[rel]
		if !ok {
			problems = append(problems, rel+" is shown but not committed")
			return nil
		}
		if b := relSlotBody(t, bk, e); !bytes.Equal(b, got) {
			problems = append(problems, fmt.Sprintf("%s shows %q, the bucket has %q", rel, relHead(got), relHead(b)))
		}
		return nil
	})
	for name := range slots {
		if !shown[name] && !strings.HasPrefix(name, ".") {
			problems = append(problems, name+" is committed but not shown")
		}
	}
	return problems
}
