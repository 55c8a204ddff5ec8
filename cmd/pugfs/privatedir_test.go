package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTempStateDirIsPrivate: the state directory a mount falls back to
// in the temporary directory is used only when it is this user's and no
// one else's: another user could make $TMPDIR/pugfs-<uid>/<hash> first,
// and the mount put its staged writes and verified blob copies (a 0600
// file's bytes among them) where that user could read and replace them
// (audit 29). One of ours left open is closed to 0700.
func TestTempStateDirIsPrivate(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make a directory of another user's")
	}
	const u = "file:///bucket"
	tests := []struct {
		name    string
		prepare func(t *testing.T, parent, dir string)
		ok      bool
	}{
		{"absent: made", func(t *testing.T, parent, dir string) {}, true},
		{"ours but open to all: closed", func(t *testing.T, parent, dir string) {
			if err := os.MkdirAll(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(parent, 0o777)
			os.Chmod(dir, 0o777)
		}, true},
		{"parent of another user", func(t *testing.T, parent, dir string) {
			if err := os.Mkdir(parent, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(parent, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"directory of another user", func(t *testing.T, parent, dir string) {
			if err := os.MkdirAll(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a symbolic link", func(t *testing.T, parent, dir string) {
			if err := os.Mkdir(parent, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(t.TempDir(), dir); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Where it goes, from a first call in another directory.
			other := t.TempDir()
			t.Setenv("TMPDIR", other)
			d0, _ := tempStateDir(u)
			rel, _ := filepath.Rel(other, d0)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			dir := filepath.Join(tmp, rel)
			tt.prepare(t, filepath.Dir(dir), dir)
			got, err := tempStateDir(u)
			if got != dir {
				t.Fatalf("tempStateDir = %s, want %s", got, dir)
			}
			if (err == nil) != tt.ok {
				t.Fatalf("tempStateDir: %v, want ok %v", err, tt.ok)
			}
			if !tt.ok {
				return
			}
			for _, d := range []string{filepath.Dir(dir), dir} {
				fi, err := os.Lstat(d)
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Fatalf("%s: %v, %v; want a directory of mode 0700", d, fi.Mode(), err)
				}
			}
		})
	}
}
