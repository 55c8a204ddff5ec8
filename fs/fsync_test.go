package fs

import (
	"context"
	"path/filepath"
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
