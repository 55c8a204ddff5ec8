package cache

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
)

// consistency.md §2: memory writes are set-union merges. Two stores on
// one bucket (two mounts), three writers each, every call adding two new
// names and then repeating one of them unchanged. Every name survives, in
// the views of both mounts and through a fresh open; the records that were
// there first keep their order, each call's two records stay together in
// call order, each writer's calls in its order; a repeat of an identical
// record writes no version (the version count is exactly the number of
// changing calls).
//
// Seen failing: with WriteMemory's PUT made unconditional (no
// If-None-Match, so a concurrent writer's version was overwritten),
// records vanished from the union and the writers' repeats of their own
// records had to write them again, on every backend.
func TestMemorySetUnion(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w1 := newWorld(t, b)
		w2 := w1.reopen()
		const ns = "team/notes"
		rec := func(name string, at time.Time) layout.Descriptor { return textDesc(name, "body of "+name, at) }
		first := []string{"old-1", "old-2", "old-3"}
		var put []layout.Descriptor
		for _, n := range first {
			put = append(put, rec(n, epoch))
		}
		if _, err := w1.store.WriteMemory(bg, ns, layout.MemoryWrite{Put: put}); err != nil {
			t.Fatal(err)
		}
		c1 := newCache(t, w1.store, Options{MetadataTTL: time.Hour})
		views := []*Views{c1.NewViews(w1.store), newCache(t, w2.store, Options{MetadataTTL: time.Hour}).NewViews(w2.store)}
		for _, v := range views {
			if nss, err := v.Namespaces(bg); err != nil || len(nss) != 1 || nss[0].Version != 1 {
				t.Fatalf("namespaces before: %v, %v", nss, err)
			}
		}

		const writers, calls = 3, 3
		var wg sync.WaitGroup
		errc := make(chan error, 2*writers)
		for si, st := range []*layout.Store{w1.store, w2.store} {
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range calls {
						a, b := fmt.Sprintf("s%d-g%d-k%d-a", si, g, k), fmt.Sprintf("s%d-g%d-k%d-b", si, g, k)
						res, err := st.WriteMemory(bg, ns, layout.MemoryWrite{Put: []layout.Descriptor{rec(a, epoch), rec(b, epoch)}})
						if err == nil && !res.Changed {
							err = fmt.Errorf("adding %s and %s changed nothing", a, b)
						}
						if err != nil {
							errc <- err
							return
						}
						// The same record again (a later created-at is not a change).
						again, err := st.WriteMemory(bg, ns, layout.MemoryWrite{Put: []layout.Descriptor{rec(a, epoch.Add(time.Hour))}})
						if err == nil && again.Changed {
							err = fmt.Errorf("repeating %s wrote version %d", a, again.Version)
						}
						if err != nil {
							errc <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}

		const want = 1 + 2*writers*calls // versions: the first write, then one per changing call
		check := func(where string, v uint32, recs []layout.Descriptor) {
			t.Helper()
			if v != want {
				t.Fatalf("%s: latest version %d, want %d (one per changing call)", where, v, want)
			}
			var names []string
			pos := map[string]int{}
			for i, d := range recs {
				names = append(names, d.Name)
				if _, dup := pos[d.Name]; dup {
					t.Fatalf("%s: %s twice", where, d.Name)
				}
				pos[d.Name] = i
			}
			if len(names) != len(first)+2*2*writers*calls {
				t.Fatalf("%s: %d records: %v", where, len(names), names)
			}
			if strings.Join(names[:len(first)], " ") != strings.Join(first, " ") {
				t.Fatalf("%s: existing order lost: %v", where, names)
			}
			for si := range 2 {
				for g := range writers {
					prev := -1
					for k := range calls {
						a, aok := pos[fmt.Sprintf("s%d-g%d-k%d-a", si, g, k)]
						b, bok := pos[fmt.Sprintf("s%d-g%d-k%d-b", si, g, k)]
						if !aok || !bok {
							t.Fatalf("%s: lost a record of store %d writer %d call %d: %v", where, si, g, k, names)
						}
						if b != a+1 || a < prev {
							t.Fatalf("%s: call order lost for store %d writer %d call %d: %v", where, si, g, k, names)
						}
						prev = b
					}
				}
			}
		}
		for i, v := range views {
			v.InvalidateMemories() // what the tree does after its own memory writes
			nss, err := v.Namespaces(bg)
			if err != nil || len(nss) != 1 {
				t.Fatalf("namespaces: %v, %v", nss, err)
			}
			recs, err := v.Memory(bg, ns, nss[0].Version)
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("mount %d", i+1), nss[0].Version, recs)
		}
		fresh := layout.New(testbucket.Reopen(t, b), nil)
		v, err := fresh.LatestMemoryVersion(bg, ns)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := fresh.ReadMemory(bg, ns, v)
		if err != nil {
			t.Fatal(err)
		}
		check("a fresh open", v, recs)
	})
}
