package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// Links and the inode numbers they share (fs: inoKeeper.linkedFor). From
// review 26: a link's generation made from its name alone let a new link
// of the name take the node of an earlier one still held (moved away, or
// removed while open), so b's bytes showed under c and sed -i of c
// committed them there; and a link of a link kept its number after the
// first file was written.

// linkIno returns the inode number of dir/name.
func linkIno(t *testing.T, dir, name string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestWriteLinkNumbers: names linked again after the earlier link moved
// or was removed while held each keep their own bytes, on this mount
// (at once and past the TTL) and in the bucket.
func TestWriteLinkNumbers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		script string
		want   map[string]string
	}{
		{"relink after a rename", `echo hello > a && ln a b && mv b c && ln a b && echo more >> b`,
			map[string]string{"a": "hello\n", "b": "hello\nmore\n", "c": "hello\n"}},
		{"relink after a directory rename", `mkdir d && echo hello > d/a && ln d/a d/b && mv d e && mkdir d && ln e/a d/b && echo more >> d/b`,
			map[string]string{"e/a": "hello\n", "e/b": "hello\n", "d/b": "hello\nmore\n"}},
		{"relink while the removed link is held", `echo hello > a && ln a b && exec 3>>b && rm b && echo old >&3 && ln a b && echo new >> b && exec 3>&-`,
			map[string]string{"a": "hello\n", "b": "hello\nnew\n"}},
		{"relink after a rename, the new link held, then c edited", `echo hello > a && ln a b && mv b c && ln a b && exec 3>>b && echo more >&3 && cat c >/dev/null && exec 3>&- && echo cc >> c && sed -i s/hello/HELLO/ c`,
			map[string]string{"a": "hello\n", "b": "hello\nmore\n", "c": "HELLO\ncc\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bk := openBucket(t, testbucket.Local)
			id := newSession(t, bk)
			m := mount(t, bk, "--metadata-ttl=1s")
			dir := sessDir(m, id)
			sh(t, dir, c.script)
			var names []string
			var want strings.Builder
			for name := range c.want {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				fmt.Fprintf(&want, "%s--\n", c.want[name])
			}
			show := `for f in ` + strings.Join(names, " ") + `; do cat $f; echo --; done`
			if got := sh(t, dir, show); got != want.String() {
				t.Errorf("this mount, at once: %s = %q, want %q", names, got, want.String())
			}
			// Past the TTL the kernel looks the names up again: the time
			// passing is the condition tested.
			if got := sh(t, dir, `sleep 1.5; `+show); got != want.String() {
				t.Errorf("this mount, past the TTL: %s = %q, want %q", names, got, want.String())
			}
			if got := sh(t, sessDir(mount(t, bk), id), show); got != want.String() {
				t.Errorf("another mount: %s = %q, want %q", names, got, want.String())
			}
		})
	}
}

// TestWriteLinkOfLinkSourceWritten: ln a b; ln b c; then a written: b and
// c both leave a's number (c's source was taken to be b, which still held
// the linked bytes, and c kept a's number for good: cp a c was "the same
// file").
func TestWriteLinkOfLinkSourceWritten(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk, "--metadata-ttl=1s")
	dir := sessDir(m, id)
	sh(t, dir, `echo hello > a && ln a b && ln b c`)
	if a, b, c := linkIno(t, dir, "a"), linkIno(t, dir, "b"), linkIno(t, dir, "c"); a != b || a != c {
		t.Fatalf("after ln: inodes a %d, b %d, c %d; want one", a, b, c)
	}
	sh(t, dir, `echo more >> a`)
	waitFor(t, "b and c off a's number", func() bool {
		a := linkIno(t, dir, "a")
		return linkIno(t, dir, "b") != a && linkIno(t, dir, "c") != a
	})
	if out, errOut, err := run(dir, `cp a c && cat c`); err != nil || out != "hello\nmore\n" {
		t.Errorf("cp a c: %v %q %s", err, out, errOut)
	}
}

// TestWriteLinkSourceRewrittenElsewhere: a linked to b on one mount, a
// rewritten by another: the numbers part, and each name shows its own
// bytes.
func TestWriteLinkSourceRewrittenElsewhere(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk, "--metadata-ttl=1s")
	m2 := mount(t, bk, "--metadata-ttl=1s")
	dir := sessDir(m, id)
	sh(t, dir, `echo hello > a && ln a b && cat a b >/dev/null`)
	sh(t, sessDir(m2, id), `cat a >/dev/null && echo new > a`)
	waitFor(t, "a's new bytes on the first mount", func() bool { return sh(t, dir, `cat a`) == "new\n" })
	if got := sh(t, dir, `cat b`); got != "hello\n" {
		t.Errorf("b: %q", got)
	}
	if a, b := linkIno(t, dir, "a"), linkIno(t, dir, "b"); a == b {
		t.Errorf("a and b share %d with other bytes", a)
	}
}

// TestWriteHeldMetadataTwice: two chmods and a setfattr of a file held
// open all land (the second was ESTALE: the held commit did not move the
// staged file's committed entry on; review 26).
func TestWriteHeldMetadataTwice(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	out, errOut, err := run(sessDir(m, id), `echo hello > f && exec 3>>f && chmod 600 f && chmod 640 f && setfattr -n user.pugmark.meta.k -v v f; r=$?; stat -c %a f; exec 3>&-; exit $r`)
	if err != nil || out != "640\n" {
		t.Errorf("chmod, chmod, setfattr with f held: %v %q %s", err, out, errOut)
	}
	if e := slots(t, bk, id)["f"]; e.Metadata["posix-mode"] != "0640" || e.Metadata["k"] != "v" {
		t.Errorf("f in the bucket: %v", e.Metadata)
	}
}
