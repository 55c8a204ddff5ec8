package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
	"golang.org/x/sys/unix"
)

// testMount mounts a filesystem over store in a temp dir and unmounts it
// at cleanup. The test talks to it through separate processes (shell
// tools), never through mmap or fork from this process. mutate may change
// the config and the session cache's options first; the config's Logger
// is the caches' too.
func testMount(t *testing.T, store *layout.Store, mutate func(*Config, *cache.Options)) string {
	t.Helper()
	dir, unmount := mountFS(t, store, mutate, blobcache.Options{MemBytes: 64 << 20})
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return dir
}

// mountFS mounts a filesystem over store in a temp dir; unmount unmounts
// it and closes its caches, reporting the first error.
func mountFS(t *testing.T, store *layout.Store, mutate func(*Config, *cache.Options), bo blobcache.Options) (dir string, unmount func() error) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse is missing: the tests need FUSE (install fuse3, load the fuse module): %v", err)
	}
	cfg := Config{Store: store, BucketURL: "mem://", StagingDir: t.TempDir(), UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	var co cache.Options
	if mutate != nil {
		mutate(&cfg, &co)
	}
	co.Logger = cfg.Logger
	c, err := cache.New(store, co)
	if err != nil {
		t.Fatal(err)
	}
	bo.Logger = cfg.Logger
	bc, err := blobcache.New(store, bo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cache, cfg.Blobs = c, bc
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	srv, err := Mount(dir, f, MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	return dir, func() error {
		err := srv.Unmount()
		srv.Wait()
		f.Close()
		if cerr := bc.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("blob cache close: %w", cerr)
		}
		if cerr := c.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("cache close: %w", cerr)
		}
		return err
	}
}

// eventually polls script in dir until its output is want.
func eventually(t *testing.T, dir, script, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		out, err := exec.Command("bash", "-c", "cd '"+dir+"' && "+script).CombinedOutput()
		if got = string(out); err == nil && got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: still %q after 10s, want %q", script, got, want)
}

// sh runs script with bash inside dir. The cd happens in bash, after
// exec: a forked child of this process that touches the mount before
// exec can deadlock against the server in this process.
func sh(t *testing.T, dir, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", "cd '"+dir+"' && "+script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

func shFail(t *testing.T, dir, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", "cd '"+dir+"' && "+script)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("%s: succeeded, want failure\n%s", script, out)
	}
	return string(out)
}

func TestMountSmoke(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	body := []byte("hello pugfs\n")
	bi, _ := store.PutBlobBytes(ctx, body, layout.BlobOptions{})
	d := layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: "notes/hello.txt", Data: body, CreatedAt: time.Now()}
	if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
	mnt := testMount(t, store, nil)
	id := m.Session.String()
	if got := sh(t, mnt, "ls sessions"); strings.TrimSpace(got) != id {
		t.Fatalf("ls sessions = %q", got)
	}
	if got := sh(t, mnt, "cat sessions/"+id+"/notes/hello.txt"); got != string(body) {
		t.Fatalf("cat = %q", got)
	}
	if got := sh(t, mnt, "cat sessions/"+id+"/.pugmark/version"); got != "1\n" {
		t.Fatalf("version = %q", got)
	}
	sh(t, mnt, "echo written > sessions/"+id+"/new.txt")
	if got := sh(t, mnt, "cat sessions/"+id+"/new.txt"); got != "written\n" {
		t.Fatalf("new.txt = %q", got)
	}
	if got := sh(t, mnt, "cat sessions/"+id+"/.pugmark/version"); got != "2\n" {
		t.Fatalf("version after write = %q", got)
	}
	sh(t, mnt, "mv sessions/"+id+"/new.txt sessions/"+id+"/notes/moved.txt")
	if got := sh(t, mnt, "ls sessions/"+id+"/notes"); got != "hello.txt\nmoved.txt\n" {
		t.Fatalf("ls notes = %q", got)
	}
	sh(t, mnt, "rm sessions/"+id+"/notes/hello.txt")
	if got := sh(t, mnt, "ls sessions/"+id+"/notes"); got != "moved.txt\n" {
		t.Fatalf("ls notes after rm = %q", got)
	}
	shFail(t, mnt, "echo x > sessions/"+id+"/.pugmark/at/1/x")
	log, err := store.FullLog(ctx, m.Session, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := layout.Lookup(log, "notes/moved.txt"); !ok {
		t.Fatalf("moved.txt not in the bucket: %+v", log)
	}
}

// The kernel reads ahead of a sequential reader as far as pugfs asked in
// FUSE_INIT (1 MiB), not its FUSE default of 128 KiB (fs/bdi.go).
func TestMountKernelReadAhead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting a FUSE mount's read-ahead needs root")
	}
	mnt := testMount(t, layout.New(memblob.OpenBucket(nil), nil), nil)
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(mountReadAheadKB) {
		t.Fatalf("read_ahead_kb = %s, want %d", got, mountReadAheadKB)
	}
}

// A descriptor without created-at (§7 does not require it) shows its
// session's hour as its mtime, on every mount: the mount's start, shown
// before, changed with every mount, and rsync then copied the file again.
// A chmod keeps that time, as it keeps any file's.
func TestMountMtimeWithoutCreatedAt(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	body := []byte("no time\n")
	bi, err := store.PutBlobBytes(ctx, body, layout.BlobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: "f", Data: body}
	if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
	want := strconv.FormatInt(m.Session.Time().Unix(), 10)
	id := m.Session.String()
	for _, ro := range []bool{false, true} {
		mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.ReadOnly = ro })
		for _, p := range []string{"sessions/" + id + "/f", "sessions/" + id + "/.pugmark/at/1/f"} {
			if got := strings.TrimSpace(sh(t, mnt, "stat -c %Y "+p)); got != want {
				t.Errorf("read-only %v: mtime of %s = %s, want the session's hour %s", ro, p, got, want)
			}
		}
		if !ro {
			if got := strings.TrimSpace(sh(t, mnt, "chmod 600 sessions/"+id+"/f && stat -c %Y sessions/"+id+"/f")); got != want {
				t.Errorf("after chmod: mtime %s, want %s", got, want)
			}
		}
	}
}

// TestMountStatfs: a mount that writes reports its staging directory's
// space (df and shutil.disk_usage read 0 free before, and programs that
// check before writing refused to); a read-only one reports none; both
// give the name length limit.
func TestMountStatfs(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	for _, readOnly := range []bool{false, true} {
		staging := t.TempDir()
		mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.StagingDir, c.ReadOnly = staging, readOnly })
		var got, disk unix.Statfs_t
		if err := unix.Statfs(mnt, &got); err != nil {
			t.Fatal(err)
		}
		if err := unix.Statfs(staging, &disk); err != nil {
			t.Fatal(err)
		}
		if got.Namelen != layout.MaxNameComponent {
			t.Fatalf("read-only=%v: name length %d", readOnly, got.Namelen)
		}
		if readOnly {
			if got.Blocks != 0 || got.Bavail != 0 {
				t.Fatalf("read-only mount reports %d blocks, %d available", got.Blocks, got.Bavail)
			}
			continue
		}
		size, want := got.Blocks*uint64(got.Frsize), disk.Blocks*uint64(disk.Frsize)
		avail := got.Bavail * uint64(got.Frsize)
		if size != want/4096*4096 || avail == 0 || avail > size {
			t.Fatalf("mount reports %d bytes, %d available; its staging disk has %d", size, avail, want)
		}
	}
}

// TestMountRecordAttrs: a memory record keeps chmod and utimes as a
// session's file does (posix-mode, posix-mtime in its descriptor: rsync
// -a, cp -a, tar x and install failed on EPERM); a ref keeps no mode,
// owner or time, so a change of one is EPERM. chown to another owner is
// EPERM for both, setxattr ENOTSUP, and what changes nothing succeeds.
func TestMountRecordAttrs(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	mnt := testMount(t, store, nil)
	sh(t, mnt, "mkdir -p memories/ns && echo rec > memories/ns/r && echo 0123456789abcdef0123456789abcdef > refs/r")
	old := time.Unix(1e9, 0)
	stat := func(t *testing.T, path string) (uint32, time.Time) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode & 0o7777, time.Unix(st.Mtim.Unix())
	}
	for _, c := range []struct {
		path string
		kept bool // a record keeps mode and times
	}{{"memories/ns/r", true}, {"refs/r", false}} {
		path := filepath.Join(mnt, c.path)
		uid, gid := os.Getuid(), os.Getgid()
		change := error(syscall.EPERM)
		if c.kept {
			change = nil
		}
		for _, s := range []struct {
			what  string
			call  func() error
			want  error
			mode  uint32    // the mode after, when kept
			mtime time.Time // the mtime after, when kept and set
		}{
			{"chmod 600", func() error { return os.Chmod(path, 0o600) }, change, 0o600, time.Time{}},
			{"touch -d", func() error { return os.Chtimes(path, old, old) }, change, 0o600, old},
			{"chmod 644", func() error { return os.Chmod(path, 0o644) }, nil, 0o644, old},
			{"touch", func() error { return unix.UtimesNanoAt(unix.AT_FDCWD, path, nil, 0) }, nil, 0o644, time.Time{}},
			{"chown to another user", func() error { return os.Chown(path, uid+1234, gid) }, syscall.EPERM, 0o644, time.Time{}},
			{"chown to the mount's owner", func() error { return os.Chown(path, uid, gid) }, nil, 0o644, time.Time{}},
			{"setxattr", func() error { return unix.Setxattr(path, "user.pugmark.meta.k", []byte("v"), 0) }, syscall.ENOTSUP, 0o644, time.Time{}},
			{"removexattr", func() error { return unix.Removexattr(path, "user.pugmark.meta.k") }, syscall.ENOTSUP, 0o644, time.Time{}},
		} {
			if err := s.call(); !errors.Is(err, s.want) || (s.want == nil && err != nil) {
				t.Errorf("%s of %s = %v, want %v", s.what, c.path, err, s.want)
			}
			mode, mtime := stat(t, path)
			want := uint32(0o644)
			if c.kept {
				want = s.mode
			}
			if mode != want {
				t.Errorf("%s after %s: mode %o, want %o", c.path, s.what, mode, want)
			}
			if c.kept && !s.mtime.IsZero() && !mtime.Equal(s.mtime) {
				t.Errorf("%s after %s: mtime %v, want %v", c.path, s.what, mtime, s.mtime)
			}
		}
	}
	if got := sh(t, mnt, "cat memories/ns/r"); got != "rec\n" {
		t.Errorf("the record after its attribute changes: %q", got)
	}
	for _, dir := range []string{"memories/ns", "refs"} {
		if err := os.Symlink("target", filepath.Join(mnt, dir, "link")); !errors.Is(err, syscall.EPERM) {
			t.Errorf("ln -s in %s = %v, want EPERM (no links there; it was EROFS)", dir, err)
		}
	}
	for _, c := range []struct{ from, to string }{{"memories/ns/r", "memories/ns/hard"}, {"refs/r", "refs/hard"}} {
		if err := os.Link(filepath.Join(mnt, c.from), filepath.Join(mnt, c.to)); !errors.Is(err, syscall.EPERM) {
			t.Errorf("ln %s %s = %v, want EPERM (it was ENOTSUP)", c.from, c.to, err)
		}
	}
}

// TestMountInodeOutlivesRewrites: a file rewritten, appended to or cut
// through the mount is the same inode afterwards (as on any disk file
// system), so locks and open descriptors keep meaning the file: a
// descriptor's fstat follows the appends, and a lock taken before the
// rewrites excludes a lock taken on the path after them. Every commit
// used to give the file a new inode: flock read-modify-write loops lost
// updates, and SQLite's second connection took the database for moved.
func TestMountInodeOutlivesRewrites(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	mnt := testMount(t, store, nil)
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "sessions", m.Session.String(), "f")
	if err := os.WriteFile(path, []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what  string
		write func() error
		size  int64
	}{
		{"rewrite", func() error { return os.WriteFile(path, []byte("v2 longer\n"), 0o644) }, 10},
		{"append", func() error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("more\n")
			return errors.Join(err, f.Close())
		}, 15},
		{"truncate", func() error { return os.Truncate(path, 3) }, 3},
	} {
		if err := c.write(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		var byPath, byFd unix.Stat_t
		if err := unix.Stat(path, &byPath); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fstat(int(held.Fd()), &byFd); err != nil {
			t.Fatal(err)
		}
		if byPath.Ino != byFd.Ino || byFd.Size != c.size {
			t.Fatalf("after the %s: the path is inode %d, the held descriptor %d of size %d (want the same inode, size %d)",
				c.what, byPath.Ino, byFd.Ino, byFd.Size, c.size)
		}
		other, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Flock(int(other.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		other.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			t.Fatalf("after the %s: a second lock of the path = %v, want EWOULDBLOCK", c.what, err)
		}
	}
}
