package staging

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/internal/testrig"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/gcerrors"
)

// Tests of the write engine without a kernel: they call what the go-fuse
// nodes call, in an order a kernel produces only by chance, held in place
// by a stall on the snapshot PUT.

// writerRig is a Writer over a memory bucket behind a fault injector,
// with one empty session.
type writerRig struct {
	w     *Writer
	store *layout.Store
	cache *cache.Cache
	inj   *faultblob.Injector
	id    layout.SessionID
	cfg   Config
}

func newWriterRig(t *testing.T, mode ...CommitMode) *writerRig {
	t.Helper()
	return newWriterRigCfg(t, func(c *Config) {
		if len(mode) > 0 {
			c.Commit = mode[0]
		}
	})
}

// newWriterRigCfg is newWriterRig with the Config changed by edit first.
func newWriterRigCfg(t *testing.T, edit func(*Config)) *writerRig {
	t.Helper()
	return newWriterRigTTL(t, 0, edit)
}

// newWriterRigTTL is newWriterRigCfg with a session cache that trusts
// what it loaded for ttl, as a mount with --metadata-ttl does.
func newWriterRigTTL(t *testing.T, ttl time.Duration, edit func(*Config), cacheEdit ...func(*cache.Options)) *writerRig {
	t.Helper()
	r := testrig.New(t, ttl, cacheEdit...)
	dir := t.TempDir()
	cfg := Config{StagingDir: dir, FailedDir: filepath.Join(dir, "failed")}
	if edit != nil {
		edit(&cfg)
	}
	w := New(cfg, r.Store, r.Cache, r.Blobs, nil)
	t.Cleanup(func() {
		if err := w.CheckInvariants(); err != nil {
			t.Errorf("writer state: %v", err)
		}
		w.Shutdown()
	})
	return &writerRig{w: w, store: r.Store, cache: r.Cache, inj: r.Faults, id: r.Session, cfg: cfg}
}

// stallSnapshots makes every snapshot PUT wait for the returned gate.
func (r *writerRig) stallSnapshots() *faultblob.Gate {
	g := faultblob.NewGate()
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)}, Stall: g})
	return g
}

// waitStalled polls until n requests wait on g.
func waitStalled(t *testing.T, g *faultblob.Gate, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests stalled, want %d", g.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// slot returns the committed slot of name, as a fresh reader sees it.
func (r *writerRig) slot(t *testing.T, name string) (layout.Entry, bool) {
	t.Helper()
	r.cache.Invalidate(r.id)
	st, err := r.cache.State(context.Background(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := st.Slots()[name]
	return e, ok
}

// written creates name with content, as creat(2) and write(2) do, and
// returns its staged file, still open.
func (r *writerRig) written(t *testing.T, name, content string) *File {
	t.Helper()
	s, err := r.w.Open(context.Background(), r.id, name, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(context.Background(), []byte(content), 0); err != nil {
		t.Fatal(err)
	}
	return s
}

// failedFiles lists what was kept in the failed directory.
func (r *writerRig) failedFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir(filepath.Join(r.cfg.FailedDir, r.id.String()))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestWriterTruncateDuringReleaseCommit is issue #16's lost update
// (PUGFS_PROPERTY_SEED=424242, step 69): the last release of a created
// file is committing it when truncate(2) of the path stages 363 bytes and
// returns 0. Before, the release then found the file dirty, took that for
// a failed commit and moved the 363 bytes to failed/; the next append
// built on the committed empty file.
func TestWriterTruncateDuringReleaseCommit(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	w := r.w
	s, err := w.Open(ctx, r.id, "d3/f1", nil, true) // creat(2)
	if err != nil {
		t.Fatal(err)
	}
	gate := r.stallSnapshots()
	released := make(chan error, 1)
	go func() { released <- w.Release(ctx, r.id, s) }() // the create's release
	waitStalled(t, gate, 1)

	// truncate(2) by path: Setattr stages, truncates and releases.
	s2, err := w.OpenFrom(ctx, r.id, "d3/f1", func() *layout.Entry { return nil }, false)
	if err != nil {
		t.Fatal(err)
	}
	if s2 != s {
		t.Fatal("truncate staged a second file for the name")
	}
	if err := s2.Truncate(context.Background(), 363); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx, r.id, s2); err != nil {
		t.Fatalf("truncate's release: %v", err)
	}
	gate.Release()
	if err := <-released; err != nil {
		t.Fatalf("create's release: %v", err)
	}
	e, ok := r.slot(t, "d3/f1")
	if !ok || e.Size != 363 {
		t.Fatalf("committed d3/f1 = %+v (present %v), want the truncated 363 bytes", e.Descriptor, ok)
	}
	if kept := r.failedFiles(t); len(kept) > 0 {
		t.Fatalf("an acknowledged truncate ended in failed/: %v", kept)
	}
}

// TestWriterUnlinkDuringReleaseCommit: unlink of a name whose release is
// committing it waits for that commit and removes what it committed;
// dropping the staged file under the commit made the file come back.
func TestWriterUnlinkDuringReleaseCommit(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	w := r.w
	s := r.written(t, "f", "hello")
	gate := r.stallSnapshots()
	released := make(chan error, 1)
	go func() { released <- w.Release(ctx, r.id, s) }()
	waitStalled(t, gate, 1)
	unlinked := make(chan error, 1)
	go func() { unlinked <- w.Unlink(ctx, r.id, []string{"f"}) }()
	gate.Release()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := <-unlinked; err != nil {
		t.Fatalf("unlink: %v", err)
	}
	if e, ok := r.slot(t, "f"); ok {
		t.Fatalf("f is back after its unlink returned 0: %+v", e.Descriptor)
	}
}

// TestWriterRenameDirOntoDirWithLocalSubdirs is issue #16's rename bug
// (PUGFS_PROPERTY_SEED=1796152307096129683, step 86): the target holds
// only directories made by mkdir, which are local until a file is written
// under them; POSIX still wants ENOTEMPTY.
func TestWriterRenameDirOntoDirWithLocalSubdirs(t *testing.T) {
	for _, tc := range []struct {
		name string
		dirs []string
		want error
	}{
		{"target holds a local directory", []string{"d1", "d1/d1", "d1/d2", "d1/d2/d0"}, ErrNotEmpty},
		{"target holds a nested local directory", []string{"d1", "d1/d1", "d1/d2", "d1/d2/a", "d1/d2/a/b"}, ErrNotEmpty},
		{"empty target is replaced", []string{"d1", "d1/d1", "d1/d2"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t)
			for _, d := range tc.dirs {
				r.w.Mkdir(r.id, d)
			}
			if got := r.w.Rename(context.Background(), r.id, "d1/d1", "d1/d2", false); !errors.Is(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("rename d1/d1 d1/d2 = %v, want %v", got, tc.want)
			}
			if got := r.w.Rmdir(context.Background(), r.id, "d1/d2"); tc.want != nil && !errors.Is(got, ErrNotEmpty) {
				t.Fatalf("rmdir of the non-empty target = %v, want ENOTEMPTY", got)
			}
		})
	}
}

// TestWriterRetainRefusesReleasedFile: a reader that found a staged file
// just before its last release forgot it is not handed the closed spill
// file (the property test read EIO right after a create); it reads the
// committed entry instead.
func TestWriterRetainRefusesReleasedFile(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	w := r.w
	s := r.written(t, "f", "hello")
	found := w.Staged(r.id, "f") // what a read-only Open saw
	if err := w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	if w.Retain(r.id, found) {
		t.Fatal("retain counted a staged file its last release had closed")
	}
	if _, err := found.ReadAt(context.Background(), make([]byte, 5), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read of the released staged file: %v, want ErrClosed", err)
	}
	if e, ok := r.slot(t, "f"); !ok || string(e.Data) != "hello" {
		t.Fatalf("committed f = %+v, %v", e.Descriptor, ok)
	}
}

// big is content too large to be inlined in its descriptor: committing
// it stores a blob.
func big(s string) string { return strings.Repeat(s, 1+2*layout.InlineLimit/len(s)) }

// commitBlob commits name holding body as another writer would: its
// blob stored with encoding enc ("" or layout.EncodingGzip), never read
// by the rig's blob cache. It returns the entry.
func (r *writerRig) commitBlob(t *testing.T, name, body, enc string) layout.Entry {
	t.Helper()
	r.otherBlob(t, name, body, enc)
	r.cache.Invalidate(r.id)
	e, ok := r.slot(t, name)
	if !ok {
		t.Fatalf("%s not committed", name)
	}
	return e
}

// otherBlob is commitBlob unseen by the rig's cache until it looks again.
func (r *writerRig) otherBlob(t *testing.T, name, body, enc string) {
	t.Helper()
	raw := []byte(body)
	if enc == layout.EncodingGzip {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(raw)
		zw.Close()
		raw = gz.Bytes()
	}
	ctx := context.Background()
	bi, err := r.store.PutBlobBytes(ctx, raw, layout.BlobOptions{ContentEncoding: enc})
	if err != nil {
		t.Fatal(err)
	}
	d := layout.Descriptor{Name: name, Digest: bi.Digest, Size: bi.Size, ContentEncoding: enc, ContentType: "text/plain; charset=utf-8", CreatedAt: time.Now().UTC()}
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
}

// failBlobPuts makes every blob upload fail for good.
func (r *writerRig) failBlobPuts() {
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, FailProb: 1,
		Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
}

// state is the session as a fresh reader sees it.
func (r *writerRig) state(t *testing.T) *cache.State {
	t.Helper()
	r.cache.Invalidate(r.id)
	st, err := r.cache.State(context.Background(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWriterGroupCommit: closes that arrive while an earlier snapshot of
// the session is being committed share the next snapshot.
func TestWriterGroupCommit(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	gate := r.stallSnapshots()
	errs := make(chan error, 3)
	// close(2): FLUSH commits, RELEASE follows.
	release := func(s *File) {
		if err := r.w.Flush(ctx, r.id, s, false); err != nil {
			errs <- err
			return
		}
		errs <- r.w.Release(ctx, r.id, s)
	}
	go release(r.written(t, "a", "1"))
	waitStalled(t, gate, 1) // a's snapshot, alone
	go release(r.written(t, "b", "2"))
	go release(r.written(t, "c", "3"))
	ws := r.w.session(r.id)
	for deadline := time.Now().Add(10 * time.Second); ; {
		r.w.mu.Lock()
		joined := ws.batch != nil && ws.batch.members == 2
		r.w.mu.Unlock()
		if joined {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b and c never joined one batch")
		}
		time.Sleep(time.Millisecond)
	}
	gate.Release()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := r.state(t)
	if st.Version != 2 {
		t.Fatalf("version %d after a, then b and c together: want 2", st.Version)
	}
	if ds, _ := st.Snapshot(2); len(ds) != 2 {
		t.Fatalf("snapshot 2 holds %d descriptors, want b and c", len(ds))
	}
	if s := r.w.Stats(); s.Commits != 3 || s.Snapshots != 2 {
		t.Fatalf("stats %+v, want 3 commits in 2 snapshots", s)
	}
}

// TestWriterRenameUploadsNothing: rename of a committed file and of a
// directory commits descriptors only, one snapshot each; the blobs are
// not stored again (every blob PUT fails from the start).
func TestWriterRenameUploadsNothing(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	for _, name := range []string{"f", "d/x", "d/y"} {
		if err := r.w.Release(ctx, r.id, r.written(t, name, big(name))); err != nil {
			t.Fatal(err)
		}
	}
	before := r.state(t)
	r.failBlobPuts()
	for _, c := range []struct{ from, to string }{{"f", "g"}, {"d", "e/d"}} {
		if err := r.w.Rename(ctx, r.id, c.from, c.to, false); err != nil {
			t.Fatalf("rename %s %s: %v", c.from, c.to, err)
		}
	}
	after := r.state(t)
	if after.Version != before.Version+2 {
		t.Fatalf("version %d -> %d: want one snapshot per rename", before.Version, after.Version)
	}
	for from, to := range map[string]string{"f": "g", "d/x": "e/d/x", "d/y": "e/d/y"} {
		old, was := before.Slot(from)
		now, is := after.Slot(to)
		if _, still := after.Slot(from); !was || !is || still || now.Digest != old.Digest {
			t.Fatalf("%s -> %s: before %v, after %v (old name kept %v)", from, to, was, is, still)
		}
	}
}

// TestWriterFsyncMode: with CommitOnFsync nothing lands at close; the
// session's fsync commits every staged change, a rename included, as one
// snapshot.
func TestWriterFsyncMode(t *testing.T) {
	r := newWriterRig(t, CommitOnFsync)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if err := r.w.Release(ctx, r.id, r.written(t, name, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.w.Rename(ctx, r.id, "b", "c", false); err != nil {
		t.Fatal(err)
	}
	if st := r.state(t); st.Version != 0 {
		t.Fatalf("version %d before fsync, want nothing committed", st.Version)
	}
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	st := r.state(t)
	if st.Version != 1 {
		t.Fatalf("version %d after fsync, want one snapshot", st.Version)
	}
	for name, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, ok := st.Slot(name); ok != want {
			t.Fatalf("%s present %v after fsync, want %v", name, ok, want)
		}
	}
}

// TestWriterAfterUnknownOutcome: a file written again after a close that
// was EIO for a commit whose outcome was unknown: the mount asks the
// bucket (by the commit's transaction ID) what became of it when the
// file's next commit or rename is refused, and builds on it if it
// landed. Appended to, the next close moved both appends onto the
// landed commit, the first line twice, also under another mount's
// append on top of it; edited or renamed, it was ESTALE (review 6 #2,
// review 7 #2, #5). Another writer's commit of the same bytes is not
// taken for the mount's own (review 7 #3).
func TestWriterAfterUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	base := big("base\n")
	for _, c := range []struct {
		name      string
		landed    bool
		appending bool
		// between runs after the close; then line "two" is written, and
		// the file closed (or, with rename, renamed to log.1).
		between func(r *writerRig)
		rename  bool
		want    string // the log's content past base
	}{
		{"landed/append", true, true, nil, false, "one\ntwo\n"},
		{"landed/edit", true, false, nil, false, "one\ntwo\n"},
		{"landed/other-appended-on-top", true, true, func(r *writerRig) { r.otherBlob(t, "log", base+"one\nother\n", "") }, false, "one\nother\ntwo\n"},
		{"not-landed/other-committed-the-same-bytes", false, true, func(r *writerRig) { r.otherBlob(t, "log", base+"one\n", "") }, false, "one\none\ntwo\n"},
		{"landed/renamed/append", true, true, nil, true, "one\n"},
		{"landed/renamed/edit", true, false, nil, true, "one\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logged := &syncbuf.Buffer{}
			r := newWriterRigCfg(t, func(cfg *Config) { cfg.Log = logged.Logger(slog.LevelInfo) })
			r.commitBlob(t, "log", base, "")
			key, _ := layout.SnapshotKey(r.id, r.latest(t)+1)
			put := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: key}, FailProb: 1, LoseResponse: c.landed})
			read := r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: key}, FailProb: 1})
			s := r.openWriting(t, "log", "one\n", c.appending)
			if err := r.w.Flush(ctx, r.id, s, false); !errors.Is(err, layout.ErrOutcomeUnknown) {
				t.Fatalf("first close: %v, want ErrOutcomeUnknown", err)
			}
			r.inj.Remove(put)
			r.inj.Remove(read)
			if c.between != nil {
				c.between(r)
			}
			name := "log"
			if c.rename {
				if err := r.w.Rename(ctx, r.id, "log", "log.1", false); err != nil {
					t.Fatalf("rename: %v\n%s", err, logged.String())
				}
				name = "log.1"
			} else {
				var err error
				if c.appending {
					_, err = s.Append(ctx, []byte("two\n"))
				} else {
					_, err = s.WriteAt(ctx, []byte("two\n"), int64(len(base)+4))
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := r.w.Flush(ctx, r.id, s, false); err != nil {
					t.Fatalf("second close: %v\n%s", err, logged.String())
				}
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, name); got != base+c.want {
				t.Errorf("%s ends %q, want %q\n%s", name, got[min(len(got), len(base)):], c.want, logged.String())
			}
		})
	}
}

// TestWriterRenameWrittenFileUnknownOutcome: a mv of a file open with
// changes whose snapshot (the old name removed, the new one given what
// the file was committed as) lands with its reply lost. The rename asks
// the bucket at once: when the snapshot is there, the mv succeeded, and
// the file's close lands its changes under the new name. Answering EIO
// left the file at the old name, and its close then put the changes
// back there, the file split across both names (review 8 #3). When the
// snapshot is not there, the mv fails and the file stays where it was.
func TestWriterRenameWrittenFileUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	base := big("base\n")
	for _, c := range []struct {
		name      string
		landed    bool
		appending bool
		// what log and log.1 hold once the file is closed
		log, log1 string
	}{
		{"landed/append", true, true, "(none)", base + "one\n"},
		{"landed/edit", true, false, "(none)", base + "one\n"},
		{"not-landed/append", false, true, base + "one\n", "(none)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logged := &syncbuf.Buffer{}
			var answered atomic.Bool
			r := newWriterRigCfg(t, func(cfg *Config) { cfg.Log = logged.Logger(slog.LevelInfo) })
			// The bucket answers about the snapshot again once asked
			// by transaction ID, not before.
			r.w.store = answeringStore{r.w.store, func() { answered.Store(true) }}
			r.commitBlob(t, "log", base, "")
			s := r.openWriting(t, "log", "one\n", c.appending)
			key, _ := layout.SnapshotKey(r.id, r.latest(t)+1)
			// The PUT fails (with its reply lost: it landed), and so
			// do the commit's reads of it back: the outcome is unknown.
			put := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: key}, FailProb: 1, LoseResponse: c.landed})
			r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: key}, FailProb: 1,
				While: func() bool { return !answered.Load() }})
			err := r.w.Rename(ctx, r.id, "log", "log.1", false)
			switch {
			case c.landed && err != nil:
				t.Fatalf("rename whose snapshot landed: %v\n%s", err, logged.String())
			case !c.landed && (err == nil || errors.Is(err, layout.ErrOutcomeUnknown)):
				// The bucket answered: it did not land (review 9).
				t.Fatalf("rename whose snapshot did not land: %v, want an error saying it did not", err)
			}
			r.inj.Remove(put)
			if err := r.w.Flush(ctx, r.id, s, false); err != nil {
				t.Fatalf("close: %v\n%s", err, logged.String())
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			r.cache.Invalidate(r.id)
			if got := r.bodyOf(t, "log"); got != c.log {
				t.Errorf("log holds %q, want %q\n%s", tail(got, base), tail(c.log, base), logged.String())
			}
			if got := r.bodyOf(t, "log.1"); got != c.log1 {
				t.Errorf("log.1 holds %q, want %q\n%s", tail(got, base), tail(c.log1, base), logged.String())
			}
		})
	}
}

// answeringStore is a Store that calls asked before each ResolveCommit.
type answeringStore struct {
	Store
	asked func()
}

func (a answeringStore) ResolveCommit(ctx context.Context, e *layout.OutcomeUnknownError) (layout.CommitResult, bool, error) {
	a.asked()
	return a.Store.ResolveCommit(ctx, e)
}

// tail is s past base when s starts with it (the test's large base
// spares the log), s otherwise.
func tail(s, base string) string {
	if rest, ok := strings.CutPrefix(s, base); ok {
		return "base+" + rest
	}
	return s
}

// unknownOutcomeRig is a rig whose first snapshot PUT lands with its
// reply lost (after the commits of before, if any, at once), and whose reads of it get no answer, so that the commit's
// outcome is unknown; answer lets the bucket answer again and waits for
// the writer's background check to log that the commit landed.
func unknownOutcomeRig(t *testing.T, before ...func(r *writerRig)) (r *writerRig, logged *syncbuf.Buffer, answer func()) {
	t.Helper()
	logged = &syncbuf.Buffer{}
	r = newWriterRigCfg(t, func(c *Config) { c.Log = logged.Logger(slog.LevelInfo) })
	for _, b := range before {
		b(r)
	}
	key, _ := layout.SnapshotKey(r.id, r.latest(t)+1)
	put := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: key}, FailProb: 1, LoseResponse: true})
	read := r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: key}, FailProb: 1})
	return r, logged, func() {
		t.Helper()
		r.inj.Remove(put)
		r.inj.Remove(read)
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logged.String(), "landed after all"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no word of the commit once the bucket answered:\n%s", logged.String())
			}
		}
	}
}

// TestWriterFailedCommit: a commit that fails for good returns its error
// to the close, and the content is kept in the failed directory; what an
// unmount finds staged (fsync mode, never fsynced) is kept there too.
func TestWriterFailedCommit(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		logged := &syncbuf.Buffer{}
		r := newWriterRigCfg(t, func(c *Config) { c.Log = logged.Logger(slog.LevelInfo) })
		r.failBlobPuts()
		err := r.w.Release(context.Background(), r.id, r.written(t, "f", big("kept")))
		if err == nil {
			t.Fatal("release of a file whose upload failed returned no error")
		}
		if kept := r.failedFiles(t); len(kept) != 1 {
			t.Fatalf("failed/ holds %v, want the file", kept)
		}
		// The line that says where the bytes are says why (audit 10).
		if line := logged.String(); !strings.Contains(line, "staged data kept") || !strings.Contains(line, "PermissionDenied") {
			t.Errorf("the log does not say why the commit failed:\n%s", line)
		}
		if _, ok := r.slot(t, "f"); ok {
			t.Fatal("f committed although its upload failed")
		}
	})
	t.Run("outcome unknown", func(t *testing.T) {
		// The snapshot lands, its reply is lost and the read-back gets
		// no answer (audit 4): close says EIO, the copy is kept, and the
		// log says the commit may be in the session, then, once the
		// bucket answers, that it is.
		r, logged, answer := unknownOutcomeRig(t)
		err := r.w.Release(context.Background(), r.id, r.written(t, "f", "maybe"))
		if !errors.Is(err, layout.ErrOutcomeUnknown) {
			t.Fatalf("release: %v, want ErrOutcomeUnknown", err)
		}
		if kept := r.failedFiles(t); len(kept) != 1 {
			t.Fatalf("failed/ holds %v, want the file", kept)
		}
		if !strings.Contains(logged.String(), "commit outcome unknown") {
			t.Errorf("the log does not say the outcome is unknown:\n%s", logged.String())
		}
		answer()
		if e, ok := r.slot(t, "f"); !ok || string(e.Data) != "maybe" {
			t.Errorf("f after the commit landed: %+v, %v", e, ok)
		}
		// The session holds the bytes: the copy that said "not
		// committed" is gone.
		if kept := r.failedFiles(t); len(kept) != 0 {
			t.Errorf("failed/ holds %v after the commit was found landed, want nothing", kept)
		}
	})
	t.Run("outcome unknown, landed before the release", func(t *testing.T) {
		// A second descriptor holds the file: its release comes after
		// the bucket said the commit landed, and keeps no copy.
		r, _, answer := unknownOutcomeRig(t)
		s := r.written(t, "f", "maybe")
		other, err := r.w.Open(context.Background(), r.id, "f", nil, false)
		if err != nil || other != s {
			t.Fatalf("second open: %v (same file: %v)", err, other == s)
		}
		if err := r.w.Flush(context.Background(), r.id, s, true); !errors.Is(err, layout.ErrOutcomeUnknown) {
			t.Fatalf("flush: %v, want ErrOutcomeUnknown", err)
		}
		answer()
		for range 2 {
			r.w.Release(context.Background(), r.id, s)
		}
		if kept := r.failedFiles(t); len(kept) != 0 {
			t.Errorf("failed/ holds %v for a commit found landed before the release, want nothing", kept)
		}
		if e, ok := r.slot(t, "f"); !ok || string(e.Data) != "maybe" {
			t.Errorf("f after the commit landed: %+v, %v", e, ok)
		}
	})
	t.Run("unmount", func(t *testing.T) {
		r := newWriterRig(t, CommitOnFsync)
		if err := r.w.Release(context.Background(), r.id, r.written(t, "f", "kept")); err != nil {
			t.Fatal(err)
		}
		r.w.Shutdown()
		kept := r.failedFiles(t)
		if len(kept) != 1 {
			t.Fatalf("failed/ holds %v, want the unsynced file", kept)
		}
		b, err := os.ReadFile(filepath.Join(r.cfg.FailedDir, r.id.String(), kept[0]))
		if err != nil || string(b) != "kept" {
			t.Fatalf("kept %q, %v", b, err)
		}
	})
}

// TestWriterTruncateNameRefused: truncate(2) of a path, or the truncate
// that follows open(O_TRUNC), while a handle is still open on the file
// (the handle that failed open made, released later by the kernel). A
// refused commit leaves a file that held only its committed bytes as it
// was; once CI read "" through that handle before its release came.
func TestWriterTruncateNameRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		committed bool   // the open file held its committed bytes only
		refuse    bool   // snapshot PUTs fail
		want      string // what the open file holds after the truncate
		slot      string // what the bucket holds
		kept      int    // files in failed/ after the release
	}{
		{name: "clean file, commit refused", committed: true, refuse: true, want: "first\n", slot: "first\n"},
		{name: "clean file, committed", committed: true, want: "", slot: ""},
		{name: "unsaved writes, commit refused", refuse: true, want: "", kept: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t)
			s := r.written(t, "f", "first\n")
			if tc.committed {
				if err := r.w.Flush(ctx, r.id, s, true); err != nil {
					t.Fatal(err)
				}
			}
			if tc.refuse {
				r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)},
					FailProb: 1, Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
			}
			got, err := r.w.TruncateName(ctx, r.id, "f", func() *layout.Entry { return nil }, 0, true)
			if (err != nil) != tc.refuse {
				t.Fatalf("TruncateName = %v, want an error: %v", err, tc.refuse)
			}
			if got != s {
				t.Fatal("TruncateName staged a second file beside the open one")
			}
			buf := make([]byte, 64)
			n, _ := s.ReadAt(context.Background(), buf, 0)
			if string(buf[:n]) != tc.want || s.Stat().Size != int64(len(tc.want)) {
				t.Fatalf("open file holds %q (size %d), want %q", buf[:n], s.Stat().Size, tc.want)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatalf("release: %v", err)
			}
			if kept := r.failedFiles(t); len(kept) != tc.kept {
				t.Fatalf("failed/ holds %v, want %d files", kept, tc.kept)
			}
			e, ok := r.slot(t, "f")
			if ok != tc.committed || string(e.Data) != tc.slot {
				t.Fatalf("bucket holds %q (present %v), want %q (present %v)", e.Data, ok, tc.slot, tc.committed)
			}
		})
	}
}

// TestWriterFlushRacingRename: a flush (a forked child closing its copy
// of a descriptor at exec) starts its commit after a rename of the file's
// name waited for commits in flight, and lands after the rename's. Its
// descriptor must carry the name the file has then: none, for a file
// renamed over (CI once found the replaced bytes at the name), the new
// one for a file moved.
func TestWriterFlushRacingRename(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		flushed  string // the open file being flushed
		from, to string // the rename
		want     map[string]string
	}{
		{"renamed over", "target", "new", "target", map[string]string{"target": "new", "new": ""}},
		{"moved", "moving", "moving", "moved", map[string]string{"moved": big("bytes"), "moving": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t)
			if err := r.w.Release(ctx, r.id, r.written(t, "new", "new")); err != nil {
				t.Fatal(err)
			}
			content := big("bytes")
			if tc.flushed == "target" {
				content = big("replaced")
			}
			s := r.written(t, tc.flushed, content)
			// The rename waits in its LIST of the session, past its wait
			// for commits in flight; the flush then starts and waits in
			// its blob's upload. The rename's change of the file (its
			// unlink or new name) waits for that upload, and the flush's
			// commit then joins a batch after it, before or after the
			// rename's own commit (for a file moved, there is none).
			list, put := faultblob.NewGate(), faultblob.NewGate()
			r.inj.Add(faultblob.Rule{Ops: faultblob.OpList, Stall: list})
			r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: put})
			renamed := make(chan error, 1)
			go func() { renamed <- r.w.Rename(ctx, r.id, tc.from, tc.to, false) }()
			waitStalled(t, list, 1)
			flushed := make(chan error, 1)
			go func() { flushed <- r.w.Flush(ctx, r.id, s, false) }()
			waitStalled(t, put, 1)
			list.Release()
			put.Release()
			if err := <-renamed; err != nil {
				t.Fatalf("rename: %v", err)
			}
			if err := <-flushed; err != nil {
				t.Fatalf("flush: %v", err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatalf("release: %v", err)
			}
			for name, want := range tc.want {
				e, ok := r.slot(t, name)
				got := ""
				if ok {
					b, err := r.store.ReadBlob(ctx, e.Digest, 1<<20)
					if e.Data != nil {
						b, err = e.Data, nil
					}
					if err != nil {
						t.Fatal(err)
					}
					got = string(b)
				}
				if got != want {
					t.Errorf("%s holds %d bytes (present %v), want %d", name, len(got), ok, len(want))
				}
			}
		})
	}
}

// TestCheckInvariants: the check finds a staged file filed under a name
// it does not have (what a rename that moved only one of the two would
// leave).
func TestCheckInvariants(t *testing.T) {
	r := newWriterRig(t)
	s := r.written(t, "f", "x")
	if err := r.w.CheckInvariants(); err != nil {
		t.Fatalf("a fresh staged file: %v", err)
	}
	s.mu.Lock()
	s.name = "g"
	s.mu.Unlock()
	if err := r.w.CheckInvariants(); err == nil {
		t.Fatal("a staged file filed under another name passed the check")
	}
	s.mu.Lock()
	s.name = "f" // put back for the cleanup's check
	s.mu.Unlock()
	if err := r.w.Release(context.Background(), r.id, s); err != nil {
		t.Fatal(err)
	}
}

// TestWriterLostCheckpointStaysLost is the cause of TestCheckpointConflict's
// intermittent "version 3 after the loser stopped": a close lost its
// checkpoint to a foreign one and returned ESTALE, and then a second
// FLUSH of the same file (a dup'd descriptor, or the copy of the
// descriptor a child forked by another thread closes when it execs)
// committed the same content again on the refreshed base, where it
// landed. A commit that failed and was reported is not tried again
// behind the caller's back, by a second flush as little as by the
// release; the content goes to failed/.
func TestWriterLostCheckpointStaysLost(t *testing.T) {
	r := newWriterRigTTL(t, time.Hour, func(c *Config) { c.SnapshotType = layout.Checkpoint })
	ctx := context.Background()
	if _, err := r.cache.State(ctx, r.id); err != nil { // the loser's view, kept: version 0
		t.Fatal(err)
	}
	s := r.written(t, "lost", "mine")
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Checkpoint, Base: &layout.Position{},
		Descriptors: []layout.Descriptor{{Name: "theirs", CreatedAt: time.Now().UTC(), Deleted: true}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		call func() error
	}{
		{"close", func() error { return r.w.Flush(ctx, r.id, s, false) }},
		{"a second close of a dup'd descriptor", func() error { return r.w.Flush(ctx, r.id, s, false) }},
		{"fsync of the file", func() error { return r.w.Flush(ctx, r.id, s, true) }},
		{"fsync of the session directory", func() error { return r.w.FsyncSession(ctx, r.id) }},
	} {
		err := c.call()
		if c.what != "fsync of the session directory" && !errors.Is(err, layout.ErrConflict) {
			t.Fatalf("%s after the lost checkpoint = %v, want ErrConflict", c.what, err)
		}
		if v := r.latest(t); v != 1 {
			t.Fatalf("after %s: latest %d, want the foreign 1 only", c.what, v)
		}
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatalf("release: %v", err)
	}
	if v := r.latest(t); v != 1 {
		t.Fatalf("after the release: latest %d, want 1", v)
	}
	if kept := r.failedFiles(t); len(kept) != 1 {
		t.Fatalf("failed/ holds %v, want the lost file", kept)
	}
	// A new change is a new commit: written again, it lands on the
	// session as it is now.
	s = r.written(t, "again", "retry")
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatalf("a new file after the conflict: %v", err)
	}
	if v := r.latest(t); v != 2 {
		t.Fatalf("a new file after the conflict: latest %d, want 2", v)
	}
}

// TestWriterLostFsyncCheckpointStaysLost is TestWriterLostCheckpointStaysLost
// for --commit=fsync: the fsync that lost its checkpoint to a foreign one
// is ESTALE, and what it took never lands later. Before, every change
// stayed staged, and the next fsync of the session directory committed
// the loser's files and removal on top of the winner's checkpoint.
func TestWriterLostFsyncCheckpointStaysLost(t *testing.T) {
	r := newWriterRigTTL(t, time.Hour, func(c *Config) {
		c.SnapshotType, c.Commit = layout.Checkpoint, CommitOnFsync
	})
	ctx := context.Background()
	old := layout.Descriptor{Name: "old", Data: []byte("old"), Digest: layout.DigestOf([]byte("old")), Size: 3, CreatedAt: time.Now().UTC()}
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{old}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cache.State(ctx, r.id); err != nil { // the loser's view, kept: version 1
		t.Fatal(err)
	}
	if err := r.w.Unlink(ctx, r.id, []string{"old"}); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, r.written(t, "lost", "mine")); err != nil {
		t.Fatal(err)
	}
	held := r.written(t, "held", "mine too")
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Checkpoint, Base: &layout.Position{Version: 1, LastSeq: 1},
		Descriptors: []layout.Descriptor{{Name: "theirs", CreatedAt: time.Now().UTC(), Deleted: true}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		call func() error
		want error
	}{
		{"fsync of the session directory", func() error { return r.w.FsyncSession(ctx, r.id) }, layout.ErrConflict},
		{"fsync of the held file", func() error { return r.w.Sync(ctx, r.id, held) }, layout.ErrConflict},
		{"a second fsync of the session directory", func() error { return r.w.FsyncSession(ctx, r.id) }, nil},
	} {
		if err := c.call(); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Fatalf("%s after the lost checkpoint = %v, want %v", c.what, err, c.want)
		}
		if v := r.latest(t); v != 2 {
			t.Fatalf("after %s: latest %d, want the foreign 2 only", c.what, v)
		}
	}
	if kept := r.failedFiles(t); len(kept) != 1 || !strings.HasPrefix(kept[0], "lost.") {
		t.Fatalf("failed/ holds %v, want the released lost file", kept)
	}
	if err := r.w.Release(ctx, r.id, held); err != nil {
		t.Fatalf("release: %v", err)
	}
	if kept := r.failedFiles(t); len(kept) != 2 {
		t.Fatalf("failed/ holds %v, want both lost files", kept)
	}
	if r.w.Hidden(r.id, "old") {
		t.Fatal("the lost removal of old still hides it")
	}
	// A new change is a new commit, on the session as it is now.
	if err := r.w.Release(ctx, r.id, r.written(t, "again", "retry")); err != nil {
		t.Fatal(err)
	}
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatalf("a new file after the conflict: %v", err)
	}
	ds, err := r.store.ReadSnapshot(ctx, r.id, 3)
	if err != nil || len(ds) != 1 || ds[0].Name != "again" {
		t.Fatalf("snapshot 3 = %+v, %v; want the new file alone", ds, err)
	}
	if _, ok := r.slot(t, "old"); !ok {
		t.Fatal("old removed although its removal lost")
	}
}

// mountOn is a Writer with a session cache of its own over r's store, as
// another mount of the bucket is; it trusts what it loaded for an hour.
func mountOn(t *testing.T, r *testrig.Rig) (*Writer, *cache.Cache) {
	t.Helper()
	c, err := cache.New(r.Store, cache.Options{MetadataTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w := New(Config{StagingDir: dir, FailedDir: filepath.Join(dir, "failed")}, r.Store, c, r.Blobs, nil)
	t.Cleanup(w.Shutdown)
	return w, c
}

// TestWriterOpenFreshSeesOtherWriters: two writers (two mounts) over one
// bucket, each trusting its session cache for an hour. Once one has
// changed a file, the other's OpenFresh of the entry it loaded opens the
// bucket's content and says so (Rebased), so an append lands after the
// other's; a file the other removed is ErrChanged (the kernel then looks
// the name up again); an entry with the same bytes opens as it is, and a
// chmod applies to the bytes in the bucket.
func TestWriterOpenFreshSeesOtherWriters(t *testing.T) {
	ctx := context.Background()
	r := testrig.New(t, time.Hour)
	writer := func() (*Writer, *cache.Cache) { return mountOn(t, r) }
	commit := func(w *Writer, name, content string, base *layout.Entry) {
		t.Helper()
		s, err := w.Open(ctx, r.Session, name, base, base == nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(context.Background(), []byte(content), s.Stat().Size); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx, r.Session, s, false); err != nil {
			t.Fatal(err)
		}
		if err := w.Release(ctx, r.Session, s); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(c *cache.Cache, name string) *layout.Entry {
		t.Helper()
		st, err := c.State(ctx, r.Session)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := st.Slots()[name]
		if !ok {
			t.Fatalf("no %s in the state", name)
		}
		return &e
	}
	a, ca := writer()
	b, cb := writer()
	commit(a, "log", "base\n", nil)
	commit(a, "same", "same\n", nil)
	commit(a, "gone", "gone\n", nil)
	stale, same, gone := entry(cb, "log"), entry(cb, "same"), entry(cb, "gone") // b loads, then trusts these
	commit(a, "log", "from-a\n", entry(ca, "log"))
	if err := a.Unlink(ctx, r.Session, []string{"gone"}); err != nil {
		t.Fatal(err)
	}

	if _, err := b.OpenFresh(ctx, r.Session, "gone", func() *layout.Entry { return gone }, false); !errors.Is(err, ErrChanged) {
		t.Fatalf("OpenFresh of the entry a removed = %v, want ErrChanged", err)
	}
	s, err := b.OpenFresh(ctx, r.Session, "same", func() *layout.Entry { return same }, false)
	if err != nil || s.Rebased() {
		t.Fatalf("OpenFresh of an unchanged file: rebased %v, %v", err == nil && s.Rebased(), err)
	}
	if err := b.Release(ctx, r.Session, s); err != nil {
		t.Fatal(err)
	}
	// b appends to the log it loaded before a's append: the open starts
	// from a's content, not from what b loaded.
	s, err = b.OpenFresh(ctx, r.Session, "log", func() *layout.Entry { return stale }, false)
	if err != nil || !s.Rebased() {
		t.Fatalf("OpenFresh of the entry a replaced: rebased %v, %v; want the bucket's content", err == nil && s.Rebased(), err)
	}
	if _, err := s.WriteAt(context.Background(), []byte("from-b\n"), s.Stat().Size); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx, r.Session, s, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, r.Session, s); err != nil {
		t.Fatal(err)
	}
	// A create that keeps content (>>, O_RDWR|O_CREAT) through b of a
	// name b has no entry of, which a committed: staged from a's bytes.
	commit(a, "new-by-a", "from-a\n", nil)
	s, err = b.OpenFresh(ctx, r.Session, "new-by-a", func() *layout.Entry { return nil }, false)
	if err != nil || !s.Rebased() || s.Stat().Size != int64(len("from-a\n")) {
		t.Fatalf("OpenFresh without a base of a name a created: %v; want it staged from a's content", err)
	}
	if err := b.Release(ctx, r.Session, s); err != nil {
		t.Fatal(err)
	}
	// A chmod through b of a file a rewrote keeps a's bytes.
	commit(a, "same", "changed\n", nil)
	mode := uint32(0o755)
	if _, err := b.SetAttrs(ctx, r.Session, "same", AttrChange{Mode: &mode}, func() *layout.Entry { return same }, same); err != nil {
		t.Fatal(err)
	}
	ca.Invalidate(r.Session)
	if got := entry(ca, "same"); got.Digest == same.Digest || got.Metadata[layout.MetaPosixMode] != "0755" {
		t.Fatalf("after b's chmod: digest %s (b loaded %s), mode %q; want a's bytes with mode 0755",
			got.Digest, same.Digest, got.Metadata[layout.MetaPosixMode])
	}
	buf := make([]byte, 64)
	ca.Invalidate(r.Session)
	n, _ := r.Blobs.ReadAt(ctx, &entry(ca, "log").Descriptor, buf, 0)
	if got := string(buf[:n]); got != "base\nfrom-a\nfrom-b\n" {
		t.Fatalf("log = %q, want both appends", got)
	}
}

// TestWriterOpenStagedOverIsRedone: an open stages a committed file from
// its entry while another open of the name stages it, appends, commits
// and lets it go. The first open's file then starts from content the
// name no longer has, and its commit would drop the other's append (four
// threads appending to one file through a mount lost lines this way). It
// must stage again from what is committed now, or say the file changed.
// An open fetches nothing of a plain body (the file holds it lazily) but
// the size of a gzip one, which is where the first open waits here.
func TestWriterOpenStagedOverIsRedone(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	base := big("base\n")
	e := r.commitBlob(t, "log", base, layout.EncodingGzip)
	baseOf := func() *layout.Entry { return &e }
	// The first open's read of the body's decoded size waits in its GET.
	var armed atomic.Bool
	armed.Store(true)
	g := faultblob.NewGate()
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g, While: armed.Load})
	type opened struct {
		s   *File
		err error
	}
	first := make(chan opened, 1)
	go func() {
		s, err := r.w.OpenFresh(ctx, r.id, "log", baseOf, false)
		first <- opened{s, err}
	}()
	waitStalled(t, g, 1)
	armed.Store(false)
	// The other open rewrites the file whole (a copy from the base would
	// wait on the same blob read, which the blob cache shares).
	other, err := r.w.Open(ctx, r.id, "log", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.WriteAt(context.Background(), []byte(base+"other\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, other); err != nil {
		t.Fatal(err)
	}
	g.Release()
	got := <-first
	if errors.Is(got.err, ErrChanged) {
		return // the front end looks the name up again (ESTALE)
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if _, err := got.s.Append(context.Background(), []byte("first\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, got.s); err != nil {
		t.Fatal(err)
	}
	e, _ = r.slot(t, "log")
	b, err := r.store.ReadBlob(ctx, e.Digest, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := base + "other\nfirst\n"; string(b) != want {
		t.Fatalf("log ends %q, want %q", b[len(base):], want[len(base):])
	}
}

// TestWriterRenameRetypes: a committed file renamed takes the type its
// new name gives, where its type came from its old name or from sniffing
// (sed -i, rsync and os.replace write a temporary and rename it over
// the file: README.md became text/plain); a type set on purpose, or a
// new name whose extension says nothing, keeps the type.
func TestWriterRenameRetypes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		from, to, body, set, want string
	}{
		{"out.json.tmp", "out.json", `{"a":1}`, "", "application/json"},
		{"sedAbC123", "README.md", "# title\n", "", "text/markdown; charset=utf-8"},
		{"a.txt", "a.md", "text\n", "", "text/markdown; charset=utf-8"},
		{"b.txt", "b.md", "text\n", "application/x-special", "application/x-special"},
		{"c.json", "c.unknownext", `{"a":1}`, "", "application/json"},
	} {
		t.Run(c.to, func(t *testing.T) {
			r := newWriterRig(t)
			s := r.written(t, c.from, c.body)
			if c.set != "" {
				s.changeAttrs(func(a *Attrs) { a.ContentType = c.set })
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Rename(ctx, r.id, c.from, c.to, false); err != nil {
				t.Fatal(err)
			}
			e, ok := r.slot(t, c.to)
			if !ok || e.ContentType != c.want {
				t.Fatalf("%s: type %q (%v), want %q", c.to, e.ContentType, ok, c.want)
			}
		})
	}
}

// TestWriterFailedCommitFullDisk: the staged data of a failed commit is
// kept whole when the disk holds it once but not twice: the spill file
// is given its name under failed/, not copied. The copy stopped where
// the disk ran out, the staged file was released, and the write was
// lost behind a cut copy that read as the data (the fault audit).
func TestWriterFailedCommitFullDisk(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	r := newWriterRigCfg(t, func(c *Config) {
		c.StagingDir, c.FailedDir = dir, filepath.Join(dir, "failed")
	})
	r.failBlobPuts()
	body := strings.Repeat("0123456789abcdef", 5<<20/16) // 5 MiB of the 8
	if err := r.w.Release(context.Background(), r.id, r.written(t, "big.bin", body)); err == nil {
		t.Fatal("release of a file whose upload failed returned no error")
	}
	kept := r.failedFiles(t)
	if len(kept) != 1 {
		t.Fatalf("failed/ holds %v, want the file", kept)
	}
	b, err := os.ReadFile(filepath.Join(r.cfg.FailedDir, r.id.String(), kept[0]))
	if err != nil || string(b) != body {
		t.Fatalf("kept %d of %d bytes, %v", len(b), len(body), err)
	}
}

// TestWriterCutDropsSetMtime: open(O_TRUNC) and truncate(2) of a path
// change the content, so a time utimes set on the old content (touch -d,
// tar x) is not the file's mtime any more; the mode stays. Before, a cut
// to size 0 that wrote nothing kept it (`: > f` showed 2000-01-01).
func TestWriterCutDropsSetMtime(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		what string
		cut  func(r *writerRig, base *layout.Entry) error
	}{
		{"open(O_TRUNC)", func(r *writerRig, base *layout.Entry) error {
			s, err := r.w.Open(ctx, r.id, "f", base, true)
			if err != nil {
				return err
			}
			return r.w.Release(ctx, r.id, s)
		}},
		{"truncate(2) to 0", func(r *writerRig, base *layout.Entry) error {
			_, err := r.w.TruncateName(ctx, r.id, "f", func() *layout.Entry { return base }, 0, true)
			return err
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			r := newWriterRig(t)
			meta := map[string]string{layout.MetaPosixMtime: layout.FormatPosixMtime(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)), layout.MetaPosixMode: "0600"}
			d := layout.Descriptor{Name: "f", Data: []byte("data"), Digest: layout.DigestOf([]byte("data")), Size: 4, CreatedAt: time.Now().UTC(), Metadata: meta}
			if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
				t.Fatal(err)
			}
			base, _ := r.slot(t, "f")
			if err := c.cut(r, &base); err != nil {
				t.Fatal(err)
			}
			e, ok := r.slot(t, "f")
			if !ok || e.Size != 0 || e.Version != 2 {
				t.Fatalf("after the cut: %+v %v", e, ok)
			}
			if _, set := e.Metadata[layout.MetaPosixMtime]; set || e.Metadata[layout.MetaPosixMode] != "0600" {
				t.Fatalf("metadata after the cut %v, want the mode and no posix-mtime", e.Metadata)
			}
		})
	}
}

// TestWriterRenameKeepsMtime: a renamed file (alone, or in a renamed
// directory) shows the mtime it had, as rename(2) leaves it; it showed
// the time of the mv (the conformance audit).
func TestWriterRenameKeepsMtime(t *testing.T) {
	ctx := context.Background()
	old := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, c := range []struct{ from, to, name, moved string }{
		{"f", "g", "f", "g"},
		{"d", "e", "d/f", "e/f"},
	} {
		r := newWriterRig(t)
		d := layout.Descriptor{Name: c.name, Data: []byte("x"), Digest: layout.DigestOf([]byte("x")), Size: 1, CreatedAt: old}
		if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Rename(ctx, r.id, c.from, c.to, false); err != nil {
			t.Fatal(err)
		}
		e, ok := r.slot(t, c.moved)
		if !ok {
			t.Fatalf("%s not there after mv %s %s", c.moved, c.from, c.to)
		}
		if got := layout.ShownMtime(e.Metadata, e.CreatedAt, r.id.Time()); !got.Equal(old) {
			t.Errorf("mv %s %s: %s shows mtime %v, want %v", c.from, c.to, c.moved, got, old)
		}
	}
}

// TestWriterEditKeepsDescriptorFields: a file staged from another
// writer's descriptor keeps its cache-control, and, while its bytes are
// the same (a touch opens the file for writing), the fields pugfs does
// not know (§18). touch -d dropped the cache-control (the conformance
// audit). The touch of the file's committed bytes commits at once
// (version 2), the append after it at its release (version 3).
func TestWriterEditKeepsDescriptorFields(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		what        string
		write       string
		wantExtra   bool
		wantVersion uint32
	}{{"touch", "", true, 2}, {"append", "more", false, 3}} {
		r := newWriterRig(t)
		d := layout.Descriptor{Name: "f", Data: []byte("x"), Digest: layout.DigestOf([]byte("x")), Size: 1,
			CreatedAt: time.Now().UTC(), CacheControl: "no-store", Extra: map[string]json.RawMessage{"x-future": json.RawMessage(`1`)}}
		if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
		base, _ := r.slot(t, "f")
		s, err := r.w.Open(ctx, r.id, "f", &base, false)
		if err != nil {
			t.Fatal(err)
		}
		mt := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // touch -d, through the open file
		if _, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mtime: &mt}, func() *layout.Entry { return &base }, &base); err != nil {
			t.Fatal(err)
		}
		if c.write != "" {
			if _, err := s.WriteAt(context.Background(), []byte(c.write), 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		e, _ := r.slot(t, "f")
		if e.Version != c.wantVersion || e.CacheControl != "no-store" || (e.Extra["x-future"] != nil) != c.wantExtra {
			t.Errorf("%s: version %d, cache-control %q, extra %v (want version %d, extra %v)", c.what, e.Version, e.CacheControl, e.Extra, c.wantVersion, c.wantExtra)
		}
	}
}

// TestWriterLink: link(2) gives a file a second name that shares its
// content: a descriptor for the same blob (no upload) with the same mode
// and mtime when the file is committed, a staged copy when it is not
// (--commit=fsync, or still open for writing), committed as any written
// file. The names are separate files afterwards. tar x and rsync -H of
// hard links failed with EPERM before.
func TestWriterLink(t *testing.T) {
	ctx := context.Background()
	old := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, c := range []struct {
		name    string
		mode    CommitMode
		release bool // close the source before the link
	}{
		{"close/committed", CommitOnClose, true},
		{"close/open-for-writing", CommitOnClose, false},
		{"fsync/staged", CommitOnFsync, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRig(t, c.mode)
			body := big("linked ")
			s := r.written(t, "d/f", body)
			if _, err := r.w.SetAttrs(ctx, r.id, "d/f", AttrChange{Mode: ptr(uint32(0o751)), Mtime: &old}, func() *layout.Entry { return nil }, nil); err != nil {
				t.Fatal(err)
			}
			if c.release {
				if err := r.w.Release(ctx, r.id, s); err != nil {
					t.Fatal(err)
				}
			}
			before := r.state(t).Version
			if c.mode == CommitOnClose && c.release {
				r.failBlobPuts() // the committed blob is shared, not stored again
			}
			if err := r.w.Link(ctx, r.id, "d/f", "e/g"); err != nil {
				t.Fatal(err)
			}
			if c.mode == CommitOnFsync {
				if v := r.state(t).Version; v != before {
					t.Fatalf("version %d -> %d before fsync: want nothing committed", before, v)
				}
				if err := r.w.FsyncSession(ctx, r.id); err != nil {
					t.Fatal(err)
				}
			}
			if !c.release {
				if err := r.w.Release(ctx, r.id, s); err != nil {
					t.Fatal(err)
				}
			}
			f, okf := r.slot(t, "d/f")
			g, okg := r.slot(t, "e/g")
			if !okf || !okg || g.Digest != f.Digest || g.Digest != layout.DigestOf([]byte(body)) {
				t.Fatalf("d/f %v %v, e/g %v %v: want both, one digest", okf, f.Digest, okg, g.Digest)
			}
			if g.Metadata[layout.MetaPosixMode] != f.Metadata[layout.MetaPosixMode] || layout.ShownMtime(g.Metadata, g.CreatedAt, r.id.Time()) != layout.ShownMtime(f.Metadata, f.CreatedAt, r.id.Time()) {
				t.Fatalf("attributes: d/f %v, e/g %v", f.Metadata, g.Metadata)
			}
			// Separate files from now on.
			r.inj.Reset()
			s2, err := r.w.Open(ctx, r.id, "e/g", &g, true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s2.WriteAt(context.Background(), []byte("other"), 0); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s2); err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if f2, _ := r.slot(t, "d/f"); f2.Digest != f.Digest {
				t.Fatalf("writing e/g changed d/f")
			}
		})
	}
	t.Run("refusals", func(t *testing.T) {
		r := newWriterRig(t)
		for _, name := range []string{"f", "g"} {
			if err := r.w.Release(ctx, r.id, r.written(t, name, name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			from, to string
			want     error
		}{
			{"f", "g", ErrExist},
			{"missing", "h", ErrNotExist},
			{"f", SendDir + "/" + layout.NewSessionID(time.Now()).String() + "/f", ErrCrossSend},
		} {
			if err := r.w.Link(ctx, r.id, c.from, c.to); !errors.Is(err, c.want) {
				t.Errorf("link %s %s: %v, want %v", c.from, c.to, err, c.want)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestWriterRenameDirFailsWhole: a directory rename whose commit fails
// moves nothing, here either: the target is not left as an empty local
// directory (the fault audit: an mv tried again then moved the source
// into it, d2/d/x), and staged files and local subdirectories keep their
// names.
func TestWriterRenameDirFailsWhole(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	r.write(t, "d/x", "x\n")
	r.w.Mkdir(r.id, "d/sub")
	s := r.written(t, "d/y", "y\n") // staged, open
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)}, FailProb: 1,
		Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
	if err := r.w.Rename(ctx, r.id, "d", "d2", false); err == nil {
		t.Fatal("rename committed with every snapshot PUT failing")
	}
	r.inj.Reset()
	if st := r.w.Staged(r.id, "d/y"); st != s || s.Name() != "d/y" {
		t.Fatalf("staged d/y after the failed rename: %v %q", st, s.Name())
	}
	st := r.state(t)
	slots, tree := r.w.Live(st)
	if file, dir := r.w.kindOf(r.w.session(r.id), slots, tree, "d2"); file || dir {
		t.Fatalf("d2 is left after the failed rename (file %v, dir %v)", file, dir)
	}
	if _, dir := r.w.kindOf(r.w.session(r.id), slots, tree, "d/sub"); !dir {
		t.Fatal("d/sub lost its name")
	}
	// Tried again, it moves d to d2 (not into it).
	if err := r.w.Rename(ctx, r.id, "d", "d2", false); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"d2/x", "d2/y"} {
		if _, ok := r.slot(t, n); !ok {
			t.Errorf("%s missing after the second rename", n)
		}
	}
}

// TestWriterStagingDirRemoved: the staging directory lives in the cache
// directory, which people and cleaners empty while a mount runs; the
// next create makes it again and commits (every create failed with
// ENOENT until the mount was restarted).
func TestWriterStagingDirRemoved(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	if err := os.RemoveAll(r.cfg.StagingDir); err != nil {
		t.Fatal(err)
	}
	s := r.written(t, "after.txt", "after removal")
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatalf("release: %v", err)
	}
	e, ok := r.slot(t, "after.txt")
	if !ok || e.Size != int64(len("after removal")) {
		t.Fatalf("after.txt: %+v, %v; want it committed", e, ok)
	}
	if fi, err := os.Stat(r.cfg.StagingDir); err != nil || !fi.IsDir() {
		t.Fatalf("staging directory: %v", err)
	}
}

// TestWriterFailedTruncatingOpenHoldsNothing: an open with O_TRUNC of a
// file another handle holds staged, whose cut to nothing fails, holds
// nothing of the file: the other handle's release is the last. (The
// failed cut makes the content half-written, so that release refuses to
// commit it and keeps it in the failed directory.) The failed open kept
// its share of the file, which nobody released: the file was never
// committed nor kept, never forgotten, its spill file open for good.
func TestWriterFailedTruncatingOpenHoldsNothing(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t)
	s := r.written(t, "f", "kept")
	// A spill file that cannot be cut: the open's truncate fails.
	ro, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	s.mu.Lock()
	spill := s.file
	s.file = ro
	s.mu.Unlock()
	if _, err := r.w.Open(ctx, r.id, "f", nil, true); err == nil {
		t.Fatal("an open with O_TRUNC of a file that cannot be cut succeeded")
	}
	s.mu.Lock()
	s.file = spill
	s.mu.Unlock()
	if err := r.w.Release(ctx, r.id, s); err == nil {
		t.Fatal("the last release committed a file whose cut failed")
	}
	if r.w.Staged(r.id, "f") != nil {
		t.Fatal("f is still staged after its last release")
	}
	if kept := r.failedFiles(t); len(kept) != 1 {
		t.Fatalf("failed directory holds %q, want f's copy", kept)
	}
}

// TestWriterSalvageKeepsNoCutCopy: the copy kept of a staged file whose
// commit failed is the whole file or nothing. A read of the spill file
// that ended early (an I/O error, a file shorter than its size) left
// the loop with no error, and the cut copy was kept and logged as the
// data.
func TestWriterSalvageKeepsNoCutCopy(t *testing.T) {
	for _, c := range []struct {
		name  string
		short int64 // bytes the spill file lacks of the file's size
	}{{"whole", 0}, {"spill file shorter than the file", 10}} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRig(t)
			body := big("salvaged ")
			s := r.written(t, "f", body)
			s.mu.Lock()
			s.size += c.short
			s.mu.Unlock()
			r.w.mu.Lock()
			kept := r.w.salvageLocked(r.id, s, "test; staged data kept")
			r.w.mu.Unlock()
			s.mu.Lock()
			s.size -= c.short
			s.mu.Unlock()
			if c.short > 0 {
				if kept != "" || len(r.failedFiles(t)) != 0 {
					t.Fatalf("kept %q (failed directory %q) of a file that could not be read whole", kept, r.failedFiles(t))
				}
				return
			}
			got, err := os.ReadFile(kept)
			if err != nil || string(got) != body {
				t.Fatalf("kept %q: %d bytes, %v; want the %d bytes of the file", kept, len(got), err, len(body))
			}
		})
	}
}

// TestWriterMtimeWhileWriting: a file being written shows the time of its
// last write as its mtime, as a disk does, and its commit's created-at
// (the mtime after the close) is later still; it showed the time of its
// open until the close (audit 12). A file opened and not written shows
// its open.
func TestWriterMtimeWhileWriting(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r := newWriterRigCfg(t, func(c *Config) {
		c.Now = func() time.Time { return at(time.Duration(clock.Load())) }
	})
	s, err := r.w.Open(ctx, r.id, "f", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Stat().Mtime; !got.Equal(at(0)) {
		t.Errorf("mtime after the open: %v, want %v", got, at(0))
	}
	for i, d := range []time.Duration{time.Second, time.Minute} {
		clock.Store(int64(d))
		if _, err := s.WriteAt(ctx, []byte("x"), int64(i)); err != nil {
			t.Fatal(err)
		}
		if got := s.Stat().Mtime; !got.Equal(at(d)) {
			t.Errorf("mtime after a write at +%v: %v, want the write's time", d, got)
		}
	}
	clock.Store(int64(time.Hour))
	if err := r.w.Flush(ctx, r.id, s, false); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	if e, _ := r.slot(t, "f"); !e.CreatedAt.Equal(at(time.Hour)) {
		t.Errorf("created-at %v, want the close's time %v", e.CreatedAt, at(time.Hour))
	}
}

// slowResolveStore is a Store whose ResolveCommit waits d (or its
// context) before it asks: a bucket that does not answer, each try
// waiting for --request-timeout.
type slowResolveStore struct {
	Store
	d     time.Duration
	calls atomic.Int32
}

func (s *slowResolveStore) ResolveCommit(ctx context.Context, e *layout.OutcomeUnknownError) (layout.CommitResult, bool, error) {
	s.calls.Add(1)
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return layout.CommitResult{}, false, ctx.Err()
	}
	return s.Store.ResolveCommit(ctx, e)
}

// TestWriterRenameSettleBounded: a rename of a file being written whose
// commit's outcome is unknown asks the bucket within one deadline
// (settleMoveFor), whatever each try takes: it holds the session's nsMu
// meanwhile, and a close of another file of the session waits for it.
// Each try bounded by the request timeout alone, six of them held both
// for minutes (review 9: 11.9 s with tries of 1 s).
func TestWriterRenameSettleBounded(t *testing.T) {
	old := settleMoveFor
	settleMoveFor = time.Second
	t.Cleanup(func() { settleMoveFor = old })
	ctx := context.Background()
	r := newWriterRigCfg(t, nil)
	r.commitBlob(t, "log", big("base\n"), "")
	r.commitBlob(t, "other", "o\n", "")
	s := r.openWriting(t, "log", "one\n", true)
	o := r.openWriting(t, "other", "two\n", true)
	slow := &slowResolveStore{Store: r.w.store, d: time.Second}
	r.w.store = slow
	key, _ := layout.SnapshotKey(r.id, r.latest(t)+1)
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: key}, FailProb: 1, LoseResponse: true})
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: key}, FailProb: 1})
	renamed := make(chan error, 1)
	start := time.Now()
	go func() { renamed <- r.w.Rename(ctx, r.id, "log", "log.1", false) }()
	for slow.calls.Load() == 0 {
		time.Sleep(time.Millisecond) // polls for the settling to start
	}
	// Its commit reads the rename's snapshot, which the bucket does
	// not answer for: what counts is how long it waited.
	r.w.Release(ctx, r.id, o)
	closed := time.Since(start)
	if err := <-renamed; !errors.Is(err, layout.ErrOutcomeUnknown) {
		t.Errorf("rename: %v, want ErrOutcomeUnknown", err)
	}
	if took := time.Since(start); took > 5*time.Second || closed > 5*time.Second {
		t.Errorf("the rename took %v and a close of another file waited %v (%d tries); settling is bounded by %v", took, closed, slow.calls.Load(), settleMoveFor)
	}
	r.w.Release(ctx, r.id, s)
}

// TestWriterRenameOverOpenFileFails: a rename over a file open with
// changes whose commit fails leaves that file as it was, as a failed
// rename(2) does on a disk: its writer's close commits its bytes. The
// target was unstaged before the commit and left so: its descriptors
// wrote to an unlinked file, and its close returned 0 with the bytes
// gone, while the bucket kept both names as they were (review 9). Both
// kinds of source: a committed file, and one being written itself.
func TestWriterRenameOverOpenFileFails(t *testing.T) {
	ctx := context.Background()
	for _, writing := range []bool{false, true} {
		t.Run(fmt.Sprintf("source-being-written=%v", writing), func(t *testing.T) {
			r := newWriterRigCfg(t, nil)
			r.commitBlob(t, "a", "a\n", "")
			r.commitBlob(t, "b", "b\n", "")
			var src *File
			if writing {
				src = r.openWriting(t, "a", "more a\n", true)
			}
			b := r.openWriting(t, "b", "more b\n", true)
			refuse := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Regexp: regexp.MustCompile(`/snapshots/`)}, FailProb: 1,
				Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
			if err := r.w.Rename(ctx, r.id, "a", "b", false); err == nil {
				t.Fatal("rename with its commit refused: no error")
			}
			r.inj.Remove(refuse)
			if err := r.w.Flush(ctx, r.id, b, false); err != nil {
				t.Fatalf("close of b: %v", err)
			}
			if err := r.w.Release(ctx, r.id, b); err != nil {
				t.Fatal(err)
			}
			if src != nil {
				if err := r.w.Release(ctx, r.id, src); err != nil {
					t.Fatal(err)
				}
			}
			if got := r.bodyOf(t, "b"); got != "b\nmore b\n" {
				t.Errorf("b holds %q, want its writer's bytes", got)
			}
		})
	}
}
