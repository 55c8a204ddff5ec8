package fs

import (
	"context"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
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
