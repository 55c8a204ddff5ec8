package layout

import (
	"context"
	"errors"
	"testing"

	"gocloud.dev/blob/memblob"
)

func TestSmokeCommitAndScan(t *testing.T) {
	ctx := context.Background()
	s := New(memblob.OpenBucket(nil), nil)
	m := s.NewRootManifest()
	if _, created, err := s.CreateSession(ctx, m); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if v, err := s.LatestVersion(ctx, m.Session); err != nil || v != 0 {
		t.Fatalf("latest = %d, %v", v, err)
	}
	body := []byte("hello")
	bi, err := s.PutBlobBytes(ctx, body, BlobOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	d := Descriptor{Digest: bi.Digest, Size: bi.Size, Name: "a.txt", Data: body, CreatedAt: s.now()}
	res, err := s.Commit(ctx, m.Session, CommitRequest{Type: Provisional, Descriptors: []Descriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 1 || res.Descriptors[0].SequenceNumber != 1 {
		t.Fatalf("res = %+v", res)
	}
	tomb := Descriptor{Name: "a.txt", Deleted: true}
	if _, err := s.Commit(ctx, m.Session, CommitRequest{Type: Checkpoint, Descriptors: []Descriptor{tomb, d}}); err != nil {
		t.Fatal(err)
	}
	log, err := s.FullLog(ctx, m.Session, 2)
	if err != nil || len(log) != 3 || log[2].SequenceNumber != 3 {
		t.Fatalf("log = %+v %v", log, err)
	}
	if _, ok := Lookup(log, "a.txt"); !ok {
		t.Fatal("a.txt not live")
	}
	meta, err := s.ReadSnapshotMeta(ctx, m.Session, 2)
	if err != nil || meta.Type != Checkpoint || meta.TransactionID == 0 {
		t.Fatalf("meta %+v %v", meta, err)
	}
	// A checkpoint based on version 1 loses to the foreign checkpoint at 2.
	_, err = s.Commit(ctx, m.Session, CommitRequest{Type: Checkpoint, Descriptors: []Descriptor{d}, Base: &Position{Version: 1, LastSeq: 1}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("want conflict, got %v", err)
	}
	child, err := s.Fork(ctx, m.Session, ForkRequest{Descriptor: d})
	if err != nil {
		t.Fatal(err)
	}
	clog, err := s.FullLog(ctx, child, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := clog[len(clog)-1]; got.Session != child || got.SequenceNumber != 5 {
		t.Fatalf("child last = %+v", got)
	}
	ids, err := s.ListSessions(ctx, nil)
	if err != nil || len(ids) != 2 {
		t.Fatalf("ids %v %v", ids, err)
	}
	r, err := s.WriteMemory(ctx, "team/notes", MemoryWrite{Put: []Descriptor{d}})
	if err != nil || r.Version != 1 || !r.Changed {
		t.Fatalf("memory %+v %v", r, err)
	}
	r, err = s.WriteMemory(ctx, "team/notes", MemoryWrite{Put: []Descriptor{d}})
	if err != nil || r.Changed {
		t.Fatalf("identical memory write changed: %+v %v", r, err)
	}
	got, created, err := s.CreateNamedSession(ctx, "demo", nil)
	if err != nil || !created {
		t.Fatal(err)
	}
	if id, err := s.ResolveSessionName(ctx, "demo"); err != nil || id != got.Session {
		t.Fatalf("resolve %v %v", id, err)
	}
}
