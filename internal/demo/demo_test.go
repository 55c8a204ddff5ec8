package demo_test

import (
	"context"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/internal/demo"
	"github.com/pugmark/pugfs/internal/fsck"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/localblob"
)

// The project's own buckets must pass its own checker: Write is the one
// writer that exercises every feature, so this is the end-to-end test of
// layout against fsck.
func TestWritePassesFsck(t *testing.T) {
	buckets := map[string]func(t *testing.T) *blob.Bucket{
		"mem": func(t *testing.T) *blob.Bucket { return memblob.OpenBucket(nil) },
		"local": func(t *testing.T) *blob.Bucket {
			b, err := localblob.OpenBucket(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	for name, open := range buckets {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := open(t)
			defer b.Close()
			s := layout.New(b, nil)
			sum, err := demo.Write(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("summary:\n%s", sum)
			rep, err := fsck.Check(ctx, s, fsck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Findings {
				if f.Severity >= fsck.Warning {
					t.Errorf("finding: %s", f)
				} else {
					t.Logf("finding: %s", f)
				}
			}
			if rep.Stats.BlobsRead == 0 || rep.Stats.Snapshots == 0 {
				t.Errorf("fsck looked at nothing: %+v", rep.Stats)
			}
			checkShape(t, ctx, s, sum)

			// A second run reuses the named sessions and still passes.
			if _, err := demo.Write(ctx, s); err != nil {
				t.Fatal(err)
			}
			rep, err = fsck.Check(ctx, s, fsck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Warnings > 0 {
				t.Errorf("second run: %d errors, %d warnings: %v", rep.Errors, rep.Warnings, rep.Findings)
			}
		})
	}
}

// checkShape checks that the demo holds what its documentation promises.
func checkShape(t *testing.T, ctx context.Context, s *layout.Store, sum demo.Summary) {
	t.Helper()
	log, err := s.FullLog(ctx, sum.Main.ID, sum.Main.Versions)
	if err != nil {
		t.Fatal(err)
	}
	slots := layout.Slots(log)
	for _, name := range []string{"src/main.go", "notes/today.md", "notes/plan.md", demo.BigFile, "data/report.csv", "data/events.jsonl", "config.json"} {
		if _, ok := slots[name]; !ok {
			t.Errorf("main session has no live %s", name)
		}
	}
	for _, name := range []string{"scratch.txt", "notes/draft.md"} {
		if _, ok := slots[name]; ok {
			t.Errorf("%s should be deleted", name)
		}
	}
	if e := slots[demo.BigFile]; e.Size != demo.BigSize || e.Data != nil {
		t.Errorf("big file: size %d, inline %d bytes", e.Size, len(e.Data))
	}
	if slots["data/report.csv"].ContentEncoding != layout.EncodingGzip || slots["data/events.jsonl"].ContentEncoding != layout.EncodingZstd {
		t.Error("encoded files lost their content-encoding")
	}
	if slots["notes/plan.md"].Digest != digestOfDraft(log) {
		t.Error("the rename re-uploaded or changed the body")
	}
	types := map[layout.SnapshotType]bool{}
	for v := uint32(1); v <= sum.Main.Versions; v++ {
		m, err := s.ReadSnapshotMeta(ctx, sum.Main.ID, v)
		if err != nil {
			t.Fatal(err)
		}
		types[m.Type] = true
	}
	if len(types) != 3 {
		t.Errorf("snapshot types %v, want all three", types)
	}
	if ok, _ := s.SessionExists(ctx, sum.PendingFork.ID); ok {
		t.Error("pending fork child exists")
	}
	if ok, _ := s.SessionExists(ctx, sum.Fork.ID); !ok {
		t.Error("fork child missing")
	}
	if id, err := s.ResolveSessionName(ctx, demo.MainName); err != nil || id != sum.Main.ID {
		t.Errorf("refs/sessions/%s: %v %v", demo.MainName, id, err)
	}
	inbox, err := s.FullLog(ctx, sum.Inbox.ID, sum.Inbox.Versions)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := layout.Lookup(inbox, "messages/from-demo.md"); !ok || e.SourceSession != sum.Main.ID {
		t.Errorf("cross-session write not delivered: %+v", e)
	}
	if len(sum.Namespaces) != 3 {
		t.Errorf("namespaces %v", sum.Namespaces)
	}
	for _, ns := range sum.Namespaces {
		if ns.Name != "project" && ns.Version < 3 {
			t.Errorf("namespace %s has %d versions, want history", ns.Name, ns.Version)
		}
	}
}

func digestOfDraft(log []layout.Entry) layout.Digest {
	for _, e := range log {
		if e.Name == "notes/draft.md" && !e.Deleted {
			return e.Digest
		}
	}
	return layout.Digest{}
}
