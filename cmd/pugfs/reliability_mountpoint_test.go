package main

import (
	"context"
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
