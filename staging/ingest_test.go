package staging

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sys/unix"
)

// failingReader fails the test if anything reads it.
type failingReader struct{ t *testing.T }

func (r failingReader) Read(p []byte) (int, error) {
	r.t.Error("the source was read")
	return 0, errors.New("read")
}

// stagingFree is the room the staging directory's file system has.
func (r *writerRig) stagingFree(t *testing.T) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(r.cfg.StagingDir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Frsize
}

// TestWriterIngestRoom: an ingestion of a source the staging directory
// has no room for is ENOSPC before a byte of it is read (audit 14: a
// sparse source filled the disk for everyone first); one that fits is
// ingested.
func TestWriterIngestRoom(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	free := r.stagingFree(t)
	_, err := r.w.Ingest(ctx, r.id, "huge", "file:///src/huge", failingReader{t}, free+1<<30, nil, layout.BlobOptions{})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("ingest of %d bytes with %d free: %v, want ENOSPC", free+1<<30, free, err)
	}
	if _, err := r.w.Ingest(ctx, r.id, "small", "file:///src/small", strings.NewReader("small\n"), 6, nil, layout.BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.bodyOf(t, "small"); got != "small\n" {
		t.Errorf("small holds %q", got)
	}
}

// blockingReader blocks until its channel is closed, then fails.
type blockingReader struct {
	started chan<- struct{}
	release <-chan struct{}
}

func (r blockingReader) Read(p []byte) (int, error) {
	close(r.started)
	<-r.release
	return 0, errors.New("released")
}

// TestWriterIngestRoomShared: two ingestions that each fit the staging
// directory's room, but not both, are not both let through: the first
// holds its size until it ends (review 12: each passed the check against
// the same free space).
func TestWriterIngestRoomShared(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	each := r.stagingFree(t) * 6 / 10
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := r.w.Ingest(ctx, r.id, "one", "file:///src/one", blockingReader{started, release}, each, nil, layout.BlobOptions{})
		first <- err
	}()
	<-started // the first one streams
	_, err := r.w.Ingest(ctx, r.id, "two", "file:///src/two", failingReader{t}, each, nil, layout.BlobOptions{})
	close(release)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a second ingestion of %d bytes beside one of %d: %v, want ENOSPC", each, each, err)
	}
	if err := <-first; err == nil {
		t.Error("the first ingestion, whose source failed, succeeded")
	}
	// Released: the room is back.
	if _, err := r.w.Ingest(ctx, r.id, "three", "file:///src/three", strings.NewReader("3"), 1, nil, layout.BlobOptions{}); err != nil {
		t.Fatal(err)
	}
}

// spillThenBlock yields n bytes, then (once they are all written to the
// spill file) signals started and blocks until release, then EOF.
type spillThenBlock struct {
	left    int64
	started chan<- struct{}
	release <-chan struct{}
}

func (r *spillThenBlock) Read(p []byte) (int, error) {
	if r.left > 0 {
		k := min(int64(len(p)), r.left)
		clear(p[:k])
		r.left -= k
		return int(k), nil
	}
	close(r.started)
	<-r.release
	return 0, io.EOF
}

// TestWriterIngestRoomStaged: what an ingestion under way has staged is
// gone from the free space statfs reports, and was still counted in its
// reservation too: a second ingestion that fit the room left was ENOSPC
// (review 13). On a tmpfs of its own, so that free space is exact.
func TestWriterIngestRoomStaged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=128m"); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	r := newWriterRigCfg(t, func(c *Config) { c.StagingDir = dir })
	ctx := context.Background()
	const mb = 1 << 20
	a := int64(24 * mb)
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := r.w.Ingest(ctx, r.id, "one", "file:///src/one", &spillThenBlock{left: a, started: started, release: release}, a, nil, layout.BlobOptions{})
		first <- err
	}()
	<-started // a's bytes are all in its spill file
	free := r.stagingFree(t)
	b := int64(30 * mb)
	t.Logf("free after a spilled: %d MiB; b needs %d MiB + the 64 MiB reserve; a needs nothing more", free/mb, b/mb)
	_, err := r.w.Ingest(ctx, r.id, "two", "file:///src/two", &spillThenBlock{left: b, started: make(chan struct{}), release: closed()}, b, nil, layout.BlobOptions{})
	close(release)
	if errors.Is(err, syscall.ENOSPC) && b+ingestReserve <= free {
		t.Errorf("ingestion of %d MiB with %d MiB free (the 64 MiB reserve beyond it) and nothing else to come: %v", b/mb, free/mb, err)
	}
	<-first
}

func closed() <-chan struct{} { c := make(chan struct{}); close(c); return c }
