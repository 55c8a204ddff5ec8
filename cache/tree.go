package cache

import "github.com/pugmark/pugfs/layout"

// treeDelta is how a state's tree can be derived from its predecessor's
// instead of built from scratch: every commit makes a new state, and
// rebuilding the tree of a session of n files for each (sorting every
// name) made writing n files O(n² log n).
type treeDelta struct {
	base    *Dir
	prev    func(name string) (layout.Entry, bool) // the slots base was built from
	changed []string
}

// DeriveTree returns the tree of the slots is looks up, derived from
// base, the tree of the slots was looks up, where they differ only in
// the names changed: the directories on the path of a change are copied,
// the rest shared with base, which is not changed. For a view of a
// state with changes over it (the write engine's pending ops).
func DeriveTree(base *Dir, was, is func(name string) (layout.Entry, bool), changed []string) *Dir {
	return (&treeDelta{base: base, prev: was, changed: changed}).apply(is)
}

// apply returns the tree of the slots slot looks up: d.base with the
// changed names updated. Directories on the path of a change are copied;
// everything else is shared with base, which is never modified.
func (d *treeDelta) apply(slot func(name string) (layout.Entry, bool)) *Dir {
	root := d.base.clone()
	fresh := map[*Dir]bool{root: true}
	seen := make(map[string]bool, len(d.changed))
	for _, name := range d.changed {
		if seen[name] {
			continue // changed twice: was and is say it once (review 34: a hidden name counted twice)
		}
		seen[name] = true
		parts, ok := layout.NamePath(name)
		_, was := d.prev(name)
		e, is := slot(name)
		if !ok {
			if was {
				root.Hidden--
			}
			if is {
				root.Hidden++
			}
			continue
		}
		if !is && !was {
			continue
		}
		// Copy the directories down to the leaf's parent.
		path := []*Dir{root}
		dir := root
		for _, p := range parts[:len(parts)-1] {
			next, ok := dir.Sub(p)
			switch {
			case !ok && !is:
				next = nil // removing a name whose directory is gone
			case !ok:
				next = newDir()
				fresh[next] = true
				dir.dirs.set(p, next)
			case !fresh[next]:
				next = next.clone()
				fresh[next] = true
				dir.dirs.set(p, next)
			}
			if next == nil {
				break
			}
			dir = next
			path = append(path, dir)
		}
		if len(path) != len(parts) {
			continue
		}
		leaf := parts[len(parts)-1]
		if is {
			e := e
			dir.files.set(leaf, &e)
			continue
		}
		dir.files.remove(leaf)
		// Drop directories left empty: a tree built from slots has none.
		for i := len(path) - 1; i > 0 && path[i].FileCount() == 0 && path[i].SubCount() == 0; i-- {
			path[i-1].dirs.remove(parts[i-1])
		}
	}
	return root
}

// clone returns a copy of d whose files and subdirectories can be
// changed without changing d (layered.derive); the entries and
// subdirectories themselves are shared.
func (d *Dir) clone() *Dir {
	return &Dir{files: d.files.derive(), dirs: d.dirs.derive(), Hidden: d.Hidden}
}
