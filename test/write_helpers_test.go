package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/fsck"
	"github.com/pugmark/pugfs/layout"
)

// Helpers of the write-side tests: what the bucket holds, read back with
// the layout package, and what a fresh mount shows.

// newSession creates a root session in bk and returns its ID.
func newSession(t testing.TB, bk *Bucket) layout.SessionID {
	t.Helper()
	m, _, err := bk.Store.CreateSession(context.Background(), bk.Store.NewRootManifest())
	if err != nil {
		t.Fatal(err)
	}
	return m.Session
}

// latest returns the latest snapshot version of id.
func latest(t testing.TB, bk *Bucket, id layout.SessionID) uint32 {
	t.Helper()
	v, err := bk.Store.LatestVersion(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fullLog returns the full log of id at its latest version.
func fullLog(t testing.TB, bk *Bucket, id layout.SessionID) []layout.Entry {
	t.Helper()
	log, err := bk.Store.FullLog(context.Background(), id, latest(t, bk, id))
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// slots returns the live named slots of id in the bucket.
func slots(t testing.TB, bk *Bucket, id layout.SessionID) map[string]layout.Entry {
	t.Helper()
	return layout.Slots(fullLog(t, bk, id))
}

// body returns the stored body of a descriptor's blob, checked against its
// digest.
func body(t testing.TB, bk *Bucket, d layout.Descriptor) []byte {
	t.Helper()
	b, err := bk.Store.ReadBlob(context.Background(), d.Digest, 1<<30)
	if err != nil {
		t.Fatalf("read blob of %s: %v", d.Name, err)
	}
	return b
}

// wantSlots checks that the live slots of id are exactly want (name ->
// content), reading each body from the bucket.
func wantSlots(t testing.TB, bk *Bucket, id layout.SessionID, want map[string]string) {
	t.Helper()
	got := slots(t, bk, id)
	for name, content := range want {
		e, ok := got[name]
		if !ok {
			t.Errorf("bucket: %s missing; live slots %v", name, slotNames(got))
			continue
		}
		if b := body(t, bk, e.Descriptor); string(b) != content {
			t.Errorf("bucket: %s = %q, want %q", name, trunc(b), trunc([]byte(content)))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("bucket: unexpected live slot %s", name)
		}
	}
}

func slotNames(m map[string]layout.Entry) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

func trunc(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// freshMount mounts bk again, with nothing cached, and returns the
// directory of session id in it.
func freshMount(t *testing.T, bk *Bucket, id layout.SessionID) string {
	t.Helper()
	m := mount(t, bk, "--metadata-ttl", "0", "--read-only")
	return filepath.Join(m.Dir, "sessions", id.String())
}

// wantTree checks that dir (a session directory on a mount) holds exactly
// the files of want (relative path -> content), .pugmark aside.
func wantTree(t testing.TB, dir string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	for name, content := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("mount %s: %s missing (have %v)", dir, name, keys(got))
		case g != content:
			t.Errorf("mount %s: %s = %q, want %q", dir, name, trunc([]byte(g)), trunc([]byte(content)))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("mount %s: unexpected file %s", dir, name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// writeFile writes data to path with open/write/close in this process and
// returns the error of whichever call failed, close(2) included (bash
// ignores close errors of redirections).
func writeFile(path string, data []byte, flag int) error {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const createFlags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC

// errnoOf returns the errno inside err, or 0.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var putsRE = regexp.MustCompile(`\bput (\d+)`)

// mountPuts returns the number of PUT requests the mount made so far, from
// its .pugmark/stats.
func mountPuts(t testing.TB, m *Mount) int { return statsNumber(t, m, putsRE) }

// statsNumber is the number re captures first in the mount's
// .pugmark/stats.
func statsNumber(t testing.TB, m *Mount, re *regexp.Regexp) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.Dir, ".pugmark", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	s := re.FindSubmatch(b)
	if s == nil {
		t.Fatalf(".pugmark/stats has no %v:\n%s", re, b)
	}
	n, _ := strconv.Atoi(string(s[1]))
	return n
}

// objectCount returns the number of blobs in bk.
func objectCount(t testing.TB, bk *Bucket) int {
	t.Helper()
	n := 0
	if err := bk.Store.ListBlobs(context.Background(), func(layout.Digest, int64) bool { n++; return true }, nil); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkBucket runs fsck and fails on error findings.
func checkBucket(t testing.TB, bk *Bucket) {
	t.Helper()
	rep, err := fsck.Check(context.Background(), bk.Store, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		var b bytes.Buffer
		for _, f := range rep.Findings {
			if f.Severity == fsck.Error {
				fmt.Fprintf(&b, "  %s %s: %s\n", f.Rule, f.Key, f.Message)
			}
		}
		t.Fatalf("fsck: %d errors:\n%s", rep.Errors, b.String())
	}
}

// snapType returns the type of snapshot v of id.
func snapType(t testing.TB, bk *Bucket, id layout.SessionID, v uint32) layout.SnapshotType {
	t.Helper()
	m, err := bk.Store.ReadSnapshotMeta(context.Background(), id, v)
	if err != nil {
		t.Fatal(err)
	}
	return m.Type
}

// sessDir is the directory of session id on m.
func sessDir(m *Mount, id layout.SessionID) string {
	return filepath.Join(m.Dir, "sessions", id.String())
}

// parallelBuckets runs each bucket kind's subtest in parallel with the others.
func parallelBuckets(t *testing.T, fn func(t *testing.T, bk *Bucket)) {
	t.Parallel()
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		fn(t, bk)
	})
}

// shE is sh with errexit: a multi-command script fails at its first
// failing command, not only on the last one.
func shE(t *testing.T, dir, script string) string {
	t.Helper()
	return sh(t, dir, "set -e\n"+script)
}

// bucketCacheDir is the directory of the one bucket mounted with
// --cache-dir dir that keeps that bucket's own state (its staged writes,
// failed/, index and summaries): buckets/<hash of its URL>/ (dir itself
// when no mount made one).
func bucketCacheDir(dir string) string {
	own, _ := filepath.Glob(filepath.Join(dir, "buckets", "*"))
	if len(own) != 1 {
		return dir
	}
	return own[0]
}
