package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// hungRoot is a FUSE root whose statfs never answers until released, like
// a pugfs killed while one of its threads was stuck in the kernel.
type hungRoot struct {
	gofs.Inode
	release chan struct{}
}

func (h *hungRoot) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	<-h.release
	return 0
}

// TestReliabilityHungMountpoint: mounting on a directory whose filesystem
// does not answer fails within the timeout with a message that says how
// to end the connection, instead of hanging forever in stat/statfs.
//
// Without statMountpoint's timeout, checkMountpoint blocks until the test
// binary's deadline.
func TestReliabilityHungMountpoint(t *testing.T) {
	if syscall.Getuid() != 0 {
		t.Skip("needs root to mount")
	}
	defer func(d time.Duration) { mountpointTimeout = d }(mountpointTimeout)
	mountpointTimeout = 500 * time.Millisecond
	dir := t.TempDir()
	root := &hungRoot{release: make(chan struct{})}
	srv, err := gofs.Mount(dir, root, &gofs.Options{MountOptions: fuse.MountOptions{DirectMount: true, Name: "hungtest"}})
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	defer func() {
		close(root.release)
		srv.Unmount()
	}()
	start := time.Now()
	_, err = checkMountpoint(dir)
	el := time.Since(start)
	if err == nil {
		t.Fatal("a hung mountpoint was accepted")
	}
	if el > mountpointTimeout+5*time.Second {
		t.Errorf("took %v", el)
	}
	if msg := err.Error(); !strings.Contains(msg, "does not answer") || !strings.Contains(msg, "/sys/fs/fuse/connections/") {
		t.Errorf("message %q does not say what is wrong and how to end it", msg)
	}
}

// TestMountRefusesNonEmpty: a mountpoint with entries, or with a
// filesystem already mounted on it, is refused in one line naming the
// way out, before anything is mounted; --allow-non-empty mounts anyway.
// Without checkEmpty the first two mount (and hide the entries).
func TestMountRefusesNonEmpty(t *testing.T) {
	bucket := t.TempDir()
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dir string
		want      []string
	}{
		{"a directory with a file", full, []string{"not empty", `"notes.txt"`, "--allow-non-empty"}},
	}
	if syscall.Getuid() == 0 {
		mounted := t.TempDir()
		if err := syscall.Mount("tmpfs", mounted, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(mounted, syscall.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(mounted, "x"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, dir string
			want      []string
		}{"a mount point", mounted, []string{"already a mount (tmpfs)", "fusermount3 -u " + mounted}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := pugfs(t, "mount", bucket, tc.dir)
			if r.code != 1 || strings.Count(r.err, "\n") != 1 {
				t.Fatalf("want exit 1 and one line: %s", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.err, w) {
					t.Errorf("message lacks %q: %s", w, r.err)
				}
			}
		})
	}
	if err := checkEmpty(t.TempDir()); err != nil {
		t.Errorf("an empty directory is refused: %v", err)
	}
}
