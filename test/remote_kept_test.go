package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// Snapshots and manifests kept in the cache directory (issue 12: the
// on-disk cache of immutable objects; layout/kept.go): a fresh mount with
// the cache directory of an earlier one loads the sessions its listing
// shows without a GET, and reads again what the bucket holds anew.

var keptCounted = regexp.MustCompile(`(?m)^faults counted sessions/: get (\d+),`)

// keptSessionGets is how many GETs of keys under sessions/ the mount has
// sent so far.
func keptSessionGets(t *testing.T, m *Mount) int64 {
	t.Helper()
	g := keptCounted.FindStringSubmatch(relReadStats(t, m).raw)
	if g == nil {
		t.Fatalf("no count of sessions/ requests in .pugmark/stats")
	}
	n, _ := strconv.ParseInt(g[1], 10, 64)
	return n
}

func keptRemount(t *testing.T, bk *Bucket) {
	ids := make([]layout.SessionID, 3)
	for i := range ids {
		ids[i] = relSession(t, bk)
		relCommitFiles(t, bk, ids[i], map[string]string{"f": fmt.Sprintf("session %d, first", i)})
		relCommitFiles(t, bk, ids[i], map[string]string{"g": fmt.Sprintf("session %d, second", i)})
	}
	// What cat of every session's f and g prints, in the glob's order.
	order := slices.Clone(ids)
	slices.SortFunc(order, layout.SessionID.Compare)
	want := ""
	for _, id := range order {
		i := slices.Index(ids, id)
		want += fmt.Sprintf("session %d, firstsession %d, second", i, i)
	}
	fb := relWithFaults(bk, map[string]string{"fault_count_prefix": "sessions/"})
	cacheDir := t.TempDir()
	catAll := "for s in sessions/*/; do cat $s/f $s/g; done"

	m1 := relMountOn(t, fb, t.TempDir(), "--read-only", "--cache-dir", cacheDir)
	if got := sh(t, m1.Dir, catAll); got != want {
		t.Fatalf("first mount reads %q, want %q", got, want)
	}
	if n := keptSessionGets(t, m1); n < int64(3*len(ids)) {
		t.Fatalf("first mount: %d GETs under sessions/, want at least %d (a manifest and two snapshots a session)", n, 3*len(ids))
	}
	m1.Stop(t)

	// A fresh mount with that cache directory: the listing vouches for
	// every manifest and snapshot, so none is read.
	m2 := relMountOn(t, fb, t.TempDir(), "--read-only", "--cache-dir", cacheDir)
	if got := sh(t, m2.Dir, catAll); got != want {
		t.Errorf("second mount reads %q, want %q", got, want)
	}
	if n := keptSessionGets(t, m2); n != 0 {
		t.Errorf("second mount: %d GETs under sessions/, want 0 (all kept)", n)
	}
	if st := relReadStats(t, m2).raw; !regexp.MustCompile(`read back [1-9]`).MatchString(st) {
		t.Errorf("stats do not count the kept objects read back:\n%s", st)
	}
	m2.Stop(t)

	// Every copy damaged on disk (a flipped byte, as bit rot or a stray
	// writer would leave it): removed with a log line, never believed;
	// the objects are read from the bucket again (and kept anew).
	damaged := 0
	err := filepath.WalkDir(cacheDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() || !strings.Contains(p, "/kept/") || strings.HasPrefix(de.Name(), ".") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data[len(data)-1] ^= 1
		damaged++
		if err := os.Chmod(p, 0o600); err != nil {
			return err
		}
		return os.WriteFile(p, data, 0o600)
	})
	if err != nil || damaged < 3*len(ids) {
		t.Fatalf("damaged %d kept copies (%v), want at least %d", damaged, err, 3*len(ids))
	}
	m2b := relMountOn(t, fb, t.TempDir(), "--read-only", "--cache-dir", cacheDir)
	if got := sh(t, m2b.Dir, catAll); got != want {
		t.Errorf("with damaged copies: %q, want %q", got, want)
	}
	if n := keptSessionGets(t, m2b); n < int64(3*len(ids)) {
		t.Errorf("with damaged copies: %d GETs under sessions/, want at least %d", n, 3*len(ids))
	}
	if !strings.Contains(m2b.Log(), "is damaged") {
		t.Errorf("no log line for the damaged copies:\n%s", m2b.Log())
	}
	m2b.Stop(t)

	// The bucket emptied and written again, as a generator run twice
	// would: session 0's second snapshot is another object now (other
	// content, another size). The listing shows its new stamp, so the
	// kept copy is not used.
	ctx := context.Background()
	other := relSession(t, bk)
	relCommitFiles(t, bk, other, map[string]string{"g": "written again, and longer"})
	key1, _ := layout.SnapshotKey(other, 1)
	key0, _ := layout.SnapshotKey(ids[0], 2)
	raw, err := bk.B.ReadAll(ctx, key1)
	if err != nil {
		t.Fatal(err)
	}
	if err := bk.B.WriteAll(ctx, key0, raw, nil); err != nil {
		t.Fatal(err)
	}
	m3 := relMountOn(t, fb, t.TempDir(), "--read-only", "--cache-dir", cacheDir)
	if got, want := sh(t, m3.Dir, "cat "+sess(ids[0])+"/g"), "written again, and longer"; got != want {
		t.Errorf("after the bucket was written again: %q, want %q", got, want)
	}
	if n := keptSessionGets(t, m3); n != 1 {
		t.Errorf("after the bucket was written again: %d GETs under sessions/, want 1 (the rewritten snapshot)", n)
	}
}

// TestRemoteKeptObjects runs keptRemount on the local driver (behind the
// fault injector, which makes it a remote bucket to the mount) and S3.
func TestRemoteKeptObjects(t *testing.T) {
	t.Parallel()
	eachBucket(t, keptRemount)
}

// TestCloudKeptObjects runs keptRemount on the GCS and Azure emulators:
// their listings and reads must give the same stamps.
func TestCloudKeptObjects(t *testing.T) {
	eachCloud(t, keptRemount)
}
