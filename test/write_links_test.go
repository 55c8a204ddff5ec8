package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestWriteHardLinks: link(2) in a session makes the new name a file that
// shares the content (one blob, same mode and mtime), in either commit
// mode, so tar x of an archive holding hard links extracts every member
// and exits 0. Before, link was EPERM: tar reported "Cannot hard link"
// for each and exited 2. A link out of the session (another session, a
// history file) is EXDEV, as for rename.
func TestWriteHardLinks(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	sh(t, src, `mkdir d && echo hello > d/a && ln d/a d/b && ln d/a c && chmod 751 d/a && touch -d 2020-01-02T03:04:05Z d/a && tar cf ../links.tar .`)
	archive := filepath.Join(filepath.Dir(src), "links.tar")
	for _, mode := range []string{"close", "fsync"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			bk := openBucket(t, testbucket.Local)
			id := newSession(t, bk)
			m := mount(t, bk, "--commit="+mode)
			dir := sessDir(m, id)
			sh(t, dir, `tar xf '`+archive+`' && sync .`)
			s := slots(t, bk, id)
			a, b, c := s["d/a"], s["d/b"], s["c"]
			if a.Digest != b.Digest || a.Digest != c.Digest || string(body(t, bk, c.Descriptor)) != "hello\n" {
				t.Fatalf("linked names: d/a %v, d/b %v, c %v", a.Digest, b.Digest, c.Digest)
			}
			for _, name := range []string{"d/a", "d/b", "c"} {
				if got := s[name].Metadata["posix-mode"]; got != "0751" {
					t.Errorf("%s: posix-mode %q, want 0751", name, got)
				}
			}
			if got := sh(t, dir, `stat -c '%a %Y %h' d/a d/b c`); got != strings.Repeat("751 1577934245 1\n", 3) {
				t.Errorf("stat after tar x: %q", got)
			}
			// Separate files from now on.
			sh(t, dir, `echo changed > d/b && sync .`)
			if got := sh(t, dir, `cat d/a d/b c`); got != "hello\nchanged\nhello\n" {
				t.Errorf("after writing d/b: %q", got)
			}
			other := newSession(t, bk)
			for _, to := range []string{filepath.Join(sessDir(m, other), "x"), filepath.Join(dir, "e")} {
				from := filepath.Join(dir, "c")
				if to == filepath.Join(dir, "e") {
					from = filepath.Join(m.Dir, meta(id), "log.jsonl")
				}
				if err := os.Link(from, to); !errors.Is(err, syscall.EXDEV) {
					t.Errorf("ln %s %s: %v, want EXDEV", from, to, err)
				}
			}
		})
	}
}

// TestWriteHardLinkInode: a hard link's new name shows its source's inode
// number while both hold the bytes it was linked with, so git clone of a
// repository in the same session, which links each object and checks
// that the new name is the source's inode (git 2.45.1 and distributions'
// backports), works; it failed with "hardlink different from source"
// (audit 21). Written to, either name has a number of its own again, and
// cp from one to the other is no copy onto itself. Also with
// --metadata-ttl=0, where every stat is a lookup.
func TestWriteHardLinkInode(t *testing.T) {
	t.Parallel()
	for _, ttl := range []string{"1s", "0"} {
		t.Run("ttl="+ttl, func(t *testing.T) {
			t.Parallel()
			bk := openBucket(t, testbucket.Local)
			id := newSession(t, bk)
			m := mount(t, bk, "--metadata-ttl="+ttl)
			dir := sessDir(m, id)
			ino := func(name string) uint64 {
				t.Helper()
				var st syscall.Stat_t
				if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
					t.Fatal(err)
				}
				return st.Ino
			}
			sh(t, dir, `echo hello > a && ln a b && ln a c`)
			if a, b, c := ino("a"), ino("b"), ino("c"); a != b || a != c {
				t.Fatalf("after ln: inodes a %d, b %d, c %d; want one", a, b, c)
			}
			sh(t, dir, `echo more >> b`)
			waitFor(t, "b's own number once written", func() bool { return ino("b") != ino("a") })
			if ino("c") != ino("a") {
				t.Errorf("c left a's number when b was written")
			}
			sh(t, dir, `echo again >> a`)
			waitFor(t, "c's own number once its source was written", func() bool { return ino("c") != ino("a") })
			sh(t, dir, `cp a c`)
			if got := sh(t, dir, `cat a b c`); got != "hello\nagain\nhello\nmore\nhello\nagain\n" {
				t.Errorf("a, b, c: %q", got)
			}
			out := sh(t, dir, `git init -q src && cd src && echo x > f && git add f &&
				git -c user.name=t -c user.email=t@example.com commit -qm first && cd .. &&
				git clone -q src dst && git -C dst fsck --full 2>&1 && git -C dst log --format=%s`)
			if !strings.HasSuffix(out, "first\n") {
				t.Errorf("git clone in the session: %q", out)
			}
		})
	}
}
