package e2e

import (
	"context"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sys/unix"
)

// seed commits files (name -> content) to id as one checkpoint, created
// now.
func seed(t testing.TB, bk *Bucket, id layout.SessionID, files map[string]string) {
	t.Helper()
	seedAt(t, bk, id, time.Now(), files)
}

// seedAt commits files to id as one checkpoint, each descriptor created
// at the given time, with no posix-mtime: the files show that time as
// their mtime, as files written by a program that never set one do.
func seedAt(t testing.TB, bk *Bucket, id layout.SessionID, at time.Time, files map[string]string) {
	t.Helper()
	ctx := context.Background()
	var ds []layout.Descriptor
	for name, content := range files {
		bi, err := bk.Store.PutBlobBytes(ctx, []byte(content), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, layout.Descriptor{Name: name, Digest: bi.Digest, Size: bi.Size, Data: []byte(content), CreatedAt: at.UTC()})
	}
	if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
}

// TestWriteFsyncMode: with --commit=fsync every change in a session (new
// files, appends, rm, mv of files and directories, ln -s ingests) stays
// local, visible on this mount only, until an fsync of a file (sync FILE,
// also of a file without a staged write) or of the session directory;
// then all of them are ONE snapshot.
func TestWriteFsyncMode(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		seed(t, bk, id, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "d/c.txt": "c\n", "keep": "k\n"})
		src := filepath.Join(t.TempDir(), "src.txt")
		if err := os.WriteFile(src, []byte("ingested\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		m := mount(t, bk, "--commit=fsync", "--ingest-from=file://"+filepath.Dir(src)+"/")
		dir := sessDir(m, id)
		shE(t, dir, `
			echo n1 > n1.txt
			mkdir sub
			echo n2 > sub/n2.txt
			rm a.txt
			mv b.txt b2.txt
			echo more >> d/c.txt
			mv d e
			ln -s file://`+src+` in.txt
			mv in.txt in2.txt
			cp b2.txt b3.txt
		`)
		want := map[string]string{"n1.txt": "n1\n", "sub/n2.txt": "n2\n", "b2.txt": "b\n", "b3.txt": "b\n",
			"e/c.txt": "c\nmore\n", "keep": "k\n", "in2.txt": "ingested\n"}
		wantTree(t, dir, want)
		if v := latest(t, bk, id); v != 1 {
			t.Fatalf("version %d before fsync, want 1 (the seed)", v)
		}
		wantTree(t, freshMount(t, bk, id), map[string]string{"a.txt": "a\n", "b.txt": "b\n", "d/c.txt": "c\n", "keep": "k\n"})

		shE(t, dir, `sync n1.txt`)
		if v := latest(t, bk, id); v != 2 {
			t.Fatalf("version %d after sync, want 2: one snapshot", v)
		}
		wantSlots(t, bk, id, want)
		wantTree(t, dir, want)

		// The session directory, fsynced by a program.
		shE(t, dir, `echo n3 > n3.txt; rm b3.txt; mv e/c.txt c.txt`)
		delete(want, "b3.txt")
		delete(want, "e/c.txt")
		want["n3.txt"], want["c.txt"] = "n3\n", "c\nmore\n"
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatalf("fsync of the session directory: %v", err)
		}
		d.Close()
		if v := latest(t, bk, id); v != 3 {
			t.Fatalf("version %d after fsync of the directory, want 3", v)
		}
		wantSlots(t, bk, id, want)

		// sync of a committed file with nothing staged on it.
		shE(t, dir, `rm n3.txt; sync keep`)
		delete(want, "n3.txt")
		if v := latest(t, bk, id); v != 4 {
			t.Fatalf("version %d after sync keep, want 4", v)
		}
		// Nothing pending: fsync is no snapshot.
		shE(t, dir, `sync keep`)
		if v := latest(t, bk, id); v != 4 {
			t.Fatalf("version %d after an fsync with nothing pending, want 4", v)
		}
		wantSlots(t, bk, id, want)
		wantTree(t, dir, want)
		wantTree(t, freshMount(t, bk, id), want)
		checkBucket(t, bk)
	})
}

// TestWriteFsyncUploadsTogether: the blobs of one --commit=fsync commit
// go up together: 40 files staged, then one sync, with a bucket 20 ms
// away, have at least 8 PUTs in flight at once. They went one after
// another: 300 files took 7.5 s at 20 ms, 0.7 s together (the remote
// audit), and pugfs exec commits this way.
func TestWriteFsyncUploadsTogether(t *testing.T) {
	bk := relLocalBucket(t)
	id := newSession(t, bk)
	m := mount(t, relWithFaults(bk, map[string]string{"fault_latency": "20ms"}), "--commit=fsync")
	dir := sessDir(m, id)
	shE(t, dir, `for i in $(seq 40); do head -c 3000 /dev/urandom > f$i.bin; done; sync f1.bin`)
	if v := latest(t, bk, id); v != 1 {
		t.Fatalf("version %d after sync, want 1: one snapshot", v)
	}
	c := listReadCounts(t, m)
	if c.Put != 41 || c.Peak < 8 {
		t.Fatalf("one commit of 40 files: %+v; want 41 PUTs, at least 8 in flight at once", c)
	}
}

// TestWriteFsyncModeUnmountKeepsData: what --commit=fsync still holds when
// the mount stops without an fsync is not committed (no fsync asked for
// it) and not dropped silently: written files go to the failed directory,
// pending renames and removals are logged. SIGHUP (a terminal or ssh
// session gone) stops it so too: it killed the process, leaving a dead
// mount and keeping nothing (review 5).
func TestWriteFsyncModeUnmountKeepsData(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
			t.Run(unix.SignalName(sig), func(t *testing.T) { fsyncModeStopKeepsData(t, bk, sig) })
		}
	})
}

func fsyncModeStopKeepsData(t *testing.T, bk *Bucket, sig syscall.Signal) {
	id := newSession(t, bk)
	seed(t, bk, id, map[string]string{"old.txt": "old\n"})
	cacheDir := t.TempDir()
	m := mount(t, bk, "--commit=fsync", "--cache-dir", cacheDir)
	shE(t, sessDir(m, id), `echo "never fsynced" > pending.txt; mv old.txt renamed.txt`)
	m.StopWith(t, sig)
	if mountID(m.Dir) != "" {
		t.Fatalf("a mount is left on %s after %v", m.Dir, sig)
	}
	if v := latest(t, bk, id); v != 1 {
		t.Fatalf("version %d after unmount, want 1", v)
	}
	var kept []string
	filepath.Walk(cacheDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.Contains(fi.Name(), "pending.txt") {
			if b, _ := os.ReadFile(p); string(b) == "never fsynced\n" {
				kept = append(kept, p)
			}
		}
		return nil
	})
	if len(kept) != 1 {
		t.Fatalf("kept copies of pending.txt: %v\n%s", kept, m.Log())
	}
	if log := m.Log(); !strings.Contains(log, "renamed.txt") || !strings.Contains(log, "not committed") {
		t.Fatalf("the log does not name the pending rename:\n%s", log)
	}
}

// TestWriteFailedPerBucket: mounts of two buckets sharing one
// --cache-dir each show their own failed commits: what a mount of one
// bucket kept at its stop (a --commit=fsync change never fsynced) showed
// in the other bucket's .pugmark/failed/, under a session that bucket
// does not have, and counted in its stats (audit 12).
func TestWriteFailedPerBucket(t *testing.T) {
	t.Parallel()
	bx, by := openBucket(t, testbucket.Local), openBucket(t, testbucket.Local)
	idx := newSession(t, bx)
	newSession(t, by)
	cacheDir := t.TempDir()
	mx := mount(t, bx, "--commit=fsync", "--cache-dir", cacheDir)
	shE(t, sessDir(mx, idx), `echo "never fsynced" > pending.txt`)
	mx.Stop(t)

	kept := func(m *Mount) []string {
		var out []string
		filepath.WalkDir(filepath.Join(m.Dir, ".pugmark", "failed"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out = append(out, strings.TrimPrefix(p, m.Dir))
			}
			return nil
		})
		return out
	}
	my := mount(t, by, "--cache-dir", cacheDir)
	if got := kept(my); len(got) != 0 {
		t.Errorf("bucket Y's mount shows bucket X's failed commits: %v", got)
	}
	mx = mount(t, bx, "--cache-dir", cacheDir)
	if got := kept(mx); len(got) != 1 || !strings.Contains(got[0], idx.String()+"/pending.txt.") {
		t.Errorf("bucket X's mount shows %v as its failed commits, want its pending.txt", got)
	}
}

// TestWriteFsyncCrashKeepsClosed: a --commit=fsync mount killed with
// SIGKILL keeps the files it had closed and not yet fsynced: the next
// mount on its cache directory moves them into .pugmark/failed/, as an
// unmount would have kept them. They were unnamed spill files, gone
// with the process; they are parked under names now (staging/park.go),
// from the close(2) on: the kernel's RELEASE, which parked them, comes
// after close(2) returned, and not at all while another descriptor of the
// same open file lives (held.txt, duplicated here; a forked child's copy
// is the same), so a kill in between lost them. The killed mount may have
// spelled the bucket's URL otherwise (through the fault injector): its
// files went to that spelling's directory, which the next mount did not
// look in (audit 27 F3).
func TestWriteFsyncCrashKeepsClosed(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	for _, c := range []struct {
		name string
		url  *Bucket // how the killed mount spells the bucket
	}{
		{"same-url", bk},
		{"fault-injector-url", relWithFaults(bk, map[string]string{"fault_latency": "1ms"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := newSession(t, bk)
			cache, dir := t.TempDir(), t.TempDir()
			m := startMount(t, c.url, dir, "--commit=fsync", "--cache-dir", cache)
			shE(t, sessDir(m, id), `echo one > a.txt; mkdir d; seq 1 1000 > d/b.txt`)
			f, err := os.Create(filepath.Join(sessDir(m, id), "held.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("held\n"); err != nil {
				t.Fatal(err)
			}
			dup, err := syscall.Dup(int(f.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// a.txt and d/b.txt get their names at their close too,
			// unless a request held them at that moment (their RELEASE
			// names them then, a moment later); held.txt, whose
			// RELEASE never comes, only so.
			waitFor(t, "the three files kept", func() bool {
				kept := 0
				filepath.WalkDir(cache, func(p string, e iofs.DirEntry, err error) error {
					dir := filepath.Dir(p)
					if err == nil && !e.IsDir() && filepath.Base(dir) == id.String() && strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "parked-") {
						kept++
					}
					return nil
				})
				return kept == 3
			})
			m.Kill()
			syscall.Close(dup) // on the dead mount: nothing to release
			m = startMount(t, bk, dir, "--commit=fsync", "--cache-dir", cache)
			defer m.Stop(t)
			var seq strings.Builder
			for i := 1; i <= 1000; i++ {
				fmt.Fprintln(&seq, i)
			}
			for name, want := range map[string]string{"a.txt": "one\n", "d%2Fb.txt": seq.String(), "held.txt": "held\n"} {
				kept, _ := filepath.Glob(filepath.Join(dir, ".pugmark", "failed", id.String(), name+".*"))
				if len(kept) != 1 {
					t.Fatalf("%s kept as %v, want one copy in .pugmark/failed/", name, kept)
				}
				if got, err := os.ReadFile(kept[0]); err != nil || string(got) != want {
					t.Errorf("%s kept with %d bytes (%v), want %d", name, len(got), err, len(want))
				}
			}
			if v := latest(t, bk, id); v != 0 {
				t.Errorf("version %d: a change never fsynced landed", v)
			}
		})
	}
}

// TestWriteFsyncUploadsWide: an fsync's blobs go up three quarters of
// --max-requests at a time (48 by default), counted by the mount's
// scheduler behind a bucket whose blob requests take 200 ms. 16 at a
// time, pugfs exec of 20,000 files 20 ms away took 51 s to commit
// (audit 19).
func TestWriteFsyncUploadsWide(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	fb := relWithFaults(bk, map[string]string{"fault_latency": "200ms", "fault_prefix": layout.ObjectsPrefix})
	m := mount(t, fb, "--commit=fsync")
	shE(t, sessDir(m, id), `for i in $(seq 1 100); do echo "file $i" > f$i.txt; done; sync f1.txt`)
	if v := latest(t, bk, id); v != 1 {
		t.Fatalf("version %d after the fsync, want 1", v)
	}
	if peak := statsNumber(t, m, execPeakLine); peak < 40 || peak > 64 {
		t.Errorf("at most %d requests in flight during the fsync of 100 files, want about 48 (3/4 of --max-requests)", peak)
	}
}
