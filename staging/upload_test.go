package staging

import (
	"context"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestWriterSameBytesNotUploaded: a file committed with the bytes it was
// filled from (a touch, which opens it for writing and sets its times; a
// rewrite with the same bytes) commits a new descriptor and stores no
// blob: the blob is in the bucket already, named by the committed
// descriptor. On a bucket 20 ms away each was a PUT more. New bytes are
// still stored.
func TestWriterSameBytesNotUploaded(t *testing.T) {
	ctx := context.Background()
	body := string(make([]byte, 3000)) // above the inline limit
	for _, c := range []struct {
		name   string
		change func(t *testing.T, s *File)
		stores bool // whether the close stores a blob
		want   string
	}{
		{"touch", func(t *testing.T, s *File) {}, false, body},
		{"same-bytes", func(t *testing.T, s *File) {
			if _, err := s.WriteAt(context.Background(), []byte(body[:100]), 0); err != nil {
				t.Fatal(err)
			}
		}, false, body},
		{"new-bytes", func(t *testing.T, s *File) {
			if _, err := s.Append(context.Background(), []byte("more")); err != nil {
				t.Fatal(err)
			}
		}, true, body + "more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, nil)
			r.write(t, "f", body)
			base, _ := r.slot(t, "f")
			// A blob is stored with a PUT, or found there with a HEAD
			// (layout.Options.PutBlindBelow).
			puts := func() int64 {
				ops := r.inj.Stats().Ops
				return ops[faultblob.OpPut].Requests + ops[faultblob.OpHead].Requests
			}
			before := puts()
			s, err := r.w.Open(ctx, r.id, "f", &base, false)
			if err != nil {
				t.Fatal(err)
			}
			c.change(t, s)
			if _, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{MtimeNow: true}, func() *layout.Entry { return &base }, &base); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := puts() - before; (got > 1) != c.stores || got == 0 {
				t.Fatalf("%d PUTs and HEADs for the close; want the snapshot's, and a blob's: %v", got, c.stores)
			}
			e, ok := r.slot(t, "f")
			if !ok || e.Version != base.Version+1 {
				t.Fatalf("f at version %d (%v), want a new descriptor at %d", e.Version, ok, base.Version+1)
			}
			got, err := r.store.ReadBlob(ctx, e.Digest, 1<<20)
			if err != nil || string(got) != c.want {
				t.Fatalf("f's blob: %d bytes, %v; want %d bytes", len(got), err, len(c.want))
			}
		})
	}
}
