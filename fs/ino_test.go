package fs

import "testing"

// TestMovedInos: the number a lookup derives for a name avoids every
// renamed node's, and is the same at every lookup.
func TestMovedInos(t *testing.T) {
	var o movedInos
	ino := inoOf("ref", "a")
	if o.avoid(ino) != ino {
		t.Fatal("a number no node was renamed from changed")
	}
	o.add(ino)
	next := o.avoid(ino)
	if next == ino || o.avoid(ino) != next {
		t.Fatalf("after a rename: %d, then %d; want one other number", next, o.avoid(ino))
	}
	o.add(next)
	if third := o.avoid(ino); third == ino || third == next {
		t.Fatalf("a number of a renamed node again: %d", third)
	}
}
