package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// loggedHoldRig is a rig as pugfs exec's Writer (Hold, checkpoints)
// whose log is the returned buffer.
func loggedHoldRig(t *testing.T) (*writerRig, *bytes.Buffer) {
	var logBuf bytes.Buffer
	r := newWriterRigCfg(t, func(c *Config) {
		c.Commit, c.SnapshotType, c.Hold = CommitOnFsync, layout.Checkpoint, true
		c.Log = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	return r, &logBuf
}

// attrsChanged commits files f0..f<n-1> and stages a change of their
// attributes alone (chmod -R, setfattr): staged, they hold the blob they
// were opened on (lazy).
func (r *writerRig) attrsChanged(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		name := fmt.Sprintf("f%d", i)
		r.commitBlob(t, name, "x\n", "")
		base, _ := r.slot(t, name)
		s, err := r.w.Open(ctx, r.id, name, &base, false)
		if err != nil {
			t.Fatal(err)
		}
		s.changeAttrs(func(a *Attrs) { a.Meta = map[string]string{"k": "v"} })
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriterKeepSummaryUnchanged: files whose content is unchanged (only
// their attributes changed: chmod -R, setfattr) count toward the ten
// lines too; each had a line of its own (review 15).
func TestWriterKeepSummaryUnchanged(t *testing.T) {
	r, logBuf := loggedHoldRig(t)
	const n = 14
	r.attrsChanged(t, n)
	r.w.KeepSession(r.id)
	out := logBuf.String()
	if lines := strings.Count(out, "its content is unchanged"); lines > keepLogged {
		t.Errorf("%d lines for %d unchanged files, want at most %d", lines, n, keepLogged)
	}
	if !strings.Contains(out, fmt.Sprintf("more=%d", n-keepLogged)) {
		t.Errorf("no summary line of the %d more files:\n%s", n-keepLogged, out)
	}
}

// TestWriterRefuseSummary: a lost checkpoint of many files keeps them
// all, in ten lines and one with the count: one line a file was 20,000
// lines, 9.7 MB on a handler's stderr (audit 19).
func TestWriterRefuseSummary(t *testing.T) {
	r, logBuf := loggedHoldRig(t)
	ctx := context.Background()
	const n = 30
	for i := range n {
		r.write(t, fmt.Sprintf("f%d", i), "x\n")
	}
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{{Name: "theirs", CreatedAt: time.Now().UTC(), Deleted: true}}}); err != nil {
		t.Fatal(err)
	}
	r.cache.Invalidate(r.id)
	if _, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput); !errors.Is(err, layout.ErrConflict) {
		t.Fatalf("CommitSession over a foreign checkpoint = %v, want ErrConflict", err)
	}
	if kept := r.failedFiles(t); len(kept) != n {
		t.Fatalf("%d files kept, want %d", len(kept), n)
	}
	lines := strings.Count(logBuf.String(), "level=ERROR")
	if lines != keepLogged+1 || !strings.Contains(logBuf.String(), fmt.Sprintf("more=%d", n-keepLogged)) {
		t.Fatalf("%d lines for %d files kept, want %d and one with the count:\n%s", lines, n, keepLogged+1, logBuf.String())
	}
}
