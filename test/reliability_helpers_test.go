package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/fsck"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// Helpers of the reliability tests (reliability_*_test.go).

// relWithFaults returns bk seen through the fault injector: the same bucket,
// with a fault+ URL carrying params (fault_ names, values unescaped).
func relWithFaults(bk *Bucket, params map[string]string) *Bucket {
	q := url.Values{}
	for k, v := range params {
		q.Set(k, v)
	}
	u := "fault+" + bk.URL
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	c := *bk
	c.URL = u + sep + q.Encode()
	return &c
}

// relSwitchFile returns a path for fault_active_file, initially absent, and
// functions that switch the faults on and off.
func relSwitchFile(t *testing.T) (path string, on, off func()) {
	path = filepath.Join(t.TempDir(), "faults-on")
	on = func() {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	off = func() { os.Remove(path) }
	return path, on, off
}

// relMountOn mounts bk on dir (which exists) and stops it at cleanup.
func relMountOn(t *testing.T, bk *Bucket, dir string, args ...string) *Mount {
	t.Helper()
	m := startMount(t, bk, dir, args...)
	t.Cleanup(func() { m.Stop(t) })
	return m
}

// relPID is the mount process's ID.
func relPID(m *Mount) int { return m.cmd.Process.Pid }

// relAlive reports whether the mount process is still running.
func relAlive(m *Mount) bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// waitFor polls cond every few milliseconds until it holds or timeout
// passes, then fails the test with msg.
func relWait(t *testing.T, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", timeout, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newSession creates a root session in bk and returns its ID.
func relSession(t *testing.T, bk *Bucket) layout.SessionID {
	t.Helper()
	m, _, err := bk.Store.CreateSession(context.Background(), bk.Store.NewRootManifest())
	if err != nil {
		t.Fatal(err)
	}
	return m.Session
}

// relCommitFiles commits name -> body as one snapshot of id, blobs included.
func relCommitFiles(t *testing.T, bk *Bucket, id layout.SessionID, files map[string]string) {
	t.Helper()
	ctx := context.Background()
	var ds []layout.Descriptor
	for name, body := range files {
		if _, err := bk.Store.PutBlobBytes(ctx, []byte(body), layout.BlobOptions{}); err != nil {
			t.Fatal(err)
		}
		d := layout.Descriptor{Name: name, Digest: layout.DigestOf([]byte(body)), Size: int64(len(body)),
			CreatedAt: time.Now().UTC(), ContentType: "text/plain"}
		if len(body) <= layout.InlineLimit {
			d.Data = []byte(body)
		}
		ds = append(ds, d)
	}
	if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
}

// relLiveSlots returns the live slots of a session as the bucket has them now.
func relLiveSlots(t *testing.T, bk *Bucket, id layout.SessionID) map[string]layout.Entry {
	t.Helper()
	ctx := context.Background()
	v, err := bk.Store.LatestVersion(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	log, err := bk.Store.FullLog(ctx, id, v)
	if err != nil {
		t.Fatal(err)
	}
	return layout.Slots(log)
}

// relSlotBody reads a slot's content from the bucket (inline data or blob).
func relSlotBody(t *testing.T, bk *Bucket, e layout.Entry) []byte {
	t.Helper()
	if e.Data != nil {
		return e.Data
	}
	b, err := bk.Store.ReadBlob(context.Background(), e.Digest, 1<<30)
	if err != nil {
		t.Fatalf("blob of %s: %v", e.Name, err)
	}
	return b
}

// relFsckClean fails the test if fsck finds any error in the bucket.
func relFsckClean(t *testing.T, bk *Bucket) *fsck.Report {
	t.Helper()
	rep, err := fsck.Check(context.Background(), bk.Store, fsck.Options{})
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if !rep.OK() {
		var lines []string
		for _, f := range rep.Findings {
			if f.Severity == fsck.Error {
				lines = append(lines, f.String())
			}
		}
		t.Fatalf("fsck found %d errors:\n%s", rep.Errors, strings.Join(lines, "\n"))
	}
	return rep
}

// relLocalBucket returns a fresh bucket on the local driver.
func relLocalBucket(t *testing.T) *Bucket { return openBucket(t, testbucket.Local) }

// relFaultCounts are the injector's counters of one request kind, read
// from .pugmark/stats.
type relFaultCounts struct{ Requests, Delayed, Stalled, Errors, Lost int64 }

var relFaultLine = regexp.MustCompile(`(?m)^faults (\w+): requests (\d+), delayed (\d+), stalled (\d+), errors (\d+), lost (\d+)$`)
var relHiddenLine = regexp.MustCompile(`(?m)^faults list: hidden keys (\d+), ghost keys (\d+)$`)
var relStoreLine = regexp.MustCompile(`(?m)^backend retries (\d+), errors (\d+)$`)
var relCommitLine = regexp.MustCompile(`(?m)^commits (\d+) \(snapshots (\d+), descriptors (\d+)\), commit errors (\d+), conflicts (\d+)$`)

// relMountStats is what .pugmark/stats says.
type relMountStats struct {
	Faults                  map[string]relFaultCounts
	Hidden, Ghosts          int64
	Retries, Errors         int64
	Commits, Snapshots      int64
	CommitErrors, Conflicts int64
	raw                     string
}

func relReadStats(t *testing.T, m *Mount) relMountStats {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.Dir, ".pugmark", "stats"))
	if err != nil {
		t.Fatalf("read .pugmark/stats: %v", err)
	}
	s := relMountStats{Faults: map[string]relFaultCounts{}, raw: string(b)}
	n := func(x string) int64 { v, _ := strconv.ParseInt(x, 10, 64); return v }
	for _, g := range relFaultLine.FindAllStringSubmatch(s.raw, -1) {
		s.Faults[g[1]] = relFaultCounts{n(g[2]), n(g[3]), n(g[4]), n(g[5]), n(g[6])}
	}
	if g := relHiddenLine.FindStringSubmatch(s.raw); g != nil {
		s.Hidden, s.Ghosts = n(g[1]), n(g[2])
	}
	if g := relStoreLine.FindStringSubmatch(s.raw); g != nil {
		s.Retries, s.Errors = n(g[1]), n(g[2])
	}
	if g := relCommitLine.FindStringSubmatch(s.raw); g != nil {
		s.Commits, s.Snapshots, s.CommitErrors, s.Conflicts = n(g[1]), n(g[2]), n(g[4]), n(g[5])
	}
	return s
}

// relBucketBehind says how the bucket's live files differ from the model
// ("" when they match): the truth a second mount is checked against.
func relBucketBehind(bk *Bucket, id layout.SessionID, want *relModel) (string, error) {
	ctx := context.Background()
	v, err := bk.Store.LatestVersion(ctx, id)
	if err != nil {
		return "", err
	}
	log, err := bk.Store.FullLog(ctx, id, v)
	if err != nil {
		return "", err
	}
	slots := layout.Slots(log)
	var behind []string
	for _, p := range slices.Sorted(maps.Keys(want.files)) {
		b := want.files[p]
		e, ok := slots[p]
		if !ok {
			behind = append(behind, p+": missing")
			continue
		}
		body := e.Data
		if body == nil {
			if body, err = bk.Store.ReadBlob(ctx, e.Digest, 1<<30); err != nil {
				return "", fmt.Errorf("blob of %s: %w", p, err)
			}
		}
		if !bytes.Equal(body, b) {
			behind = append(behind, fmt.Sprintf("%s: %d bytes (seq %d), model %d", p, len(body), e.SequenceNumber, len(b)))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(slots)) {
		if _, ok := want.files[p]; !ok {
			behind = append(behind, p+": not in the model")
		}
	}
	return strings.Join(behind, "; "), nil
}

// logTail returns the last n lines of a log.
func logTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
