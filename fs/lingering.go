package fs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
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
func (f *FS) endLingering(srv *fuse.Server, dir string) {
	if f.cfg.NoOpen {
		// The kernel never OPENs this mount's files, so the handle
		// count cannot say a copy is unused, and the fdinfo scan
		// alone missed a reader once: never cut one off.
		return
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		f.log.Debug("cannot watch for lingering copies of the mount", "err", err)
		return
	}
	conn := unix.Minor(uint64(st.Dev))
	dev := []byte(" " + strconv.FormatUint(uint64(unix.Major(uint64(st.Dev))), 10) + ":" + strconv.FormatUint(uint64(conn), 10) + " ")
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		f.log.Debug("cannot watch for lingering copies of the mount", "err", err)
		return
	}
	defer mi.Close()
	stop := make(chan struct{})
	go func() { srv.Wait(); close(stop) }()
	for mountedHere(mi, dev) {
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
	f.log.Warn("unmounted, but another mount namespace (pugfs exec, unshare) still holds a copy of the mount that nobody uses: ending its FUSE connection", "mountpoint", dir, "connection", conn)
	if err := abortConnection(conn); err != nil {
		f.log.Warn("could not end the FUSE connection; the mount stops when that namespace ends", "err", err)
	}
}

// mountedHere reports whether this mount namespace holds a mount of the
// device dev (" major:minor ", as mountinfo's third field).
func mountedHere(mi *os.File, dev []byte) bool {
	if _, err := mi.Seek(0, io.SeekStart); err != nil {
		return false
	}
	b, err := io.ReadAll(mi)
	return err == nil && bytes.Contains(b, dev)
}

// copyInUse reports whether some process has a file open through a
// mount of dev (" major:minor ") in any mount namespace, by the mount IDs
// of /proc/<pid>/fdinfo: the kernel's handle count misses the files of a
// mount that answers no OPEN (a read-only one, noopen.go). What this
// process may not read (another user's processes) is not seen.
func copyInUse(dev []byte) bool {
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
		for _, l := range bytes.Split(b, []byte("\n")) {
			if id, _, ok := bytes.Cut(l, []byte(" ")); ok && bytes.Contains(l, dev) {
				ids[string(id)] = true
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
			if _, rest, ok := bytes.Cut(b, []byte("mnt_id:")); ok {
				id, _, _ := bytes.Cut(bytes.TrimLeft(rest, " \t"), []byte("\n"))
				if ids[string(id)] {
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
