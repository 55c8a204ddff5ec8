package staging

import (
	"context"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// TestAppendOntoOthersNewFileTakesItsAttributes: `>>` to a name this
// mount found absent, while another mount creates it with a schema URL, a
// mode and a key of its own: the appended line goes onto the other
// mount's file, whose attributes stay, as a second open(O_CREAT|O_APPEND)
// on a disk changes nothing of the file the first made. The metadata
// merge of the rebase (audit 41, F2) counted every attribute of the new
// file as its own change: the losing open's create mode replaced the
// file's, and its empty schema URL the other mount's (review 43).
func TestAppendOntoOthersNewFileTakesItsAttributes(t *testing.T) {
	ctx := context.Background()
	const schema = "https://example.com/log.schema.json"
	for _, check := range []string{"schema", "mode", "key"} {
		t.Run(check, func(t *testing.T) {
			r := newWriterRig(t)
			s, err := r.w.OpenFresh(ctx, r.id, "log", func() *layout.Entry { return nil }, false)
			if err != nil {
				t.Fatal(err)
			}
			if s.Committed() != nil {
				t.Fatalf("log staged from %v, want a new file", s.Committed())
			}
			// fs's Create does this for a file it made (umask 077).
			s.SetCreateMode(0o600)
			if _, err := s.Append(ctx, []byte("mine\n")); err != nil {
				t.Fatal(err)
			}
			// The other mount creates log first: mode 0644, a schema, a key.
			body := "theirs\n"
			d := layout.Descriptor{Name: "log", Data: []byte(body), Digest: layout.DigestOf([]byte(body)), Size: int64(len(body)),
				CreatedAt: time.Now().UTC(), SchemaURL: schema,
				Metadata: map[string]string{layout.MetaPosixMode: layout.FormatPosixMode(0o644), "owner": "them"}}
			if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatalf("close of the >>: %v", err)
			}
			if got := r.slotBody(t, "log"); got != "theirs\nmine\n" {
				t.Fatalf("log = %q, want the other mount's line, then this one's", got)
			}
			e, _ := r.slot(t, "log")
			switch check {
			case "schema":
				if e.SchemaURL != schema {
					t.Errorf("log's schema-url %q after the rebase, want the other mount's %q (this mount set none)", e.SchemaURL, schema)
				}
			case "mode":
				if got := layout.PosixMode(e.Metadata, 0); got != 0o644 {
					t.Errorf("log's mode %o after the rebase, want the existing file's 0644: an O_CREAT open of an existing file does not change its mode (metadata %v)", got, e.Metadata)
				}
			case "key":
				if e.Metadata["owner"] != "them" {
					t.Errorf("log's metadata %v, want owner=them kept", e.Metadata)
				}
			}
		})
	}
}

// TestFsyncFchmodOntoRewriteShowsTheRewritesTime: with --commit=fsync,
// chmod through a descriptor of f (which pins the time f shows as
// posix-mtime: a chmod does not move it), then another mount's rewrite,
// then the fsync: the mode goes on the rewrite, which keeps its own time,
// as a chmod by path made again on it does. The rebase took the pinned
// time for one the descriptor had set, and the new bytes showed the old
// ones' time, which make and rsync take for unchanged (review 43).
func TestFsyncFchmodOntoRewriteShowsTheRewritesTime(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	r.write(t, "f", "body\n")
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	old, _ := r.slot(t, "f")
	oldTime := layout.ShownMtime(old.Metadata, old.CreatedAt, r.id.Time())
	base := r.liveEntry(t, "f")
	s, err := r.w.OpenFresh(ctx, r.id, "f", func() *layout.Entry { return base }, false)
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{Mode: &mode}, func() *layout.Entry { return base }, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	r.otherWriter(t, "f", "theirs\n")
	theirs, _ := r.slot(t, "f")
	theirTime := layout.ShownMtime(theirs.Metadata, theirs.CreatedAt, r.id.Time())
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	e, _ := r.slot(t, "f")
	if got := r.slotBody(t, "f"); got != "theirs\n" {
		t.Fatalf("f = %q, want the other mount's bytes", got)
	}
	if got := layout.PosixMode(e.Metadata, 0); got != 0o600 {
		t.Errorf("f's mode %o, want 600", got)
	}
	shown := layout.ShownMtime(e.Metadata, e.CreatedAt, r.id.Time())
	if shown.Before(theirTime) {
		t.Errorf("f shows mtime %v, the time of the bytes the rewrite replaced (%v), older than the rewrite (%v): metadata %v",
			shown, oldTime, theirTime, e.Metadata)
	}
}
