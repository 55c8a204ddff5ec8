package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// helperName is the program mount(8) runs for an /etc/fstab entry of type
// fuse.pugfs when it exists: /sbin/mount.fuse.pugfs, a link to pugfs.
// Without it, mount(8) runs mount.fuse3, which runs "pugfs SPEC DIR -o
// OPTIONS" from the PATH; pugfs takes both (isMountHelper).
const helperName = "mount.fuse.pugfs"

// isMountHelper reports whether pugfs was started by mount(8): as
// mount.fuse.pugfs, or by mount.fuse3 with a bucket and a mountpoint
// before -o, where a command would be.
func isMountHelper(argv0 string, args []string, cmds []*command) bool {
	if filepath.Base(argv0) == helperName {
		return true
	}
	if len(args) < 3 || !strings.HasPrefix(args[2], "-o") {
		return false
	}
	c, _ := find(cmds, args[:1])
	return c == nil
}

// helperBare and helperValued map mount options to pugfs mount flags:
// an option alone to a flag alone, an option=value to the flag with that
// value. An option is the flag's name without its dashes, with _ for -.
var (
	helperBare = map[string]string{
		"ro": "--read-only", "allow_other": "--allow-other", "debug": "--debug",
		"nonempty": "--allow-non-empty", "sniff_encoding": "--sniff-encoding",
	}
	helperValued = map[string]string{
		"uid": "--uid", "gid": "--gid", "umask": "--umask", "commit": "--commit",
		"metadata_ttl": "--metadata-ttl", "cache_dir": "--cache-dir", "cache_size": "--cache-size",
		"snapshot_type": "--snapshot-type", "metrics_addr": "--metrics-addr",
		"request_timeout": "--request-timeout", "max_requests": "--max-requests",
		"fast_path": "--fast-path", "ingest_from": "--ingest-from", "ingest_max_size": "--ingest-max-size", "xattrs": "--xattrs",
	}
)

// helperIgnored are options that mean nothing to pugfs, or that mount(8)
// or mount.fuse3 handled already (mount.fuse3 adds dev,suid, or rw).
var helperIgnored = map[string]bool{
	"rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "owner": true, "group": true, "_netdev": true, "nofail": true,
	"dev": true, "nodev": true, "suid": true, "nosuid": true, "exec": true, "noexec": true,
	"async": true, "sync": true, "dirsync": true, "atime": true, "noatime": true,
	"relatime": true, "norelatime": true, "strictatime": true, "nostrictatime": true,
	"diratime": true, "nodiratime": true, "lazytime": true, "nolazytime": true,
	"loud": true, "silent": true,
}

// helperFlags turns mount(8)'s arguments after SPEC and DIR into pugfs
// mount flags. fake (-f) asks for the command line only; an option pugfs
// does not know is an error, so that a typo in /etc/fstab is not dropped.
func helperFlags(args []string) (flags []string, fake, verbose bool, err error) {
	var opts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t":
			if i+1 == len(args) {
				return nil, false, false, fmt.Errorf("%s needs an argument", a)
			}
			if a == "-o" {
				opts = append(opts, strings.Split(args[i+1], ",")...)
			}
			i++
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case a == "-N" || strings.HasPrefix(a, "--"):
			return nil, false, false, fmt.Errorf("%s is not supported", a)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, c := range a[1:] {
				switch c {
				case 'f':
					fake = true
				case 'v':
					verbose = true
				case 'r':
					opts = append(opts, "ro")
				case 's', 'n', 'w':
				default:
					return nil, false, false, fmt.Errorf("unknown flag -%c", c)
				}
			}
		default:
			return nil, false, false, fmt.Errorf("unexpected argument %q", a)
		}
	}
	for i, o := range opts {
		name, value, hasValue := strings.Cut(o, "=")
		if name == "ingest_from" {
			// Its value is a comma-separated list (--ingest-from), which
			// the split on commas above cut apart: the URLs that follow
			// belong to it.
			for ; i+1 < len(opts) && isIngestURL(opts[i+1]); i++ {
				value += "," + opts[i+1]
				opts[i+1] = ""
			}
		}
		switch {
		case o == "" || helperIgnored[o] || strings.HasPrefix(o, "x-") ||
			hasValue && (name == "comment" || name == "fsname" || name == "subtype" || name == "user"):
		case !hasValue && helperBare[o] != "":
			flags = append(flags, helperBare[o])
		case hasValue && helperValued[name] != "":
			flags = append(flags, helperValued[name]+"="+value)
		default:
			return nil, false, false, fmt.Errorf("unknown option %q (pugfs help mount lists the options)", o)
		}
	}
	return flags, fake, verbose, nil
}

// isIngestURL reports whether an option of mount(8)'s list is a URL that
// continues ingest_from's list: a scheme and no option name before it.
func isIngestURL(o string) bool {
	scheme, _, ok := strings.Cut(o, "://")
	return ok && scheme != "" && !strings.ContainsAny(scheme, "=/")
}

// runMountHelper mounts as mount(8) expects of a helper: it starts pugfs
// mount in the background, in a session of its own so that it outlives
// mount(8) and the shell, with its output in a log file, and returns once
// the mount is there (0), or when pugfs exited or PUGFS_MOUNT_TIMEOUT
// seconds (30) passed without it (1, with the log's end). `umount DIR`
// ends that pugfs as a signal does.
func runMountHelper(name string, args []string, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		return 1
	}
	if len(args) < 2 {
		return fail("usage: %s BUCKET-URL MOUNTPOINT [-o OPTIONS]", name)
	}
	spec, dir := args[0], args[1]
	flags, fake, verbose, err := helperFlags(args[2:])
	if err != nil {
		return fail("%v", err)
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if st, serr := os.Stat(abs); err != nil || serr != nil || !st.IsDir() {
		return fail("mountpoint %s does not exist or is not a directory", dir)
	}
	self, err := os.Executable()
	if err != nil {
		return fail("cannot find the pugfs binary: %v", err)
	}
	argv := append(append([]string{"mount"}, flags...), "--", spec, abs)
	if fake || verbose {
		fmt.Fprintf(stderr, "%s: %s %s\n", name, self, strings.Join(argv, " "))
	}
	if fake {
		return 0
	}
	if mountedAt(abs) {
		return fail("something is already mounted on %s", abs)
	}
	logPath := helperLog(abs)
	// Not through a symbolic link, not a FIFO (whose open would wait for
	// a reader for good: review 31), and only a file of this user's: the
	// temporary directory's name is one another user can make first.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return fail("log file %s: %v", logPath, err)
	}
	defer logf.Close()
	if st, err := logf.Stat(); err == nil {
		if !st.Mode().IsRegular() {
			return fail("log file %s is not a regular file: not written", logPath)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
			return fail("log file %s belongs to uid %d, not to this user: not written", logPath, sys.Uid)
		}
	}
	var logStart int64
	if st, err := logf.Stat(); err == nil {
		logStart = st.Size() // earlier mounts' lines are not this one's reason
	}
	cmd := exec.Command(self, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fail("start pugfs: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	timeout := 30 * time.Second
	if s, err := strconv.Atoi(os.Getenv("PUGFS_MOUNT_TIMEOUT")); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !mountedAt(abs) {
		select {
		case <-exited:
			if mountedAt(abs) {
				return 0
			}
			return fail("pugfs exited before the mount appeared; its log (%s) ends with:\n%s", logPath, logTail(logPath, logStart, 5))
		case <-deadline:
			// No daemon left behind that might mount later, unasked.
			cmd.Process.Signal(syscall.SIGTERM)
			return fail("the mount did not appear on %s within %v; stopped pugfs, see %s", abs, timeout, logPath)
		case <-tick.C:
		}
	}
	return 0
}

// helperLog is where the pugfs a helper starts writes: PUGFS_LOG, else a
// file named for the mountpoint in /var/log/pugfs (root) or the
// temporary directory.
func helperLog(abs string) string {
	if p := os.Getenv("PUGFS_LOG"); p != "" {
		return p
	}
	name := "pugfs" + strings.NewReplacer("/", "_", " ", "_").Replace(abs) + ".log"
	if err := os.MkdirAll("/var/log/pugfs", 0o755); err == nil && syscall.Access("/var/log/pugfs", 2) == nil {
		return filepath.Join("/var/log/pugfs", name)
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("pugfs-%d%s", os.Getuid(), name[len("pugfs"):]))
}

// mountedAt reports whether something is mounted on dir (this process's
// mount namespace).
func mountedAt(dir string) bool {
	fstype, _ := topMount(dir)
	return fstype != ""
}

// logTail is the last n lines of the file at path from byte from on.
func logTail(path string, from int64, n int) string {
	b, _ := os.ReadFile(path)
	b = b[min(from, int64(len(b))):]
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
