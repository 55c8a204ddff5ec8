package staging

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestWriterNameNotUTF8 checks that every operation that would write a
// name JSON cannot carry (another writer's "caf\xe9.txt", or a new file
// below such a directory) is refused with ErrNotUTF8 before anything is
// staged or uploaded: the commit refuses such a name too, but at close,
// with the bytes already written, and after an upload for an ingestion.
func TestWriterNameNotUTF8(t *testing.T) {
	const bad = "caf\xe9.txt"
	mode := uint32(0o600)
	for _, tc := range []struct {
		name string
		op   func(ctx context.Context, r *writerRig) error
	}{
		{"open", func(ctx context.Context, r *writerRig) error {
			_, err := r.w.Open(ctx, r.id, bad, nil, false)
			return err
		}},
		{"open below", func(ctx context.Context, r *writerRig) error {
			_, err := r.w.Open(ctx, r.id, "caf\xe9/new.txt", nil, true)
			return err
		}},
		{"open exclusive", func(ctx context.Context, r *writerRig) error {
			_, err := r.w.OpenExclusive(ctx, r.id, bad)
			return err
		}},
		{"truncate", func(ctx context.Context, r *writerRig) error {
			_, err := r.w.TruncateName(ctx, r.id, bad, func() *layout.Entry { return nil }, 0, true)
			return err
		}},
		{"chmod", func(ctx context.Context, r *writerRig) error {
			_, err := r.w.SetAttrs(ctx, r.id, bad, AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil)
			return err
		}},
		{"unlink", func(ctx context.Context, r *writerRig) error {
			return r.w.Unlink(ctx, r.id, []string{bad})
		}},
		{"rename from", func(ctx context.Context, r *writerRig) error {
			return r.w.Rename(ctx, r.id, bad, "ok.txt", false)
		}},
		{"rename to", func(ctx context.Context, r *writerRig) error {
			if err := r.w.Release(ctx, r.id, r.written(t, "ok.txt", "x")); err != nil {
				t.Fatal(err)
			}
			return r.w.Rename(ctx, r.id, "ok.txt", bad, false)
		}},
		{"link", func(ctx context.Context, r *writerRig) error {
			return r.w.Link(ctx, r.id, "ok.txt", bad)
		}},
		{"ingest", func(ctx context.Context, r *writerRig) error {
			_, err := r.w.Ingest(ctx, r.id, bad, "file:///src", strings.NewReader("body"), layout.BlobOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t)
			ctx := context.Background()
			puts := r.inj.Stats().Ops[faultblob.OpPut].Requests
			err := tc.op(ctx, r)
			if !errors.Is(err, layout.ErrNotUTF8) {
				t.Fatalf("err = %v, want ErrNotUTF8", err)
			}
			if s := r.w.Staged(r.id, bad); s != nil {
				t.Errorf("%q is staged", bad)
			}
			if n := r.inj.Stats().Ops[faultblob.OpPut].Requests - puts; n > 0 && tc.name == "ingest" {
				t.Errorf("%d PUTs for a refused ingestion", n)
			}
		})
	}
}
