package readahead

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// viewInos numbers file fNN 17*NN mod n in the live tree and 13*NN mod n
// in a history view: each view of a mount has inode numbers of its own.
type viewInos struct{ n int }

func (p viewInos) File(_ layout.SessionID, at uint32, name string, _ *layout.Entry) uint64 {
	var i int
	fmt.Sscanf(name, "f%d", &i)
	if at == 0 {
		return uint64(17 * i % p.n)
	}
	return uint64(13 * i % p.n)
}

func (p viewInos) Dir(layout.SessionID, uint32, string) uint64 { return 0 }

// TestReadAheadInodeOrderPerView: each view has inode numbers of its
// own, and the latest version's view shares its tree with the live one:
// an inode order cached by tree alone gave .pugmark/at/<latest>/ the
// live tree's order once that was read so, and cp -r of at/<latest>/
// (in its own inode order) got no read-ahead (review 29).
func TestReadAheadInodeOrderPerView(t *testing.T) {
	const n = 40
	r := newRig(t, n, 2000, 1<<20)
	r.ra.Close()
	r.ra = New(r.c, r.log, time.Minute, Options{Inos: viewInos{n}})
	t.Cleanup(r.ra.Close)
	st, _ := r.c.Peek(r.id)
	at := st.Version // the latest version: its view is the live tree
	by := func(mul int) []int {
		o := make([]int, n)
		for i := range n {
			o[mul*i%n] = i
		}
		return o
	}
	live, hist := by(17), by(13)
	// The live tree first, in its inode order.
	for _, i := range live[:2] {
		r.read(i)
	}
	var want []string
	for _, i := range live[2:10] {
		want = append(want, r.files[i].Name)
	}
	slices.Sort(want)
	r.waitFor(t, "live tree in inode order", want)
	r.log.mu.Lock()
	r.log.names = nil
	r.log.mu.Unlock()
	// Then cp -r .pugmark/at/<latest>/ in that view's inode order.
	for _, i := range hist[:2] {
		d := r.files[i]
		r.ra.Read(&Pos{ID: r.id, At: at, Name: d.Name}, &d, 7)
	}
	want = nil
	for _, i := range hist[2:10] {
		want = append(want, r.files[i].Name)
	}
	slices.Sort(want)
	r.waitFor(t, fmt.Sprintf("at/%d in its own inode order", at), want)
}

// countInos numbers files as permInos does and counts the calls.
type countInos struct {
	n     int
	calls atomic.Int64
}

func (p *countInos) File(_ layout.SessionID, _ uint32, name string, _ *layout.Entry) uint64 {
	p.calls.Add(1)
	var i int
	fmt.Sscanf(name, "f%d", &i)
	return uint64(17 * i % p.n)
}

func (p *countInos) Dir(layout.SessionID, uint32, string) uint64 { return 0 }

// TestReadAheadOrdersOfConcurrentSessions: a program that reads five
// sessions at once (rg -j5 over sessions/, five cp -r) builds each
// view's orders once: with 8 kept, two a view, every read rebuilt a
// whole tree's order under ReadAhead.mu on the program's read path,
// an inode-number lookup per file of it (review 29).
func TestReadAheadOrdersOfConcurrentSessions(t *testing.T) {
	ctx := context.Background()
	const sessions, files = 5, 200
	store := layout.New(memblob.OpenBucket(nil), nil)
	var ids []layout.SessionID
	var ds [][]layout.Descriptor
	for range sessions {
		m := store.NewRootManifest()
		if _, _, err := store.CreateSession(ctx, m); err != nil {
			t.Fatal(err)
		}
		var fs []layout.Descriptor
		for i := range files {
			d, err := store.PutBody(ctx, fmt.Sprintf("f%03d", i), []byte(fmt.Sprintf("body %d", i)), layout.BlobOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, d)
		}
		if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: fs}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Session)
		ds = append(ds, fs)
	}
	c, err := cache.New(store, cache.Options{MetadataTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := c.State(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	inos := &countInos{n: files}
	r := New(c, &bodyLog{bytes: 1 << 20}, time.Minute, Options{Inos: inos})
	t.Cleanup(r.Close)
	// Five readers, one per session, each in name order, interleaved.
	for i := range 50 {
		for s := range sessions {
			d := ds[s][i]
			r.Read(&Pos{ID: ids[s], Name: d.Name}, &d, uint32(s+1))
		}
	}
	reads := int64(50 * sessions)
	if got := inos.calls.Load(); got > 2*sessions*files {
		t.Errorf("%d reads asked the mount for %d inode numbers (%d a read): each view's inode order is rebuilt at every read; building each once is %d",
			reads, got, got/reads, sessions*files)
	}
}
