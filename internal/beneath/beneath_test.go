package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpen: a path below the directory opens; a symbolic link anywhere
// on it (ELOOP), a ".." out of it or an absolute path (EXDEV) does not,
// with
// openat2 and without it (before Linux 5.6: the fallback followed a link
// in the middle of the path, objects -> /etc, out of the bucket).
func TestOpen(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"a/b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "a/b/f"), filepath.Join(outside, "secret")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"a/out": outside, "a/b/g": filepath.Join(outside, "secret")} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	dirfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	for _, withoutOpenat2 := range []bool{false, true} {
		openat2Missing.Store(withoutOpenat2)
		for _, c := range []struct {
			path string
			want error // nil: opens
		}{
			{"a/b/f", nil},
			{"./a//b/f", nil},
			{"a/out/secret", unix.ELOOP},
			{"a/b/g", unix.ELOOP},
			{"../" + filepath.Base(outside) + "/secret", unix.EXDEV},
			{filepath.Join(outside, "secret"), unix.EXDEV},
		} {
			fd, err := Open(dirfd, c.path, unix.O_RDONLY)
			if err == nil {
				unix.Close(fd)
			}
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("without openat2 %v: Open(%q) = %v, want %v", withoutOpenat2, c.path, err, c.want)
			}
		}
	}
	openat2Missing.Store(false)
}
