package staging

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/internal/testrig"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/gcerrors"
)

// TestWriterReleaseRacingReaderParks: with --commit=fsync, a writer's
// RELEASE that finds itself the last open then waits for session.nsMu (a
// rename or unlink of the session in flight). A reader that opens the
// file in that window (Retain: only Writer.mu) makes the release drop its
// open as one that is not the last: the file only readers hold is parked
// then too. It stayed unnamed for as long as the reader (`tail -f`,
// `less`) held it, and a crash meanwhile lost it (review 28).
func TestWriterReleaseRacingReaderParks(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	s := r.written(t, "f", "closed, not fsynced\n")
	// The writer's close(2) met a read holding File.mu (keepClosed only
	// tries it): left to the RELEASE.
	s.mu.RLock()
	r.w.FlushSince(ctx, r.id, s, s.Gen())
	s.mu.RUnlock()
	ws := r.w.session(r.id)
	ws.nsMu.Lock() // a rename of the session in flight
	released := make(chan error, 1)
	go func() { released <- r.w.Release(ctx, r.id, s) }()
	time.Sleep(200 * time.Millisecond) // the release waits for nsMu
	retained := r.w.Retain(r.id, s)    // a reader opens the file
	ws.nsMu.Unlock()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	kept := r.keptNames(t)
	if retained {
		defer r.w.ReleaseRead(ctx, r.id, s)
	}
	r.w.mu.Lock()
	opens, readers := s.opens, s.readers
	r.w.mu.Unlock()
	if !retained {
		t.Skip("the reader's open came after the release forgot the file")
	}
	if len(kept) != 1 {
		t.Fatalf("writer closed and released, a reader holds the file (opens %d, readers %d): a crash keeps %v; want it kept", opens, readers, kept)
	}
}

// TestWriterAdoptParkedSpill: a file
// closed and released with --commit=fsync is parked (its spill file
// closed, reopened by name for the upload); the fsync's upload then
// adopts it into the disk tier, and reading it back costs no GET.
func TestWriterAdoptParkedSpill(t *testing.T) {
	ctx := context.Background()
	rig := testrig.New(t, 0)
	bc, err := blobcache.New(rig.Store, blobcache.Options{ChunkSize: 16 << 10, MemBytes: 1 << 20,
		DiskDir: filepath.Join(t.TempDir(), "cache"), DiskBytes: 64 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	dir := t.TempDir()
	w := New(Config{StagingDir: dir, FailedDir: filepath.Join(dir, "failed"), Commit: CommitOnFsync}, rig.Store, rig.Cache, bc, nil)
	t.Cleanup(w.Shutdown)
	body := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB
	s, err := w.Open(ctx, rig.Session, "f", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, body, 0); err != nil {
		t.Fatal(err)
	}
	w.FlushSince(ctx, rig.Session, s, s.Gen())
	if err := w.Release(ctx, rig.Session, s); err != nil {
		t.Fatal(err)
	}
	if err := w.FsyncSession(ctx, rig.Session); err != nil {
		t.Fatal(err)
	}
	if got := bc.Stats().Adopted; got != 1 {
		t.Fatalf("adopted %d bodies, want 1", got)
	}
	rig.Faults.Add(faultblob.Rule{Ops: faultblob.OpGet, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Err: faultblob.PermanentError(gcerrors.NotFound)})
	d := &layout.Descriptor{Name: "f", Digest: layout.DigestOf(body), Size: int64(len(body))}
	got := make([]byte, len(body))
	n, err := bc.ReadAt(ctx, d, got, 0)
	if n != len(body) || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, %v", n, err)
	}
}
