package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// TestWriteShellTools: the shell tools people write files with stage and
// commit what they mean (tree.md "Writing", first bullet): echo >, >>,
// cp, mv, rm, sed -i (temp file + rename over), truncate -s, dd
// conv=notrunc into an existing file, dd seek past EOF (sparse), and
// O_TRUNC of an existing file. The bucket (read with the layout package)
// and a fresh mount agree with what the shell should have made.
func TestWriteShellTools(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		dir := sessDir(m, id)
		shE(t, dir, `
			echo hello > a.txt
			echo world >> a.txt
			cp a.txt b.txt
			mv b.txt c.txt
			printf 'one\ntwo\nthree\n' > s.txt
			sed -i 's/two/TWO/' s.txt
			printf 'abcdefghij' > t.bin
			truncate -s 4 t.bin
			printf '0123456789' > d.bin
			printf 'XY' | dd of=d.bin bs=1 seek=3 conv=notrunc status=none
			printf 'Z' | dd of=sparse.bin bs=1 seek=100 status=none
			printf 'tail' | dd of=d.bin bs=1 seek=20 conv=notrunc status=none
			echo gone > rm.txt
			rm rm.txt
			echo long-old-content > o.txt
			echo new > o.txt
			mkdir -p deep/er
			echo nested > deep/er/n.txt
		`)
		want := map[string]string{
			"a.txt":         "hello\nworld\n",
			"c.txt":         "hello\nworld\n",
			"s.txt":         "one\nTWO\nthree\n",
			"t.bin":         "abcd",
			"d.bin":         "012XY56789" + strings.Repeat("\x00", 10) + "tail",
			"sparse.bin":    strings.Repeat("\x00", 100) + "Z",
			"o.txt":         "new\n",
			"deep/er/n.txt": "nested\n",
		}
		wantTree(t, dir, want)
		wantSlots(t, bk, id, want)
		wantTree(t, freshMount(t, bk, id), want)
		checkBucket(t, bk)
	})
}

// TestWriteReadsSeeStagedContent: before close, reads on the same mount
// (another descriptor, another process) see what was written so far.
// The reading process is started before the file is opened, and no other
// test starts one until the close (holdForks): a child forked while the
// descriptor is open would inherit it, and its close-on-exec is a
// close(2), which commits.
func TestWriteReadsSeeStagedContent(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		p := filepath.Join(sessDir(m, id), "live.txt")
		cmd := exec.Command("bash", "-c", "read go; cat "+p)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		release := holdForks()
		defer release()
		f, err := os.OpenFile(p, createFlags, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write([]byte("first ")); err != nil {
			t.Fatal(err)
		}
		stdin.Write([]byte("go\n"))
		if err := cmd.Wait(); err != nil || out.String() != "first " {
			t.Fatalf("cat before close = %q, %v", out.String(), err)
		}
		if _, err := f.Write([]byte("second")); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != "first second" {
			t.Fatalf("read before close = %q, %v", got, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Size() != 12 {
			t.Fatalf("stat before close: %v, %v", fi, err)
		}
		if v := latest(t, bk, id); v != 0 {
			t.Fatalf("version %d before close, want 0", v)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		release()
		wantSlots(t, bk, id, map[string]string{"live.txt": "first second"})
	})
}

// TestWriteLargeFile: a 50 MiB file is staged on disk and uploaded as a
// stream, never held whole in memory. On the local driver the mount's peak
// RSS grows by far less than the file. S3's transfer manager buffers up
// to about 64 MiB per upload (a 16 MiB single-PUT probe, then 6 parts of
// 8 MiB), so there the check is that a file twice as large adds nothing to
// the peak: memory is bounded, not proportional to the file.
func TestWriteLargeFile(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		// A soft memory limit makes the collector run before garbage
		// piles up, so the peak RSS is close to what is live.
		lim := *bk
		lim.Env = append(append([]string(nil), bk.Env...), "GOMEMLIMIT=24MiB")
		m := mount(t, &lim, "--cache-size", "8MiB")
		write := func(name string, size int) {
			t.Helper()
			src := filepath.Join(t.TempDir(), name)
			data := make([]byte, size)
			rand.Read(data)
			if err := os.WriteFile(src, data, 0o644); err != nil {
				t.Fatal(err)
			}
			shE(t, sessDir(m, id), "cp "+src+" "+name)
			e, ok := slots(t, bk, id)[name]
			if sum := sha256.Sum256(data); !ok || e.Size != int64(size) || e.Digest != layout.Digest(sum) || e.Data != nil {
				t.Fatalf("bucket: %s = %+v, want size %d digest %x, no inline data", name, e.Descriptor, size, sum)
			}
			got, err := os.ReadFile(filepath.Join(freshMount(t, bk, id), name))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("fresh mount: %s differs (%d bytes, %v)", name, len(got), err)
			}
		}
		const size = 50 << 20
		before := vmHWM(t, m)
		write("big.bin", size)
		after := vmHWM(t, m)
		t.Logf("peak RSS %d KiB -> %d KiB for a %d KiB file", before>>10, after>>10, size>>10)
		if raceEnabled {
			// The race detector's shadow memory grows with every byte
			// the program touches: the RSS says nothing then.
			return
		}
		if bk.Kind != "s3" {
			if grew := after - before; grew > size/4 {
				t.Errorf("pugfs peak RSS grew by %d KiB writing a %d KiB file", grew>>10, size>>10)
			}
			return
		}
		write("bigger.bin", 2*size)
		again := vmHWM(t, m)
		t.Logf("peak RSS %d KiB -> %d KiB for a %d KiB file", after>>10, again>>10, 2*size>>10)
		if grew := again - after; grew > 16<<20 {
			t.Errorf("pugfs peak RSS grew by another %d KiB for a file twice as large: not bounded", grew>>10)
		}
	})
}

// vmHWM returns the peak resident set size of the mount process, in bytes.
func vmHWM(t testing.TB, m *Mount) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", m.cmd.Process.Pid)
	return 0
}

// faultBucket returns bk behind the fault injector with every PUT under
// prefix failing.
func faultBucket(t testing.TB, bk *Bucket, prefix string) *Bucket {
	t.Helper()
	u, err := url.Parse(bk.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "fault+" + u.Scheme
	q := u.Query()
	q.Set("fault_error_rate", "1")
	q.Set("fault_ops", "put")
	if prefix != "" {
		q.Set("fault_prefix", prefix)
	}
	u.RawQuery = q.Encode()
	fb := *bk
	fb.URL = u.String()
	return &fb
}

// TestWriteCommitErrorOnClose: a commit that fails is returned by close(2)
// (EIO), logged with the key and the reason, and the staged bytes are kept
// in the staging "failed" directory, also after the mount has stopped.
func TestWriteCommitErrorOnClose(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		for _, prefix := range []string{"objects/", "sessions/"} {
			t.Run(strings.TrimSuffix(prefix, "/"), func(t *testing.T) {
				id := newSession(t, bk)
				cacheDir := t.TempDir()
				m := mount(t, faultBucket(t, bk, prefix), "--cache-dir", cacheDir)
				p := filepath.Join(sessDir(m, id), "doomed.txt")
				err := writeFile(p, []byte("precious bytes\n"), createFlags)
				if errnoOf(err) != syscall.EIO {
					t.Fatalf("close = %v, want EIO", err)
				}
				// fsync(2) returns the failure too.
				g, err := os.OpenFile(filepath.Join(sessDir(m, id), "synced.txt"), createFlags, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				g.Write([]byte("synced\n"))
				if err := g.Sync(); errnoOf(err) != syscall.EIO {
					t.Fatalf("fsync = %v, want EIO", err)
				}
				g.Close()
				if v := latest(t, bk, id); v != 0 {
					t.Fatalf("a failed commit made version %d", v)
				}
				waitFor(t, "the failure in the log", func() bool {
					return strings.Contains(m.Log(), "doomed.txt") && strings.Contains(m.Log(), "injected")
				})
				failed := func() []string {
					var found []string
					filepath.Walk(cacheDir, func(p string, fi os.FileInfo, err error) error {
						if err == nil && !fi.IsDir() && strings.Contains(p, "failed") && strings.Contains(fi.Name(), "doomed.txt") {
							if b, _ := os.ReadFile(p); string(b) == "precious bytes\n" {
								found = append(found, p)
							}
						}
						return nil
					})
					return found
				}
				waitFor(t, "the staged data in the failed directory", func() bool { return len(failed()) > 0 })
				m.Stop(t)
				if len(failed()) == 0 {
					t.Fatalf("the failed commit's data is gone after unmount\n%s", m.Log())
				}
			})
		}
	})
}

// TestWriteTruncateCommitsAtOnce: truncate(2) of a path commits before it
// returns, and returns the commit's error, also while another descriptor
// holds the file open: the commit is not left to that descriptor's close
// (or to the release of one just closed, which the kernel sends later).
func TestWriteTruncateCommitsAtOnce(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		p := filepath.Join(sessDir(m, id), "f.txt")
		if err := writeFile(p, []byte("hello world\n"), createFlags); err != nil {
			t.Fatal(err)
		}
		held, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		if err := os.Truncate(p, 5); err != nil {
			t.Fatalf("truncate: %v", err)
		}
		wantSlots(t, bk, id, map[string]string{"f.txt": "hello"})
		// The descriptor held across it writes on top of the truncated
		// file, and its close commits that.
		if _, err := held.WriteAt([]byte("!"), 5); err != nil {
			t.Fatal(err)
		}
		if err := held.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		wantSlots(t, bk, id, map[string]string{"f.txt": "hello!"})

		// A commit that fails is truncate(2)'s error.
		fm := mount(t, faultBucket(t, bk, "sessions/"))
		fp := filepath.Join(sessDir(fm, id), "f.txt")
		held2, err := os.OpenFile(fp, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer held2.Close()
		if err := os.Truncate(fp, 2); errnoOf(err) != syscall.EIO {
			t.Fatalf("truncate on a bucket refusing writes = %v, want EIO", err)
		}
		wantSlots(t, bk, id, map[string]string{"f.txt": "hello!"})
	})
}

// TestWriteFailedRewriteKeepsCommittedFile: a file created through the
// mount is rewritten (O_TRUNC) while the bucket refuses the commit. The
// close is EIO, and the file, through the inode its create made, still
// shows what was committed before. It once answered ENOENT until the
// kernel looked the name up again, and later "" until the kernel released
// the handle of the failed open (when open(O_TRUNC) was an open and a
// truncate without a handle, committed at once).
func TestWriteFailedRewriteKeepsCommittedFile(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		sw, on, off := relSwitchFile(t)
		fb := relWithFaults(bk, map[string]string{"fault_error_rate": "1", "fault_ops": "put",
			"fault_prefix": "sessions/", "fault_active_file": sw})
		m := mount(t, fb, "--metadata-ttl", "1h")
		p := filepath.Join(sessDir(m, id), "f.txt")
		if err := writeFile(p, []byte("first\n"), createFlags); err != nil {
			t.Fatal(err)
		}
		on()
		if err := writeFile(p, []byte("second\n"), os.O_WRONLY|os.O_TRUNC); errnoOf(err) != syscall.EIO {
			t.Fatalf("the rewrite = %v, want EIO", err)
		}
		off()
		if got, err := os.ReadFile(p); err != nil || string(got) != "first\n" {
			t.Fatalf("after the failed rewrite: %q, %v; want the committed first line", got, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Size() != 6 {
			t.Fatalf("stat after the failed rewrite: %v, %v", fi, err)
		}
		wantSlots(t, bk, id, map[string]string{"f.txt": "first\n"})
	})
}

// TestWriteTruncatingOpenCommitsAtClose: open(O_TRUNC) of a committed
// file stages the cut with the open; nothing lands until the close, so no
// other mount, history or handler sees the file empty meanwhile (write
// audit: an empty version landed at open, and stayed if the writer died).
func TestWriteTruncatingOpenCommitsAtClose(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	p := filepath.Join(sessDir(m, id), "config.json")
	if err := writeFile(p, []byte("first\n"), createFlags); err != nil {
		t.Fatal(err)
	}
	v := latest(t, bk, id)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := latest(t, bk, id); got != v {
		t.Errorf("open(O_TRUNC) committed: version %d, was %d", got, v)
	}
	wantSlots(t, bk, id, map[string]string{"config.json": "first\n"})
	if _, err := f.WriteString("second\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := latest(t, bk, id); got != v+1 {
		t.Errorf("the rewrite is version %d, want %d (one commit, at close)", got, v+1)
	}
	wantSlots(t, bk, id, map[string]string{"config.json": "second\n"})
}

// TestWriteDupFdsOneSnapshot: flush runs on every close of every dup'd
// descriptor; the file is still one commit.
func TestWriteDupFdsOneSnapshot(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		shE(t, sessDir(m, id), `exec 3>f.txt; echo a >&3; exec 4>&3; exec 3>&-; exec 4>&-`)
		if v := latest(t, bk, id); v != 1 {
			t.Fatalf("version %d after one file through two descriptors, want 1", v)
		}
		wantSlots(t, bk, id, map[string]string{"f.txt": "a\n"})
		// touch sets the times through its descriptor: committed on close.
		shE(t, sessDir(m, id), `touch empty`)
		wantSlots(t, bk, id, map[string]string{"f.txt": "a\n", "empty": ""})
		// A file only created and closed by a shell is committed at
		// release (the shell's first close is of a dup before any
		// write), which runs after close(2) returns.
		shE(t, sessDir(m, id), `: > empty2`)
		waitFor(t, "empty2 committed", func() bool { _, ok := slots(t, bk, id)["empty2"]; return ok })
		wantSlots(t, bk, id, map[string]string{"f.txt": "a\n", "empty": "", "empty2": ""})
		if v := latest(t, bk, id); v != 3 {
			t.Fatalf("version %d after two empty files, want 3", v)
		}
	})
}

// TestWriteDescriptorFields: descriptors written through the tree carry
// name, digest, size, created-at, content-type (extension, else sniffed),
// sequence number, inline data exactly when <= 1024 bytes, and metadata
// set with setxattr before close; setxattr on a closed file is a new
// descriptor with the same digest.
func TestWriteDescriptorFields(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		dir := sessDir(m, id)
		start := time.Now().UTC()
		files := map[string][]byte{
			"doc.json":  []byte(`{"a": 1}`),
			"page.html": []byte("plain words"),
			"noext":     []byte("<!DOCTYPE html><html><body>hi</body></html>"),
			"blob":      {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0},
			"inline":    bytes.Repeat([]byte("i"), 1024),
			"notinline": bytes.Repeat([]byte("n"), 1025),
			"notes.txt": []byte("text\n"),
		}
		wantType := map[string]string{
			"doc.json":  "application/json",
			"page.html": "text/html; charset=utf-8",
			"noext":     "text/html; charset=utf-8",
			"blob":      "image/png",
			"inline":    "text/plain; charset=utf-8",
			"notinline": "text/plain; charset=utf-8",
			"notes.txt": "text/plain; charset=utf-8",
		}
		for name, b := range files {
			if err := writeFile(filepath.Join(dir, name), b, createFlags); err != nil {
				t.Fatal(err)
			}
		}
		// Metadata set before close.
		shE(t, dir, `exec 3>meta.txt; setfattr -n user.pugmark.meta.owner -v alice meta.txt; echo m >&3; exec 3>&-`)
		end := time.Now().UTC()
		got := slots(t, bk, id)
		for name, b := range files {
			e, ok := got[name]
			if !ok {
				t.Errorf("%s missing", name)
				continue
			}
			d := e.Descriptor
			if d.Name != name || d.Digest != layout.DigestOf(b) || d.Size != int64(len(b)) {
				t.Errorf("%s: name %q digest %s size %d", name, d.Name, d.Digest, d.Size)
			}
			if d.CreatedAt.Before(start.Add(-time.Second)) || d.CreatedAt.After(end.Add(time.Second)) {
				t.Errorf("%s: created-at %v not within [%v, %v]", name, d.CreatedAt, start, end)
			}
			if d.ContentType != wantType[name] {
				t.Errorf("%s: content-type %q, want %q", name, d.ContentType, wantType[name])
			}
			if inline := len(b) <= layout.InlineLimit; inline != (d.Data != nil) || (inline && !bytes.Equal(d.Data, b)) {
				t.Errorf("%s (%d bytes): inline data %d bytes", name, len(b), len(d.Data))
			}
			if d.SequenceNumber < 1 {
				t.Errorf("%s: sequence number %d", name, d.SequenceNumber)
			}
		}
		me := got["meta.txt"]
		if me.Metadata["owner"] != "alice" || string(body(t, bk, me.Descriptor)) != "m\n" {
			t.Fatalf("meta.txt: metadata %v body %q", me.Metadata, body(t, bk, me.Descriptor))
		}
		if v := latest(t, bk, id); v != uint32(len(files)+1) {
			t.Errorf("version %d, want %d (one per file)", v, len(files)+1)
		}
		// setxattr on a closed file: a new descriptor, same blob.
		v0 := latest(t, bk, id)
		shE(t, dir, `setfattr -n user.pugmark.meta.reviewed -v yes notes.txt`)
		if v := latest(t, bk, id); v != v0+1 {
			t.Fatalf("setfattr on a closed file: version %d, want %d", v, v0+1)
		}
		ne := slots(t, bk, id)["notes.txt"]
		if ne.Digest != got["notes.txt"].Digest || ne.Metadata["reviewed"] != "yes" || ne.Version != v0+1 {
			t.Fatalf("notes.txt after setfattr: %+v", ne)
		}
		if x := shE(t, dir, `getfattr --only-values -n user.pugmark.meta.reviewed notes.txt`); x != "yes" {
			t.Fatalf("getfattr = %q", x)
		}
		if x := shE(t, dir, `getfattr --only-values -n user.pugmark.digest notes.txt`); x != ne.Digest.String() {
			t.Fatalf("getfattr digest = %q, want %s", x, ne.Digest)
		}
		// A content type set on purpose stays through later edits.
		shE(t, dir, `setfattr -n user.pugmark.content-type -v application/x-notes notes.txt; echo more >> notes.txt`)
		if ne := slots(t, bk, id)["notes.txt"]; ne.ContentType != "application/x-notes" || ne.Metadata["reviewed"] != "yes" || string(body(t, bk, ne.Descriptor)) != "text\nmore\n" {
			t.Fatalf("notes.txt after setfattr content-type and an append: %+v", ne.Descriptor)
		}
		// Sequence numbers are contiguous across the session.
		for i, e := range fullLog(t, bk, id) {
			if e.SequenceNumber != int64(i+1) {
				t.Fatalf("log entry %d has sequence number %d", i, e.SequenceNumber)
			}
		}
		fresh := freshMount(t, bk, id)
		if x := shE(t, fresh, `getfattr --only-values -n user.pugmark.meta.owner meta.txt`); x != "alice" {
			t.Fatalf("fresh mount: meta.owner = %q", x)
		}
		checkBucket(t, bk)
	})
}

// TestWriteUnlinkAndRename: unlink is a tombstone; rename of a file and of
// a whole directory is one snapshot of tombstones and new descriptors
// without uploading any blob again.
func TestWriteUnlinkAndRename(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		dir := sessDir(m, id)
		shE(t, dir, `echo x > x.txt; mkdir -p d/sub; echo 1 > d/one; echo 2 > d/sub/two; echo k > keep.txt`)
		v0 := latest(t, bk, id)

		shE(t, dir, `rm x.txt`)
		snap, err := bk.Store.ReadSnapshot(context.Background(), id, v0+1)
		if err != nil || len(snap) != 1 || !snap[0].Deleted || snap[0].Name != "x.txt" || !snap[0].Digest.IsZero() {
			t.Fatalf("rm: snapshot %d = %+v, %v; want one tombstone", v0+1, snap, err)
		}

		renames := []struct{ script, want string }{
			{`mv keep.txt kept.txt`, "keep.txt kept.txt"},
			{`mv d e`, "d/one d/sub/two e/one e/sub/two"},
			{`mv e/sub e/moved`, "e/moved/two e/sub/two"},
		}
		for _, r := range renames {
			v := latest(t, bk, id)
			puts, objs := mountPuts(t, m), objectCount(t, bk)
			shE(t, dir, r.script)
			if got := latest(t, bk, id); got != v+1 {
				t.Fatalf("%s: version %d -> %d, want one snapshot", r.script, v, got)
			}
			if p := mountPuts(t, m) - puts; p != 1 {
				t.Errorf("%s: %d PUTs, want 1 (the snapshot; no blob uploads)", r.script, p)
			}
			if o := objectCount(t, bk); o != objs {
				t.Errorf("%s: objects %d -> %d", r.script, objs, o)
			}
			snap, err := bk.Store.ReadSnapshot(context.Background(), id, v+1)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range snap {
				names = append(names, d.Name)
				if d.Deleted == strings.HasPrefix(d.Name, strings.Fields(r.script)[1]) {
					continue
				}
				t.Errorf("%s: descriptor %s deleted=%v", r.script, d.Name, d.Deleted)
			}
			if got := strings.Join(sortStrings(names), " "); got != r.want {
				t.Errorf("%s: snapshot names %q, want %q", r.script, got, r.want)
			}
		}
		want := map[string]string{"kept.txt": "k\n", "e/one": "1\n", "e/moved/two": "2\n"}
		wantTree(t, dir, want)
		wantSlots(t, bk, id, want)
		// The moved directory keeps working under its new name.
		shE(t, dir, `echo 3 > e/three; cat e/one >> e/moved/two`)
		want["e/three"] = "3\n"
		want["e/moved/two"] = "2\n1\n"
		wantTree(t, dir, want)
		wantSlots(t, bk, id, want)
		wantTree(t, freshMount(t, bk, id), want)
		checkBucket(t, bk)
	})
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestWriteRenameRules: RENAME_NOREPLACE is honoured, a rename across
// sessions is EXDEV (mv then copies and deletes), a write over a renamed
// file lands under the new name.
func TestWriteRenameRules(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		a, b := newSession(t, bk), newSession(t, bk)
		m := mount(t, bk)
		da, db := sessDir(m, a), sessDir(m, b)
		shE(t, da, `echo src > src; echo dst > dst`)
		err := renameat2(filepath.Join(da, "src"), filepath.Join(da, "dst"), renameNoReplace)
		if errnoOf(err) != syscall.EEXIST {
			t.Fatalf("renameat2(RENAME_NOREPLACE) over an existing file = %v, want EEXIST", err)
		}
		if err := renameat2(filepath.Join(da, "src"), filepath.Join(da, "new"), renameNoReplace); err != nil {
			t.Fatalf("renameat2(RENAME_NOREPLACE) to a free name: %v", err)
		}
		if err := os.Rename(filepath.Join(da, "new"), filepath.Join(db, "new")); errnoOf(err) != syscall.EXDEV {
			t.Fatalf("rename across sessions = %v, want EXDEV", err)
		}
		shE(t, da, `mv new ../`+b.String()+`/moved`)
		// rename over an existing name replaces it.
		shE(t, da, `echo over > tmp; mv tmp dst; echo more >> dst`)
		wantSlots(t, bk, a, map[string]string{"dst": "over\nmore\n"})
		wantSlots(t, bk, b, map[string]string{"moved": "src\n"})
		checkBucket(t, bk)
	})
}

const renameNoReplace = 1

func renameat2(from, to string, flags uint) error {
	f, err := syscall.BytePtrFromString(from)
	if err != nil {
		return err
	}
	tt, err := syscall.BytePtrFromString(to)
	if err != nil {
		return err
	}
	const sysRenameat2 = 316 // linux/amd64
	atFdcwd := -100
	_, _, e := syscall.Syscall6(sysRenameat2, uintptr(atFdcwd), uintptr(unsafe.Pointer(f)), uintptr(atFdcwd), uintptr(unsafe.Pointer(tt)), uintptr(flags), 0)
	if e != 0 {
		return &os.LinkError{Op: "renameat2", Old: from, New: to, Err: e}
	}
	return nil
}

// TestWriteOpenFileMovedOrRemoved: a file open for writing moves with a
// rename (its descriptors keep writing to it under the new name); once
// its name is removed, or renamed over, what is still written through
// its descriptors goes nowhere, as with any unlinked file.
func TestWriteOpenFileMovedOrRemoved(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		dir := sessDir(m, id)
		shE(t, dir, `exec 3>removed; echo a >&3; rm removed; echo b >&3; exec 3>&-`)

		f, err := os.OpenFile(filepath.Join(dir, "moving"), createFlags, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("x"))
		if err := os.Rename(filepath.Join(dir, "moving"), filepath.Join(dir, "moved")); err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("y"))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}

		if err := writeFile(filepath.Join(dir, "new"), []byte("new"), createFlags); err != nil {
			t.Fatal(err)
		}
		g, err := os.OpenFile(filepath.Join(dir, "target"), createFlags, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		g.Write([]byte("replaced"))
		if err := os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "target")); err != nil {
			t.Fatal(err)
		}
		g.Write([]byte(" and more"))
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"moved": "xy", "target": "new"}
		wantTree(t, dir, want)
		wantSlots(t, bk, id, want)
		wantTree(t, freshMount(t, bk, id), want)
	})
}

// TestWriteDirectories: mkdir in a session is local until a file is
// written below it; rmdir of a non-empty directory is ENOTEMPTY.
func TestWriteDirectories(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		dir := sessDir(m, id)
		shE(t, dir, `mkdir -p empty/inner local; test -d empty/inner`)
		if v := latest(t, bk, id); v != 0 {
			t.Fatalf("mkdir made version %d", v)
		}
		fresh := freshMount(t, bk, id)
		if out := shE(t, fresh, `ls -A`); out != "" {
			t.Fatalf("a fresh mount shows %q after a mkdir", out)
		}
		shE(t, dir, `echo f > local/f`)
		if v := latest(t, bk, id); v != 1 {
			t.Fatalf("version %d after the first file under a mkdir'd dir", v)
		}
		if e := shErr(t, dir, `rmdir local`); !strings.Contains(e, "not empty") {
			t.Fatalf("rmdir of a non-empty directory: %q", e)
		}
		if e := shErr(t, dir, `rmdir empty`); !strings.Contains(e, "not empty") {
			t.Fatalf("rmdir of a directory holding a directory: %q", e)
		}
		shE(t, dir, `rmdir empty/inner empty; test ! -e empty`)
		if e := shErr(t, dir, `mkdir local`); !strings.Contains(e, "exists") {
			t.Fatalf("mkdir of an existing directory: %q", e)
		}
		if out := shE(t, fresh, `ls -A; cat local/f`); out != "local\nf\n" {
			t.Fatalf("fresh mount: %q", out)
		}
		// Directories that only exist through their files (made by
		// another writer): rm -r, and rmdir once emptied.
		other := newSession(t, bk)
		seed(t, bk, other, map[string]string{"d/a": "a", "d/sub/b": "b", "e/x": "x", "keep": "k"})
		od := sessDir(m, other)
		shE(t, od, `rm -r d; test ! -e d; rm e/x; rmdir e; test ! -e e`)
		wantSlots(t, bk, other, map[string]string{"keep": "k"})
		wantTree(t, od, map[string]string{"keep": "k"})
	})
}

// TestWriteSymlinkIngests: ln -s URL name ingests the object (§3.2):
// streamed, hashed, stored, committed; file:// from another local
// directory and s3:// from another bucket of the S3 server, each allowed
// with --ingest-from (reliability_ingest_test.go has the refusals).
func TestWriteSymlinkIngests(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		content := []byte(strings.Repeat("ingest me\n", 500))
		var srcURL, prefix string
		switch bk.Kind {
		case "s3":
			other := openBucket(t, bk.Kind)
			if err := other.B.WriteAll(context.Background(), "in/obj.txt", content, nil); err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(other.URL)
			u.Path = "/in/obj.txt"
			srcURL, prefix = u.String(), other.URL
		default:
			src := t.TempDir()
			if err := os.WriteFile(filepath.Join(src, "obj.txt"), content, 0o644); err != nil {
				t.Fatal(err)
			}
			srcURL, prefix = "file://"+filepath.Join(src, "obj.txt"), "file://"+src+"/"
		}
		m := mount(t, bk, "--ingest-from="+prefix)
		dir := sessDir(m, id)
		objs := objectCount(t, bk)
		shE(t, dir, `ln -s '`+srcURL+`' ingested.txt`)
		e, ok := slots(t, bk, id)["ingested.txt"]
		if !ok || e.Digest != layout.DigestOf(content) || e.Size != int64(len(content)) {
			t.Fatalf("bucket: ingested.txt = %+v", e.Descriptor)
		}
		if !bytes.Equal(body(t, bk, e.Descriptor), content) {
			t.Fatal("bucket: ingested body differs")
		}
		if objectCount(t, bk) != objs+1 {
			t.Errorf("objects %d -> %d, want one more", objs, objectCount(t, bk))
		}
		if got := shE(t, dir, `cat ingested.txt`); got != string(content) {
			t.Fatalf("cat ingested.txt: %d bytes", len(got))
		}
		if e := shErr(t, dir, `ln -s 'file:///nonexistent/dir/x' bad`); e == "" {
			t.Fatal("ln -s of a missing object: no error")
		}
		// A plain path is no ingest: EACCES, as tree.md says of anything
		// but an allowed URL.
		for _, target := range []string{"ingested.txt", "/etc/hostname", "../x"} {
			if err := os.Symlink(target, filepath.Join(dir, "plain")); errnoOf(err) != syscall.EACCES {
				t.Errorf("ln -s %s: %v, want EACCES", target, err)
			}
		}
		wantTree(t, freshMount(t, bk, id), map[string]string{"ingested.txt": string(content)})
	})
}

// TestWriteSymlinkIngestReadAtOnce: a program that opens the name right
// after its ln -s, as `ln -s URL f && cat f` does, reads the ingested
// file. The symlink(2) reply (the kernel insists on a symlink) must reach
// the kernel as never cached: before, its timeout was 1 ns, which the
// kernel rounds up to a tick, and an open within that tick followed the
// reply's link and failed with ENOENT. Python makes each open follow its
// symlink within microseconds, well inside any tick.
func TestWriteSymlinkIngestReadAtOnce(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	src := t.TempDir()
	content := "ingested at once\n"
	if err := os.WriteFile(filepath.Join(src, "obj.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	m := mount(t, bk, "--ingest-from=file://"+src+"/")
	script := `python3 -c '
import os, sys
bad = 0
for i in range(20):
    name = "n%d.txt" % i
    os.symlink(sys.argv[1], name)
    try:
        got = open(name).read()
    except OSError as e:
        got = str(e)
    if got != sys.argv[2]:
        bad += 1
        print(name, repr(got))
print("bad", bad)
' 'file://` + src + `/obj.txt' '` + content + `'`
	if out := shE(t, sessDir(m, id), script); out != "bad 0\n" {
		t.Fatalf("opened right after ln -s:\n%s", out)
	}
}

// wantEROFS runs each script in a subshell of one bash in dir and checks
// that each fails with EROFS.
func wantEROFS(t *testing.T, dir string, scripts []string) {
	t.Helper()
	var b strings.Builder
	for i, s := range scripts {
		fmt.Fprintf(&b, "echo '@@ %d'; ( %s ) 2>&1 && echo '@@ succeeded'\n", i, s)
	}
	b.WriteString("echo '@@ end'\n")
	out := shE(t, dir, b.String())
	for i, s := range scripts {
		start := strings.Index(out, fmt.Sprintf("@@ %d\n", i))
		end := strings.Index(out, fmt.Sprintf("@@ %d\n", i+1))
		if i == len(scripts)-1 {
			end = strings.Index(out, "@@ end\n")
		}
		if start < 0 || end < start {
			t.Fatalf("output of the checks is garbled:\n%s", out)
		}
		if got := out[start:end]; !strings.Contains(got, "Read-only file system") || strings.Contains(got, "@@ succeeded") {
			t.Errorf("%s in %s: %q, want EROFS", s, dir, got)
		}
	}
}

// TestWriteReadOnlyPlaces: history, objects/, names/, the root and
// .pugmark/ refuse writes; a --read-only mount refuses every write.
func TestWriteReadOnlyPlaces(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		m := mount(t, bk)
		s := "sessions/" + id.String()
		shE(t, m.Dir, `echo x > `+s+`/f; setfattr -n user.pugmark.meta.k -v v `+s+`/f`)
		obj := strings.TrimSpace(shE(t, m.Dir, `ls objects | head -1`))
		wantEROFS(t, m.Dir, []string{
			`echo x > ` + s + `/.pugmark/at/1/new`,
			`echo x >> ` + s + `/.pugmark/at/1/f`,
			`rm ` + s + `/.pugmark/at/1/f`,
			`mkdir ` + s + `/.pugmark/at/1/d`,
			`echo x > ` + s + `/.pugmark/version`,
			`rm ` + s + `/.pugmark/snapshots/1.json`,
			`touch ` + s + `/.pugmark/seq/1`,
			`mv ` + s + `/.pugmark/at/1/f ` + s + `/g`,
			`echo x > objects/new`,
			`rm objects/` + obj,
			`echo x >> objects/` + obj,
			`echo x > names/n`,
			`echo x > .pugmark/x`,
			`echo x > rootfile`,
			`mkdir rootdir`,
			`rmdir sessions`,
			// link(2) was ENOTSUP in these (audit 21).
			`ln ` + s + `/f ` + s + `/.pugmark/at/1/g`,
			`ln ` + s + `/f ` + s + `/.pugmark/x`,
			`ln ` + s + `/f .pugmark/x`,
			`ln ` + s + `/f objects/x`,
			`ln ` + s + `/f names/x`,
			`ln ` + s + `/f rootlink`,
		})
		if e := shErr(t, m.Dir, `setfattr -n user.pugmark.digest -v x `+s+`/f`); !strings.Contains(e, "not supported") {
			t.Errorf("setfattr of a derived attribute: %q, want ENOTSUP", e)
		}
		// So mv from another session (a copy with the attributes) says
		// nothing of them and keeps what can be set: f has meta.k.
		src, other := "sessions/"+newSession(t, bk).String(), "sessions/"+newSession(t, bk).String()
		shE(t, m.Dir, `echo y > `+src+`/g; setfattr -n user.pugmark.meta.k -v v `+src+`/g`)
		if out, errOut, err := run(m.Dir, `mv `+src+`/g `+other+`/moved && getfattr --only-values -n user.pugmark.meta.k `+other+`/moved`); err != nil || errOut != "" || out != "v" {
			t.Errorf("mv to another session: %q, stderr %q, %v; want no warning and meta.k kept", out, errOut, err)
		}
		ro := mount(t, bk, "--read-only")
		wantEROFS(t, ro.Dir, []string{
			`echo x > ` + s + `/new`,
			`echo x >> ` + s + `/f`,
			`rm ` + s + `/f`,
			`mkdir ` + s + `/d`,
			`truncate -s 0 ` + s + `/f`,
			`setfattr -n user.pugmark.meta.k -v w ` + s + `/f`,
			`mkdir sessions/` + layout.NewSessionID(time.Now()).String(),
			`mkdir memories/ns`,
			`echo x > refs/r`,
			`ln -s file:///etc/hostname ` + s + `/l`,
		})
		if v := latest(t, bk, id); v != 2 {
			t.Fatalf("version %d, want 2", v)
		}
	})
}

// TestWriteStatDuringSlowUpload: while a close is uploading its blob
// (slowed down here), the file can be stat'ed and read on the mount; only
// writes to it wait.
func TestWriteStatDuringSlowUpload(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		id := newSession(t, bk)
		slow := *bk
		u, err := url.Parse(bk.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.Scheme = "fault+" + u.Scheme
		q := u.Query()
		q.Set("fault_latency", "2s")
		q.Set("fault_ops", "put")
		q.Set("fault_prefix", "objects/")
		u.RawQuery = q.Encode()
		slow.URL = u.String()
		m := mount(t, &slow)
		p := filepath.Join(sessDir(m, id), "slow.txt")
		f, err := os.OpenFile(p, createFlags, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("slow content\n"))
		closed := make(chan error, 1)
		start := time.Now()
		go func() { closed <- f.Close() }()
		// Wait until the close is in its upload, then stat and read.
		waitFor(t, "the upload to start", func() bool { return mountPuts(t, m) > 0 || time.Since(start) > time.Second })
		t0 := time.Now()
		fi, err := os.Stat(p)
		if err != nil || fi.Size() != 13 {
			t.Fatalf("stat during the upload: %v, %v", fi, err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != "slow content\n" {
			t.Fatalf("read during the upload: %q, %v", got, err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("stat and read took %v during an upload: they waited for it", d)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		wantSlots(t, bk, id, map[string]string{"slow.txt": "slow content\n"})
	})
}

// TestWriteNameNotUTF8: names are stored as JSON strings, which carry
// only UTF-8; a name with other bytes would come back with U+FFFD in
// their place, and two such names as one file holding the second's bytes.
// Creating, making or renaming to such a name fails with EILSEQ, a memory
// record or ref of such a name with EINVAL, and nothing is committed.
func TestWriteNameNotUTF8(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	d := sessDir(m, id)
	if err := os.WriteFile(filepath.Join(d, "ok.txt"), []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(m.Dir, "memories", "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	v := latest(t, bk, id)
	for _, c := range []struct {
		what string
		err  error
		// layout is set for the layout's own names (memories, refs),
		// which it refuses as invalid (EINVAL) if the front end did not.
		layout bool
	}{
		{"create", os.WriteFile(filepath.Join(d, "coll-\xff"), []byte("first\n"), 0o644), false},
		{"mkdir", os.Mkdir(filepath.Join(d, "dir-\xfe"), 0o755), false},
		{"rename", os.Rename(filepath.Join(d, "ok.txt"), filepath.Join(d, "ok-\xfe")), false},
		{"namespace", os.Mkdir(filepath.Join(m.Dir, "memories", "ns-\xff"), 0o755), true},
		{"memory record", os.WriteFile(filepath.Join(m.Dir, "memories", "notes", "rec-\xff"), []byte("x\n"), 0o644), true},
		{"ref", os.WriteFile(filepath.Join(m.Dir, "refs", "r-\xff"), []byte("x\n"), 0o644), true},
	} {
		if e := errnoOf(c.err); e != syscall.EILSEQ && !(c.layout && e == syscall.EINVAL) {
			t.Errorf("%s of a name that is not UTF-8: %v, want EILSEQ", c.what, c.err)
		}
	}
	if got := latest(t, bk, id); got != v {
		t.Errorf("refused names committed: version %d, was %d", got, v)
	}
	wantSlots(t, bk, id, map[string]string{"ok.txt": "ok\n"})
}

// TestWriteAppendersOneMount: O_APPEND writers of one file on one mount
// never overwrite each other nor leave holes. Each close commits; a
// commit invalidates the name in the kernel, and the next lookup can make
// a second kernel inode of the same staged file, with its own idea of the
// size: appends at that size overwrote another writer's line or left a
// run of zeros (write audit: 88 of 90 lines survived three shells).
// Appends now go at the staged file's end, whatever offset the kernel
// sends.
func TestWriteAppendersOneMount(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	p := filepath.Join(sessDir(m, id), "one.log")
	if err := os.WriteFile(p, []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	appendLine := func(f *os.File, line string) {
		t.Helper()
		if _, err := f.WriteString(line); err != nil {
			t.Error(err)
		}
	}
	open := func() *os.File {
		t.Helper()
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Two descriptors held across the other's commit.
	want := []string{"base"}
	for r := range 3 {
		a, b := open(), open()
		appendLine(a, fmt.Sprintf("A%d\n", r))
		a.Close()
		appendLine(b, fmt.Sprintf("B%d\n", r))
		b.Close()
		want = append(want, fmt.Sprintf("A%d", r), fmt.Sprintf("B%d", r))
	}
	// Writers racing, each open, append, close.
	var wg sync.WaitGroup
	for w := range 4 {
		for i := range 20 {
			want = append(want, fmt.Sprintf("w%d-%d", w, i))
		}
		wg.Go(func() {
			for i := range 20 {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Error(err)
					return
				}
				appendLine(f, fmt.Sprintf("w%d-%d\n", w, i))
				if err := f.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	check := func(where string, got string) {
		t.Helper()
		if strings.ContainsRune(got, 0) {
			t.Errorf("%s: zeros in the file:\n%q", where, got)
		}
		lines := strings.Fields(got)
		slices.Sort(lines)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(lines, w) {
			t.Errorf("%s: %d lines, want %d:\n%q", where, len(lines), len(w), got)
		}
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	check("through the mount", string(got))
	check("in the bucket", string(body(t, bk, slots(t, bk, id)["one.log"].Descriptor)))
}

// TestWriteMknodRegular: mknod(2) of a regular file is a create closed at
// once, so GNU tar's --xattrs extraction, which makes each file with an
// extended attribute so and sets the attribute before the bytes, lands
// every file with its metadata (it was ENOTSUP, and tar skipped the file,
// bytes and all). A FIFO is still ENOTSUP: the layout keeps files only.
func TestWriteMknodRegular(t *testing.T) {
	bk := relLocalBucket(t)
	id := newSession(t, bk)
	m := mount(t, bk)
	dir := sessDir(m, id)
	src := t.TempDir()
	shE(t, src, `
		echo plain > plain.txt
		echo tagged > tagged.txt
		setfattr -n user.pugmark.meta.k -v v tagged.txt
		mkdir sub && echo deep > sub/deep.txt && setfattr -n user.pugmark.meta.d -v w sub/deep.txt
		tar --xattrs -cf ../x.tar .
	`)
	shE(t, dir, `tar --xattrs -xf `+filepath.Join(src, "../x.tar")+` && python3 -c "import os, stat; os.mknod('empty', 0o640 | stat.S_IFREG)"`)
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); errnoOf(err) != syscall.ENOTSUP {
		t.Errorf("mkfifo: %v, want ENOTSUP", err)
	}
	want := map[string]string{"plain.txt": "plain\n", "tagged.txt": "tagged\n", "sub/deep.txt": "deep\n", "empty": ""}
	wantTree(t, dir, want)
	wantSlots(t, bk, id, want)
	fresh := freshMount(t, bk, id)
	wantTree(t, fresh, want)
	if got := shE(t, fresh, "getfattr --only-values -n user.pugmark.meta.k tagged.txt; echo; getfattr --only-values -n user.pugmark.meta.d sub/deep.txt; echo; stat -c %a empty"); got != "v\nw\n440\n" { // a read-only mount shows no write bits
		t.Errorf("metadata and mode after tar --xattrs and mknod: %q", got)
	}
}

// TestWriteFileOverLocalDir: an empty directory made with mkdir lives on
// its mount only; a file another mount commits under its name then wins
// there too, as it does on every other mount and in this one's listing
// (the lookup found the empty directory until rmdir, whatever the TTL).
func TestWriteFileOverLocalDir(t *testing.T) {
	bk := relLocalBucket(t)
	id := newSession(t, bk)
	a, b := mount(t, bk, "--metadata-ttl=0"), mount(t, bk, "--metadata-ttl=0")
	da, db := sessDir(a, id), sessDir(b, id)
	shE(t, da, "mkdir results")
	shE(t, db, "echo B > results")
	if got := shE(t, da, "cat results"); got != "B\n" {
		t.Fatalf("cat results on the mount that made the empty directory: %q", got)
	}
	if got := shE(t, da, "ls -l | grep -c '^d' || true"); got != "0\n" {
		t.Fatalf("a directory still listed: %q", got)
	}
}
