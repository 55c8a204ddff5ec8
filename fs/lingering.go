package fs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/internal/mountinfo"
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
// process's mount namespace and the kernel holds no file or directory of
// it open and no process has a file open through a copy (a lazy unmount
// with files in use is still being used), the
// connection is ended through fusectl, as unmounting would have if the
// copy did not exist. Whoever reaches the copy afterwards gets ENOTCONN,
// as after any unmount of a FUSE file system they were still on.
func (f *FS) endLingering(srv *fuse.Server, dev string) {
	if f.cfg.NoOpen {
		// The kernel never OPENs this mount's files, so the handle
		// count cannot say a copy is unused, and the fdinfo scan
		// alone missed a reader once: never cut one off.
		return
	}
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
		// The mount table changes (POLLPRI) are what to look at; the
		// timeout only lets the loop see stop.
		fds := []unix.PollFd{{Fd: int32(mi.Fd()), Events: unix.POLLPRI}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, err := unix.Poll(fds, 1000); err == nil && n > 0 {
				break
			} else if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}
	idle := 0
	for idle < 2 {
		select {
		case <-stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
		if f.OpenHandles() > 0 || copyInUse(dev) {
			idle = 0
		} else {
			idle++
		}
	}
	f.log.Warn("unmounted, but another mount namespace (pugfs exec, unshare) still holds a copy of the mount that nobody uses: ending its FUSE connection", "connection", conn)
	if err := abortConnection(uint32(conn)); err != nil {
		f.log.Warn("could not end the FUSE connection; the mount stops when that namespace ends", "err", err)
	}
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

// copyInUse reports whether some process has a file open through a
// mount of dev ("major:minor") in any mount namespace, by the mount IDs
// of /proc/<pid>/fdinfo: the kernel's handle count misses the files of a
// mount that answers no OPEN (a read-only one, noopen.go). What this
// process may not read (another user's processes) is not seen.
func copyInUse(dev string) bool {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	var pids []string
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err == nil {
			pids = append(pids, p.Name())
		}
	}
	ids := map[string]bool{}
	namespaces := map[string]bool{}
	for _, pid := range pids {
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || namespaces[ns] {
			continue
		}
		namespaces[ns] = true
		b, _ := os.ReadFile("/proc/" + pid + "/mountinfo")
		for _, e := range parseMountinfo(b) {
			if e.dev == dev {
				ids[e.id] = true
			}
		}
	}
	if len(ids) == 0 {
		return false
	}
	for _, pid := range pids {
		fds, _ := os.ReadDir("/proc/" + pid + "/fdinfo")
		for _, fd := range fds {
			b, _ := os.ReadFile("/proc/" + pid + "/fdinfo/" + fd.Name())
			if _, rest, ok := strings.Cut(string(b), "mnt_id:"); ok {
				id, _, _ := strings.Cut(strings.TrimLeft(rest, " \t"), "\n")
				if ids[id] {
					return true
				}
			}
		}
	}
	return false
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
