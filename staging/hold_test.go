package staging

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// holdRig is a Writer as pugfs exec runs it: fsync mode, checkpoints,
// Hold.
func holdRig(t *testing.T) *writerRig {
	return newWriterRigCfg(t, func(c *Config) {
		c.Commit, c.SnapshotType, c.Hold = CommitOnFsync, layout.Checkpoint, true
	})
}

// write stages name with body and releases it, as echo body > name does.
func (r *writerRig) write(t *testing.T, name, body string) {
	t.Helper()
	ctx := context.Background()
	s, err := r.w.Open(ctx, r.id, name, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(context.Background(), []byte(body), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
}

func (r *writerRig) latest(t *testing.T) uint32 {
	t.Helper()
	v, err := r.store.LatestVersion(context.Background(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWriterHoldFsyncCommitsNothing: with Hold, a handler's fsync(2)
// lands nothing; CommitSession then commits every change as one
// checkpoint on the base it is given.
func TestWriterHoldFsyncCommitsNothing(t *testing.T) {
	r := holdRig(t)
	ctx := context.Background()
	r.write(t, "a", "one")
	r.write(t, "d/b", "two")
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	if v := r.latest(t); v != 0 {
		t.Fatalf("fsync with Hold committed: version %d", v)
	}
	if err := r.w.Unlink(ctx, r.id, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	res, err := r.w.CommitSession(ctx, r.id, layout.Position{Version: 0, LastSeq: 0}, MergeLateInput)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 1 || r.latest(t) != 1 {
		t.Fatalf("committed at %d (latest %d), want one snapshot at 1", res.Version, r.latest(t))
	}
	if m, err := r.store.ReadSnapshotMeta(ctx, r.id, 1); err != nil || m.Type != layout.Checkpoint {
		t.Fatalf("snapshot 1: %+v, %v; want a checkpoint", m, err)
	}
	if _, ok := r.slot(t, "a"); ok {
		t.Fatal("a was removed before the commit, yet it is live")
	}
	if e, ok := r.slot(t, "d/b"); !ok || e.Size != 3 {
		t.Fatalf("d/b = %+v, %v", e.Descriptor, ok)
	}
	if kept := r.failedFiles(t); len(kept) > 0 {
		t.Fatalf("failed/ holds %v after a clean commit", kept)
	}
}

// TestWriterCommitSessionEmpty: with nothing staged CommitSession still
// commits one (empty) snapshot, the invocation's checkpoint.
func TestWriterCommitSessionEmpty(t *testing.T) {
	r := holdRig(t)
	res, err := r.w.CommitSession(context.Background(), r.id, layout.Position{}, MergeLateInput)
	if err != nil || res.Version != 1 || len(res.Descriptors) != 0 {
		t.Fatalf("empty CommitSession = %+v, %v; want an empty snapshot at 1", res, err)
	}
}

// TestWriterCommitSessionConflict: a foreign checkpoint above the base is
// a conflict; nothing lands, and what was staged is kept in failed/ at
// Shutdown, never dropped.
func TestWriterCommitSessionConflict(t *testing.T) {
	r := holdRig(t)
	ctx := context.Background()
	r.write(t, "out", "mine")
	// Someone else's checkpoint lands while the handler runs; the cache
	// may well know it by now, the base must still be the old one.
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{{Name: "theirs", CreatedAt: time.Now().UTC(), Deleted: true}}}); err != nil {
		t.Fatal(err)
	}
	r.cache.Invalidate(r.id)
	_, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput)
	if !errors.Is(err, layout.ErrConflict) {
		t.Fatalf("CommitSession over a foreign checkpoint = %v, want ErrConflict", err)
	}
	if v := r.latest(t); v != 1 {
		t.Fatalf("latest %d after the conflict, want the foreign 1 only", v)
	}
	r.w.Shutdown()
	if kept := r.failedFiles(t); len(kept) != 1 {
		t.Fatalf("failed/ holds %v, want the staged out", kept)
	}
}

// TestWriterCommitSessionMergesProvisional: provisional snapshots above
// the base are no conflict (decisions.md §13.3): the checkpoint lands
// after them, with sequence numbers that continue theirs.
func TestWriterCommitSessionMergesProvisional(t *testing.T) {
	r := holdRig(t)
	ctx := context.Background()
	r.write(t, "out", "mine")
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{{Name: "in", CreatedAt: time.Now().UTC(), Deleted: true}}}); err != nil {
		t.Fatal(err)
	}
	res, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 2 || len(res.Descriptors) != 1 || res.Descriptors[0].SequenceNumber != 2 {
		t.Fatalf("CommitSession = version %d, %+v; want version 2, seq 2", res.Version, res.Descriptors)
	}
}

// TestWriterDiscard: Discard drops what was staged; Shutdown then keeps
// nothing, and a later commit holds none of it.
func TestWriterDiscard(t *testing.T) {
	r := holdRig(t)
	ctx := context.Background()
	r.write(t, "a", "one")
	r.w.Mkdir(r.id, "dir")
	r.w.Discard(r.id)
	if _, ok := r.w.Lookup(r.id, "a"); ok {
		t.Fatal("a is still staged after Discard")
	}
	if _, ok := r.w.Lookup(r.id, "dir"); ok {
		t.Fatal("dir is still local after Discard")
	}
	res, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput)
	if err != nil || len(res.Descriptors) != 0 {
		t.Fatalf("commit after Discard = %+v, %v; want an empty snapshot", res.Descriptors, err)
	}
	r.w.Shutdown()
	if kept := r.failedFiles(t); len(kept) > 0 {
		t.Fatalf("failed/ holds %v after Discard", kept)
	}
}

// TestSendName: only .pugmark/send/<lowercase 32-hex>/<name> is a
// cross-session write.
func TestSendName(t *testing.T) {
	id := layout.NewSessionID(time.Now())
	for _, tc := range []struct {
		full string
		ok   bool
		name string
	}{
		{SendDir + "/" + id.String() + "/a/b.txt", true, "a/b.txt"},
		{SendDir + "/" + id.String() + "/", false, ""},
		{SendDir + "/" + id.String(), false, ""},
		{SendDir + "/" + strings.ToUpper(id.String()) + "/x", false, ""},
		{SendDir + "/not-an-id/x", false, ""},
		{"send/" + id.String() + "/x", false, ""},
	} {
		target, name, ok := SendName(tc.full)
		if ok != tc.ok || name != tc.name || (ok && target != id) {
			t.Errorf("SendName(%q) = %s, %q, %v", tc.full, target, name, ok)
		}
	}
}

// TestWriterRenameAcrossSend: a rename into or out of a send directory
// (or between two) is ErrCrossSend, so mv copies, which writes the file
// there and makes it a cross-session write. Before, mv of a committed
// file into send/<target>/ committed a slot named
// ".pugmark/send/<target>/..." of the sender, delivered to nobody.
func TestWriterRenameAcrossSend(t *testing.T) {
	ctx := context.Background()
	t1, t2 := layout.NewSessionID(time.Now()).String(), layout.NewSessionID(time.Now()).String()
	into, other := SendDir+"/"+t1, SendDir+"/"+t2
	for _, c := range []struct {
		from, to string
		want     error
	}{
		{"committed", into + "/x", ErrCrossSend},
		{"staged", into + "/x", ErrCrossSend},
		{"dir", into + "/dir", ErrCrossSend},
		{into + "/sent", "out", ErrCrossSend},
		{into + "/sent", other + "/sent", ErrCrossSend},
		{into, "gone", ErrCrossSend},
		{into + "/sent", into + "/renamed", nil},
		{"committed", "plain", nil},
	} {
		r := holdRig(t)
		if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Descriptors: []layout.Descriptor{{
			Name: "committed", Data: []byte("c"), Digest: layout.DigestOf([]byte("c")), Size: 1, CreatedAt: time.Now().UTC()}}}); err != nil {
			t.Fatal(err)
		}
		r.write(t, "staged", "s")
		r.write(t, "dir/f", "f")
		r.write(t, into+"/sent", "m")
		if err := r.w.Rename(ctx, r.id, c.from, c.to, false); !errors.Is(err, c.want) {
			t.Errorf("rename %s to %s = %v, want %v", c.from, c.to, err, c.want)
		}
	}
}

// TestWriterSendCommit: a staged file under SendDir commits as a record
// of a cross-session write, not as a slot of the session.
func TestWriterSendCommit(t *testing.T) {
	r := holdRig(t)
	target := layout.NewSessionID(time.Now())
	r.write(t, SendDir+"/"+target.String()+"/msg", "hi")
	res, err := r.w.CommitSession(context.Background(), r.id, layout.Position{}, MergeLateInput)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Descriptors) != 1 || res.Descriptors[0].Name != "msg" || res.Descriptors[0].TargetSession != target {
		t.Fatalf("committed %+v", res.Descriptors)
	}
	if _, ok := r.slot(t, "msg"); ok {
		t.Fatal("a sent file became a slot of the sender")
	}
}
