package cache

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// gatedList is a Store whose listing passes wait for release once they
// have listed the bucket: a LIST that began before something happened.
type gatedList struct {
	Store
	listed, release chan struct{}
}

func (g *gatedList) ListSessionVersions(ctx context.Context, known []uint32, full func(uint32, int) bool, bad func(string, error)) ([]layout.ListedSession, error) {
	found, err := g.Store.ListSessionVersions(ctx, known, full, bad)
	g.listed <- struct{}{}
	<-g.release
	return found, err
}

// TestSessionCreatedDuringAPass: a session this mount creates while a
// listing pass is running is in the listing that pass leaves, though its
// LIST began before the session existed. The pass replaced the listing
// the session had been added to, and the mount's own new session was
// missing from its ls sessions/ until the next pass (the remote audit).
func TestSessionCreatedDuringAPass(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	old := w.session()
	g := &gatedList{Store: w.store, listed: make(chan struct{}), release: make(chan struct{})}
	c := newCache(t, g, Options{MetadataTTL: time.Hour})
	done := make(chan []layout.SessionID)
	go func() {
		ids, _ := c.Sessions(bg)
		done <- ids
	}()
	<-g.listed
	made := w.session() // what a mkdir sessions/<id> of this mount does
	c.SessionCreated(made)
	close(g.release)
	<-done
	ids, err := c.Sessions(bg) // within the TTL: the pass's listing
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []layout.SessionID{old, made} {
		if !slices.Contains(ids, id) {
			t.Errorf("listing %v lacks %s", ids, id)
		}
	}
}
