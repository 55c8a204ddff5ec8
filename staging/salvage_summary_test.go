package staging

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestWriterKeepSummary: past the tenth file kept, keepLocked logs one
// line with the count; files that could NOT be kept are never in it
// (review 13: they were counted as kept).
func TestWriterKeepSummary(t *testing.T) {
	var logBuf bytes.Buffer
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o600)
	r := newWriterRigCfg(t, func(c *Config) {
		c.Commit, c.SnapshotType, c.Hold = CommitOnFsync, layout.Checkpoint, true
		c.FailedDir = filepath.Join(blocker, "failed") // nothing can be kept
		c.Log = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	for i := range 12 {
		r.write(t, fmt.Sprintf("f%d", i), "x\n")
	}
	kept, lost := r.w.KeepSession(r.id)
	t.Logf("kept %d, lost %d", kept, lost)
	for _, l := range strings.Split(logBuf.String(), "\n") {
		if kept == 0 && strings.Contains(l, "more staged files kept") {
			t.Errorf("none kept (%d lost), yet the log says: %s", lost, l)
		}
	}
}
