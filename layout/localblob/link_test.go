package localblob

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gocloud.dev/blob"
	"golang.org/x/sys/unix"
)

// TestLinkPublishesTheFile: with WriteOptions.Link, the object is the
// caller's file itself (same inode, nothing copied), with the write's
// metadata and the permissions of any other object; an O_TMPFILE works.
// A file that cannot be linked (unlinked, or on another file system) is
// copied and checked against SHA256 like a written body. Nothing is left
// in the temp directory either way.
func TestLinkPublishesTheFile(t *testing.T) {
	ctx := context.Background()
	b, dir := newBucket(t, nil)
	put := func(key string, f *os.File, sum []byte) error {
		w, err := b.NewWriter(ctx, key, &blob.WriterOptions{
			ContentType: "application/x-test",
			BeforeWrite: func(as func(any) bool) error {
				if !as(&WriteOptions{Link: f, SHA256: sum}) {
					return errors.New("As(*WriteOptions) failed")
				}
				return nil
			},
		})
		if err != nil {
			return err
		}
		return w.Close()
	}
	ino := func(f *os.File) uint64 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	check := func(key, body string, wantIno uint64) {
		t.Helper()
		got, err := b.ReadAll(ctx, key)
		if err != nil || string(got) != body {
			t.Fatalf("%s: %q, %v", key, got, err)
		}
		a, err := b.Attributes(ctx, key)
		if err != nil || a.ContentType != "application/x-test" {
			t.Fatalf("%s: attributes %+v, %v", key, a, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, key), &st); err != nil {
			t.Fatal(err)
		}
		if wantIno != 0 && st.Ino != wantIno {
			t.Errorf("%s: inode %d, want the linked file's %d", key, st.Ino, wantIno)
		}
		if wantIno == 0 && st.Ino == 0 {
			t.Errorf("%s: no inode", key)
		}
		if st.Mode&0o777 == 0o600 {
			t.Errorf("%s: mode %o: the linked file's, not an object's", key, st.Mode&0o777)
		}
		if n := tmpEntries(t, dir); len(n) != 0 {
			t.Fatalf("temp files left: %q", n)
		}
	}

	// An O_TMPFILE on the bucket's file system: linked.
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("O_TMPFILE: %v", err)
	}
	tmp := os.NewFile(uintptr(fd), "tmpfile")
	defer tmp.Close()
	tmp.WriteString("linked body")
	if err := put("objects/a", tmp, sha256Of("linked body")); err != nil {
		t.Fatal(err)
	}
	check("objects/a", "linked body", ino(tmp))

	// An unlinked file cannot be linked: copied, and checked.
	gone, err := os.CreateTemp(dir, "gone")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	os.Remove(gone.Name())
	gone.WriteString("copied body")
	if err := put("objects/b", gone, sha256Of("other")); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("a copied body that does not match: %v", err)
	}
	if err := put("objects/b", gone, sha256Of("copied body")); err != nil {
		t.Fatal(err)
	}
	check("objects/b", "copied body", 0)
	if ino(gone) == func() uint64 {
		var st unix.Stat_t
		unix.Stat(filepath.Join(dir, "objects/b"), &st)
		return st.Ino
	}() {
		t.Error("an unlinked file became the object")
	}
}
