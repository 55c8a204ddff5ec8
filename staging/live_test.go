package staging

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// TestLiveViewMatchesBuild: with --commit=fsync, the live view of a
// session (its slots with the pending removals and renames over them) is
// derived from the view before it as ops are queued, and from the new
// state after an fsync; through random rounds of both, its names and
// tree are those of the slots with every pending op applied, built from
// scratch: each queued op copied every slot and built the tree again
// (review 34).
func TestLiveViewMatchesBuild(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(c *Config) { c.Commit = CommitOnFsync })
	rng := rand.New(rand.NewPCG(34, 1))
	var names []string
	for i := range 60 {
		names = append(names, fmt.Sprintf("f%d", i), fmt.Sprintf("d%d/f%d", i%6, i), fmt.Sprintf("d%d/e%d/g", i%4, i%5))
	}
	names = append(names, "z/") // a name with no path
	var seed []layout.Descriptor
	for _, n := range names[:90] {
		seed = append(seed, layout.Descriptor{Name: n, Digest: layout.DigestOf([]byte(n)), Size: 1})
	}
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: seed}); err != nil {
		t.Fatal(err)
	}
	var pending []layout.Descriptor
	for round := range 300 {
		if rng.IntN(25) == 0 {
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatalf("round %d: fsync: %v", round, err)
			}
			pending = nil
		}
		var ds []layout.Descriptor
		for k := rng.IntN(3) + 1; k > 0; k-- {
			n := names[rng.IntN(len(names))]
			d := layout.Descriptor{Name: n, Digest: layout.DigestOf([]byte(fmt.Sprint(round, k))), Size: 1}
			if rng.IntN(2) == 0 {
				d = layout.Descriptor{Name: n, Deleted: true}
			}
			ds = append(ds, d)
		}
		if err := r.w.Queue(ctx, r.id, ds); err != nil {
			t.Fatal(err)
		}
		pending = append(pending, ds...)
		st, err := r.cache.State(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		slots, tree := r.w.Live(st)
		model := maps.Clone(st.Slots())
		for _, d := range pending {
			layout.ApplySlot(model, layout.Entry{Descriptor: d, Session: r.id})
		}
		for _, n := range names {
			e, ok := slots(n)
			m, want := model[n]
			if ok != want || ok && e.Digest != m.Digest {
				t.Fatalf("round %d: slot %q = %v, %v; want %v, %v", round, n, e.Digest, ok, m.Digest, want)
			}
		}
		if got, want := liveTreeString(tree), liveTreeString(cache.BuildTree(model)); got != want {
			t.Fatalf("round %d: live tree\n%s\nwant\n%s", round, got, want)
		}
	}
}

// liveTreeString renders a tree: its files with their digests, its
// directories, its hidden count.
func liveTreeString(d *cache.Dir) string {
	var out []string
	var walk func(d *cache.Dir, prefix string)
	walk = func(d *cache.Dir, prefix string) {
		for n, e := range d.Files() {
			out = append(out, fmt.Sprintf("f %s%s %s", prefix, n, e.Digest))
		}
		for _, n := range slices.Sorted(maps.Keys(maps.Collect(d.Subs()))) {
			sub, _ := d.Sub(n)
			out = append(out, "d "+prefix+n)
			walk(sub, prefix+n+"/")
		}
	}
	walk(d, "")
	sort.Strings(out)
	return strings.Join(out, "\n") + fmt.Sprintf("\nhidden %d", d.Hidden)
}
