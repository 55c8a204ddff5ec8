package blobcache

import (
	"bytes"
	"context"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/layout"
)

// diskFilled is a cache with a disk tier in dir holding n bodies of size
// bytes, each read whole once.
func diskFilled(t *testing.T, dir string, n, size int) (*Cache, []*layout.Descriptor) {
	t.Helper()
	src := newFakeBlobSource()
	c := newTestBlobCache(t, src, diskOpts(dir))
	var ds []*layout.Descriptor
	for i := range n {
		body := blobTestBody(size, uint64(100+i))
		d := &layout.Descriptor{Name: "x.bin", ContentType: "application/octet-stream", Digest: src.put(body), Size: int64(size)}
		if got, err := readAll(context.Background(), c, d, 64<<10); err != nil || len(got) != size {
			t.Fatalf("read %d: %d bytes, %v", i, len(got), err)
		}
		ds = append(ds, d)
	}
	c.disk.mu.Lock()
	entries := len(c.disk.index)
	c.disk.mu.Unlock()
	if entries != n {
		t.Fatalf("%d copies on disk, want %d", entries, n)
	}
	return c, ds
}

// TestGiveBackWaitsForAnotherEviction: a GiveBack while another eviction
// runs (the one a new copy's install starts, or another write that found
// the disk full) waits for it, then gives back what is still asked. It
// gave nothing back, and the write that asked was ENOSPC for the timing
// alone (review 39).
func TestGiveBackWaitsForAnotherEviction(t *testing.T) {
	c, _ := diskFilled(t, t.TempDir(), 4, 1<<20)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	remove := c.disk.root.Remove
	c.disk.removeFn = func(name string) error {
		once.Do(func() { close(started); <-release })
		return remove(name)
	}
	first := make(chan int64, 1)
	go func() { first <- c.GiveBack(1) }()
	<-started
	second := make(chan int64, 1)
	go func() { second <- c.GiveBack(2 << 20) }()
	// Released once the second has answered or waits for the first.
	for deadline := time.Now().Add(10 * time.Second); len(second) == 0 && !waitingIn("diskCache).giveBack"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second GiveBack neither answers nor waits")
		}
	}
	close(release)
	<-first
	if got := <-second; got <= 0 {
		t.Errorf("GiveBack(2 MiB) after another eviction gave back %d bytes, with 3 MiB of copies left on disk", got)
	}
}

// TestGiveBackFreesWhatItCounts: a copy a verify pass wrote stays open
// (the verified files, up to 64), and removing its name alone frees no
// disk space. GiveBack lets those files go and counts what the file
// system gained: it counted the names it removed, and the write that
// asked tried again into a file system as full as before (review 39).
func TestGiveBackFreesWhatItCounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	c, _ := diskFilled(t, dir, 1, 8<<20)
	free := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	before := free()
	n := c.GiveBack(1)
	after := free()
	if n <= 0 || after-before < n/2 {
		t.Errorf("GiveBack says it gave back %d bytes; the file system has %d bytes more free", n, after-before)
	}
}

// waitingIn reports whether a goroutine waits for a lock in fn.
func waitingIn(fn string) bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "sync.(*Mutex).Lock") {
			return true
		}
	}
	return false
}
