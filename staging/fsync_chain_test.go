package staging

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// liveEntry is the entry name has in the session's live view: what the
// front end gives as the base of a file it opens with --commit=fsync.
func (r *writerRig) liveEntry(t *testing.T, name string) *layout.Entry {
	t.Helper()
	st, err := r.cache.State(context.Background(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	slots, _ := r.w.Live(st)
	e, ok := slots(name)
	if !ok {
		t.Fatalf("%s not in the live view", name)
	}
	return &e
}

// appendLive appends line to name opened on its live entry, and
// releases it.
func (r *writerRig) appendLive(t *testing.T, name, line string) {
	t.Helper()
	ctx := context.Background()
	base := r.liveEntry(t, name)
	s, err := r.w.OpenFresh(ctx, r.id, name, func() *layout.Entry { return base }, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, []byte(line)); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
}

// TestFsyncChangesBuiltOnPendingChanges: with --commit=fsync, a change of
// a name whose last change waits for the same fsync is built on that
// change, and lands after it: it is guarded as that change is, by the
// committed file it was made from, or not at all (a rename's
// destination). Guarded by the pending entry's digest at version 0, the
// name's own committed entry, or its absence, counted as another
// writer's change (review 36): chmod then mv left the file under both
// names, chmod then touch dropped the mode, chmod then >> undid the chmod,
// and >> to a renamed file kept only the appended bytes; chmod, touch -d
// (through a descriptor) and mv left the old name (audit 41). With another
// writer's rewrite of the file before the fsync, each change is still
// guarded: none lands the old bytes over the rewrite, and an rm leaves
// the rewrite (audit 41: it deleted it).
func TestFsyncChangesBuiltOnPendingChanges(t *testing.T) {
	ctx := context.Background()
	mode := uint32(0o600)
	mt := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	none := func() *layout.Entry { return nil }
	chmod := func(r *writerRig, t *testing.T, name string) {
		if _, err := r.w.SetAttrs(ctx, r.id, name, AttrChange{Mode: &mode}, none, nil); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(r *writerRig, t *testing.T, name string) {
		if _, err := r.w.SetAttrs(ctx, r.id, name, AttrChange{Mtime: &mt}, none, nil); err != nil {
			t.Fatal(err)
		}
	}
	// GNU touch -d: the file opened for writing, its times set through
	// the descriptor (the staged file takes them), and closed.
	touchOpen := func(r *writerRig, t *testing.T, name string) {
		base := r.liveEntry(t, name)
		s, err := r.w.OpenFresh(ctx, r.id, name, func() *layout.Entry { return base }, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.w.SetAttrs(ctx, r.id, name, AttrChange{Mtime: &mt}, func() *layout.Entry { return base }, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
	}
	// setfattr user.pugmark.meta.k v: the file opened, its metadata
	// changed through the staged file, and released.
	setfattr := func(r *writerRig, t *testing.T, name string) {
		base := r.liveEntry(t, name)
		s, err := r.w.OpenFresh(ctx, r.id, name, func() *layout.Entry { return base }, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.w.ChangeAttrs(ctx, r.id, s, func(a *Attrs) {
			a.Meta = maps.Clone(a.Meta)
			if a.Meta == nil {
				a.Meta = map[string]string{}
			}
			a.Meta["k"] = "v"
		}); err != nil {
			t.Fatal(err)
		}
	}
	mv := func(r *writerRig, t *testing.T, from, to string) {
		if err := r.w.Rename(ctx, r.id, from, to, false); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		body  string // "(none)": absent
		mode  uint32 // 0: not checked
		mtime bool   // posix-mtime is mt
		key   bool   // the metadata key k is v (setfattr)
	}
	for _, tc := range []struct {
		name  string
		other bool // another writer rewrites f before the fsync
		do    func(r *writerRig, t *testing.T)
		want  map[string]want
	}{
		{name: "chmod then mv", do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); mv(r, t, "f", "g") },
			want: map[string]want{"f": {body: "(none)"}, "g": {body: "body\n", mode: 0o600}}},
		{name: "chmod then touch", do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); touch(r, t, "f") },
			want: map[string]want{"f": {body: "body\n", mode: 0o600, mtime: true}}},
		{name: "touch then chmod", do: func(r *writerRig, t *testing.T) { touch(r, t, "f"); chmod(r, t, "f") },
			want: map[string]want{"f": {body: "body\n", mode: 0o600, mtime: true}}},
		{name: "chmod then append", do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); r.appendLive(t, "f", "more\n") },
			want: map[string]want{"f": {body: "body\nmore\n", mode: 0o600}}},
		{name: "mv then append", do: func(r *writerRig, t *testing.T) { mv(r, t, "f", "g"); r.appendLive(t, "g", "more\n") },
			want: map[string]want{"f": {body: "(none)"}, "g": {body: "body\nmore\n"}}},
		// The move of a staged file built on the chmod (audit 41).
		{name: "chmod then touch through a descriptor then mv", do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); touchOpen(r, t, "f"); mv(r, t, "f", "g") },
			want: map[string]want{"f": {body: "(none)"}, "g": {body: "body\n", mode: 0o600, mtime: true}}},
		{name: "mv then chmod then mv back", do: func(r *writerRig, t *testing.T) { mv(r, t, "f", "g"); chmod(r, t, "g"); mv(r, t, "g", "f") },
			want: map[string]want{"f": {body: "body\n", mode: 0o600}, "g": {body: "(none)"}}},
		// Another writer's rewrite first: the changes made from the old
		// bytes go on the rewrite (a chmod, a touch, appended bytes) or
		// leave it alone (a rename moves the bytes it saw).
		{name: "chmod then touch, rewritten", other: true, do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); touch(r, t, "f") },
			want: map[string]want{"f": {body: "theirs\n", mode: 0o600, mtime: true}}},
		{name: "chmod then mv, rewritten", other: true, do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); mv(r, t, "f", "g") },
			want: map[string]want{"f": {body: "theirs\n"}, "g": {body: "body\n", mode: 0o600}}},
		{name: "rm, rewritten", other: true, do: func(r *writerRig, t *testing.T) { must(t, r.w.Unlink(ctx, r.id, []string{"f"})) },
			want: map[string]want{"f": {body: "theirs\n"}}},
		{name: "chmod then rm, rewritten", other: true, do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); must(t, r.w.Unlink(ctx, r.id, []string{"f"})) },
			want: map[string]want{"f": {body: "theirs\n"}}},
		{name: "chmod then rm", do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); must(t, r.w.Unlink(ctx, r.id, []string{"f"})) },
			want: map[string]want{"f": {body: "(none)"}}},
		// The appended file's attributes stay its own on the rewrite
		// (audit 41, F2: it took the other writer's whole).
		{name: "chmod then append, rewritten", other: true, do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); r.appendLive(t, "f", "more\n") },
			want: map[string]want{"f": {body: "theirs\nmore\n", mode: 0o600}}},
		{name: "touch through a descriptor, rewritten", other: true, do: func(r *writerRig, t *testing.T) { touchOpen(r, t, "f") },
			want: map[string]want{"f": {body: "theirs\n", mtime: true}}},
		// A change of metadata alone through the staged file goes on
		// the rewrite, as a chmod does (audit 41, F7: ESTALE).
		{name: "setfattr, rewritten", other: true, do: func(r *writerRig, t *testing.T) { setfattr(r, t, "f") },
			want: map[string]want{"f": {body: "theirs\n", key: true}}},
		{name: "chmod then setfattr, rewritten", other: true, do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); setfattr(r, t, "f") },
			want: map[string]want{"f": {body: "theirs\n", mode: 0o600, key: true}}},
		{name: "chmod then touch through a descriptor, rewritten", other: true, do: func(r *writerRig, t *testing.T) { chmod(r, t, "f"); touchOpen(r, t, "f") },
			want: map[string]want{"f": {body: "theirs\n", mode: 0o600, mtime: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t, CommitOnFsync)
			r.write(t, "f", "body\n")
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			tc.do(r, t)
			if tc.other {
				r.otherWriter(t, "f", "theirs\n")
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			for name, w := range tc.want {
				if got := r.slotBody(t, name); got != w.body {
					t.Errorf("%s = %q, want %q", name, got, w.body)
				}
				e, _ := r.slot(t, name)
				if got := layout.PosixMode(e.Metadata, 0); w.mode != 0 && got != w.mode {
					t.Errorf("%s mode %o, want %o (metadata %v)", name, got, w.mode, e.Metadata)
				}
				if w.key && e.Metadata["k"] != "v" {
					t.Errorf("%s metadata %v, want k=v", name, e.Metadata)
				}
				if got := e.Metadata[layout.MetaPosixMtime]; w.mtime && got != layout.FormatPosixMtime(mt) {
					t.Errorf("%s posix-mtime %q, want %q", name, got, layout.FormatPosixMtime(mt))
				}
			}
		})
	}
}

// TestFsyncEditAfterChmodOverOthersChmod: with --commit=fsync, chmod f
// then an edit in place of f (built on the pending chmod's entry), and
// another writer's chmod of f (same bytes), seen by this mount's state or
// not yet (within --metadata-ttl). The edit is built on f's bytes, which
// nobody changed, and lands. The guard sent with the commit counted any
// change of f because the chmod's does; the bucket's refusal refuses every
// change of the name, and the edit was ESTALE (review 39).
func TestFsyncEditAfterChmodOverOthersChmod(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			ctx := context.Background()
			r := newWriterRigTTL(t, ttl, func(c *Config) { c.Commit = CommitOnFsync })
			r.write(t, "f", "body\n")
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			committed, _ := r.slot(t, "f")
			r.state(t) // the mount's state knows f as committed
			mode := uint32(0o600)
			if _, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, func() *layout.Entry { return nil }, nil); err != nil {
				t.Fatal(err)
			}
			base := r.liveEntry(t, "f")
			s, err := r.w.OpenFresh(ctx, r.id, "f", func() *layout.Entry { return base }, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.WriteAt(ctx, []byte("BODY"), 0); err != nil { // edit in place
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			r.otherChmod(t, committed, 0o640)
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Errorf("fsync: %v", err)
			}
			if got := r.slotBody(t, "f"); got != "BODY\n" {
				t.Errorf("f = %q, want the edit %q (failed dir: %v)", got, "BODY\n", r.failedFiles(t))
			}
		})
	}
}

// TestFsyncRenameNoReplaceOverOthersCreate: with --commit=fsync, a rename
// that must not replace (GNU mv to a new name: RENAME_NOREPLACE) is
// guarded at the fsync by its new name's absence: when another writer
// made that name before the fsync, the rename is dropped and both files
// stay. Unguarded, it replaced the other writer's file (audit 41).
func TestFsyncRenameNoReplaceOverOthersCreate(t *testing.T) {
	ctx := context.Background()
	for _, other := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "other writer"}[other], func(t *testing.T) {
			r := newWriterRig(t, CommitOnFsync)
			r.write(t, "a", "mine\n")
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Rename(ctx, r.id, "a", "n", true); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"a": "(none)", "n": "mine\n"}
			if other {
				r.otherWriter(t, "n", "theirs\n")
				want = map[string]string{"a": "mine\n", "n": "theirs\n"}
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			for name, body := range want {
				if got := r.slotBody(t, name); got != body {
					t.Errorf("%s = %q, want %q", name, got, body)
				}
			}
		})
	}
}

// TestFsyncCreateOverPendingRemoval: with --commit=fsync, a name removed
// by a pending change (mv c n, or rm c) and made again with a create that
// keeps content (>>, touch) is guarded as that removal: when another
// writer changed c before the fsync, the appended bytes go after its
// content. Unguarded, the new file replaced it, and the other writer's
// append was lost (audit 41).
func TestFsyncCreateOverPendingRemoval(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		remove func(r *writerRig, t *testing.T)
		other  bool
		want   map[string]string
	}{
		{"mv", func(r *writerRig, t *testing.T) { must(t, r.w.Rename(ctx, r.id, "c", "n", false)) }, false,
			map[string]string{"c": "F\n", "n": "init\n"}},
		{"mv, other writer", func(r *writerRig, t *testing.T) { must(t, r.w.Rename(ctx, r.id, "c", "n", false)) }, true,
			map[string]string{"c": "init\nC7\nF\n", "n": "init\n"}},
		{"rm, other writer", func(r *writerRig, t *testing.T) { must(t, r.w.Unlink(ctx, r.id, []string{"c"})) }, true,
			map[string]string{"c": "init\nC7\nF\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t, CommitOnFsync)
			r.write(t, "c", "init\n")
			must(t, r.w.FsyncSession(ctx, r.id))
			tc.remove(r, t)
			if tc.other {
				r.otherWriter(t, "c", "init\nC7\n")
			}
			s, err := r.w.OpenFresh(ctx, r.id, "c", func() *layout.Entry { return nil }, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, []byte("F\n")); err != nil {
				t.Fatal(err)
			}
			must(t, r.w.Release(ctx, r.id, s))
			must(t, r.w.FsyncSession(ctx, r.id))
			for name, body := range tc.want {
				if got := r.slotBody(t, name); got != body {
					t.Errorf("%s = %q, want %q", name, got, body)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFsyncDroppedRenameOldNameWrittenAgain: with --commit=fsync, mv a n
// (to a new name), then the old name written again (mv c a, or a new
// file a), and another writer makes n before the fsync. The rename cannot
// land on n, nor its file stay at a: it lands under a name of its own
// beside n. Dropped with a's removal, a's bytes were nowhere (review 42).
func TestFsyncDroppedRenameOldNameWrittenAgain(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		again func(r *writerRig, t *testing.T)
		a     string
	}{
		{"mv c a", func(r *writerRig, t *testing.T) { must(t, r.w.Rename(ctx, r.id, "c", "a", true)) }, "C\n"},
		{"write a", func(r *writerRig, t *testing.T) { r.write(t, "a", "new a\n") }, "new a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWriterRig(t, CommitOnFsync)
			r.write(t, "a", "A\n")
			r.write(t, "c", "C\n")
			must(t, r.w.FsyncSession(ctx, r.id))
			must(t, r.w.Rename(ctx, r.id, "a", "n", true))
			tc.again(r, t)
			r.otherWriter(t, "n", "theirs\n")
			must(t, r.w.FsyncSession(ctx, r.id))
			if got := r.slotBody(t, "n"); got != "theirs\n" {
				t.Errorf("n = %q, want the other writer's", got)
			}
			if got := r.slotBody(t, "a"); got != tc.a {
				t.Errorf("a = %q, want %q", got, tc.a)
			}
			r.cache.Invalidate(r.id)
			var kept []string
			for name, e := range r.state(t).Tree().Files() {
				if strings.HasPrefix(name, "n.conflict-") && string(e.Data) == "A\n" {
					kept = append(kept, name)
				}
			}
			if len(kept) != 1 {
				t.Errorf("a's bytes are kept under %v, want one name n.conflict-*", kept)
			}
		})
	}
}
