package main

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestBucketID: spellings of one bucket name one state directory (the
// fault injector's scheme and parameters, the order of the others, an
// unclean local path), other buckets and other parts of one (endpoint,
// prefix) another, and a URL with nothing to change keeps the name an
// older pugfs gave it (a hash of the URL as given), so its summaries and
// crash leftovers are found after the upgrade (audit 27 F3).
func TestBucketID(t *testing.T) {
	const s3 = "s3://b?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true"
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{s3, "fault+" + s3 + "&fault_latency=20ms", true},
		{s3, "fault+s3://b?fault_error_rate=0.1&region=us-east-1&endpoint=http://127.0.0.1:7070&use_path_style=true", true},
		{s3, "s3://b?use_path_style=true&region=us-east-1&endpoint=http://127.0.0.1:7070", true},
		{"file:///srv/bucket", "file:///srv//bucket/", true},
		{"file:///srv/bucket", "fault+file:///srv/bucket?fault_latency=5ms", true},
		{"file:///srv/bucket", "file:///srv/bucket2", false},
		{s3, "s3://c?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true", false},
		{s3, "s3://b?endpoint=http://127.0.0.1:7071&region=us-east-1&use_path_style=true", false},
		{"s3://b?prefix=team/", "s3://b?prefix=other/", false},
		{"s3://b", "s3://b?prefix=team/", false},
		{"gs://b", "azblob://b", false},
	} {
		if got := bucketID(c.a) == bucketID(c.b); got != c.same {
			t.Errorf("same directory for %q and %q: %v, want %v (%q, %q)", c.a, c.b, got, c.same, bucketIdentity(c.a), bucketIdentity(c.b))
		}
	}
	for _, u := range []string{s3, "file:///srv/bucket", "s3://b?region=eu-west-1", "gs://b", "azblob://c?domain=x", "mem://"} {
		if bucketID(u) != legacyBucketID(u) {
			t.Errorf("%q is named %s, where an older pugfs named it %s", u, bucketID(u), legacyBucketID(u))
		}
	}
}

// TestLegacyStateDir: a URL whose directory name changed with bucketID
// (its parameters out of order) has the directory an older pugfs used
// swept too; one whose name did not change has none.
func TestLegacyStateDir(t *testing.T) {
	const sorted, unsorted = "s3://b?endpoint=http://h&region=r", "s3://b?region=r&endpoint=http://h"
	for _, cfg := range []mountConfig{{}, {CacheDir: t.TempDir()}} {
		state := defaultStateDir(unsorted)
		if cfg.CacheDir != "" {
			state = cfg.CacheDir
		}
		old, ok := legacyStateDir(cfg, state, unsorted)
		if !ok || old == bucketStateDir(cfg, state, unsorted) || !strings.HasSuffix(old, legacyBucketID(unsorted)) {
			t.Errorf("cache dir %q: legacy directory of %s = %q, %v; want the one named %s", cfg.CacheDir, unsorted, old, ok, legacyBucketID(unsorted))
		}
		if old, ok := legacyStateDir(cfg, state, sorted); ok {
			t.Errorf("cache dir %q: %s has a legacy directory %q, but its name did not change", cfg.CacheDir, sorted, old)
		}
	}
}

// TestBucketIDEscapedPath: the path of a local bucket is cleaned as the
// driver opens it, unescaped (u.Path, then filepath.Abs): cleaned while
// escaped, "file:///S/a/%2F/../b" opened S/b but was given the state
// directory of the bucket S/a/b, one bucket's failed files, summaries,
// kept snapshots and memory-writer on another's mount (review 33).
func TestBucketIDEscapedPath(t *testing.T) {
	root := t.TempDir()
	a := "file://" + root + "/a/b"
	b := "file://" + root + "/a/%2F/../b"
	pa, _ := url.Parse(a)
	pb, _ := url.Parse(b)
	da, _ := filepath.Abs(pa.Path)
	db, _ := filepath.Abs(pb.Path)
	if da == db {
		t.Fatalf("test premise: both open %s", da)
	}
	if bucketID(a) == bucketID(b) {
		t.Errorf("%s (opens %s) and %s (opens %s) share state directory %s (identity %q)", a, da, b, db, bucketID(a), bucketIdentity(b))
	}
	if bucketID(b) != bucketID("file://"+root+"/b") {
		t.Errorf("%s opens %s, but has another state directory than file://%s/b", b, db, root)
	}
}
