package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// Local resources: a full staging disk, an unwritable cache directory,
// too few file descriptors.

// relTmpfs mounts a tmpfs of the given size (and options) on a fresh
// directory, unmounted at cleanup.
func relTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestReliabilityStagingDiskFull: with the cache directory (and so the
// staging directory) on a 2 MiB tmpfs, writing a 4 MiB file fails with
// ENOSPC, from write(2) or close(2), and nothing of it is committed: the
// name is not in the bucket, not even with the part that fit. Small writes
// work again once the failed file is gone, and the mount stays up.
//
// Removing the protection (committing what a staged file holds after one
// of its writes failed) commits the first ~2 MiB as if they were the file.
func TestReliabilityStagingDiskFull(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	cache := relTmpfs(t, "size=2m")
	mnt := mount(t, bk, "--cache-dir", cache)
	sd := filepath.Join(mnt.Dir, "sessions", id.String())
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
	f, err := os.Create(filepath.Join(sd, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.Write(big)
	cerr := f.Close()
	t.Logf("write: %v; close: %v", werr, cerr)
	if !errors.Is(werr, syscall.ENOSPC) && !errors.Is(cerr, syscall.ENOSPC) {
		t.Fatalf("writing 4 MiB into a 2 MiB staging directory: write %v, close %v; want ENOSPC", werr, cerr)
	}
	if cerr == nil {
		t.Errorf("close(2) returned 0 for a file whose write failed with ENOSPC: the data is not all there")
	}
	// Nothing committed half, now or when the release runs.
	relWait(t, 5*time.Second, "the failed file's space freed (its release ran)", func() bool {
		var st syscall.Statfs_t
		syscall.Statfs(cache, &st)
		return st.Bfree*uint64(st.Bsize) > 1<<20
	})
	if e, ok := relLiveSlots(t, bk, id)["big.bin"]; ok {
		t.Fatalf("big.bin was committed (%d bytes of %d) although its write failed", e.Size, len(big))
	}
	if err := os.WriteFile(filepath.Join(sd, "small.txt"), []byte("fits\n"), 0o644); err != nil {
		t.Fatalf("a small write after the failure: %v", err)
	}
	if e, ok := relLiveSlots(t, bk, id)["small.txt"]; !ok || string(e.Data) != "fits\n" {
		t.Fatalf("small.txt: %+v %v", e, ok)
	}
	if !relAlive(mnt) {
		t.Fatal("the mount died")
	}
}

// TestReliabilityStagingRoomFromCopies: the cache directory's copies of
// bodies the mount uploaded share the staging directory's file system, and
// may fill it to the 5% the blob cache leaves free. A staged write that
// then finds no room gets it back from those copies (they can be fetched
// again) and goes on: it was ENOSPC again and again for as long as the
// copies stayed (audit 37).
func TestReliabilityStagingRoomFromCopies(t *testing.T) {
	// On S3: from a local bucket only what is read is copied.
	bk := openBucket(t, testbucket.S3)
	id := relSession(t, bk)
	cache := relTmpfs(t, "size=32m")
	mnt := mount(t, bk, "--cache-dir", cache)
	sd := filepath.Join(mnt.Dir, "sessions", id.String())
	body := func(i, size int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("%015d\n", i)), size/16)
	}
	for i := range 24 {
		if err := os.WriteFile(filepath.Join(sd, fmt.Sprintf("f%02d", i)), body(i, 5<<18), 0o644); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
	}
	kept := dirBytes(t, filepath.Join(cache, "blobs"))
	if kept < 16<<20 {
		t.Fatalf("the cache directory keeps %d bytes of copies: too few to fill it", kept)
	}
	big := body(99, 16<<20)
	if err := os.WriteFile(filepath.Join(sd, "big.bin"), big, 0o644); err != nil {
		t.Fatalf("a 16 MiB write with %d bytes of copies in the 32 MiB cache directory: %v", kept, err)
	}
	if got, err := os.ReadFile(filepath.Join(sd, "big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big.bin reads back %d bytes, %v", len(got), err)
	}
	for i := range 24 {
		if got, err := os.ReadFile(filepath.Join(sd, fmt.Sprintf("f%02d", i))); err != nil || !bytes.Equal(got, body(i, 5<<18)) {
			t.Fatalf("f%02d after its copy was given back: %d bytes, %v", i, len(got), err)
		}
	}
}

// dirBytes is the size of the regular files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReliabilityCacheDirUnwritable: a cache directory that cannot be
// written (a read-only file system) does not stop the mount: it warns,
// stages elsewhere, and reads and writes work.
//
// Removing the protection (failing when the staging directory cannot be
// made) makes the mount exit at start.
func TestReliabilityCacheDirUnwritable(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	files := relSeedFiles(t, bk, id, 4, 11)
	cache := relTmpfs(t, "size=1m,ro")
	mnt := mount(t, bk, "--cache-dir", cache)
	if l := mnt.Log(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, cache) {
		t.Errorf("no warning naming the cache directory:\n%s", l)
	}
	relCheckReads(t, mnt, id, files)
	sd := filepath.Join(mnt.Dir, "sessions", id.String())
	if err := os.WriteFile(filepath.Join(sd, "w.txt"), []byte("staged elsewhere\n"), 0o644); err != nil {
		t.Fatalf("write with an unwritable cache directory: %v", err)
	}
	if e, ok := relLiveSlots(t, bk, id)["w.txt"]; !ok || string(e.Data) != "staged elsewhere\n" {
		t.Fatalf("w.txt: %+v %v", e, ok)
	}
}

// TestReliabilityTooManyOpenFiles: pugfs limited to 64 file descriptors
// (RLIMIT_NOFILE) while a client holds 100 files open for writing (each
// is a staging file in pugfs): the opens past the limit fail with EMFILE,
// ENFILE or EIO, the others work, nothing crashes, the log says why (once),
// and once the client closes its files the mount serves reads and writes
// again.
//
// Removing the protection (a panic or a fatal exit on a failed open, or
// an accept/read loop that gives up on EMFILE) kills the mount.
func TestReliabilityTooManyOpenFiles(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("no prlimit")
	}
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	files := relSeedFiles(t, bk, id, 8, 12)
	mnt := startMountCmd(t, bk, t.TempDir(), func(argv []string) *exec.Cmd {
		return exec.Command("prlimit", append([]string{"--nofile=64:64", "--"}, argv...)...)
	})
	t.Cleanup(func() { mnt.Stop(t) })
	sd := filepath.Join(mnt.Dir, "sessions", id.String())
	var open []*os.File
	fails := map[string]int{}
	for i := 0; i < 100; i++ {
		f, err := os.Create(filepath.Join(sd, fmt.Sprintf("held%03d", i)))
		if err != nil {
			var e syscall.Errno
			if !errors.As(err, &e) || (e != syscall.EMFILE && e != syscall.ENFILE && e != syscall.EIO) {
				t.Fatalf("open %d: %v, want EMFILE, ENFILE or EIO", i, err)
			}
			fails[e.Error()]++
			continue
		}
		f.Write([]byte("x"))
		open = append(open, f)
	}
	t.Logf("%d opens held, failures %v", len(open), fails)
	if len(fails) == 0 {
		t.Fatal("no open failed: the limit was not reached, the test tested nothing")
	}
	if !relAlive(mnt) {
		t.Fatalf("the mount died:\n%s", mnt.Log())
	}
	// Said in the log, once for all the failed opens (audit 31: every
	// open of the mount failed, and nothing said why).
	if n := strings.Count(mnt.Log(), "out of file descriptors"); n != 1 {
		t.Errorf("the log says %d times that pugfs is out of file descriptors, want once:\n%s", n, mnt.Log())
	}
	for _, f := range open {
		f.Close()
	}
	// The mount serves again: reads, and new writes.
	relWait(t, 20*time.Second, "writes work again", func() bool {
		return os.WriteFile(filepath.Join(sd, "after.txt"), []byte("after\n"), 0o644) == nil
	})
	relCheckReads(t, mnt, id, files)
	if e, ok := relLiveSlots(t, bk, id)["after.txt"]; !ok || string(e.Data) != "after\n" {
		t.Fatalf("after.txt: %+v %v", e, ok)
	}
	if !relAlive(mnt) {
		t.Fatalf("the mount died:\n%s", mnt.Log())
	}
}
