package fs

import (
	"slices"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

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

// TestSlotIno: a slot file's number follows each part of its identity
// (session, view, name, digest, sequence number), the same identity
// always gives the same number, and computing one allocates nothing: a
// listing computes one per entry, and the strings it hashed before
// (hex digest, session ID, decimal sequence number) were most of what a
// cold `find` of 10,000 files allocated per entry after the nodes.
func TestSlotIno(t *testing.T) {
	f := &FS{}
	base := layout.Entry{Descriptor: layout.Descriptor{Name: "d/f.txt", Digest: layout.DigestOf([]byte("a")), SequenceNumber: 7}}
	id := layout.SessionID{1}
	const view = "3" // a history view: no inode kept by renames
	want := f.slotIno(id, view, base.Name, &base)
	if again := f.slotIno(id, view, base.Name, &base); again != want {
		t.Fatalf("same identity: %d, then %d", want, again)
	}
	other := base
	other.Digest = layout.DigestOf([]byte("b"))
	later := base
	later.SequenceNumber = 8
	for _, c := range []struct {
		what string
		id   layout.SessionID
		view string
		name string
		e    *layout.Entry
	}{
		{"another session", layout.SessionID{2}, view, base.Name, &base},
		{"another view", id, "4", base.Name, &base},
		{"another name", id, view, "d/g.txt", &base},
		{"another digest", id, view, base.Name, &other},
		{"another sequence number", id, view, base.Name, &later},
		// Parts are delimited: moving a byte from one part to the next
		// is another identity.
		{"a byte moved between view and name", id, view + "d", "/f.txt", &base},
	} {
		if got := f.slotIno(c.id, c.view, c.name, c.e); got == want || got < 2 || got >= 1<<63 {
			t.Errorf("%s: number %d (the base's is %d)", c.what, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { f.slotIno(id, view, base.Name, &base) }); n != 0 {
		t.Errorf("slotIno allocates %v times a call, want 0", n)
	}
}

// TestInoKeeperWrittenLinkParts: ln c f; ln c g; a write through f's node
// keeps f on the number the three shared and moves c and g, which still
// show the linked bytes, to another one they share; a write of c then
// through its node from before (the kernel's, until it drops the entry)
// keeps c's new number, not f's, and parts g from it for good.
func TestInoKeeperWrittenLinkParts(t *testing.T) {
	var k inoKeeper
	id := layout.SessionID{1}
	d := layout.DigestOf([]byte("linked"))
	const shared, genF, genG = 100, 1, 2
	k.committed(id, "c", shared, d)
	k.linked(id, "f", "c", shared, genF, d)
	k.linked(id, "g", "c", shared, genG, d)
	if ino, gen, ok := k.linkedFor(id, "g", d); !ok || ino != shared || gen != genG {
		t.Fatalf("g after ln: %d gen %d %v; want %d gen %d", ino, gen, ok, shared, genG)
	}

	parted, ok := k.written(id, "f", shared, genF, nil)
	slices.Sort(parted)
	if !ok || !slices.Equal(parted, []string{"c", "g"}) {
		t.Fatalf("f written: parted %q, %v; want c and g", parted, ok)
	}
	if ino, gen, ok := k.forStaged(id, "f", nil); !ok || ino != shared || gen != genF {
		t.Errorf("f: %d gen %d %v; want its node's %d gen %d", ino, gen, ok, shared, genF)
	}
	moved, _, ok := k.forFile(id, "c", d)
	if !ok || moved == shared {
		t.Fatalf("c: %d %v; want another number than f's %d", moved, ok, shared)
	}
	if ino, gen, ok := k.linkedFor(id, "g", d); !ok || ino != moved || gen != genG {
		t.Errorf("g: %d gen %d %v; want c's new %d gen %d", ino, gen, ok, moved, genG)
	}
	if parted, ok := k.written(id, "f", shared, genF, nil); !ok || len(parted) != 0 {
		t.Errorf("f written again: parted %q, %v", parted, ok)
	}

	parted, ok = k.written(id, "c", shared, 0, nil)
	if !ok || !slices.Equal(parted, []string{"g"}) {
		t.Fatalf("c written through its old node: parted %q, %v; want g", parted, ok)
	}
	if ino, _, _ := k.forStaged(id, "c", nil); ino != moved {
		t.Errorf("c written through its old node: number %d, want its new %d (f has %d)", ino, moved, shared)
	}
	if _, _, ok := k.linkedFor(id, "g", d); ok {
		t.Error("g still shares c's number after c was written")
	}
	if _, ok := k.written(id, "g", moved, genG, nil); ok {
		t.Error("g written through its node from before the parting kept c's number")
	}
}
