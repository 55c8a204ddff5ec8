package staging

import (
	"context"
	"errors"
	"testing"

	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// TestRecords: memory records and refs written without a kernel; each
// write drops the view it makes stale, and refusals are the package's
// sentinels (fs/errno.go maps them).
func TestRecords(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	var memDrops, refDrops int
	var made []layout.SessionID
	r := NewRecords(store, RecordCaches{
		InvalidateMemories: func() { memDrops++ },
		InvalidateRefs:     func() { refDrops++ },
		SessionCreated:     func(id layout.SessionID) { made = append(made, id) },
	}, nil, nil)

	for _, body := range []string{"one", "two"} {
		d, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "a", Metadata: map[string]string{"k": "v"}}, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if d.Name != "a" || d.Metadata["k"] != "v" || string(d.Data) != body {
			t.Fatalf("record %+v, want a with metadata and %q inline", d, body)
		}
	}
	if len(made) != 1 {
		t.Fatalf("%d writer sessions made for two memory writes, want one", len(made))
	}
	if _, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "b"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := r.RenameMemory(ctx, "notes", "a", "b", true); !errors.Is(err, ErrExist) {
		t.Fatalf("rename onto an existing record with noReplace: %v, want ErrExist", err)
	}
	if err := r.RenameMemory(ctx, "notes", "a", "c", false); err != nil {
		t.Fatal(err)
	}
	if err := r.RenameMemory(ctx, "notes", "a", "d", false); !errors.Is(err, ErrNotExist) {
		t.Fatalf("rename of a moved record: %v, want ErrNotExist", err)
	}
	if err := r.RemoveMemory(ctx, "notes", "c"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveMemory(ctx, "notes", "c"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("second remove: %v, want ErrNotExist", err)
	}
	if memDrops != 6 {
		t.Fatalf("memory view dropped %d times for 6 writes", memDrops)
	}

	if _, _, err := r.WriteRef(ctx, "tags/x", layout.Ref{}, false, []byte("two\nlines\n")); !errors.Is(err, ErrBadRef) {
		t.Fatalf("a two-line ref: %v, want ErrBadRef", err)
	}
	prev, existed, err := r.WriteRef(ctx, "tags/x", layout.Ref{}, false, []byte("objects/one\n"))
	if err != nil || !existed || prev.Target != "objects/one" {
		t.Fatalf("create: %+v %v %v", prev, existed, err)
	}
	if prev, _, err = r.WriteRef(ctx, "tags/x", prev, true, []byte("objects/two")); err != nil || prev.Target != "objects/two" {
		t.Fatalf("replace: %+v %v", prev, err)
	}
	if err := r.DeleteRef(ctx, "tags/x"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteRef(ctx, "tags/x"); !errors.Is(err, layout.ErrNotFound) {
		t.Fatalf("second delete: %v, want not found", err)
	}
	if refDrops != 3 {
		t.Fatalf("ref view dropped %d times for 3 writes", refDrops)
	}
}
