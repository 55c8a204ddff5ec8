package cache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// dumpTree renders a tree for comparison: every file with its digest,
// every directory, the hidden count.
func dumpTree(d *Dir, prefix string, out *[]string) {
	for n, e := range d.Files() {
		*out = append(*out, fmt.Sprintf("f %s%s %s", prefix, n, e.Digest))
	}
	for n, sub := range d.Subs() {
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
// or SubCount is not the number of files or subdirectories it yields, or
// "".
func miscounted(d *Dir, path string) string {
	n, m := 0, 0
	for range d.Files() {
		n++
	}
	for range d.Subs() {
		m++
	}
	if n != d.FileCount() || m != d.SubCount() {
		return path + "/"
	}
	for name, sub := range d.Subs() {
		if bad := miscounted(sub, path+"/"+name); bad != "" {
			return bad
		}
	}
	return ""
}

// TestTreeDeltaHiddenOnce: a name with no path that appears twice among
// a state's changes (put then removed in one commit, or in two versions
// read by one refresh) moves Hidden once in the derived tree: it moved
// twice (review 34).
func TestTreeDeltaHiddenOnce(t *testing.T) {
	dg := func(s string) layout.Digest { return layout.DigestOf([]byte(s)) }
	big := func() map[string]layout.Entry {
		m := map[string]layout.Entry{}
		for i := 0; i < 100; i++ {
			m[fmt.Sprint("f", i)] = layout.Entry{}
		}
		return m
	}
	st := &State{root: big()}
	st.Tree()
	st = st.with(1, [][]layout.Descriptor{{{Name: "z/", Digest: dg("1")}}})
	st.Tree()
	// One commit puts z/ again and removes it.
	next := st.with(2, [][]layout.Descriptor{{{Name: "z/", Digest: dg("2")}, {Name: "z/", Deleted: true}}})
	got, want := next.Tree(), BuildTree(next.Slots())
	if got.Hidden != want.Hidden {
		t.Errorf("put and removed in one commit: derived Hidden %d, built %d", got.Hidden, want.Hidden)
	}
	// A refresh reads two versions that each put the hidden name.
	st2 := &State{root: big()}
	st2.Tree()
	next2 := st2.with(1, [][]layout.Descriptor{{{Name: "z/", Digest: dg("a")}}, {{Name: "z/", Digest: dg("b")}}})
	got, want = next2.Tree(), BuildTree(next2.Slots())
	if got.Hidden != want.Hidden {
		t.Errorf("put in two versions of one refresh: derived Hidden %d, built %d", got.Hidden, want.Hidden)
	}
}

// TestTreeDeltaModelWithFolds: large directories so that Dir.clone and
// State.with fold; multi-version refreshes; forks; every derived tree
// equals the built one, counts agree, and the trees of the last states
// are left as they were. Slots and Tree are called from several
// goroutines on each published state (-race). By review 34.
func TestTreeDeltaModelWithFolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 34))
	var names []string
	for i := 0; i < 400; i++ {
		names = append(names, fmt.Sprintf("flat%d", i))
	}
	for i := 0; i < 100; i++ {
		names = append(names, fmt.Sprintf("d%d/f%d", i%7, i), fmt.Sprintf("d%d", i%9), fmt.Sprintf("d%d/f%d/g", i%7, i%13))
	}
	st := &State{root: map[string]layout.Entry{}}
	st.Tree()
	model := map[string]layout.Entry{}
	type kept struct {
		st  *State
		str string
	}
	var history []kept
	for round := 0; round < 600; round++ {
		var snaps [][]layout.Descriptor
		for v := rng.IntN(3) + 1; v > 0; v-- {
			var ds []layout.Descriptor
			for k := rng.IntN(12) + 1; k > 0; k-- {
				name := names[rng.IntN(len(names))]
				d := layout.Descriptor{Name: name, Digest: layout.DigestOf([]byte(fmt.Sprint(round, v, k)))}
				switch rng.IntN(6) {
				case 0, 1:
					d = layout.Descriptor{Name: name, Deleted: true}
				case 2:
					d.Fork = true // not a slot
				}
				ds = append(ds, d)
			}
			snaps = append(snaps, ds)
		}
		next := st.with(st.Version+1, snaps)
		for i, ds := range snaps {
			for _, d := range ds {
				layout.ApplySlot(model, layout.Entry{Descriptor: d, Version: st.Version + 1 + uint32(i)})
			}
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next.Slots()
				next.Tree()
				for _, n := range names[:50] {
					next.Slot(n)
				}
			}()
		}
		wg.Wait()
		eq := func(a, b layout.Entry) bool { return a.Digest == b.Digest && a.Version == b.Version }
		if !maps.EqualFunc(next.Slots(), model, eq) {
			t.Fatalf("round %d: Slots differs from the model", round)
		}
		for _, n := range names {
			e, ok := next.Slot(n)
			m, want := model[n]
			if ok != want || ok && !eq(e, m) {
				t.Fatalf("round %d: Slot(%q) = %v, want %v", round, n, ok, want)
			}
		}
		got := next.Tree()
		if bad := miscounted(got, ""); bad != "" {
			t.Fatalf("round %d: %q miscounted", round, bad)
		}
		want := BuildTree(model)
		if treeString(got) != treeString(want) {
			t.Fatalf("round %d: derived tree differs from built", round)
		}
		for _, h := range history {
			if treeString(h.st.Tree()) != h.str {
				t.Fatalf("round %d: an older state's tree changed", round)
			}
		}
		history = append(history, kept{next, treeString(got)})
		if len(history) > 5 {
			history = history[1:]
		}
		st = next
	}
}

// TestTreeDeltaManyDirsPerCommit: a commit of one file into a session
// of many directories does not copy the root directory's subdirectories
// (Dir.clone copied the map: 3.4 MB allocated a commit with 100,000 of
// them, review 34). Counted in bytes allocated, not time.
func TestTreeDeltaManyDirsPerCommit(t *testing.T) {
	const n = 100000
	root := make(map[string]layout.Entry, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("dir%d/f", i)
		root[name] = layout.Entry{Descriptor: layout.Descriptor{Name: name}}
	}
	st := &State{root: root, Version: 1, snaps: make([][]layout.Descriptor, 1)}
	st.Tree()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	const commits = 10
	for i := 0; i < commits; i++ {
		st = st.with(st.Version+1, [][]layout.Descriptor{{{Name: fmt.Sprintf("dir%d/new", i)}}})
		st.Tree()
	}
	runtime.ReadMemStats(&ms1)
	per := (ms1.TotalAlloc - ms0.TotalAlloc) / commits
	if per > 256<<10 {
		t.Errorf("one commit into a session of %d directories allocates %d KiB (the root's subdirectories copied)", n, per>>10)
	}
}
