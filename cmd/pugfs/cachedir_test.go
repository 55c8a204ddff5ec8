package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// TestCacheDirPerBucket: one --cache-dir shared by mounts of two buckets
// that hold the same keys (one a copy of the other) keeps each bucket's
// snapshots, index and summaries apart: a snapshot kept under the same
// key and stamp (size, time to the second) by a mount of one bucket
// showed its file on a mount of the other (audit 3). Blobs, named by
// their digest, stay shared.
func TestCacheDirPerBucket(t *testing.T) {
	const a, b = "s3://bucket-a?endpoint=http://127.0.0.1:1", "s3://bucket-b?endpoint=http://127.0.0.1:1"
	dir := t.TempDir()
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	bc, err := blobcache.New(store, blobcache.Options{MemBytes: 1 << 20, DiskDir: filepath.Join(dir, "blobs"), DiskBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	ka, kb := &keeperSlot{ns: keptNamespace(a)}, &keeperSlot{ns: keptNamespace(b)}
	ka.bc.Store(bc)
	kb.bc.Store(bc)
	const key = "sessions/year=2026/month=12/day=05/hour=22/ID/snapshots/FFFFFFFE.json"
	st := layout.Stamp{Size: 25, Mod: 1764972000}
	ka.Keep(key, st, []byte(`{"from": "bucket A"}`+"\n"))
	if got, ok := ka.Kept(key, st); !ok || !bytes.Contains(got, []byte("bucket A")) {
		t.Fatalf("bucket A's own copy: %q, %v", got, ok)
	}
	if got, ok := kb.Kept(key, st); ok || kb.Has(key) {
		t.Fatalf("a mount of bucket B found bucket A's copy of %s: %q", key, got)
	}

	own := func(cacheDir, u string) string {
		return bucketStateDir(mountConfig{CacheDir: cacheDir}, filepath.Join(dir, "state"), u)
	}
	if own("", a) != filepath.Join(dir, "state") {
		t.Errorf("the default state directory, already the URL's own, is not used as it is: %s", own("", a))
	}
	if da, db := own(dir, a), own(dir, b); da == db || filepath.Dir(da) != filepath.Dir(db) {
		t.Errorf("--cache-dir shared by two buckets: their own directories are %s and %s", da, db)
	}
}

// TestCacheDirLegacyFailed: the failed directory an earlier pugfs kept
// at the top of a --cache-dir, for every bucket, is no mount's since each
// bucket's went under buckets/: a mount says where its files are, and
// how many, rather than hiding what may be the only copy of a write
// whose close failed (review 9).
func TestCacheDirLegacyFailed(t *testing.T) {
	bucket, cacheDir := t.TempDir(), t.TempDir()
	old := filepath.Join(cacheDir, "failed", "00079d6d8b34fc068e48c348f7c7cc10", "notes.txt.20261201T000000")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("bytes a close returned EIO for\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logged syncbuf.Buffer
	cfg := mountConfig{BucketURL: "file://" + bucket, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 16 << 20,
		MetadataTTL: time.Second, RequestTimeout: 10 * time.Second, MaxRequests: 16, SnapshotType: layout.Provisional}
	env, err := prepareMount(context.Background(), cfg, logged.Logger(slog.LevelInfo), false)
	if err != nil {
		t.Fatal(err)
	}
	defer env.close()
	if got := logged.String(); !strings.Contains(got, "dir="+filepath.Join(cacheDir, "failed")+" files=1") {
		t.Errorf("the mount does not report the earlier failed directory:\n%s", got)
	}
}
