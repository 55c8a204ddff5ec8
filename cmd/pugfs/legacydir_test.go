package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
)

// TestLegacyFailedFilesMoved: a bucket whose state directory changed
// name with bucketID (here a fault-injector URL; equally a URL with its
// parameters out of order) had its failed commits kept by an older pugfs
// under the old directory's failed/: possibly the only copy of a write
// whose close failed, they are moved into the mount's failed directory
// (shown under .pugmark/failed/), where they were neither shown nor
// reported (review 33).
func TestLegacyFailedFilesMoved(t *testing.T) {
	bucket, cacheDir := t.TempDir(), t.TempDir()
	u := "fault+file://" + bucket + "?fault_latency=1ms"
	if legacyBucketID(u) == bucketID(u) {
		t.Fatal("test URL keeps its name")
	}
	const name = "notes.txt.20261201T000000"
	old := filepath.Join(cacheDir, "buckets", legacyBucketID(u), "failed", "00079d6d8b34fc068e48c348f7c7cc10", name)
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("bytes a close returned EIO for\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logged syncbuf.Buffer
	cfg := mountConfig{BucketURL: u, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 16 << 20,
		MetadataTTL: time.Second, RequestTimeout: 10 * time.Second, MaxRequests: 16, SnapshotType: layout.Provisional}
	env, err := prepareMount(context.Background(), cfg, logged.Logger(slog.LevelInfo), false)
	if err != nil {
		t.Fatal(err)
	}
	defer env.close()
	found, _ := filepath.Glob(filepath.Join(env.failedDir, "*", name))
	if len(found) != 1 {
		t.Fatalf("the failed file an older pugfs kept in %s is not in the mount's failed directory %s:\n%s", old, env.failedDir, logged.String())
	}
	if b, err := os.ReadFile(found[0]); err != nil || string(b) != "bytes a close returned EIO for\n" {
		t.Errorf("moved with %q, %v", b, err)
	}
	if !strings.Contains(logged.String(), "older pugfs") {
		t.Errorf("the move is not logged:\n%s", logged.String())
	}
}
