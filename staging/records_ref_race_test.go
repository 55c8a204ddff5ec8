package staging

import (
	"context"
	"errors"
	"testing"

	"github.com/pugmark/pugfs/layout"
	_ "github.com/pugmark/pugfs/layout/drivers" // the local driver's If-Match
	"github.com/pugmark/pugfs/layout/localblob"
)

// racingRefStore is a RecordStore whose next successful RenameRef is
// followed, before its caller goes on, by between: another writer's
// compare-and-swap landing right after this one.
type racingRefStore struct {
	*layout.Store
	between func()
}

func (s *racingRefStore) RenameRef(ctx context.Context, name string, prev layout.Ref, target string) error {
	err := s.Store.RenameRef(ctx, name, prev, target)
	if f := s.between; f != nil && err == nil {
		s.between = nil
		f()
	}
	return err
}

// TestRecordsRefWriteAfterAnotherSwap: a ref write returns the ref as
// read back after its write, the base of the descriptor's next write.
// When another writer's compare-and-swap lands between the write and the
// read, the descriptor's next write is ESTALE (ErrRefChanged), and the
// other writer's value stays. The read handed back the other writer's
// token, and the next write replaced its value (review 40). Local
// driver: a real If-Match.
func TestRecordsRefWriteAfterAnotherSwap(t *testing.T) {
	ctx := context.Background()
	b, err := localblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := layout.New(b, nil)
	rs := &racingRefStore{Store: store}
	r := NewRecords(rs, RecordCaches{}, RecordOptions{})
	o := NewRecords(store, RecordCaches{}, RecordOptions{})
	if _, _, err := o.WriteRef(ctx, "tags/x", layout.Ref{}, false, []byte("objects/zero\n")); err != nil {
		t.Fatal(err)
	}
	prev, err := store.ReadRef(ctx, "tags/x")
	if err != nil {
		t.Fatal(err)
	}
	rs.between = func() {
		cur, err := store.ReadRef(ctx, "tags/x")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := o.WriteRef(ctx, "tags/x", cur, true, []byte("objects/theirs\n")); err != nil {
			t.Fatal(err)
		}
	}
	now, existed, err := r.WriteRef(ctx, "tags/x", prev, true, []byte("objects/mine1\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = r.WriteRef(ctx, "tags/x", now, existed, []byte("objects/mine2\n"))
	got, _ := store.ReadRef(ctx, "tags/x")
	if !errors.Is(err, layout.ErrRefChanged) || got.Target != "objects/theirs" {
		t.Fatalf("the descriptor's next write: %v, the ref holds %q; want ErrRefChanged and the other writer's objects/theirs", err, got.Target)
	}
}
