package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sys/unix"
)

// TestXattrChangeKeepsMtime: the README promises that a metadata
// change of a committed file is a new descriptor of the same blob "which
// keeps the file's mtime", and that "metadata set with setfattr commits
// the same way" as a chmod. A chmod kept it; a setfattr, a setfattr -x
// and an fsetxattr through a descriptor that wrote nothing moved it to
// the time of the change (a file tagged after it was written then looked
// new to make and rsync), in both commit modes.
func TestXattrChangeKeepsMtime(t *testing.T) {
	t.Parallel()
	needTool(t, "setfattr")
	needTool(t, "python3")
	old := time.Date(2024, 3, 4, 5, 6, 7, 890000000, time.UTC)
	for _, mode := range []string{"close", "fsync"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			bk := openBucket(t, testbucket.Local)
			id := newSession(t, bk)
			seedAt(t, bk, id, old, map[string]string{
				"chmod.txt": "c\n", "set.txt": "s\n", "unset.txt": "u\n", "fd.txt": "f\n",
			})
			m := mount(t, bk, "--metadata-ttl=0", "--commit="+mode)
			dir := sessDir(m, id)
			sh(t, dir, `setfattr -n user.pugmark.meta.k -v v unset.txt`)
			sh(t, dir, `chmod 600 chmod.txt
setfattr -n user.pugmark.meta.k -v v set.txt
setfattr -x user.pugmark.meta.k unset.txt
python3 -c '
import os
fd = os.open("fd.txt", os.O_RDWR)
os.setxattr(fd, "user.pugmark.meta.k", b"v")
os.close(fd)'
sync chmod.txt`)
			names := []string{"chmod.txt", "set.txt", "unset.txt", "fd.txt"}
			check := func(where, d string) {
				t.Helper()
				for _, n := range names {
					fi, err := os.Stat(filepath.Join(d, n))
					if err != nil {
						t.Errorf("%s: %v", where, err)
						continue
					}
					if !fi.ModTime().Equal(old) {
						t.Errorf("%s: %s mtime %s, want %s as before the metadata change", where, n, fi.ModTime().UTC().Format(time.RFC3339Nano), old.Format(time.RFC3339Nano))
					}
				}
			}
			check("this mount", dir)
			s := slots(t, bk, id)
			for _, n := range names {
				e := s[n]
				if got := layout.ShownMtime(e.Metadata, e.CreatedAt, id.Time()); !got.Equal(old) {
					t.Errorf("bucket: %s shows mtime %s (metadata %v)", n, got.Format(time.RFC3339Nano), e.Metadata)
				}
			}
			if got := s["set.txt"].Metadata["k"]; got != "v" {
				t.Errorf("bucket: set.txt meta k = %q, want v", got)
			}
			if _, ok := s["unset.txt"].Metadata["k"]; ok {
				t.Errorf("bucket: unset.txt still has meta k")
			}
			m.Stop(t)
			check("fresh mount", freshMount(t, bk, id))
			if strings.Contains(m.Log(), "level=ERROR") {
				t.Errorf("log has errors:\n%s", m.Log())
			}
		})
	}
}

// TestRenameShowsNewDescriptorAtOnce: after a rename inside a session,
// the writing mount's user.pugmark.* attributes of the new name must be
// those of the descriptor the rename committed (tree.md: the extended
// attributes are the descriptor's), as other mounts show at once. The
// moved inode kept showing the old name's descriptor (its version,
// sequence number and content type: a.json renamed a.html read
// application/json) until the metadata TTL ran out, while the bucket
// held text/html.
func TestRenameShowsNewDescriptorAtOnce(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk, "--metadata-ttl=30s")
	dir := sessDir(m, id)
	type move struct{ from, to string }
	var moves []move
	// Several of each: whether the kernel's release of the write came
	// before the rename or after it, the old descriptor showed.
	for i := range 5 {
		moves = append(moves, move{fmt.Sprintf("a%d.json", i), fmt.Sprintf("a%d.html", i)},
			move{fmt.Sprintf("b%d.csv", i), fmt.Sprintf("sub-b%d.css", i)})
	}
	for _, c := range moves {
		if err := os.WriteFile(filepath.Join(dir, c.from), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Looked at before the rename, as a tool checking what it wrote.
		// (ENODATA while the kernel's release of the write is pending.)
		_, _ = unix.Getxattr(filepath.Join(dir, c.from), "user.pugmark.content-type", make([]byte, 64))
		if err := os.Rename(filepath.Join(dir, c.from), filepath.Join(dir, c.to)); err != nil {
			t.Fatal(err)
		}
		e, ok := slots(t, bk, id)[c.to]
		if !ok {
			t.Fatalf("bucket: %s missing", c.to)
		}
		want := map[string]string{
			"user.pugmark.content-type":    e.ContentType,
			"user.pugmark.version":         strconv.FormatUint(uint64(e.Version), 10),
			"user.pugmark.sequence-number": strconv.FormatInt(e.SequenceNumber, 10),
		}
		for attr, w := range want {
			buf := make([]byte, 256)
			n, err := unix.Getxattr(filepath.Join(dir, c.to), attr, buf)
			if err != nil {
				t.Errorf("%s: getxattr %s: %v", c.to, attr, err)
				continue
			}
			if got := string(buf[:n]); got != w {
				t.Errorf("%s: %s = %q on the writing mount, the bucket's descriptor has %q", c.to, attr, got, w)
			}
		}
	}
}

// TestXattrsRightAfterClose: once close(2) has returned,
// the file is committed, and the README promises its user.pugmark.*
// attributes (digest, version, ...). A program that wrote a file and
// then read its digest to record it got ENODATA now and then: until the
// kernel's release, which comes a moment after the close, the mount
// built the attributes from the staged file, which has no descriptor's
// digest, version, sequence number or created-at (and no content type
// when the name's extension or the content gave it).
func TestXattrsRightAfterClose(t *testing.T) {
	t.Parallel()
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	m := mount(t, bk)
	dir := sessDir(m, id)
	missing := 0
	const n = 60
	for i := range n {
		name := fmt.Sprintf("f%02d.json", i)
		content := fmt.Sprintf("{\"i\": %d}\n", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, attr := range []string{"user.pugmark.digest", "user.pugmark.version", "user.pugmark.content-type"} {
			buf := make([]byte, 256)
			if _, err := unix.Getxattr(filepath.Join(dir, name), attr, buf); err != nil {
				missing++
				if missing <= 5 {
					t.Errorf("%s right after its close: getxattr %s: %v", name, attr, err)
				}
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d attributes missing right after a close", missing, 3*n)
	}
	// And they are the bucket's.
	s := slots(t, bk, id)
	for i := range n {
		name := fmt.Sprintf("f%02d.json", i)
		buf := make([]byte, 256)
		k, err := unix.Getxattr(filepath.Join(dir, name), "user.pugmark.digest", buf)
		if err != nil || string(buf[:k]) != s[name].Digest.String() {
			t.Errorf("%s: digest %q (%v), bucket has %s", name, buf[:k], err, s[name].Digest)
		}
	}
}
