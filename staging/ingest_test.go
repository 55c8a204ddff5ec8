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

// TestWriterIngestRoom: an ingestion of a source the staging directory
// has no room for is ENOSPC before a byte of it is read (audit 14: a
// sparse source filled the disk for everyone first); one that fits is
// ingested.
func TestWriterIngestRoom(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	var st unix.Statfs_t
	if err := unix.Statfs(r.cfg.StagingDir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Frsize
	_, err := r.w.Ingest(ctx, r.id, "huge", "file:///src/huge", failingReader{t}, free+1<<30, 0, layout.BlobOptions{})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("ingest of %d bytes with %d free: %v, want ENOSPC", free+1<<30, free, err)
	}
	if _, err := r.w.Ingest(ctx, r.id, "small", "file:///src/small", strings.NewReader("small\n"), 6, 0, layout.BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.bodyOf(t, "small"); got != "small\n" {
		t.Errorf("small holds %q", got)
	}
}
