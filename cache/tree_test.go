package cache

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// dumpTree renders a tree for comparison: every file with its digest,
// every directory, the hidden count.
func dumpTree(d *Dir, prefix string, out *[]string) {
	for n, e := range d.Files {
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
// names with no path; and the predecessor's tree is left as it was.
func TestTreeDeltaMatchesBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "a/b", "a/c", "a/b/c", "d/e/f", "d/e/g", "d/h", "x/../y", "", "z/", "z/z", "q/r/s/t"}
	for i := 0; i < 40; i++ {
		names = append(names, fmt.Sprintf("flat%d", i), fmt.Sprintf("n%d/m%d", i%5, i))
	}
	st := &State{slots: map[string]layout.Entry{}}
	st.Tree()
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
		if next.treeFrom == nil {
			t.Fatal("no tree delta although the predecessor's tree was built")
		}
		next.treeFrom.changed = append(next.treeFrom.changed, names[rng.IntN(len(names))]) // an unchanged name too
		got := next.treeFrom.apply(next.slots)
		if want := BuildTree(next.slots); treeString(got) != treeString(want) {
			t.Fatalf("round %d: derived tree\n%s\nbuilt tree\n%s", round, treeString(got), treeString(want))
		}
		if after := treeString(st.Tree()); after != before {
			t.Fatalf("round %d: the predecessor's tree changed", round)
		}
		st = next
		st.Tree()
	}
}
