package staging

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestWriterFsyncPastAFailedWrite: with --commit=fsync, a file whose
// write failed (a full staging disk) is left out of the session's fsync,
// which commits the others and fails naming it, as long as it is not
// written again or removed. It refused every later fsync of the session,
// the files written whole with it too, after the disk had room again
// (audit 27).
func TestWriterFsyncPastAFailedWrite(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	good := r.written(t, "good.txt", "whole\n")
	bad := r.written(t, "bad.txt", "cut")
	bad.mu.Lock()
	bad.werr = fmt.Errorf("an earlier write of bad.txt failed: %w", syscall.ENOSPC) // as WriteAt sets it
	bad.mu.Unlock()
	for i := range 2 {
		err := r.w.FsyncSession(ctx, r.id)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "bad.txt") {
			t.Fatalf("fsync %d: %v, want ENOSPC naming bad.txt", i, err)
		}
		if got := r.bodyOf(t, "good.txt"); got != "whole\n" {
			t.Fatalf("fsync %d: good.txt committed as %q, want its bytes", i, got)
		}
		if _, ok := r.slot(t, "bad.txt"); ok {
			t.Fatalf("fsync %d committed the file whose write failed", i)
		}
	}
	// Removed, it no longer stands in the way.
	if err := r.w.Release(ctx, r.id, bad); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	if err := r.w.Unlink(ctx, r.id, []string{"bad.txt"}); err != nil {
		t.Fatal(err)
	}
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatalf("fsync after the file was removed: %v", err)
	}
	r.w.Release(ctx, r.id, good)
}
