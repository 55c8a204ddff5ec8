package fs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/internal/mountinfo"
	"github.com/pugmark/pugfs/internal/procread"
	"golang.org/x/sys/unix"
)

// A mount namespace made while a mount exists gets a copy of it: pugfs
// exec makes one for every handler, `unshare -m` another. Unmounting the
// mount here then leaves its FUSE connection alive for as long as that
// namespace lives, since the copy still holds it: the server serves
// nobody and never learns it was unmounted. A pugfs mount stopped with
// SIGTERM or fusermount -u while a handler ran did not exit until the
// handler ended (a test's mount waited 30 s on another test's handler).
//
// endLingering watches for that: once the mount is gone from this
// process's mount namespace, another namespace still holds a copy, the
// kernel holds no file or directory of it open and no process uses a
// file of it (devInUse: a lazy unmount with files in use is still being
// used, and so is a copy someone reads through or works in), the
// connection is ended through fusectl, as unmounting would have if the
// copy did not exist. Whoever reaches the copy afterwards gets ENOTCONN,
// as after any unmount of a FUSE file system they were still on.
func (f *FS) endLingering(srv *fuse.Server, dev string) {
	_, minor, _ := strings.Cut(dev, ":")
	conn, err := strconv.ParseUint(minor, 10, 32)
	if err != nil {
		f.log.Debug("cannot watch for lingering copies of the mount", "device", dev)
		return
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		f.log.Debug("cannot watch for lingering copies of the mount", "err", err)
		return
	}
	defer mi.Close()
	stop := make(chan struct{})
	go func() { srv.Wait(); close(stop) }()
	for {
		if _, err := mi.Seek(0, io.SeekStart); err != nil {
			return
		}
		if b, err := io.ReadAll(mi); err != nil || !mountsDev(b, dev) {
			break
		}
		// A change of the mount table (POLLPRI) wakes the loop at once.
		// The table is read again every second anyway: under load the
		// unmount's wake-up was missed (the mount was gone from the
		// table, and the loop still polled, 20 s later).
		fds := []unix.PollFd{{Fd: int32(mi.Fd()), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, 1000); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		select {
		case <-stop:
			return
		default:
		}
	}
	idle, said, wait := 0, false, scanMin
	for idle < 2 {
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		switch {
		case !copiesLeft(dev):
			// Not lingering: a lazily unmounted mount ends with its
			// last user.
			idle, wait = 0, nextScan(wait, true)
		case f.OpenHandles() > 0 || devInUse(dev):
			if !said {
				f.log.Info("unmounted, but a copy of the mount in another mount namespace (pugfs exec, unshare) is in use: serving it until nobody uses it", "connection", conn)
				said = true
			}
			idle, wait = 0, nextScan(wait, true)
		default:
			idle, wait = idle+1, nextScan(wait, false)
		}
	}
	f.log.Warn("unmounted, but another mount namespace (pugfs exec, unshare) still holds a copy of the mount that nobody uses: ending its FUSE connection", "connection", conn)
	if err := abortConnection(uint32(conn)); err != nil {
		f.log.Warn("could not end the FUSE connection; the mount stops when that namespace ends", "err", err)
	}
}

// A scan after the unmount reads the mount table, open files and maps of
// every process: cheap on a workstation, not on a host running
// thousands of containers. A copy seen in use (or a lazily unmounted
// mount still used here) is scanned for less and less often, up to
// scanMax; a copy seen idle is scanned again after scanMin, so that it
// ends about a second after its last user, whatever came before.
const (
	scanMin = 500 * time.Millisecond
	scanMax = 8 * time.Second
)

// nextScan returns how long to wait before the scan after one that
// waited wait and found the copy busy or not.
func nextScan(wait time.Duration, busy bool) time.Duration {
	if !busy {
		return scanMin
	}
	return min(2*wait, scanMax)
}

// mountinfoEntry is one line of a mountinfo file: the fields pugfs reads.
type mountinfoEntry struct {
	id, dev, mountpoint, fstype string
}

// parseMountinfo returns the entries of a mountinfo file's content, in
// its order (a mount on top of another comes after it).
func parseMountinfo(b []byte) []mountinfoEntry {
	var es []mountinfoEntry
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 7 {
			continue
		}
		e := mountinfoEntry{id: f[0], dev: f[2], mountpoint: mountinfo.Unescape(f[4])}
		// Optional fields end at "-", then the filesystem type.
		for i := 6; i+1 < len(f); i++ {
			if f[i] == "-" {
				e.fstype = f[i+1]
				break
			}
		}
		es = append(es, e)
	}
	return es
}

// mountsDev reports whether the mountinfo content b holds a mount of the
// device dev ("major:minor").
func mountsDev(b []byte, dev string) bool {
	for _, e := range parseMountinfo(b) {
		if e.dev == dev {
			return true
		}
	}
	return false
}

// mountedHere reports whether this mount namespace holds a mount of the
// device dev ("major:minor").
func mountedHere(dev string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return err == nil && mountsDev(b, dev)
}

// mountDev returns the device ("major:minor") of the FUSE mount on top
// of dir in this mount namespace, or "" if there is none. It asks the
// mount table, not stat, which would need the server to answer and, once
// the mount is gone, gives the device of the directory under it.
func mountDev(dir string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	return fuseDevAt(b, dir)
}

// fuseDevAt returns the device of the topmost mount of the mountinfo
// content b at dir (the kernel shows paths with symlinks resolved), if
// it is a FUSE mount; else "". It touches nothing under dir.
func fuseDevAt(b []byte, dir string) string {
	// Only the parent is resolved: the mountpoint itself is the mount's
	// root, and a stat of it waits for the server.
	real := dir
	if r, err := filepath.EvalSymlinks(filepath.Dir(dir)); err == nil {
		real = filepath.Join(r, filepath.Base(dir))
	}
	dev := ""
	for _, e := range parseMountinfo(b) {
		if e.mountpoint == dir || e.mountpoint == real {
			dev = ""
			if e.fstype == "fuse" || strings.HasPrefix(e.fstype, "fuse.") {
				dev = e.dev
			}
		}
	}
	return dev
}

// copiesLeft reports whether some mount namespace holds a mount of dev
// ("major:minor"), by the mount tables of every process.
func copiesLeft(dev string) bool {
	seen := map[string]bool{}
	for _, pid := range processes() {
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		b, err := procread.ReadFile("/proc/"+pid+"/mountinfo", procWithin)
		if errors.Is(err, procread.ErrTimeout) || err == nil && mountsDev(b, dev) {
			return true // unknown is held: never cut anyone off
		}
	}
	return false
}

// devInUse reports whether some process uses a file of device dev
// ("major:minor"), through any mount of it: holds it open, has it mapped,
// or has its working or root directory there. The kernel's handle count
// misses all of these on a mount that answers no OPEN (a read-only one,
// noopen.go), and the last two on any mount: neither holds a handle.
// Files are looked at with statx(AT_STATX_DONT_SYNC), which asks no
// filesystem (this one, or a hung one elsewhere) for anything. What
// this process may not read (another user's processes) is not seen.
func devInUse(dev string) bool {
	major, minor, _ := strings.Cut(dev, ":")
	ma, err1 := strconv.ParseUint(major, 10, 32)
	mi, err2 := strconv.ParseUint(minor, 10, 32)
	if err1 != nil || err2 != nil {
		return true // unknown: never cut anyone off
	}
	on := func(p string) bool {
		var st unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st) == nil &&
			uint64(st.Dev_major) == ma && uint64(st.Dev_minor) == mi
	}
	mapped := fmt.Sprintf(" %02x:%02x ", ma, mi)
	for _, pid := range processes() {
		dir := "/proc/" + pid + "/"
		if on(dir+"cwd") || on(dir+"root") {
			return true
		}
		// maps takes the process's memory-map lock, held by a page fault
		// stuck on a hung FUSE mount: an unknown is a use.
		b, err := procread.ReadFile(dir+"maps", procWithin)
		if errors.Is(err, procread.ErrTimeout) || err == nil && strings.Contains(string(b), mapped) {
			return true
		}
		fds, _ := os.ReadDir(dir + "fd")
		for _, fd := range fds {
			if on(dir + "fd/" + fd.Name()) {
				return true
			}
		}
	}
	return false
}

// procWithin bounds a read of another process's /proc files.
const procWithin = 2 * time.Second

// processes returns the IDs of the processes in /proc.
func processes() []string {
	procs, _ := os.ReadDir("/proc")
	var pids []string
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err == nil {
			pids = append(pids, p.Name())
		}
	}
	return pids
}

// fusectl is where the kernel's FUSE connections can be ended.
const fusectl = "/sys/fs/fuse/connections"

// abortConnection ends FUSE connection conn, mounting fusectl first if
// it is not (root only).
func abortConnection(conn uint32) error {
	dir := filepath.Join(fusectl, strconv.FormatUint(uint64(conn), 10))
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("none", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "abort"), []byte("1"), 0o200)
}
