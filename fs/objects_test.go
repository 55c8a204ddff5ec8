package fs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob/memblob"
)

// TestMountObjectsReadAhead: a program reading objects/ in its listing's
// order (cat objects/*, cp -r, sha256sum) finds the next blobs fetched
// ahead: the first read starts the reads of the blobs after it, and
// reading them all then fetches none twice. 200 blobs 20 ms away took
// 6.4 s one GET after another (audit 3).
func TestMountObjectsReadAhead(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), &layout.Options{Now: time.Now})
	ctx := context.Background()
	const n = 20
	for i := range n {
		if _, err := store.PutBlobBytes(ctx, fmt.Appendf(nil, "blob %d\n", i), layout.BlobOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.ReadOnly = true })
	gets := func() int64 { return inj.Stats().Ops[faultblob.OpGet].Requests }
	names := strings.Fields(sh(t, mnt, "ls objects"))
	if len(names) != n {
		t.Fatalf("objects/ lists %d blobs, want %d", len(names), n)
	}
	before := gets()
	sh(t, mnt, "head -c 1 objects/"+names[0]+" >/dev/null")
	for deadline := time.Now().Add(10 * time.Second); gets()-before < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d GETs after reading the first blob, want all %d blobs (the rest read ahead)", gets()-before, n)
		}
	}
	if got := sh(t, mnt, "cat objects/* | wc -l"); strings.TrimSpace(got) != fmt.Sprint(n) {
		t.Fatalf("cat objects/*: %q lines", got)
	}
	if got := gets() - before; got != n {
		t.Errorf("%d GETs for %d blobs read in order: a blob read ahead was fetched again", got, n)
	}
}
