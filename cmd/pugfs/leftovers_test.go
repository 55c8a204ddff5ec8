package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// holdOpen starts `sleep` holding files (opened for writing) as its
// descriptors 3 and on, and returns its pid.
func holdOpen(t *testing.T, files ...*os.File) int {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// TestHeldForWritingSymlinkedMountpoint: a file held open under a
// session directory reached through a symlink (a --cache-dir or
// $XDG_CACHE_HOME under one) is named. /proc/PID/fd shows resolved paths,
// and nothing was named (review 25).
func TestHeldForWritingSymlinkedMountpoint(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	sess := filepath.Join(link, "sessions", "abc")
	if err := os.MkdirAll(sess, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(sess, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pid := holdOpen(t, f)
	if got := heldForWriting([]int{pid}, sess); !slices.Equal(got, []string{"out.log"}) {
		t.Errorf("heldForWriting(%s) = %q, want [out.log]", sess, got)
	}
}

// TestHeldForWritingDeletedOnce: a file held open, removed, made again
// under its name and held again is named once; it was named twice, the
// " (deleted)" of /proc cut after the names were made unique (review 25).
func TestHeldForWritingDeletedOnce(t *testing.T) {
	sess := t.TempDir()
	p := filepath.Join(sess, "out.log")
	f1, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	os.Remove(p)
	f2, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	pid := holdOpen(t, f1, f2)
	if got := heldForWriting([]int{pid}, sess); !slices.Equal(got, []string{"out.log"}) {
		t.Errorf("heldForWriting = %q, want [out.log] once", got)
	}
}
