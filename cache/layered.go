package cache

import "iter"

// layered is a map of names to *T shared with the layered map it was
// derived from (derive), with the names changed since over it (a nil
// value is a removal): a directory of 50,000 files, or of 100,000
// subdirectories, was copied whole for each commit that changed one of
// its names (audit 31, review 34). The changes are folded into a map of
// its own once they pass foldAt of it, so deriving costs O(√n). A
// layered map is changed only while being built or derived, before the
// State holding it is published.
type layered[T any] struct {
	base map[string]*T
	over map[string]*T // non-nil once base is shared
	n    int
}

// newLayered returns an empty layered map.
func newLayered[T any]() layered[T] { return layered[T]{base: map[string]*T{}} }

// get returns the value of name.
func (m *layered[T]) get(name string) (*T, bool) {
	if v, ok := m.over[name]; ok {
		return v, v != nil
	}
	v, ok := m.base[name]
	return v, ok
}

// all yields each name and value, in no order.
func (m *layered[T]) all() iter.Seq2[string, *T] {
	return func(yield func(string, *T) bool) {
		for k, v := range m.base {
			if _, changed := m.over[k]; !changed && !yield(k, v) {
				return
			}
		}
		for k, v := range m.over {
			if v != nil && !yield(k, v) {
				return
			}
		}
	}
}

// set makes name hold v (not nil).
func (m *layered[T]) set(name string, v *T) {
	if _, had := m.get(name); !had {
		m.n++
	}
	if m.over != nil {
		m.over[name] = v
	} else {
		m.base[name] = v
	}
}

// remove removes name.
func (m *layered[T]) remove(name string) {
	if _, had := m.get(name); !had {
		return
	}
	m.n--
	if m.over != nil {
		m.over[name] = nil
	} else {
		delete(m.base, name)
	}
}

// derive returns a copy of m that can be changed without changing m.
func (m *layered[T]) derive() layered[T] {
	c := layered[T]{n: m.n}
	if len(m.over) > foldAt(len(m.base)) {
		c.base = make(map[string]*T, m.n+1)
		for k, v := range m.all() {
			c.base[k] = v
		}
		c.over = map[string]*T{}
		return c
	}
	c.base = m.base
	c.over = make(map[string]*T, len(m.over)+1)
	for k, v := range m.over {
		c.over[k] = v
	}
	return c
}
