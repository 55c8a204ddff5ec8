package fs

import (
	"context"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// TestCreatedFileReopenedUnchanged: a file made by create(2), committed
// and released, then opened for writing and closed without a write (the
// property test's `write f at <past the end> (0 bytes)`), still shows its
// committed content through the inode create made. The reopen staged a
// fresh copy from the committed entry; once that copy was released, the
// inode had neither a staged file nor an entry of its own to show, and
// stat and read answered ENOENT (seed 11381628749939372008, when the
// kernel kept create's inode instead of looking the name up again).
func TestCreatedFileReopenedUnchanged(t *testing.T) {
	r := newFSRig(t)
	ctx := context.Background()
	s, err := r.f.w.Open(ctx, r.id, "f", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	n := &slotFile{f: r.f, id: r.id, name: "f"}
	n.st.Store(s)
	h := &whandle{f: r.f, id: r.id, s: s, n: n, counted: true}
	if _, errno := h.Write(ctx, []byte("hello"), 0); errno != 0 {
		t.Fatal(errno)
	}
	if errno := h.Flush(ctx); errno != 0 {
		t.Fatalf("close: %v", errno)
	}
	h.Release(ctx)

	fh, _, errno := n.Open(ctx, syscall.O_WRONLY)
	if errno != 0 {
		t.Fatalf("reopen: %v", errno)
	}
	h2 := fh.(*whandle)
	if errno := h2.Flush(ctx); errno != 0 {
		t.Fatalf("close of the reopened file: %v", errno)
	}
	h2.Release(ctx)

	var out fuse.AttrOut
	if errno := n.Getattr(ctx, nil, &out); errno != 0 || out.Size != 5 {
		t.Fatalf("stat after the reopen: size %d, %v; want 5", out.Size, errno)
	}
	buf := make([]byte, 16)
	res, errno := n.Read(ctx, nil, buf, 0)
	if errno != 0 {
		t.Fatalf("read after the reopen: %v", errno)
	}
	if b, _ := res.Bytes(buf); string(b) != "hello" {
		t.Fatalf("read after the reopen: %q, want %q", b, "hello")
	}
}

// TestListingShowsStagedFile: a directory listing taken while a file is
// staged over its committed entry (an append not committed yet) gives the
// staged file, as a lookup does, and the node it makes shows the appended
// bytes after the commit too. The listing gave the committed entry, and
// READDIRPLUS answers from the listing: a node made there (the kernel had
// forgotten the file's inode, as it may under memory pressure) showed the
// bytes the commit replaced once the staged file was forgotten, for as
// long as the kernel kept the node (TestWriteFsyncMode, under load: "c\n"
// read back after `echo more >> d/c.txt; mv d e; sync`).
func TestListingShowsStagedFile(t *testing.T) {
	r := newFSRig(t)
	ctx := context.Background()
	write := func(s *staging.File, data string, off int64) {
		t.Helper()
		h := &whandle{f: r.f, id: r.id, s: s, n: &slotFile{f: r.f, id: r.id, name: "x"}, counted: true}
		if _, errno := h.Write(ctx, []byte(data), off); errno != 0 {
			t.Fatal(errno)
		}
		if errno := h.Flush(ctx); errno != 0 {
			t.Fatalf("close: %v", errno)
		}
		h.Release(ctx)
	}
	s, err := r.f.w.Open(ctx, r.id, "x", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	write(s, "a\n", 0)

	// Staged again from the committed entry: an append in progress.
	base := func() *layout.Entry {
		st, err := r.f.cache.State(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		e := st.Slots()["x"]
		return &e
	}
	s, err = r.f.w.OpenFresh(ctx, r.id, "x", base, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(context.Background(), []byte("b\n"), 2); err != nil {
		t.Fatal(err)
	}
	cs, err := (&sessionDir{f: r.f, id: r.id}).list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var node *slotFile
	for _, c := range cs {
		if c.name == "x" {
			if node != nil {
				t.Fatal("x listed twice")
			}
			node = c.node().(*slotFile)
		}
	}
	if node == nil {
		t.Fatalf("x not listed: %v", cs)
	}
	// The append commits, and the staged file is forgotten.
	h := &whandle{f: r.f, id: r.id, s: s, n: node, counted: true}
	if errno := h.Flush(ctx); errno != 0 {
		t.Fatalf("close: %v", errno)
	}
	h.Release(ctx)
	if r.f.w.Staged(r.id, "x") != nil {
		t.Fatal("x still staged after its last release")
	}
	buf := make([]byte, 16)
	res, errno := node.Read(ctx, nil, buf, 0)
	if errno != 0 {
		t.Fatalf("read: %v", errno)
	}
	if b, _ := res.Bytes(buf); string(b) != "a\nb\n" {
		t.Fatalf("the listed node reads %q after the commit, want %q", b, "a\nb\n")
	}
}
