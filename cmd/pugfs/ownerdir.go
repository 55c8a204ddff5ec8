package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Directories owned by a live process. The staging directory of a mount
// and the private mountpoint of a pugfs exec live in a state directory
// that several pugfs processes share (every mount and exec of a bucket,
// by default), and one that starts removes those whose owner is gone (a
// SIGKILL, a crash). A PID cannot tell: the inner process of every pugfs
// exec is PID 1 of a PID namespace of its own, so two runs at once took
// the same staging/1 and exec/1, and the second one's clean-up removed the
// first one's staged files; nor can it see or signal a host PID. So each
// such directory <root>/<name> has a lock file <root>/<name>.lock on which
// its owner holds an flock while it lives: locks are per open file, work
// across namespaces, and the kernel drops them when their owner dies,
// however it dies.

// lockSuffix ends the name of a directory's lock file.
const lockSuffix = ".lock"

// newLockSuffix ends the name a lock file has while its owner locks it,
// before it takes its name (ownDir).
const newLockSuffix = ".lock-new"

// ownDir makes a new directory under root, held by this process until
// release (which the caller calls once it has removed dir, or not: an
// unlocked directory is the next sweep's). The lock file comes first, so
// a sweep never sees the directory without it, and it takes its name
// locked: made and locked under a name sweeps leave alone, then renamed.
// A sweep that found a new lock file before its lock took it for a dead
// owner's and removed it (review 5); the owner then made another, and
// with a sweep running in a loop (a test on a loaded machine) gave up
// after 16 (CI).
func ownDir(root string) (dir string, release func(), err error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", nil, err
	}
	var lock *os.File
	for attempt := 0; ; attempt++ {
		if attempt == 16 {
			return "", nil, fmt.Errorf("lock a directory under %s: %d names taken", root, attempt)
		}
		var b [8]byte
		rand.Read(b[:])
		dir = filepath.Join(root, "p"+hex.EncodeToString(b[:])) // never a PID: see orphans
		lock, err = os.OpenFile(dir+newLockSuffix, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			lock.Close()
			os.Remove(dir + newLockSuffix)
			return "", nil, fmt.Errorf("lock %s: %w", dir+newLockSuffix, err)
		}
		err = renameNoReplace(dir+newLockSuffix, dir+lockSuffix)
		if err == nil {
			break
		}
		lock.Close()
		os.Remove(dir + newLockSuffix)
		if !errors.Is(err, unix.EEXIST) {
			return "", nil, fmt.Errorf("name the lock file %s: %w", dir+lockSuffix, err)
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		lock.Close()
		os.Remove(dir + lockSuffix)
		return "", nil, err
	}
	return dir, func() {
		os.Remove(dir + lockSuffix)
		lock.Close()
	}, nil
}

// renameNoReplace renames from to to unless to exists (EEXIST): with
// RENAME_NOREPLACE, or on a file system without it, a hard link and the
// removal of from. Either way the open file keeps its lock.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if err := unix.Link(from, to); err != nil {
		return err
	}
	return os.Remove(from)
}

// orphans calls gone for each directory under root whose owner is gone,
// with the owner's lock held (so no other sweep takes it too), and then
// removes its lock file. A directory is an orphan when its lock file can
// be locked, or when it has none: a name that is a number is an older
// pugfs's, named by its PID, and an orphan when no pugfs runs under that
// PID; a name of ownDir's lost its lock file with its owner's release.
// Anything else is left alone.
func orphans(root string, gone func(dir string)) {
	ents, _ := os.ReadDir(root)
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	for _, e := range ents {
		name := e.Name()
		if base, ok := strings.CutSuffix(name, lockSuffix); ok {
			sweepLocked(filepath.Join(root, base), names[base], gone)
			continue
		}
		if base, ok := strings.CutSuffix(name, newLockSuffix); ok && ownName(base) {
			sweepNewLock(filepath.Join(root, name))
			continue
		}
		if !e.IsDir() || names[name+lockSuffix] {
			continue
		}
		if pid, err := strconv.Atoi(name); err == nil {
			if pid > 0 && !pugfsRunning(pid) {
				gone(filepath.Join(root, name)) // an older pugfs's, gone
			}
			continue
		}
		if ownName(name) {
			// A listing is no snapshot: a lock file renamed into place
			// while it was read can be missing from it, with the
			// directory its owner made next there (a live directory was
			// swept so, once in 500 starts under load). The owner names
			// its lock before it makes the directory: looked at again,
			// a live one's is there.
			if _, err := os.Lstat(filepath.Join(root, name+lockSuffix)); err == nil {
				continue
			}
			gone(filepath.Join(root, name))
		}
	}
}

// ownName reports whether name is one ownDir makes: "p" and 16 hex
// digits. Nothing else in root is touched.
func ownName(name string) bool {
	if len(name) != 17 || name[0] != 'p' {
		return false
	}
	_, err := hex.DecodeString(name[1:])
	return err == nil
}

// sweepNewLock removes a lock file that never took its name (ownDir):
// its owner died between making and renaming it. One that is not a
// minute old may be a live owner's that has not locked it yet.
func sweepNewLock(path string) {
	lock, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer lock.Close()
	fi, err := lock.Stat()
	if err != nil || time.Since(fi.ModTime()) < time.Minute {
		return
	}
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		os.Remove(path)
	}
}

// sweepLocked hands dir to gone if its lock can be taken.
func sweepLocked(dir string, exists bool, gone func(string)) {
	lock, err := os.OpenFile(dir+lockSuffix, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer lock.Close()
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // its owner lives
	}
	if exists {
		gone(dir)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		os.Remove(dir + lockSuffix)
	}
}

// privateDir makes dir (mode 0700), or takes it if it exists, only as a
// directory of this user's that no other user can write or read: a
// directory another user made first under a world-writable one (/tmp)
// would hold the mount's staged writes and verified blob copies, readable
// and replaceable by that user (audit 29). One of ours left too open is
// closed (0700); a symbolic link, or one of another user's, is an error.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory (a symbolic link?): not used for private files", dir)
	case int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to uid %d, not to this user (%d): not used for private files", dir, st.Uid, os.Getuid())
	case st.Mode&0o077 != 0:
		return os.Chmod(dir, 0o700)
	}
	return nil
}
