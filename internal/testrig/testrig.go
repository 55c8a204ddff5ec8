// Package testrig builds what the kernel-free tests of the layers above
// layout (the write engine, fs's nodes called directly) run on: a store
// over an in-memory bucket behind a fault injector, holding one empty
// session, with the session cache and the blob cache over it.
package testrig

import (
	"context"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// Rig is a store with one session and the caches over it.
type Rig struct {
	Store   *layout.Store
	Faults  *faultblob.Injector
	Session layout.SessionID
	Cache   *cache.Cache
	Blobs   *blobcache.Cache
}

// New returns a rig whose session cache trusts what it loaded for ttl
// (as a mount with --metadata-ttl does) and whose blob cache has 8 MiB.
// The blob cache is closed at the test's cleanup, after whatever the
// test registers later (cleanups run last registered first). edit, if
// any, changes the session cache's options first (a clock of the test's).
func New(t testing.TB, ttl time.Duration, edit ...func(*cache.Options)) *Rig {
	t.Helper()
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	opts := cache.Options{MetadataTTL: ttl}
	for _, e := range edit {
		e(&opts)
	}
	c, err := cache.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := blobcache.New(store, blobcache.Options{MemBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	return &Rig{Store: store, Faults: inj, Session: m.Session, Cache: c, Blobs: bc}
}
