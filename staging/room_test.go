package staging

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/internal/testrig"
)

// ballastGiver is the rig's blob cache with a GiveBack that removes a
// ballast file standing for the cache directory's copies on the staging
// directory's file system, and counts the asks.
type ballastGiver struct {
	Blobs
	ballast string
	asked   int
}

func (g *ballastGiver) GiveBack(n int64) int64 {
	g.asked++
	fi, err := os.Stat(g.ballast)
	if err != nil {
		return 0
	}
	os.Remove(g.ballast)
	return fi.Size()
}

// fullStagingRig is a writer whose staging directory is a 16 MiB tmpfs,
// with big (4 MiB, not inline) committed, then the tmpfs filled up by
// ballast that GiveBack gives back.
func fullStagingRig(t *testing.T) (*writerRig, *ballastGiver) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	tr := testrig.New(t, 0)
	g := &ballastGiver{Blobs: tr.Blobs, ballast: filepath.Join(dir, "ballast")}
	cfg := Config{StagingDir: filepath.Join(dir, "staging"), FailedDir: filepath.Join(t.TempDir(), "failed")}
	os.MkdirAll(cfg.StagingDir, 0o700)
	w := New(cfg, tr.Store, tr.Cache, g, nil)
	t.Cleanup(w.Shutdown)
	r := &writerRig{w: w, store: tr.Store, cache: tr.Cache, inj: tr.Faults, id: tr.Session, cfg: cfg}
	r.write(t, "big", strings.Repeat("0123456789abcde\n", 4<<16))
	f, err := os.Create(g.ballast)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(buf[:4096]); err != nil {
			break
		}
	}
	f.Close()
	return r, g
}

// TestRoomFromBlobsNewFile: a new file written into a full staging disk
// gets the room back from the blob cache's copies (audit 37).
func TestRoomFromBlobsNewFile(t *testing.T) {
	r, g := fullStagingRig(t)
	s, err := r.w.Open(context.Background(), r.id, "new", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(context.Background(), make([]byte, 1<<20), 0); err != nil {
		t.Errorf("write: %v (GiveBack asked %d times)", err, g.asked)
	}
	r.w.Release(context.Background(), r.id, s)
}

// TestRoomFromBlobsAppendToCommitted: >> to a committed file (held
// lazily: its bytes are fetched into a spill file at the first write,
// File.fill) into a full staging disk gets the room back too: the fill's
// copy asked for none, and the append failed with ENOSPC for as long as
// the copies stayed (review 39).
func TestRoomFromBlobsAppendToCommitted(t *testing.T) {
	r, g := fullStagingRig(t)
	ctx := context.Background()
	base, ok := r.slot(t, "big")
	if !ok {
		t.Fatal("big not committed")
	}
	s, err := r.w.Open(ctx, r.id, "big", &base, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, []byte("more\n")); err != nil {
		t.Errorf("append to a committed file on a full staging disk: %v (GiveBack asked %d times)", err, g.asked)
	}
	r.w.Release(ctx, r.id, s)
}
