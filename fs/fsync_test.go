package fs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
	"golang.org/x/sys/unix"
)

// TestMountFsync: fsync(2) and fdatasync(2) succeed on every file and
// directory of the tree, on read-write and read-only mounts, as on a
// disk file system: everything outside a session's staged files is
// durable when the call that changed it returned. They were EOPNOTSUPP
// everywhere but in sessions, which failed the write-rename-fsync-the-
// directory pattern in memories/ and refs/ and `sync FILE`. An open
// record or ref still writes itself at fsync, before its close: go-fuse
// asks the node before the handle, so a node's fsync must hand it on.
func TestMountFsync(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	const id = "0123456789abcdef0123456789abcdef"
	rw := testMount(t, store, nil)
	sh(t, rw, "mkdir -p sessions/"+id+"/d memories/ns && echo f > sessions/"+id+"/d/f && echo rec > memories/ns/r && echo "+id+" > refs/r")
	ro := testMount(t, store, func(c *Config, _ *cache.Options) { c.ReadOnly = true })

	paths := []string{
		".", "sessions", "sessions/" + id, "sessions/" + id + "/d", "sessions/" + id + "/d/f",
		"sessions/" + id + "/.pugmark", "sessions/" + id + "/.pugmark/at/1", "sessions/" + id + "/.pugmark/at/1/d/f",
		"sessions/" + id + "/.pugmark/log.jsonl", "memories", "memories/ns", "memories/ns/r",
		"refs", "refs/r", "objects", "names", "by-hour", ".pugmark", ".pugmark/stats",
	}
	for _, mnt := range []string{rw, ro} {
		for _, p := range paths {
			fd, err := unix.Open(filepath.Join(mnt, p), unix.O_RDONLY, 0)
			if err != nil {
				t.Errorf("open %s: %v", p, err)
				continue
			}
			if err := unix.Fsync(fd); err != nil {
				t.Errorf("fsync %s (read-only %v): %v", p, mnt == ro, err)
			}
			if err := unix.Fdatasync(fd); err != nil {
				t.Errorf("fdatasync %s (read-only %v): %v", p, mnt == ro, err)
			}
			unix.Close(fd)
		}
	}

	ctx := context.Background()
	write := func(path, body string) int {
		t.Helper()
		fd, err := unix.Open(filepath.Join(rw, path), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fsync(fd); err != nil {
			t.Fatalf("fsync of %s open for writing: %v", path, err)
		}
		return fd
	}
	fd := write("memories/ns/new", "fresh\n")
	v, err := store.LatestMemoryVersion(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := store.ReadMemory(ctx, "ns", v)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range ds {
		found = found || d.Name == "new"
	}
	if !found {
		t.Errorf("a record fsynced before its close is not in the bucket (version %d)", v)
	}
	unix.Close(fd)

	fd = write("refs/r2", id+"\n")
	if r, err := store.ReadRef(ctx, "r2"); err != nil || r.Target != id {
		t.Errorf("a ref fsynced before its close: %+v, %v", r, err)
	}
	unix.Close(fd)
}

// TestMountRefFsyncKeepsNothing: vim fsyncs its swap file, which it
// makes beside the file it edits (refs/.x.swp, a ref's name), then
// removes it; every edit of a ref left the swap file's bytes in
// .pugmark/failed/ twice, with an ERROR line. An fsync of bytes that are
// no ref is EINVAL and keeps nothing; a close that cannot write them
// still keeps them, once.
func TestMountRefFsyncKeepsNothing(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	failed := t.TempDir()
	mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.FailedDir = failed })
	kept := func() int {
		t.Helper()
		n := 0
		filepath.WalkDir(failed, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				n++
			}
			return nil
		})
		return n
	}
	swap := []byte("b0VIM 9.1\x00\x00\x00\x10root\x00host\x00/m/refs/x\x00")
	for _, tc := range []struct {
		name   string
		remove bool // removed while open, as vim removes its swap file
		kept   int
	}{{".x.swp", true, 0}, {".y.swp", false, 1}} {
		path := filepath.Join(mnt, "refs", tc.name)
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, swap); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fsync(fd); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("fsync of %s holding no ref: %v, want EINVAL", tc.name, err)
		}
		if n := kept(); n != 0 {
			t.Errorf("fsync of %s kept %d files", tc.name, n)
		}
		if tc.remove {
			if err := unix.Unlink(path); err != nil {
				t.Fatal(err)
			}
		}
		unix.Close(fd) // the close's error goes nowhere, as a shell's would
		if n := kept(); n != tc.kept {
			t.Errorf("%s closed (removed while open %v): %d files kept, want %d", tc.name, tc.remove, n, tc.kept)
		}
	}
}
