package staging

import (
	"context"
	"errors"
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
