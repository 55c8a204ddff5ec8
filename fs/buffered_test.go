package fs

import (
	"context"
	"testing"
)

// TestOpenBufs: a second descriptor reads what was written last through
// any open handle; a dropped handle neither shows nor commits its
// content, and one opened after the drop does.
func TestOpenBufs(t *testing.T) {
	ctx := context.Background()
	var o openBufs[*bufHandle]
	if _, ok := o.content(); ok || o.unsaved() {
		t.Fatal("content or unsaved writes with no handle open")
	}
	a, b := &bufHandle{dirty: true}, &bufHandle{}
	o.add(a)
	o.add(b)
	if body, ok := o.content(); !ok || len(body) != 0 || o.unsaved() {
		t.Fatalf("before any write: %q, %v, unsaved %v; want empty, nothing unsaved", body, ok, o.unsaved())
	}
	a.Write(ctx, []byte("from a"), 0)
	b.Write(ctx, []byte("from b"), 0)
	if body, _ := o.content(); string(body) != "from b" || !o.unsaved() {
		t.Fatalf("content %q, unsaved %v; want the last write, unsaved", body, o.unsaved())
	}
	o.drop()
	if _, ok := o.content(); ok || o.unsaved() {
		t.Fatal("dropped handles still show their content")
	}
	if _, _, ok := a.take(); ok {
		t.Fatal("a dropped handle has content to commit")
	}
	c := &bufHandle{}
	o.add(c)
	c.Write(ctx, []byte("after"), 0)
	if body, _ := o.content(); string(body) != "after" {
		t.Fatalf("content %q after the drop, want the new handle's", body)
	}
	if body, _, ok := c.take(); !ok || string(body) != "after" {
		t.Fatalf("a handle opened after the drop: %q, %v; want it committed", body, ok)
	}
}
