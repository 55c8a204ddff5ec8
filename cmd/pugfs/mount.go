package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/ingest"
	"github.com/pugmark/pugfs/internal/mountinfo"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// commitMode says when files written through the mount become snapshots
// (tree.md "Writing").
type commitMode string

const (
	// commitOnClose commits each file when it is closed or fsynced.
	commitOnClose commitMode = "close"
	// commitOnFsync stages every change in a session until an fsync,
	// then commits them all as one snapshot.
	commitOnFsync commitMode = "fsync"
)

// cacheDirOff is the --cache-dir value that turns the disk cache off.
const cacheDirOff = "off"

// defaultCacheSize is --cache-size's default.
const defaultCacheSize = 256 << 20

// mountConfig is everything `pugfs mount` was asked for, parsed and
// validated; runMount (mount_fuse.go) acts on it.
type mountConfig struct {
	// BucketURL is normalised for blob.OpenBucket: a plain path is
	// file:///abs/path (the project's local driver). openBucket(ctx,
	// BucketURL, false) opens it.
	BucketURL string
	// Mountpoint is the absolute path of an existing directory.
	Mountpoint string
	ReadOnly   bool
	// MetadataTTL is how long a session's latest version, the session
	// list, memories and refs are trusted; 0 checks on every lookup.
	MetadataTTL time.Duration
	// CacheDir is where blob bodies, snapshot summaries and staged writes
	// are kept; "" is the per-bucket directory under the user's cache
	// directory (stateDirFor), cacheDirOff keeps nothing on disk but the
	// staged writes.
	CacheDir string
	// CacheSize is the blob cache's memory budget in bytes (> 0); the disk
	// cache under CacheDir may use four times as much.
	CacheSize int64
	Debug     bool
	// AllowOther lets other users see the mount (needs user_allow_other
	// in /etc/fuse.conf when not root).
	AllowOther bool
	// UID and GID own every file in the tree; default the invoking user.
	UID, GID uint32
	// Umask clears permission bits: files are 0666 &^ Umask, directories
	// 0777 &^ Umask.
	Umask uint32
	// Commit says when writes are committed.
	Commit commitMode
	// SnapshotType is the type of the snapshots the mount commits.
	SnapshotType layout.SnapshotType
	// MetricsAddr, if set, is the host:port to serve metrics on; a
	// missing host is loopback (metricsAddr).
	MetricsAddr string
	// MetricsPublic is set when MetricsAddr is not a loopback address:
	// the mount says so in its log.
	MetricsPublic bool
	// IngestFrom are the URL prefixes ln -s may ingest from; none refuses
	// every ingestion (package ingest).
	IngestFrom []ingest.Prefix
	// IngestMaxSize bounds an ingested source (ingest.Policy.MaxSize).
	IngestMaxSize int64
	// SniffEncoding shows text bodies whose content-encoding was lost
	// decoded when their head is gzip/zstd magic (§15), at the price of a
	// blob read per file on the stat path (blobcache.Options).
	SniffEncoding bool
	// RequestTimeout bounds every attempt of every bucket request (and
	// each read of a body, and an upload's silence while its bytes are
	// being sent); one that passes it fails, and the FUSE call with EIO,
	// instead of hanging.
	RequestTimeout time.Duration
	// MaxRequests bounds the bucket requests in flight at once, across
	// everything the mount does (layout/schedblob).
	MaxRequests int
	// FastPath is how opens and reads of files reach the mount (pfs
	// Config.NoOpen, passthrough).
	FastPath fastPath
	// NoXattrs turns extended attributes off (--xattrs=off).
	NoXattrs bool
	// AllowNonEmpty mounts over a directory that has entries (hiding
	// them), or over another mount, instead of refusing.
	AllowNonEmpty bool
}

// fastPath is --fast-path: which of the kernel's fast paths for reads the
// mount uses. They exclude each other (a mount without OPEN has nothing
// to hand a backing file to), so the mount picks one.
type fastPath string

const (
	// fastAuto is no-open on a read-only mount, off otherwise: passthrough
	// makes a large file being read refuse opens for writing (ETXTBSY),
	// which no program expects of a read-write mount unless asked for.
	fastAuto fastPath = "auto"
	// fastNoOpen answers OPEN with ENOSYS: no OPEN and RELEASE round
	// trips, pages cached across opens (read-only mounts only).
	fastNoOpen fastPath = "no-open"
	// fastPassthrough hands the verified disk copy of a large blob to
	// the kernel, which then reads it without the daemon.
	fastPassthrough fastPath = "passthrough"
	// fastOff sends every open and read through the daemon.
	fastOff fastPath = "off"
)

// resolve returns the fast path a mount uses: auto made concrete.
func (p fastPath) resolve(readOnly bool) fastPath {
	if p != fastAuto {
		return p
	}
	if readOnly {
		return fastNoOpen
	}
	return fastOff
}

func mountCommand() *command {
	return &command{
		name:     "mount",
		synopsis: "pugfs mount [flags] BUCKET-URL MOUNTPOINT",
		short:    "mount a bucket as a directory tree (foreground; Ctrl-C unmounts)",
		long: `
Mounts the pugmark bucket at BUCKET-URL on MOUNTPOINT, an existing
directory, and serves it until interrupted (Ctrl-C, SIGTERM or SIGHUP unmounts).
Sessions appear under sessions/<id>/ as their latest state, with history
under sessions/<id>/.pugmark/; memories/, refs/, names/ and objects/ show
the rest of the bucket. Unless --read-only, files written into a session are
committed as snapshots when closed (--commit=close) or fsynced
(--commit=fsync). See tree.md for the whole tree.

For mount(8) and /etc/fstab (mount -t fuse.pugfs BUCKET-URL MOUNTPOINT
-o ro,allow_other), install pugfs in /usr/local/bin: mount.fuse3 runs it
as pugfs BUCKET-URL MOUNTPOINT -o OPTIONS (or link it as
/sbin/mount.fuse.pugfs); options are these flags without dashes, with _
for - (metadata_ttl=5s).`,
		examples: `  pugfs mount ./demo-bucket ./mnt
  pugfs mount --read-only --allow-other s3://my-bucket?region=eu-west-1 /mnt/pugmark
  pugfs mount --commit=fsync --snapshot-type=checkpoint /srv/bucket /mnt/agent
  pugfs mount --metadata-ttl=0 --cache-dir=/var/cache/pugfs --cache-size=2GiB gs://bucket /mnt/p`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			var cfg mountConfig
			var uid, gid int
			cacheSize := sizeFlag(defaultCacheSize)
			umask := octalFlag(0o022)
			commit := string(commitOnClose)
			snapType := string(layout.Provisional)
			fs.BoolVar(&cfg.ReadOnly, "read-only", false, "refuse every write (EROFS) (default: off)")
			fs.DurationVar(&cfg.MetadataTTL, "metadata-ttl", time.Second, "how long listings and latest versions are trusted, a `DURATION` such as 500ms or 2s (0: ask the bucket on every lookup)")
			fs.StringVar(&cfg.CacheDir, "cache-dir", "", "`DIR` keeping what never changes (verified blobs, decoded sizes, session summaries) across mounts, and staged writes; off keeps no cache on disk (default: $XDG_CACHE_HOME/pugfs/<bucket>, else ~/.cache/pugfs/<bucket>)")
			fs.Var(&cacheSize, "cache-size", "memory budget of the blob cache, a `SIZE` in bytes with an optional KiB, MiB, GiB suffix (or K, M, G); the disk cache under --cache-dir may use 4x (at least 10 GiB, but leaves 5% of its file system free), and the mount sets a soft Go memory limit of this plus 48 MiB unless GOMEMLIMIT is set")
			fs.BoolVar(&cfg.Debug, "debug", false, "log every FUSE request and bucket call to stderr (default: off)")
			fs.BoolVar(&cfg.AllowOther, "allow-other", false, "let other users access the mount (needs user_allow_other in /etc/fuse.conf) (default: off)")
			fs.IntVar(&uid, "uid", -1, "owner `UID` of every file (default: the user running pugfs)")
			fs.IntVar(&gid, "gid", -1, "group `GID` of every file (default: the user's group)")
			fs.Var(&umask, "umask", "permission bits to clear, in `OCTAL`")
			fs.StringVar(&commit, "commit", commit, "when writes are committed, `MODE`: close (each file on close) or fsync (all staged changes of a session on fsync, as one snapshot)")
			fs.StringVar(&snapType, "snapshot-type", snapType, "`TYPE` of the snapshots the mount commits: provisional, checkpoint or queueing")
			fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve metrics on `HOST:PORT`; :PORT is loopback only (default: off)")
			var ingestFrom []string
			fs.Func("ingest-from", "let ln -s ingest URLs under `PREFIX[,PREFIX...]` (s3://bucket/dir/, file:///srv/shared/); repeatable (default: none)", func(v string) error {
				ingestFrom = append(ingestFrom, v)
				return nil
			})
			var ingestMax sizeFlag
			fs.Var(&ingestMax, "ingest-max-size", "refuse to ingest a source larger than `SIZE` (ln -s holds its directory while it streams); 0 is no bound but the staging directory's free space (default: 0)")
			fs.BoolVar(&cfg.SniffEncoding, "sniff-encoding", false, "show a text file whose body is gzip or zstd without a declared content-encoding decoded (§15); costs a small read of every such file's head on stat (default: off)")
			fs.DurationVar(&cfg.RequestTimeout, "request-timeout", deadlineblob.DefaultTimeout, "give up on a bucket request (each attempt) that has made no progress for this `DURATION` (such as 10s or 1m): no answer, no chunk of a body read, no bytes of an upload sent; the call then fails with EIO")
			fs.IntVar(&cfg.MaxRequests, "max-requests", schedblob.DefaultMaxRequests, "at most `N` bucket requests in flight at once (fewer while the bucket answers 503 SlowDown); when all are taken, requests someone waits for go before speculative ones (read-ahead)")
			fastPathArg := string(fastAuto)
			fs.StringVar(&fastPathArg, "fast-path", fastPathArg, "`MODE` of the kernel fast path for reads: no-open (read-only mounts: no OPEN/RELEASE round trip per file, pages kept across opens), passthrough (files of 1 MiB and more read by the kernel from their verified disk copy; a file being read that way refuses opens for writing, ETXTBSY), off, or auto (no-open on --read-only mounts, else off)")
			fs.BoolVar(&cfg.AllowNonEmpty, "allow-non-empty", false, "mount on a directory that is not empty, hiding its entries until unmounted, or over another mount (default: off, refused)")
			xattrs := "on"
			fs.StringVar(&xattrs, "xattrs", xattrs, "`MODE`: on, or off: answer every extended attribute request with ENOSYS, so that ls -l costs no getxattr round trips; user.pugmark.* are then not shown or settable")
			return func(ctx context.Context, sio *stdio, args []string) error {
				if len(args) != 2 {
					return usagef("want BUCKET-URL and MOUNTPOINT, got %d argument(s)", len(args))
				}
				var err error
				if cfg.BucketURL, _, err = bucketURL(args[0]); err != nil {
					return err
				}
				if cfg.Mountpoint, err = checkMountpoint(args[1]); err != nil {
					return err
				}
				if cfg.MetadataTTL < 0 {
					return usagef("--metadata-ttl must not be negative")
				}
				if cfg.RequestTimeout <= 0 {
					return usagef("--request-timeout must be positive")
				}
				if cfg.MaxRequests <= 0 {
					return usagef("--max-requests must be positive")
				}
				cfg.CacheSize = int64(cacheSize)
				if cfg.CacheSize <= 0 {
					return usagef("--cache-size must be positive")
				}
				cfg.Umask = uint32(umask)
				if cfg.UID, err = idFlag("uid", uid, os.Getuid()); err != nil {
					return err
				}
				if cfg.GID, err = idFlag("gid", gid, os.Getgid()); err != nil {
					return err
				}
				switch commitMode(commit) {
				case commitOnClose, commitOnFsync:
					cfg.Commit = commitMode(commit)
				default:
					return usagef("--commit=%s: want close or fsync", commit)
				}
				t, err := layout.ParseSnapshotType(snapType)
				if err != nil {
					return usagef("--snapshot-type=%s: want provisional, checkpoint or queueing", snapType)
				}
				cfg.SnapshotType = t
				if cfg.MetricsAddr != "" {
					if cfg.MetricsAddr, cfg.MetricsPublic, err = metricsAddr(cfg.MetricsAddr); err != nil {
						return err
					}
				}
				if cfg.IngestFrom, err = ingest.ParsePrefixes(ingestFrom); err != nil {
					return usagef("--ingest-from: %v", err)
				}
				if cfg.IngestMaxSize = int64(ingestMax); cfg.IngestMaxSize < 0 {
					return usagef("--ingest-max-size must not be negative")
				}
				switch fastPath(fastPathArg) {
				case fastAuto, fastNoOpen, fastPassthrough, fastOff:
					cfg.FastPath = fastPath(fastPathArg).resolve(cfg.ReadOnly)
				default:
					return usagef("--fast-path=%s: want auto, no-open, passthrough or off", fastPathArg)
				}
				if cfg.FastPath == fastNoOpen && !cfg.ReadOnly {
					return usagef("--fast-path=no-open needs --read-only: a write needs the handle OPEN makes")
				}
				switch xattrs {
				case "on":
				case "off":
					cfg.NoXattrs = true
				default:
					return usagef("--xattrs=%s: want on or off", xattrs)
				}
				if !cfg.AllowNonEmpty {
					if err := checkEmpty(cfg.Mountpoint); err != nil {
						return err
					}
				}
				return runMount(ctx, cfg)
			}
		},
	}
}

// metricsAddr checks a --metrics-addr value and says where it listens.
// The metrics name the bucket and count what its users do, so they stay
// on the machine unless asked: a missing host (":9090") is 127.0.0.1,
// not every interface as net.Listen would take it. public reports an
// explicit host that is not loopback.
func metricsAddr(v string) (addr string, public bool, err error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		return "", false, usagef("--metrics-addr=%s: want HOST:PORT (e.g. localhost:9090)", v)
	}
	if host == "" {
		return net.JoinHostPort("127.0.0.1", port), false, nil
	}
	ip := net.ParseIP(host)
	loop := host == "localhost" || (ip != nil && ip.IsLoopback())
	return v, !loop, nil
}

// checkMountpoint returns the absolute path of an existing directory.
func checkMountpoint(arg string) (string, error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", fmt.Errorf("mountpoint %s: %w", arg, err)
	}
	st, err, answered := statMountpoint(abs, mountpointTimeout)
	if !answered {
		// A FUSE server that neither answers nor is gone: killed while
		// one of its threads was stuck in the kernel (a notification
		// waiting for a directory lock held by a request only it could
		// answer), or hung. The kernel keeps the connection until told.
		msg := fmt.Sprintf("mountpoint %s does not answer within %v: the filesystem mounted there is hung, or was killed while busy", abs, mountpointTimeout)
		if conn := fuseConnection(abs); conn != "" {
			ctl := "/sys/fs/fuse/connections/" + conn
			how := fmt.Sprintf("echo 1 > %s/abort; umount -l %s", ctl, abs)
			if _, err := os.Stat(ctl); errors.Is(err, os.ErrNotExist) {
				// fusectl is not mounted here (containers): say how.
				how = "mount -t fusectl none /sys/fs/fuse/connections; " + how
			}
			msg += "; if nothing serves it any more, end it with: " + how
		}
		return "", errors.New(msg)
	}
	if errors.Is(err, syscall.ENOTCONN) {
		// A pugfs that died left its mount behind: detach it so the
		// mountpoint can be used again.
		fmt.Fprintf(os.Stderr, "pugfs: %s is a stale mount (its filesystem died); unmounting it\n", abs)
		if uerr := detachMount(abs); uerr != nil {
			return "", fmt.Errorf("mountpoint %s is a stale mount and unmounting it failed: %v (try fusermount3 -u %s)", abs, uerr, abs)
		}
		st, err = os.Stat(abs)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("mountpoint %s does not exist; create it with mkdir -p %s", abs, abs)
	case err != nil:
		// ENOTCONN: a pugfs that died left its mount behind.
		return "", fmt.Errorf("mountpoint %s: %w (a stale mount? unmount it with fusermount3 -u %s)", abs, err, abs)
	case !st.IsDir():
		return "", fmt.Errorf("mountpoint %s is not a directory", abs)
	}
	return abs, nil
}

// checkEmpty refuses a mountpoint that has entries, as rclone mount does:
// the mount would hide them (a user who mounts on the wrong directory sees
// their files vanish), and a mountpoint where pugfs is already mounted
// would get a second mount stacked over the first, which then serves
// nobody until both are unmounted. statMountpoint has made sure whatever
// is mounted there answers.
func checkEmpty(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if len(names) == 0 {
		return nil
	}
	if fstype, _ := topMount(dir); fstype != "" {
		return fmt.Errorf("mountpoint %s is already a mount (%s); unmount it first (fusermount3 -u %s), or pass --allow-non-empty to mount over it", dir, fstype, dir)
	}
	return fmt.Errorf("mountpoint %s is not empty (it holds %q, ...): the mount would hide its entries; use an empty directory, or pass --allow-non-empty", dir, names[0])
}

// topMount describes the filesystem mounted on dir last (the one seen):
// its type and device ("0:53"), both "" when dir is not a mount point.
func topMount(dir string) (fstype, dev string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || mountinfo.Unescape(f[4]) != dir {
			continue
		}
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				fstype, dev = f[i+1], f[2]
			}
		}
	}
	return fstype, dev
}

// mountpointTimeout bounds how long checkMountpoint waits for the
// filesystem already mounted on the mountpoint, if any, to answer.
var mountpointTimeout = 5 * time.Second

// statMountpoint stats dir and asks its filesystem for statfs: the kernel
// answers stat from its attribute cache even when the FUSE server behind
// the directory is dead, but statfs always asks the server, so a dead one
// shows as ENOTCONN. answered is false when they did not return within
// timeout (the goroutine is then left behind, blocked).
func statMountpoint(dir string, timeout time.Duration) (st os.FileInfo, err error, answered bool) {
	type res struct {
		st  os.FileInfo
		err error
	}
	c := make(chan res, 1)
	go func() {
		st, err := os.Stat(dir)
		if err == nil {
			var sfs syscall.Statfs_t
			if serr := syscall.Statfs(dir, &sfs); errors.Is(serr, syscall.ENOTCONN) {
				err = serr
			}
		}
		c <- res{st, err}
	}()
	select {
	case r := <-c:
		return r.st, r.err, true
	case <-time.After(timeout):
		return nil, nil, false
	}
}

// fuseConnection returns the number of the FUSE connection mounted at dir
// (its device minor, as in /sys/fs/fuse/connections/), or "".
func fuseConnection(dir string) string {
	fstype, dev := topMount(dir)
	if !strings.HasPrefix(fstype, "fuse") {
		return ""
	}
	_, minor, _ := strings.Cut(dev, ":")
	return minor
}

func idFlag(name string, v, def int) (uint32, error) {
	switch {
	case v == -1:
		return uint32(def), nil
	case v < 0 || int64(v) > math.MaxUint32:
		return 0, usagef("--%s=%d: want a non-negative number", name, v)
	}
	return uint32(v), nil
}

// sizeFlag is a byte count written with an optional unit: 1024, 64k,
// 512MiB, 1.5G. K, M, G, T and their KiB... forms are powers of 1024; KB,
// MB, GB, TB are powers of 1000 (the usual convention of disk tools).
type sizeFlag int64

func (s *sizeFlag) String() string { return formatSize(int64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	i := strings.IndexFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult, ok := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[strings.ToLower(unit)]
	f, err := strconv.ParseFloat(num, 64)
	// float64(math.MaxInt64) is 2^63, which int64 cannot hold: >=.
	if !ok || err != nil || f < 0 || f*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (e.g. 512MiB, 2G, 1000000)", v)
	}
	return int64(f * mult), nil
}

func formatSize(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.s)
		}
	}
	return strconv.FormatInt(n, 10)
}

// octalFlag is a permission mask written in octal (022, 0o022).
type octalFlag uint32

func (o *octalFlag) String() string { return fmt.Sprintf("%03o", uint32(*o)) }

func (o *octalFlag) Set(v string) error {
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(v, "0o"), "0O"), 8, 32)
	if err != nil || n > 0o777 {
		return fmt.Errorf("umask %q: want octal permission bits, 000 to 777", v)
	}
	*o = octalFlag(n)
	return nil
}

// detachMount detaches the mount on dir (a lazy unmount): with umount2
// as root, else through fusermount3 -uz, which lets the user who mounted
// a FUSE file system unmount it. Not root, umount2 is EPERM, and a dead
// mount of a SIGKILLed pugfs exec stayed for good.
func detachMount(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || !errors.Is(err, syscall.EPERM) {
		return err
	}
	if out, ferr := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); ferr != nil {
		return fmt.Errorf("%w; fusermount3 -uz: %v: %s", err, ferr, strings.TrimSpace(string(out)))
	}
	return nil
}
