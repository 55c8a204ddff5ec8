package cache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// dumpTree renders a tree for comparison: every file with its digest,
// every directory, the hidden count.
func dumpTree(d *Dir, prefix string, out *[]string) {
	for n, e := range d.Files() {
		*out = append(*out, fmt.Sprintf("f %s%s %s", prefix, n, e.Digest))
	}
	for n, sub := range d.Dirs {
		*out = append(*out, "d "+prefix+n)
		dumpTree(sub, prefix+n+"/", out)
	}
	if prefix == "" {
		*out = append(*out, fmt.Sprintf("hidden %d", d.Hidden))
	}
}

func treeString(d *Dir) string {
	var out []string
	dumpTree(d, "", &out)
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestTreeDeltaMatchesBuild: a state's tree derived from its
// predecessor's is the tree built from its slots, through random puts and
// removals of nested names, names that are both file and directory, and
// names with no path; and the predecessor's tree is left as it was. Its
// slots, a delta over a shared root folded now and then (State.with),
// are those of the descriptors applied one by one, looked up one name at
// a time or whole.
func TestTreeDeltaMatchesBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "a/b", "a/c", "a/b/c", "d/e/f", "d/e/g", "d/h", "x/../y", "", "z/", "z/z", "q/r/s/t"}
	for i := 0; i < 40; i++ {
		names = append(names, fmt.Sprintf("flat%d", i), fmt.Sprintf("n%d/m%d", i%5, i))
	}
	st := &State{root: map[string]layout.Entry{}}
	st.Tree()
	model := map[string]layout.Entry{} // the slots, applied one by one
	for round := 0; round < 300; round++ {
		var ds []layout.Descriptor
		for k := rng.IntN(6) + 1; k > 0; k-- {
			name := names[rng.IntN(len(names))]
			d := layout.Descriptor{Name: name, Digest: layout.DigestOf([]byte(fmt.Sprint(round, k)))}
			if rng.IntN(3) == 0 {
				d = layout.Descriptor{Name: name, Deleted: true}
			}
			ds = append(ds, d)
		}
		before := treeString(st.Tree())
		next := st.with(st.Version+1, [][]layout.Descriptor{ds})
		for _, d := range ds {
			layout.ApplySlot(model, layout.Entry{Descriptor: d, Session: next.ID, Version: next.Version})
		}
		if !maps.EqualFunc(next.Slots(), model, func(a, b layout.Entry) bool { return a.Digest == b.Digest && a.Version == b.Version }) {
			t.Fatalf("round %d: slots %v, want %v", round, slices.Sorted(maps.Keys(next.Slots())), slices.Sorted(maps.Keys(model)))
		}
		for _, name := range names {
			e, ok := next.Slot(name)
			if m, want := model[name]; ok != want || ok && e.Digest != m.Digest {
				t.Fatalf("round %d: Slot(%q) = %v, %v; want %v, %v", round, name, e.Digest, ok, m.Digest, want)
			}
		}
		if next.treeFrom == nil {
			t.Fatal("no tree delta although the predecessor's tree was built")
		}
		next.treeFrom.changed = append(next.treeFrom.changed, names[rng.IntN(len(names))]) // an unchanged name too
		got := next.treeFrom.apply(next.Slot)
		if bad := miscounted(got, ""); bad != "" {
			t.Fatalf("round %d: directory %q counts another number of files than it holds", round, bad)
		}
		if want := BuildTree(next.Slots()); treeString(got) != treeString(want) {
			t.Fatalf("round %d: derived tree\n%s\nbuilt tree\n%s", round, treeString(got), treeString(want))
		}
		if after := treeString(st.Tree()); after != before {
			t.Fatalf("round %d: the predecessor's tree changed", round)
		}
		st = next
		st.Tree()
	}
}

// miscounted returns the first directory of d (by path) whose FileCount
// is not the number of files it yields, or "".
func miscounted(d *Dir, path string) string {
	n := 0
	for range d.Files() {
		n++
	}
	if n != d.FileCount() {
		return path + "/"
	}
	for name, sub := range d.Dirs {
		if bad := miscounted(sub, path+"/"+name); bad != "" {
			return bad
		}
	}
	return ""
}
