package staging

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// TestWriterCloseDuringFsyncUpload: with --commit=fsync a close(2)
// commits nothing and returns at once, also while an fsync of the
// session uploads the file (holding File.mu shared for the whole upload):
// keepClosed taking the lock exclusively made the close wait for the
// upload (the kernel waits for a FLUSH uninterruptibly), and every stat
// of the file behind it (review 27).
func TestWriterCloseDuringFsyncUpload(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	s := r.written(t, "f", big("x\n"))
	g := faultblob.NewGate()
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut | faultblob.OpHead, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g})
	fsynced := make(chan error, 1)
	go func() { fsynced <- r.w.FsyncSession(ctx, r.id) }()
	waitStalled(t, g, 1)
	closed := make(chan struct{})
	go func() { r.w.FlushSince(ctx, r.id, s, s.Gen()); close(closed) }()
	stated := make(chan struct{})
	go func() { s.Stat(); close(stated) }()
	var problems []string
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		problems = append(problems, "close(2) (FLUSH) still waits for the fsync's upload after 10 s")
	}
	select {
	case <-stated:
	case <-time.After(10 * time.Second):
		problems = append(problems, "a stat of the file still waits after 10 s")
	}
	g.Release()
	r.inj.Reset()
	if err := <-fsynced; err != nil {
		t.Errorf("fsync: %v", err)
	}
	<-closed
	<-stated
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Error(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestWriterKeptWhileReaderHolds: a read-only open of a staged file
// (Retain) does not stop the writer's close from keeping it, nor its
// release from parking it: counted as any open, it did, and a crash
// while `less` or `tail -f` held the file lost what its writer had closed
// (review 27).
func TestWriterKeptWhileReaderHolds(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	s := r.written(t, "f", "one\n")
	if !r.w.Retain(r.id, s) { // a reader opens it
		t.Fatal("retain refused")
	}
	if err := r.w.FlushSince(ctx, r.id, s, s.Gen()); err != nil { // the writer's close(2)
		t.Fatal(err)
	}
	kept := r.keptNames(t)
	if err := r.w.Release(ctx, r.id, s); err != nil { // the writer's RELEASE
		t.Fatal(err)
	}
	keptAfterRelease := r.keptNames(t)
	r.w.ReleaseRead(ctx, r.id, s) // the reader's
	if len(kept) != 1 || len(keptAfterRelease) != 1 {
		t.Fatalf("writer closed, a reader holds the file: a crash keeps %v after the close, %v after its release; want it kept", kept, keptAfterRelease)
	}
}

// TestWriterRedirectNotKeptWhileOpen: `cmd > out` in a shell opens out
// (O_CREAT|O_TRUNC), dup2s it onto 1 and closes the first descriptor
// before cmd runs. That FLUSH comes from a descriptor that wrote nothing
// (FlushSince's wrote 0), and keeps nothing: out is open for writing
// through cmd's copy, and a crash while cmd ran kept an empty out in
// .pugmark/failed/ (review 27).
func TestWriterRedirectNotKeptWhileOpen(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	s, err := r.w.Open(ctx, r.id, "out", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.w.FlushSince(ctx, r.id, s, 0); err != nil { // the shell's close(3) after dup2(3, 1)
		t.Fatal(err)
	}
	kept := r.keptNames(t)
	// cmd writes and exits.
	if _, err := s.WriteAt(ctx, []byte("sorted\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.w.FlushSince(ctx, r.id, s, s.Gen()); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	if len(kept) != 0 {
		t.Fatalf("out is open for writing (cmd's stdout) and unwritten, yet a crash keeps %v", kept)
	}
}

// TestWriterRedirectParkWork: the same redirect costs the park
// directory what the release alone did, two park names (parking.next):
// keeping it at the shell's close, plain at cmd's write and kept again
// took five, for each file a shell loop writes through `>` (review 27).
func TestWriterRedirectParkWork(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	names := func() uint64 {
		r.w.park.mu.Lock()
		defer r.w.park.mu.Unlock()
		return r.w.park.next
	}
	before := names()
	s, err := r.w.Open(ctx, r.id, "out", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	r.w.FlushSince(ctx, r.id, s, 0) // the shell's close(3)
	s.WriteAt(ctx, []byte("x\n"), 0)
	r.w.FlushSince(ctx, r.id, s, s.Gen()) // cmd's exit
	r.w.Release(ctx, r.id, s)
	if n := names() - before; n > 2 {
		t.Fatalf("%d park names (links, renames, stamps) for one redirected file; the release alone takes 2", n)
	}
}

// TestWriterKeptAfterCutByPath: truncate(2) of the path of a file its
// writer closed (kept at the FLUSH, the RELEASE still to come) leaves it
// kept, holding the cut: the cut named it plain, as a write does, and
// its own release could not keep it while the other handle was open, so
// a crash lost a file nobody held for writing (review 27). A file whose
// writer has not closed it is not kept by a cut either.
func TestWriterKeptAfterCutByPath(t *testing.T) {
	tests := []struct {
		name   string
		size   int64
		closed bool // the writer's close(2) came before the cut
		want   string
	}{
		{"shorter", 4, true, "one\n"},
		{"to nothing", 0, true, ""},
		{"longer", 10, true, "one\ntwo\n\x00\x00"},
		{"writer still open", 4, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
			s := r.written(t, "f", "one\ntwo\n")
			if tt.closed {
				if err := r.w.FlushSince(ctx, r.id, s, s.Gen()); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.w.TruncateName(ctx, r.id, "f", func() *layout.Entry { return nil }, tt.size, true); err != nil {
				t.Fatal(err)
			}
			kept := r.keptNames(t)
			var got []byte
			if len(kept) == 1 {
				var err error
				if got, err = os.ReadFile(filepath.Join(r.cfg.StagingDir, kept[0])); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if !tt.closed {
				if len(kept) != 0 {
					t.Fatalf("cut while its writer has it open: kept %v, want nothing kept until its close", kept)
				}
				return
			}
			if len(kept) != 1 || string(got) != tt.want {
				t.Fatalf("closed, then cut to %d by path: a crash keeps %v holding %q, want one file holding %q", tt.size, kept, got, tt.want)
			}
		})
	}
}
