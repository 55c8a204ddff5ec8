package fs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/staging"
)

// TestMemoryOpenRacingARename: open(O_RDWR) of memories/ns/a while mv
// memories/ns/a memories/ns/b runs: the descriptor's write goes to b.
// The open read the node's name, listed the namespace and stored what it
// found in the node, name included, with nothing a rename waits for:
// found absent after the rename, it put the old name back on the node,
// and the write made record a again after mv had returned 0 (review 43).
func TestMemoryOpenRacingARename(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{})
	store := layout.New(faultblob.Wrap(memblob.OpenBucket(nil), inj), nil)
	mnt := testMount(t, store, nil)
	sh(t, mnt, "mkdir -p memories/ns && echo one > memories/ns/a")
	ro, err := os.Open(filepath.Join(mnt, "memories/ns/a"))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	gate, op := openStalled(t, inj, faultblob.Rule{Ops: faultblob.OpList, Match: faultblob.Match{Prefix: layout.MemoriesPrefix}}, ro, "memFile).Open")
	// The rename waits for the open's look at the record (or, before,
	// went on at once).
	if err := renameAcrossOpen(t, "memDirNode).holdCommits", gate, func() error {
		return os.Rename(filepath.Join(mnt, "memories/ns/a"), filepath.Join(mnt, "memories/ns/b"))
	}); err != nil {
		t.Fatalf("mv a b: %v", err)
	}
	o := <-op
	if o.err != nil {
		t.Fatalf("open: %v", o.err)
	}
	if _, err := o.f.WriteAt([]byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	cerr := o.f.Close()
	da, okA := recordOf(t, store, "ns", "a")
	db, okB := recordOf(t, store, "ns", "b")
	if okA || string(db.Data) != "two\n" {
		t.Fatalf("mv a b returned 0, then a write through a descriptor opened across it (close: %v): a = %q (%v), b = %q (%v); want a gone and b = \"two\\n\"", cerr, da.Data, okA, db.Data, okB)
	}
}

// TestMemoryDescriptorShowsMergedMetadata: a descriptor of record m
// (mode 640 at its open) edits it and fsyncs after another mount chmod'ed
// m to 600; the commit keeps 600 (EditMemory), and the descriptor then
// shows it: fstat says 600, and an fchmod back to 640 lands. The
// descriptor kept the metadata read at the open: fstat said 640, and the
// fchmod to 640 was a no-op that returned 0 (review 43).
func TestMemoryDescriptorShowsMergedMetadata(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	mnt := testMount(t, store, nil)
	sh(t, mnt, "mkdir -p memories/ns && echo one > memories/ns/m && chmod 640 memories/ns/m")
	path := filepath.Join(mnt, "memories/ns/m")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other := staging.NewRecords(store, staging.RecordCaches{}, staging.RecordOptions{})
	t.Cleanup(other.Close)
	if _, err := other.PutMemory(ctx, "ns", layout.Descriptor{Name: "m", Metadata: map[string]string{layout.MetaPosixMode: "0600"}}, []byte("one\n"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if d, _ := recordOf(t, store, "ns", "m"); d.Metadata[layout.MetaPosixMode] != "0600" {
		t.Fatalf("after the edit, m's metadata %v: want the other mount's 0600 kept (EditMemory)", d.Metadata)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	statMode := fi.Mode().Perm()
	if statMode != 0o600 {
		t.Errorf("fstat through the descriptor after the commit: mode %o, want the record's 600", statMode)
	}
	if err := f.Chmod(0o640); err != nil {
		t.Fatalf("fchmod 640: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	d, _ := recordOf(t, store, "ns", "m")
	if got := d.Metadata[layout.MetaPosixMode]; got != "0640" || string(d.Data) != "two\n" {
		t.Fatalf("fchmod(640) through the descriptor returned 0 (fstat through it said %o before), yet m = %q with metadata %v: want mode 0640", statMode, d.Data, d.Metadata)
	}
}
