package staging

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pugmark/pugfs/layout"
)

// parked reports whether the staged file of name is parked: no
// descriptor, its bytes under a name in the park directory.
func (r *writerRig) parked(t *testing.T, name string) bool {
	t.Helper()
	s := r.w.Staged(r.id, name)
	if s == nil {
		t.Fatalf("%s is not staged", name)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.file != nil {
		return false
	}
	if s.parkedEmpty {
		return s.parked == ""
	}
	_, err := os.Stat(s.parked)
	return s.parked != "" && err == nil
}

// parkedNames lists the files of the park directories under the
// staging directory.
func (r *writerRig) parkedNames(t *testing.T) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(r.cfg.StagingDir, func(p string, d os.DirEntry, err error) error {
		if rel := strings.TrimPrefix(p, r.cfg.StagingDir+"/"); err == nil && d.Type().IsRegular() && strings.HasPrefix(rel, "parked-") {
			names = append(names, rel)
		}
		return nil
	})
	return names
}

// keptNames lists the parked files a crash keeps: those under a
// session's directory (park.go).
func (r *writerRig) keptNames(t *testing.T) []string {
	t.Helper()
	var kept []string
	for _, n := range r.parkedNames(t) {
		if strings.Count(n, "/") == 2 {
			kept = append(kept, n)
		}
	}
	return kept
}

// deep is a path within Linux's limits (each part under 255 bytes, the
// whole under 4096) whose failedName is longer than a file name may be:
// a deep tree (node_modules, a Java package) has such paths.
func deep(leaf string) string { return strings.Repeat("dir0123456789/", 18) + leaf }

// fileN is the i-th of many files.
func fileN(i int) string { return fmt.Sprintf("d/f%d", i) }

// TestWriterPark: a file released and kept for the next fsync holds no
// descriptor (parked), and everything a staged file does still works
// on it: commit, a handle opening it again, a read, a rename, a chmod
// of content held lazily, the copy kept when the mount stops. Staged
// files held one descriptor each until the commit, and a pugfs exec run
// of more files than `ulimit -n` failed (audit 15).
func TestWriterPark(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		run  func(t *testing.T, r *writerRig)
	}{
		{"fsync commits parked files", func(t *testing.T, r *writerRig) {
			for i := range 40 {
				r.write(t, fileN(i), big(fileN(i)+"\n"))
				if !r.parked(t, fileN(i)) {
					t.Fatalf("%s was released and is not parked", fileN(i))
				}
			}
			names := r.parkedNames(t)
			if len(names) != 40 {
				t.Fatalf("%d parked files, want 40", len(names))
			}
			// As the failed directory names files: what the next mount
			// moves there if this one crashes.
			if want := regexp.MustCompile(`^parked-\d+/` + r.id.String() + `/d%2Ff0\.\d{8}T\d{6}\.\d{9}-\d+$`); !slices.ContainsFunc(names, want.MatchString) {
				t.Fatalf("parked as %v, want one like %v", names[:3], want)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			for i := range 40 {
				if got := r.bodyOf(t, fileN(i)); got != big(fileN(i)+"\n") {
					t.Fatalf("%s committed as %d bytes %.20q, want %d", fileN(i), len(got), got, len(big(fileN(i)+"\n")))
				}
			}
			if n := r.parkedNames(t); len(n) != 0 {
				t.Fatalf("parked names left after the commit: %v", n)
			}
		}},
		{"a handle opens it again", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			s, err := r.w.Open(ctx, r.id, "f", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if n, err := s.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "one\n" {
				t.Fatalf("read of the parked file: %q, %v", buf[:n], err)
			}
			if _, err := s.Append(ctx, []byte("two\n")); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if !r.parked(t, "f") {
				t.Fatal("released again and not parked")
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "f"); got != big("one\n")+"two\n" {
				t.Fatalf("f committed as %d bytes, want %d", len(got), len(big("one\n"))+4)
			}
		}},
		{"the staging directory removed", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			s, err := r.w.Open(ctx, r.id, "f", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, []byte("two\n")); err != nil {
				t.Fatal(err)
			}
			// By people or cleaners, while the file is open again.
			if err := os.RemoveAll(r.cfg.StagingDir); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			// Its name is gone with the directory: it keeps its
			// descriptor (the kernel can name only an O_TMPFILE again),
			// and the bytes.
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "f"); got != big("one\n")+"two\n" {
				t.Fatalf("f committed as %d bytes, want %d", len(got), len(big("one\n"))+4)
			}
		}},
		{"the staging directory removed while parked", func(t *testing.T, r *writerRig) {
			r.write(t, "f", "one\n")
			if err := os.RemoveAll(r.cfg.StagingDir); err != nil {
				t.Fatal(err)
			}
			// Lost with the directory, as a file written there is: the
			// fsync says so, as after a failed write, until the file is
			// removed; the next files park again.
			for range 2 {
				if err := r.w.FsyncSession(ctx, r.id); err == nil || !strings.Contains(err.Error(), "removed with the staging directory") {
					t.Fatalf("fsync of a file whose parked bytes were removed: %v", err)
				}
			}
			if err := r.w.Unlink(ctx, r.id, []string{"f"}); err != nil {
				t.Fatal(err)
			}
			r.write(t, "g", "two\n")
			if !r.parked(t, "g") {
				t.Fatal("the next file was not parked")
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "g"); got != "two\n" {
				t.Fatalf("g committed as %q", got)
			}
		}},
		{"cut by a handle", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			s, err := r.w.Open(ctx, r.id, "f", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Truncate(ctx, 4); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "f"); got != "one\n" {
				t.Fatalf("f committed as %q", got)
			}
		}},
		{"renamed", func(t *testing.T, r *writerRig) {
			r.write(t, "d/f", big("one\n"))
			if err := r.w.Rename(ctx, r.id, "d/f", "e/g", false); err != nil {
				t.Fatal(err)
			}
			if names := r.parkedNames(t); len(names) != 1 || !strings.Contains(names[0], "/e%2Fg.") {
				t.Fatalf("parked as %v after the rename, want under e/g's name", names)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "e/g"); got != big("one\n") {
				t.Fatalf("e/g committed as %d bytes", len(got))
			}
			if _, ok := r.slot(t, "d/f"); ok {
				t.Fatal("d/f still there after the rename")
			}
			// A crash keeps it under the name it has.
			if names := r.parkedNames(t); len(names) != 0 {
				t.Fatalf("parked names left after the commit: %v", names)
			}
		}},
		{"directory renamed", func(t *testing.T, r *writerRig) {
			if err := r.w.Mkdir(r.id, "d"); err != nil {
				t.Fatal(err)
			}
			r.write(t, "d/f", big("one\n"))
			r.write(t, "d/g", "two\n")
			if err := r.w.Rename(ctx, r.id, "d", "x", false); err != nil {
				t.Fatal(err)
			}
			names := strings.Join(r.parkedNames(t), " ")
			if !strings.Contains(names, "/x%2Ff.") || !strings.Contains(names, "/x%2Fg.") {
				t.Fatalf("parked as %v after the rename, want under x/'s names", names)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if f, g := r.bodyOf(t, "x/f"), r.bodyOf(t, "x/g"); f != big("one\n") || g != "two\n" {
				t.Fatalf("x/f, x/g committed as %d bytes and %q", len(f), g)
			}
		}},
		{"removed", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			if err := r.w.Unlink(ctx, r.id, []string{"f"}); err != nil {
				t.Fatal(err)
			}
			// Not left on the staging disk until unmount (review 19).
			if names := r.parkedNames(t); len(names) != 0 {
				t.Fatalf("parked names left after rm: %v", names)
			}
		}},
		{"renamed over", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("old\n"))
			r.write(t, "tmp", big("new\n"))
			if err := r.w.Rename(ctx, r.id, "tmp", "f", false); err != nil {
				t.Fatal(err)
			}
			if names := r.parkedNames(t); len(names) != 1 {
				t.Fatalf("parked names after mv tmp f: %v, want tmp's alone", names)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "f"); got != big("new\n") {
				t.Fatalf("f committed as %d bytes", len(got))
			}
		}},
		{"released while a stat holds it", func(t *testing.T, r *writerRig) {
			s, err := r.w.Open(ctx, r.id, "f", nil, true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.WriteAt(ctx, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			s.mu.RLock() // as Stat does
			err = r.w.Release(ctx, r.id, s)
			s.mu.RUnlock()
			if err != nil {
				t.Fatal(err)
			}
			// Parked once the stat lets it go: nothing else would park
			// it (review 19).
			deadline := time.Now().Add(10 * time.Second)
			for !r.parked(t, "f") {
				if time.Now().After(deadline) {
					t.Fatal("never parked")
				}
				time.Sleep(time.Millisecond)
			}
		}},
		{"read without a handle", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			buf := make([]byte, 4)
			if n, err := r.w.Staged(r.id, "f").ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "one\n" {
				t.Fatalf("read %q, %v", buf[:n], err)
			}
			if !r.parked(t, "f") {
				t.Fatal("unparked by a read without a handle, which nothing releases")
			}
		}},
		{"a failed cut of content held lazily", func(t *testing.T, r *writerRig) {
			body := big("one\n")
			r.write(t, "f", body)
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			base, _ := r.slot(t, "f")
			s, err := r.w.Open(ctx, r.id, "f", &base, false)
			if err != nil {
				t.Fatal(err)
			}
			s.Touch()
			s.changeAttrs(func(a *Attrs) { a.Meta = map[string]string{"k": "v"} })
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if !r.parked(t, "f") {
				t.Fatal("not parked")
			}
			if s, err = r.w.Open(ctx, r.id, "f", &base, false); err != nil {
				t.Fatal(err)
			}
			// No spill file can be made (as at the descriptor limit).
			os.RemoveAll(r.cfg.StagingDir)
			if err := os.WriteFile(r.cfg.StagingDir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			terr := s.Truncate(ctx, 0)
			os.Remove(r.cfg.StagingDir)
			os.Mkdir(r.cfg.StagingDir, 0o700)
			if terr == nil {
				t.Fatal("the cut succeeded without a spill file")
			}
			// The failed cut changed nothing: it read as zeros, and
			// committed so (review 19).
			buf := make([]byte, 4)
			if n, err := s.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "one\n" {
				t.Errorf("read after the failed cut: %q, %v", buf[:n], err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "f"); got != body {
				t.Fatalf("f committed as %d bytes %.20q, want its %d bytes", len(got), got, len(body))
			}
		}},
		{"deep", func(t *testing.T, r *writerRig) {
			// Named as the failed directory names it, too long for a
			// file name: not parked, and lost by a crash (review 20).
			r.write(t, deep("f"), "deep\n")
			if !r.parked(t, deep("f")) {
				t.Fatal("not parked")
			}
			if err := r.w.Rename(ctx, r.id, deep("f"), deep("g"), false); err != nil {
				t.Fatal(err)
			}
			kept := r.keptNames(t)
			if len(kept) != 1 || !strings.HasSuffix(strings.Split(kept[0], ".")[0], "dir0123456789%2Fg") {
				t.Fatalf("kept as %v, want under g's name", kept)
			}
		}},
		{"committed while held", func(t *testing.T, r *writerRig) {
			r.write(t, "f", "one\n")
			s, err := r.w.Open(ctx, r.id, "f", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			// Committed: a crash must not keep it as if it were not
			// (review 20).
			if kept := r.keptNames(t); len(kept) != 0 {
				t.Fatalf("kept after its commit: %v", kept)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed while held", func(t *testing.T, r *writerRig) {
			r.write(t, "g", "old\n")
			s := r.w.Staged(r.id, "g")
			if !r.w.Retain(r.id, s) {
				t.Fatal("not retained")
			}
			r.write(t, "h", "new\n")
			if err := r.w.Rename(ctx, r.id, "h", "g", false); err != nil {
				t.Fatal(err)
			}
			// g's old bytes are gone from the session: a crash keeps
			// h's, under g's name, alone (review 20).
			kept := r.keptNames(t)
			if len(kept) != 1 || !strings.Contains(kept[0], "/g.") {
				t.Fatalf("kept %v, want g's new bytes alone", kept)
			}
			buf := make([]byte, 4)
			if n, err := s.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "old\n" {
				t.Fatalf("the handle reads %q, %v", buf[:n], err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if n := r.parkedNames(t); len(n) != 1 {
				t.Fatalf("parked names after the last release: %v", n)
			}
		}},
		{"written again", func(t *testing.T, r *writerRig) {
			r.write(t, "f", "one\n")
			s, err := r.w.Open(ctx, r.id, "f", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.WriteAt(ctx, []byte("half"), 0); err != nil {
				t.Fatal(err)
			}
			// Open for writing: a crash now loses it, as any file open
			// for writing, not keeps half of it (review 20).
			if kept := r.keptNames(t); len(kept) != 0 {
				t.Fatalf("kept while written again: %v", kept)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if kept := r.keptNames(t); len(kept) != 1 {
				t.Fatalf("kept once closed again: %v", kept)
			}
		}},
		{"linked", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			if err := r.w.Link(ctx, r.id, "f", "g"); err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if f, g := r.bodyOf(t, "f"), r.bodyOf(t, "g"); f != big("one\n") || g != f {
				t.Fatalf("f and g committed as %d and %d bytes, want %d", len(f), len(g), len(big("one\n")))
			}
		}},
		{"unchanged content held lazily", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			base, _ := r.slot(t, "f")
			s, err := r.w.Open(ctx, r.id, "f", &base, false)
			if err != nil {
				t.Fatal(err)
			}
			s.Touch()
			s.changeAttrs(func(a *Attrs) { a.Meta = map[string]string{"k": "v"} })
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if !r.parked(t, "f") {
				t.Fatal("a chmod'ed file released and not parked")
			}
			s, err = r.w.Open(ctx, r.id, "f", &base, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, []byte("two\n")); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatal(err)
			}
			if err := r.w.FsyncSession(ctx, r.id); err != nil {
				t.Fatal(err)
			}
			if got := r.bodyOf(t, "f"); got != big("one\n")+"two\n" {
				t.Fatalf("f committed as %d bytes, want %d", len(got), len(big("one\n"))+4)
			}
		}},
		{"kept when the mount stops", func(t *testing.T, r *writerRig) {
			r.write(t, "f", big("one\n"))
			r.w.Shutdown()
			kept := r.failedFiles(t)
			if len(kept) != 1 {
				t.Fatalf("kept %v, want f", kept)
			}
			b, err := os.ReadFile(filepath.Join(r.cfg.FailedDir, r.id.String(), kept[0]))
			if err != nil || string(b) != big("one\n") {
				t.Fatalf("kept %d bytes (%v), want %d", len(b), err, len(big("one\n")))
			}
			if n := r.parkedNames(t); len(n) != 0 {
				t.Fatalf("parked names left after the mount stopped: %v", n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newWriterRig(t, CommitOnFsync))
		})
	}
}

// TestWriterParkHold: pugfs exec's Writer (Hold) parks files under plain
// numbers, which a crashed run's sweep removes: a run that did not end
// with its checkpoint keeps nothing.
func TestWriterParkHold(t *testing.T) {
	r := holdRig(t)
	r.write(t, "d/f", "one\n")
	if !r.parked(t, "d/f") {
		t.Fatal("not parked")
	}
	if names := r.parkedNames(t); len(names) != 1 || !regexp.MustCompile(`^parked-\d+/\d+$`).MatchString(names[0]) {
		t.Fatalf("parked as %v, want parked-*/<number>", names)
	}
}

// TestWriterKeepOnCrash: once pugfs exec's command exited 0
// (KeepOnCrash), a crash keeps what its checkpoint has not landed: the
// parked files get kept names, so do files parked after, and a
// checkpoint that fails leaves them so. One that lands leaves nothing to
// keep. A run killed while committing left its files as plain numbers,
// and the next run's sweep removed every one (audit 19).
func TestWriterKeepOnCrash(t *testing.T) {
	ctx := context.Background()
	r := holdRig(t)
	r.write(t, "d/f", big("one\n"))
	r.w.KeepOnCrash(r.id)
	r.write(t, "g", big("two\n"))
	kept := r.keptNames(t)
	slices.Sort(kept)
	stamp := `\.\d{8}T\d{6}\.\d{9}-\d+$`
	if len(kept) != 2 || len(r.parkedNames(t)) != 2 ||
		!regexp.MustCompile(`^parked-\d+/`+r.id.String()+`/d%2Ff`+stamp).MatchString(kept[0]) ||
		!regexp.MustCompile(`^parked-\d+/`+r.id.String()+`/g`+stamp).MatchString(kept[1]) {
		t.Fatalf("parked as %v (kept: %v), want both under the session, named as the failed directory names them", r.parkedNames(t), kept)
	}
	r.failBlobPuts()
	if _, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput); err == nil {
		t.Fatal("a checkpoint whose uploads failed landed")
	}
	if kept := r.keptNames(t); len(kept) != 2 {
		t.Fatalf("after a failed checkpoint a crash keeps %v, want both files", kept)
	}
	t.Run("kept now, not again by a crash", func(t *testing.T) {
		r := holdRig(t)
		r.write(t, "g", big("two\n"))
		r.w.KeepOnCrash(r.id)
		r.failBlobPuts()
		if _, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput); err == nil {
			t.Fatal("a checkpoint whose uploads failed landed")
		}
		// pugfs exec's exit 74 and 75 keep the files at once.
		if kept, _ := r.w.KeepSession(r.id); kept != 1 || len(r.failedFiles(t)) != 1 {
			t.Fatalf("KeepSession kept %d: %v", kept, r.failedFiles(t))
		}
		if k := r.keptNames(t); len(k) != 0 {
			t.Errorf("g kept in failed/ and still parked as %v: a crash now keeps it twice (review 23)", k)
		}
	})
	r.inj.Reset()
	if _, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput); err != nil {
		t.Fatal(err)
	}
	if names := r.parkedNames(t); len(names) != 0 {
		t.Fatalf("after the checkpoint landed a crash keeps %v", names)
	}
	if got := r.bodyOf(t, "d/f"); got != big("one\n") {
		t.Fatalf("d/f committed as %d bytes", len(got))
	}
}

// TestKeptName: a kept file's name fits a file name, and keeps the end
// of the name it stands for; two long names stay apart.
func TestKeptName(t *testing.T) {
	stamp := ".20261207T000000.000000000-12"
	for _, c := range []struct{ name, want string }{
		{"a/b", "a%2Fb" + stamp},
		{"ü/" + strings.Repeat("é", 200), ""},
		{deep("f"), ""},
	} {
		got := keptName(c.name, stamp)
		if c.want != "" && got != c.want {
			t.Errorf("keptName(%q) = %q, want %q", c.name, got, c.want)
		}
		if len(got) > 255 || !utf8.ValidString(got) || !strings.HasSuffix(got, stamp) {
			t.Errorf("keptName(%.20q...) = %q: %d bytes", c.name, got, len(got))
		}
	}
	if a, b := keptName(deep("f"), ""), keptName("x"+deep("f"), ""); a == b || !strings.HasSuffix(a, "%2Ff") {
		t.Errorf("two long names kept as %q and %q", a, b)
	}
	// Cut anywhere in a segment (deep's are "dir0123456789%2F" once
	// escaped), the kept name does not start inside an escape.
	for i := range 16 {
		got := keptName(deep("f"+strings.Repeat("y", i)), stamp)
		if tail := got[strings.IndexByte(got, '~')+1:]; strings.HasPrefix(tail, "2F") || strings.HasPrefix(tail, "F") {
			t.Errorf("keptName of a long name starts inside an escape: %.30q", tail)
		}
	}
}

// TestWriterKeptAtClose: with --commit=fsync, a file closed by its last
// descriptor has the name a crash keeps once the close (FLUSH) returns,
// not only at the RELEASE the kernel sends after close(2) returned: a
// mount killed in between lost the file its program had closed. A write
// through a dup of the descriptor names it plain again (it is open for
// writing: a crash keeps nothing of it); the next close keeps it again,
// and the commit of the fsync leaves nothing to keep.
func TestWriterKeptAtClose(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigCfg(t, func(cfg *Config) { cfg.Commit = CommitOnFsync })
	s, err := r.w.Open(ctx, r.id, "f", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	keptBody := func() string {
		t.Helper()
		kept := r.keptNames(t)
		if len(kept) != 1 {
			return fmt.Sprintf("kept names %v", kept)
		}
		b, err := os.ReadFile(filepath.Join(r.cfg.StagingDir, kept[0]))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	steps := []struct {
		what string
		do   func() error
		kept string // what a crash keeps after the step
	}{
		{"a write", func() error { _, err := s.WriteAt(ctx, []byte("one\n"), 0); return err }, "kept names []"},
		{"its close", func() error { return r.w.FlushSince(ctx, r.id, s, s.Gen()) }, "one\n"},
		{"a write through a dup", func() error { _, err := s.Append(ctx, []byte("two\n")); return err }, "kept names []"},
		{"the dup's close", func() error { return r.w.FlushSince(ctx, r.id, s, s.Gen()) }, "one\ntwo\n"},
		{"the release", func() error { return r.w.Release(ctx, r.id, s) }, "one\ntwo\n"},
		{"the fsync", func() error { return r.w.FsyncSession(ctx, r.id) }, "kept names []"},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		if got := keptBody(); got != st.kept {
			t.Fatalf("after %s a crash keeps %q, want %q", st.what, got, st.kept)
		}
	}
	if got := r.bodyOf(t, "f"); got != "one\ntwo\n" {
		t.Fatalf("f committed as %q", got)
	}
}
