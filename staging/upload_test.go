package staging

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/gcerrors"
)

// TestWriterSameBytesNotUploaded: a file committed with the bytes it was
// filled from (a touch, which opens it for writing and sets its times; a
// rewrite with the same bytes) commits a new descriptor and stores no
// blob: the blob is in the bucket already, named by the committed
// descriptor. On a bucket 20 ms away each was a PUT more. New bytes are
// still stored.
func TestWriterSameBytesNotUploaded(t *testing.T) {
	ctx := context.Background()
	body := string(make([]byte, 3000)) // above the inline limit
	for _, c := range []struct {
		name   string
		change func(t *testing.T, s *File)
		stores bool // whether the close stores a blob
		want   string
	}{
		{"touch", func(t *testing.T, s *File) {}, false, body},
		{"same-bytes", func(t *testing.T, s *File) {
			if _, err := s.WriteAt(context.Background(), []byte(body[:100]), 0); err != nil {
				t.Fatal(err)
			}
		}, false, body},
		{"new-bytes", func(t *testing.T, s *File) {
			if _, err := s.Append(context.Background(), []byte("more")); err != nil {
				t.Fatal(err)
			}
		}, true, body + "more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, nil)
			r.write(t, "f", body)
			base, _ := r.slot(t, "f")
			// A blob is stored with a PUT, or found there with a HEAD
			// (layout.Options.PutBlindBelow).
			puts := func() int64 {
				ops := r.inj.Stats().Ops
				return ops[faultblob.OpPut].Requests + ops[faultblob.OpHead].Requests
			}
			before := puts()
			s, err := r.w.Open(ctx, r.id, "f", &base, false)
			if err != nil {
				t.Fatal(err)
			}
			c.change(t, s)
			if _, err := r.w.SetAttrs(ctx, r.id, "f", AttrChange{MtimeNow: true}, func() *layout.Entry { return &base }, &base); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if got := puts() - before; (got > 1) != c.stores || got == 0 {
				t.Fatalf("%d PUTs and HEADs for the close; want the snapshot's, and a blob's: %v", got, c.stores)
			}
			e, ok := r.slot(t, "f")
			if !ok || e.Version != base.Version+1 {
				t.Fatalf("f at version %d (%v), want a new descriptor at %d", e.Version, ok, base.Version+1)
			}
			got, err := r.store.ReadBlob(ctx, e.Digest, 1<<20)
			if err != nil || string(got) != c.want {
				t.Fatalf("f's blob: %d bytes, %v; want %d bytes", len(got), err, len(c.want))
			}
		})
	}
}

// TestWriterFailedUploadKeepsEveryFile: with --commit=fsync, an fsync
// whose uploads fail for one file of two commits neither, and leaves
// both staged: the next fsync commits both, and a shutdown keeps both.
// The file whose blob did go up was marked clean by its upload, and the
// failed commit never marked it dirty again: the next fsync committed
// the other file only, and its release forgot it (a silent loss).
func TestWriterFailedUploadKeepsEveryFile(t *testing.T) {
	for _, then := range []string{"fsync again", "release, then shut down"} {
		t.Run(then, func(t *testing.T) {
			r := newWriterRig(t, CommitOnFsync)
			ctx := context.Background()
			a := r.written(t, "a", "content of a")
			b := r.written(t, "b", "content of b")
			refuse := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, FailProb: 1,
				Match: faultblob.Match{Prefix: layout.BlobKey(layout.DigestOf([]byte("content of b")))},
				Err:   faultblob.PermanentError(gcerrors.PermissionDenied)})
			if err := r.w.FsyncSession(ctx, r.id); err == nil {
				t.Fatal("fsync succeeded with b's upload refused")
			}
			r.inj.Remove(refuse)
			if _, ok := r.slot(t, "a"); ok {
				t.Fatal("a committed by the fsync that failed")
			}
			switch then {
			case "fsync again":
				if err := r.w.FsyncSession(ctx, r.id); err != nil {
					t.Fatal(err)
				}
				r.w.Release(ctx, r.id, a)
				r.w.Release(ctx, r.id, b)
				for _, name := range []string{"a", "b"} {
					if _, ok := r.slot(t, name); !ok {
						t.Errorf("%s not committed by the fsync after the failure", name)
					}
				}
			case "release, then shut down":
				r.w.Release(ctx, r.id, a)
				r.w.Release(ctx, r.id, b)
				r.w.Shutdown()
				kept := strings.Join(r.failedFiles(t), " ")
				for _, name := range []string{"a", "b"} {
					if !strings.Contains(kept, name+".") {
						t.Errorf("%s not kept at shutdown; the failed directory holds %q", name, kept)
					}
				}
			}
		})
	}
}

// TestWriterLinkWaitsForUploadAlone: a link that reaches a staged file
// while a flush of it uploads (the flush began during the link's LIST,
// after its wait for commits in flight) waits for that upload; every
// other call of the writer goes on meanwhile. It waited with Writer.mu
// held (stagedIdle), and a lookup in any session stalled for as long as
// the upload took (minutes for a large file on a remote bucket).
func TestWriterLinkWaitsForUploadAlone(t *testing.T) {
	r := newWriterRig(t)
	ctx := context.Background()
	s := r.written(t, "f", big("uploading "))
	lists := faultblob.NewGate()
	t.Cleanup(lists.Release)
	stallLists := r.inj.Add(faultblob.Rule{Ops: faultblob.OpList, Stall: lists})
	linked := make(chan error, 1)
	go func() { linked <- r.w.Link(ctx, r.id, "f", "g") }()
	waitStalled(t, lists, 1) // past its wait for commits, reading the session
	puts := faultblob.NewGate()
	t.Cleanup(puts.Release)
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: puts})
	flushed := make(chan error, 1)
	go func() { flushed <- r.w.Flush(ctx, r.id, s, true) }()
	waitStalled(t, puts, 1) // the upload holds the file's lock shared
	r.inj.Remove(stallLists)
	lists.Release()
	// The link now waits for the file's lock: a waiting writer shuts
	// new readers out.
	deadline := time.Now().Add(10 * time.Second)
	for s.mu.TryRLock() {
		s.mu.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("the link never reached the file being uploaded")
		}
		time.Sleep(time.Millisecond)
	}
	looked := make(chan struct{})
	go func() { r.w.Lookup(layout.SessionID{7}, "x"); close(looked) }()
	select {
	case <-looked:
	case <-time.After(10 * time.Second):
		t.Fatal("a lookup in another session waits for the upload")
	}
	puts.Release()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-linked; err != nil {
		t.Fatal(err)
	}
	r.w.Release(ctx, r.id, s)
	if e, ok := r.slot(t, "g"); !ok || e.Digest != layout.DigestOf([]byte(big("uploading "))) {
		t.Fatalf("g after the link: %+v, %v; want the uploaded bytes", e, ok)
	}
}

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// TestWriterUploadBudget: a commit's uploads go Config.Uploads at a time,
// within what the Writer may hold in flight: the bytes of small bodies,
// a few large ones at a time, and a large one never holds up a small one.
// 16 uploads of large files at once (each buffered in memory by the
// backend's writer) peaked at 555 MB; 16 uploads of small ones, 20 ms
// away, were the bound of a checkpoint of 20,000 files (51 s, audit 19).
func TestWriterUploadBudget(t *testing.T) {
	ctx := context.Background()
	// With 8 MiB for small bodies (each counts 256 KiB at least), large
	// from 512 KiB.
	const small, large = 500 << 10, 600 << 10
	for _, c := range []struct {
		name     string
		sizes    []int
		inFlight int // uploads at the bucket at once
	}{
		{"small files go Config.Uploads at a time", repeat(30, 1<<10), 20},
		{"small bodies go as their bytes allow", repeat(24, small), 16},
		{"large bodies go two at a time", repeat(6, large), 2},
		{"large bodies hold up no small one", append(repeat(4, large), repeat(8, 1<<10)...), 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit, cfg.Uploads = CommitOnFsync, 20 })
			r.w.budget = newUploadBudget(8<<20, 512<<10, 2)
			for i, size := range c.sizes {
				r.write(t, fileN(i), strings.Repeat(string(rune('a'+i%26)), size))
			}
			g := faultblob.NewGate()
			r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g})
			t.Cleanup(g.Release) // before the rig's, which waits for the commit
			done := make(chan error, 1)
			go func() { done <- r.w.FsyncSession(ctx, r.id) }()
			// The rest wait before their upload: for a slot of the
			// commit (the semaphore of commitStaged) or for the budget.
			waitStalled(t, g, c.inFlight)
			waiting := min(20, len(c.sizes)) - c.inFlight
			for deadline := time.Now().Add(10 * time.Second); goroutinesIn("semaphore.(*Weighted).Acquire") != waiting; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d uploads wait for the budget, want %d", goroutinesIn("semaphore.(*Weighted).Acquire"), waiting)
				}
			}
			if n := g.Waiting(); n != c.inFlight {
				t.Fatalf("%d uploads in flight, want %d", n, c.inFlight)
			}
			g.Release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for i, size := range c.sizes {
				if got := r.bodyOf(t, fileN(i)); len(got) != size {
					t.Errorf("%s committed with %d bytes, want %d", fileN(i), len(got), size)
				}
			}
		})
	}
}

// repeat is n times size.
func repeat(n, size int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = size
	}
	return out
}

// TestWriterBudgetWaitHoldsNoLock: an upload waiting for room in the
// budget (another session's uploads hold it) holds no lock of its file.
// It held File.mu shared while it waited: a write through another handle
// queued for the lock, and from then on every stat and read of the file
// waited behind that unrelated upload too (review 23).
func TestWriterBudgetWaitHoldsNoLock(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	r.write(t, "a", big("a"))
	// Other uploads in flight, holding all the room small bodies have.
	if err := r.w.budget.small.Acquire(ctx, r.w.budget.smallBytes); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { r.w.budget.small.Release(r.w.budget.smallBytes) }) }
	t.Cleanup(release)
	fsynced := make(chan error, 1)
	go func() { fsynced <- r.w.FsyncSession(ctx, r.id) }()
	for deadline := time.Now().Add(10 * time.Second); goroutinesIn("semaphore.(*Weighted).Acquire") != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no upload waits for the budget")
		}
	}
	s := r.w.Staged(r.id, "a")
	if !s.mu.TryLock() {
		t.Fatal("the upload waiting for the budget holds its file's lock")
	}
	s.mu.Unlock()
	release()
	if err := <-fsynced; err != nil {
		t.Fatal(err)
	}
	if got := r.bodyOf(t, "a"); got != big("a") {
		t.Fatalf("a committed with %d bytes", len(got))
	}
}

// TestWriterUploadDeadlines: an upload's deadline starts when the budget
// lets it start, and grows with its body (a second a MiB on top of the
// commit's): a large file waiting for a slot behind other uploads timed
// out before it sent a byte, and any upload longer than the commit's 10
// minutes failed however fast its bytes moved. An upload that overruns
// its own deadline still fails, and its file stays staged.
func TestWriterUploadDeadlines(t *testing.T) {
	ctx := context.Background()
	const uploadFor = 200 * time.Millisecond
	for _, c := range []struct {
		name   string
		size   int
		hold   bool                                                // the only large slot is taken before the fsync starts
		slow   func(t *testing.T, r *writerRig, g *faultblob.Gate) // what holds the upload up, then lets it go
		failed bool
	}{
		{"waiting for the slot", 2 << 20, true, func(t *testing.T, r *writerRig, g *faultblob.Gate) {
			// Another upload holds the only large slot (taken before the
			// fsync started) past uploadFor.
			defer r.w.budget.large.Release(1)
			g.Release()
			for deadline := time.Now().Add(10 * time.Second); goroutinesIn("semaphore.(*Weighted).Acquire") != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the upload does not wait for the slot")
				}
			}
			time.Sleep(3 * uploadFor) // the time that passes is what is tested
		}, false},
		{"a body of 2 MiB gets 2 s more", 2 << 20, false, func(t *testing.T, r *writerRig, g *faultblob.Gate) {
			waitStalled(t, g, 1)
			time.Sleep(3 * uploadFor)
			g.Release()
		}, false},
		{"a small body gets no more", 1 << 10, false, func(t *testing.T, r *writerRig, g *faultblob.Gate) {
			waitStalled(t, g, 1)
			// The stall ends when the deadline cancels the request.
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
			r.w.budget = newUploadBudget(8<<20, 512<<10, 1)
			r.w.uploadFor = uploadFor
			r.write(t, "f", strings.Repeat("x", c.size))
			g := faultblob.NewGate()
			r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g})
			t.Cleanup(g.Release)
			if c.hold {
				if err := r.w.budget.large.Acquire(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- r.w.FsyncSession(ctx, r.id) }()
			c.slow(t, r, g)
			err := <-done
			if c.failed {
				if gcerrors.Code(err) != gcerrors.DeadlineExceeded && !strings.Contains(fmt.Sprint(err), "deadline") {
					t.Fatalf("fsync: %v, want the upload's deadline", err)
				}
				if s := r.w.Staged(r.id, "f"); s == nil {
					t.Fatal("the file whose upload timed out is no longer staged")
				}
				return
			}
			if err != nil {
				t.Fatalf("fsync: %v", err)
			}
			if got := r.bodyOf(t, "f"); len(got) != c.size {
				t.Fatalf("f committed with %d bytes, want %d", len(got), c.size)
			}
		})
	}
}

// TestShutdownDuringCommitKeepsOneCopy: the mount stops (a second stop
// signal) while a close's commit uploads; the stop keeps the file in the
// failed directory, and the commit, failing after, keeps no second copy
// of the same bytes. It kept two (CI, TestStopTwiceWhileCommitting).
func TestShutdownDuringCommitKeepsOneCopy(t *testing.T) {
	r := newWriterRig(t)
	s := r.written(t, "late", big("committing when stopped "))
	puts := faultblob.NewGate()
	t.Cleanup(puts.Release)
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: puts,
		FailProb: 1, Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
	released := make(chan error, 1)
	go func() { released <- r.w.Release(context.Background(), r.id, s) }()
	waitStalled(t, puts, 1)
	r.w.Shutdown() // it waited for the upload, with Writer.mu held
	puts.Release() // the upload fails now
	if err := <-released; err == nil {
		t.Fatal("the release's commit succeeded with its upload refused")
	}
	if kept := r.failedFiles(t); len(kept) != 1 {
		t.Fatalf("failed/ holds %v, want one copy of late", kept)
	}
}

// TestShutdownDuringCommitThatLandsKeepsNoCopy: the mount stops while a
// close's commit uploads, which keeps the file in the failed directory,
// and the commit then lands: the copy is removed, as a commit whose
// outcome was unknown has its copy removed once it is found landed. It
// stayed, saying the bytes the session holds were never committed
// (review 43).
func TestShutdownDuringCommitThatLandsKeepsNoCopy(t *testing.T) {
	r := newWriterRig(t)
	body := big("committing when stopped ")
	s := r.written(t, "late", body)
	puts := faultblob.NewGate()
	t.Cleanup(puts.Release)
	rule := r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: puts})
	released := make(chan error, 1)
	go func() { released <- r.w.Release(context.Background(), r.id, s) }()
	waitStalled(t, puts, 1)
	r.w.Shutdown()
	r.inj.Remove(rule)
	puts.Release() // the upload goes on, and the commit lands
	if err := <-released; err != nil {
		t.Fatalf("the release's commit: %v", err)
	}
	e, ok := r.slot(t, "late")
	if !ok || e.Size != int64(len(body)) {
		t.Fatalf("late not committed (%v, size %d)", ok, e.Size)
	}
	if kept := r.failedFiles(t); len(kept) != 0 {
		t.Fatalf("the commit landed, yet failed/ holds %v: a copy saying the bytes were never committed", kept)
	}
}
