package staging

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
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
			_, err := r.w.Ingest(ctx, r.id, bad, "file:///src", strings.NewReader("body"), 4, nil, layout.BlobOptions{})
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

// TestWriterRenameDirNameNotUTF8: a directory holding another writer's
// file whose name is not UTF-8 cannot move (the file's new name and its
// old name's tombstone would be written): refused at once, in both commit
// modes. With --commit=fsync the mv returned 0 and queued the ops, which
// every later fsync of the session then failed on, with the files
// written beside them (review 11).
func TestWriterRenameDirNameNotUTF8(t *testing.T) {
	for _, mode := range []CommitMode{CommitOnClose, CommitOnFsync} {
		t.Run(map[CommitMode]string{CommitOnClose: "close", CommitOnFsync: "fsync"}[mode], func(t *testing.T) {
			ctx := context.Background()
			r := newWriterRig(t, mode)
			body := "e9\n"
			js := fmt.Sprintf(`[{"name":"d/caf`+"\xe9"+`.txt","digest":%q,"size":%d,"data":%q,"sequence-number":1}]`,
				layout.DigestOf([]byte(body)).String(), len(body), base64.StdEncoding.EncodeToString([]byte(body)))
			key, _ := layout.SnapshotKey(r.id, 1)
			if err := r.store.Bucket().WriteAll(ctx, key, []byte(js), &blob.WriterOptions{ContentType: "application/json",
				Metadata: map[string]string{layout.MetaSnapshotSession: r.id.String(), layout.MetaSnapshotVersion: "1",
					layout.MetaTransactionID: "12345", layout.MetaSnapshotType: "checkpoint"}}); err != nil {
				t.Fatal(err)
			}
			r.cache.Invalidate(r.id)
			if err := r.w.Rename(ctx, r.id, "d", "e", false); !errors.Is(err, layout.ErrNotUTF8) {
				t.Fatalf("mv d e: %v, want ErrNotUTF8", err)
			}
			if err := r.w.Release(ctx, r.id, r.written(t, "other.txt", "other\n")); err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatalf("fsync: %v", err)
			}
			if got := r.bodyOf(t, "other.txt"); got != "other\n" {
				t.Errorf("other.txt holds %q, want %q", got, "other\n")
			}
			if _, ok := r.slot(t, "d/caf\xe9.txt"); !ok {
				t.Error("the refused mv moved d/caf\\xe9.txt")
			}
		})
	}
}
