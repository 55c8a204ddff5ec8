package staging

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// TestAttrChangeApply: what chmod and utimes write, and that a
// metadata-only change keeps the mtime the file showed.
func TestAttrChangeApply(t *testing.T) {
	mode, defMode := uint32(0o750), uint32(layout.DefaultFileMode)
	at := time.Date(2020, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	shown := time.Date(2025, 5, 5, 5, 5, 5, 5, time.UTC)
	for _, c := range []struct {
		name string
		c    AttrChange
		in   map[string]string
		keep time.Time
		want map[string]string
	}{
		{"chmod of content being written", AttrChange{Mode: &mode}, nil, time.Time{},
			map[string]string{layout.MetaPosixMode: "0750"}},
		{"chmod of committed content keeps its mtime", AttrChange{Mode: &mode}, map[string]string{"k": "v"}, shown,
			map[string]string{"k": "v", layout.MetaPosixMode: "0750", layout.MetaPosixMtime: "2025-05-05T05:05:05.000000005Z"}},
		{"chmod keeps a set mtime", AttrChange{Mode: &mode}, map[string]string{layout.MetaPosixMtime: "2001-01-01T00:00:00Z"}, shown,
			map[string]string{layout.MetaPosixMode: "0750", layout.MetaPosixMtime: "2001-01-01T00:00:00Z"}},
		{"utimes is UTC with nanoseconds", AttrChange{Mtime: &at}, nil, shown,
			map[string]string{layout.MetaPosixMtime: "2020-01-02T02:04:05.000000006Z"}},
		{"utimes to now drops posix-mtime", AttrChange{MtimeNow: true}, map[string]string{layout.MetaPosixMode: "0600", layout.MetaPosixMtime: "2001-01-01T00:00:00Z"}, shown,
			map[string]string{layout.MetaPosixMode: "0600"}},
		{"nothing left is nil", AttrChange{MtimeNow: true}, map[string]string{layout.MetaPosixMtime: "x"}, shown, nil},
		// Editors chmod after every save: to the mode the file has, it
		// changes nothing (and commits nothing).
		{"chmod to the default mode", AttrChange{Mode: &defMode}, nil, shown, nil},
		{"chmod to the mode set", AttrChange{Mode: &mode}, map[string]string{layout.MetaPosixMode: "0750"}, shown,
			map[string]string{layout.MetaPosixMode: "0750"}},
	} {
		got := c.c.Apply(maps.Clone(c.in), c.keep)
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}

// TestWriterMetadataOfHeldFile: a chmod, utimes or setxattr of a file
// another open still holds commits before it returns when the content is
// committed already (the kernel sends the RELEASE of `echo x > f` after
// close(2) has returned, so `setfattr` next found the file held), and
// lands with the content, at its commit, while the content is being
// written. It waited for the last release, and a setfattr or chmod
// returned before its change was in the bucket.
func TestWriterMetadataOfHeldFile(t *testing.T) {
	ctx := context.Background()
	mode := uint32(0o600)
	mtime := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	none := func() *layout.Entry { return nil }
	for _, c := range []struct {
		name   string
		change func(r *writerRig) error
		has    func(e layout.Entry) bool
	}{
		{"chmod", func(r *writerRig) error {
			_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, none, nil)
			return err
		}, func(e layout.Entry) bool { return layout.PosixMode(e.Metadata, 0) == mode }},
		{"utimes", func(r *writerRig) error {
			_, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mtime: &mtime}, none, nil)
			return err
		}, func(e layout.Entry) bool {
			return layout.ShownMtime(e.Metadata, e.CreatedAt, e.CreatedAt).Equal(mtime)
		}},
		{"setxattr", func(r *writerRig) error {
			s, err := r.w.OpenFresh(ctx, r.id, "f", none, false)
			if err != nil {
				return err
			}
			return r.w.ChangeAttrs(ctx, r.id, s, func(a *Attrs) { a.Meta = map[string]string{"k": "v"} })
		}, func(e layout.Entry) bool { return e.Metadata["k"] == "v" }},
	} {
		t.Run(c.name+"/committed", func(t *testing.T) {
			r := newWriterRig(t)
			held := r.written(t, "f", "hello")
			if err := r.w.Flush(ctx, r.id, held, false); err != nil { // close(2)
				t.Fatal(err)
			}
			if err := c.change(r); err != nil {
				t.Fatal(err)
			}
			if e, ok := r.slot(t, "f"); !ok || !c.has(e) || string(e.Data) != "hello" {
				t.Fatalf("f = %+v (present %v) while another open holds it, want hello with the change committed", e.Descriptor, ok)
			}
			if err := r.w.Release(ctx, r.id, held); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(c.name+"/being-written", func(t *testing.T) {
			r := newWriterRig(t)
			held := r.written(t, "f", "hello")
			if err := r.w.Flush(ctx, r.id, held, false); err != nil {
				t.Fatal(err)
			}
			if _, err := held.WriteAt(ctx, []byte(" world"), 5); err != nil {
				t.Fatal(err)
			}
			if err := c.change(r); err != nil {
				t.Fatal(err)
			}
			if e, ok := r.slot(t, "f"); !ok || c.has(e) || string(e.Data) != "hello" {
				t.Fatalf("f = %+v (present %v) while being written, want hello as committed before", e.Descriptor, ok)
			}
			if err := r.w.Release(ctx, r.id, held); err != nil {
				t.Fatal(err)
			}
			if e, ok := r.slot(t, "f"); !ok || !c.has(e) || string(e.Data) != "hello world" {
				t.Fatalf("f = %+v (present %v) after the close, want the content and the change in one descriptor", e.Descriptor, ok)
			}
		})
	}
}
