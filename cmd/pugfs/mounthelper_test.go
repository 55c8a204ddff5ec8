package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestIsMountHelper: pugfs is mount(8)'s helper when run as
// mount.fuse.pugfs, or as mount.fuse3 runs it (SPEC DIR -o OPTIONS), and
// never when its first argument is a command.
func TestIsMountHelper(t *testing.T) {
	cmds := commands()
	tests := []struct {
		argv0 string
		args  []string
		want  bool
	}{
		{"/sbin/mount.fuse.pugfs", []string{"s3://b", "/mnt"}, true},
		{"pugfs", []string{"/srv/bucket", "/mnt", "-o", "ro,dev,suid"}, true},
		{"pugfs", []string{"/srv/bucket", "/mnt", "-oro"}, true},
		{"pugfs", []string{"mount", "/srv/bucket", "/mnt"}, false},
		{"pugfs", []string{"mount", "-o", "x"}, false},
		{"pugfs", []string{"/srv/bucket", "/mnt"}, false}, // a mistake, not mount.fuse3
		{"pugfs", []string{"fsck", "/srv/bucket", "-o"}, false},
	}
	for _, tt := range tests {
		if got := isMountHelper(tt.argv0, tt.args, cmds); got != tt.want {
			t.Errorf("isMountHelper(%q, %q) = %v, want %v", tt.argv0, tt.args, got, tt.want)
		}
	}
}

// TestHelperFlags: fstab options become pugfs mount flags; what mount(8)
// and mount.fuse3 add is ignored; an unknown option or flag is an error.
func TestHelperFlags(t *testing.T) {
	tests := []struct {
		args  []string
		flags []string
		fake  bool
		err   string
	}{
		{[]string{"-o", "ro,allow_other,dev,suid,_netdev,nofail,x-systemd.automount"}, []string{"--read-only", "--allow-other"}, false, ""},
		{[]string{"-o", "rw,uid=1000,metadata_ttl=5s", "-t", "fuse.pugfs"}, []string{"--uid=1000", "--metadata-ttl=5s"}, false, ""},
		{[]string{"-ocache_dir=/var/cache/a b,commit=fsync"}, []string{"--cache-dir=/var/cache/a b", "--commit=fsync"}, false, ""},
		{[]string{"-fnv", "-o", "ro"}, []string{"--read-only"}, true, ""},
		// --ingest-from's list survives the split on commas (review 5).
		{[]string{"-o", "ro,ingest_from=s3://team-a/,s3://team-b/,file:///srv/x/,uid=7"}, []string{"--read-only", "--ingest-from=s3://team-a/,s3://team-b/,file:///srv/x/", "--uid=7"}, false, ""},
		{[]string{"-o", "ingest_from=s3://a/,ingest_from=gs://b/"}, []string{"--ingest-from=s3://a/", "--ingest-from=gs://b/"}, false, ""},
		{[]string{"-r"}, []string{"--read-only"}, false, ""},
		{[]string{"-o", "ro,colour=blue"}, nil, false, `unknown option "colour=blue"`},
		{[]string{"-o", "uid"}, nil, false, `unknown option "uid"`},
		{[]string{"-x"}, nil, false, "unknown flag -x"},
		{[]string{"-o"}, nil, false, "-o needs an argument"},
		{[]string{"extra"}, nil, false, "unexpected argument"},
	}
	for _, tt := range tests {
		flags, fake, _, err := helperFlags(tt.args)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("helperFlags(%q): %v, want an error saying %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(flags, tt.flags) || fake != tt.fake {
			t.Errorf("helperFlags(%q) = %q, fake %v, %v; want %q, fake %v", tt.args, flags, fake, err, tt.flags, tt.fake)
		}
	}
}

// TestMountHelperLogIsNoFifo: the mount helper's log in the temporary
// directory (a user who cannot write /var/log/pugfs) has a name another
// local user can make first; a FIFO there blocked the helper for good
// (mount(8), mount -a at boot), the owner check coming only once a
// reader appeared (review 31). PUGFS_LOG points the helper at one here
// (as root, /var/log/pugfs would serve).
func TestMountHelperLogIsNoFifo(t *testing.T) {
	dir := t.TempDir()
	fifo := dir + "/pugfs-1000_mnt.log"
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Skip(err)
	}
	os.Chown(fifo, 65534, 65534) // another user's
	t.Setenv("PUGFS_LOG", fifo)
	mnt := t.TempDir()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() { done <- runMountHelper("mount.pugfs", []string{"file:///nonexistent-review31", mnt}, &stderr) }()
	select {
	case rc := <-done:
		t.Logf("helper returned %d: %s", rc, stderr.String())
	case <-time.After(5 * time.Second):
		// Unblock it: the uid check then refuses the file.
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			defer r.Close()
		}
		rc := <-done
		t.Fatalf("mount helper blocked >5s opening a FIFO planted at its log path (returned %d once a reader came: %s)", rc, stderr.String())
	}
}
