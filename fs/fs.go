package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/ingest"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/readahead"
	"github.com/pugmark/pugfs/staging"
	"golang.org/x/sys/unix"
)

// CommitMode says when staged writes become snapshots (package staging).
type CommitMode = staging.CommitMode

// The commit modes of package staging.
const (
	CommitOnClose = staging.CommitOnClose
	CommitOnFsync = staging.CommitOnFsync
)

// Config is everything a mount needs.
type Config struct {
	Store *layout.Store
	Cache *cache.Cache
	Blobs *blobcache.Cache
	// Views are the bucket-wide views over Store (Cache.NewViews); nil
	// makes the filesystem its own. pugfs exec passes the ones it read
	// the session's checkpoints through, so the mount reads them no more.
	Views *cache.Views
	// BucketURL is shown in .pugmark/bucket, with credentials removed.
	BucketURL string
	// Flags is shown in .pugmark/flags.
	Flags    string
	ReadOnly bool
	// Shared says other users may come in (--allow-other): what shows
	// the bytes of any file whatever its mode (objects/, a session's
	// .pugmark/snapshots/*.json and log.jsonl, with their inline data)
	// is then readable by the mount's owner alone (privateRead).
	Shared bool
	// NoOpen answers OPEN of regular files with ENOSYS, which makes the
	// kernel stop sending OPEN and RELEASE for the whole mount and keep
	// every file's page cache across opens (noopen.go). Read-only mounts
	// only: a write needs a handle.
	NoOpen bool
	// Passthrough hands the kernel the verified disk copy of large blobs
	// at open, when the kernel allows it (pinned.go); Mount checks that
	// once and logs what it found.
	Passthrough bool
	// NoXattrs answers every extended attribute request with ENOSYS, so
	// that the kernel stops asking (xattroff.go): ls -l then costs no
	// getxattr round trips, and user.pugmark.* are not shown or settable.
	NoXattrs     bool
	Commit       CommitMode
	SnapshotType layout.SnapshotType
	// Hold, with CommitOnFsync, makes fsync commit nothing: changes wait
	// for CommitSession (pugfs exec).
	Hold bool
	// Uploads bounds the blob uploads of one commit in flight at once
	// (staging.Config.Uploads).
	Uploads int
	// Sends shows .pugmark/send/<target-id>/ in every session: files
	// written there are cross-session writes (§12), which the caller
	// delivers after the commit (pugfs exec).
	Sends bool
	// GroupWindow is how long a commit waits for other closes in the
	// same session to share its snapshot (default 2ms).
	GroupWindow time.Duration
	// StagingDir holds spill files of writes in progress.
	StagingDir string
	// FailedDir keeps the bytes of writes whose commit failed for good
	// (default StagingDir/failed). It should outlive the mount: the
	// staging directory is removed at unmount and after a crash.
	FailedDir string
	// WriterFile keeps the ID of the session named as the writer of
	// this mount's memory records, for the next mount of the bucket
	// (staging.RecordOptions.WriterFile); empty makes one per mount.
	WriterFile string
	UID, GID   uint32
	Umask      uint32
	// Ingest decides which URLs ln -s may ingest, for whom; nil refuses
	// every one (the default: see package ingest).
	Ingest *ingest.Policy
	Logger *slog.Logger
	// Now is the clock for created-at (tests pin it).
	Now func() time.Time
	// ExtraStats, if set, adds lines to .pugmark/stats (the fault
	// injector's counters when the bucket is a fault+ URL).
	ExtraStats func() string
}

// FS is one mount's filesystem.
type FS struct {
	cfg   Config
	store *layout.Store
	cache *cache.Cache
	blobs *blobcache.Cache
	views *cache.Views
	log   *slog.Logger
	// logged keeps errnoOf from logging one failure again and again
	// (errno.go).
	logged repeats
	ttl    time.Duration
	// objAhead reads objects/ ahead of a program reading it in order.
	objAhead listAhead
	start    time.Time
	// w is the write engine: every change of a session goes through it.
	w *staging.Writer
	// recs writes memory records, refs and new sessions.
	recs *staging.Records
	// mem is this mount's memory-directory state.
	mem memWrites
	// notify sends kernel cache invalidations from a background queue.
	notify *notifier
	root   *gofs.Inode
	// inos keeps the inode numbers of live files across renames and
	// new descriptors of the same bytes.
	inos inoKeeper
	// refs are the directories and open new refs of refs/ (refs.go).
	refs refWrites
	// moved are the numbers of renamed memory records and refs (ino.go).
	moved movedInos
	// ra fetches ahead of traversals (readahead.go).
	ra *readahead.ReadAhead
	// kreq counts kernel requests (kernelstats.go).
	kreq kernelCounts
	// pages counts the bodies handed to the kernel's page cache
	// (pagestore.go).
	pages pageStores
	// passthrough is set once Mount found that the kernel takes backing
	// files (pinned.go).
	passthrough atomic.Bool
	// shadowed holds the memory namespaces a record of the same name
	// hides, each warned about once (memories.go).
	shadowed sync.Map
	// only, when set (WriteOnly, before Mount; never changed after), is
	// the one session whose live tree takes writes.
	only layout.SessionID
}

// WriteOnly makes session id the only place the mount takes writes: its
// live tree (and its .pugmark/send/). Every other session, memories/,
// refs/ and new sessions are read-only. pugfs exec mounts so: an
// invocation is one checkpoint of one session, and nothing else may land
// while the handler runs, nor at all if it fails (tree.md). Call it
// before Mount.
func (f *FS) WriteOnly(id layout.SessionID) { f.only = id }

// sharedWritable reports whether memories, refs and new sessions take
// writes.
func (f *FS) sharedWritable() bool { return !f.cfg.ReadOnly && f.only.IsZero() }

// sessionWritable reports whether session id's live tree takes writes.
func (f *FS) sessionWritable(id layout.SessionID) bool {
	return !f.cfg.ReadOnly && (f.only.IsZero() || id == f.only)
}

// New returns the filesystem for cfg.
func New(cfg Config) (*FS, error) {
	if cfg.Store == nil || cfg.Cache == nil || cfg.Blobs == nil {
		return nil, fmt.Errorf("fs: Store, Cache and Blobs are required")
	}
	if cfg.NoOpen && !cfg.ReadOnly {
		return nil, fmt.Errorf("fs: NoOpen needs a read-only mount (writes need a handle)")
	}
	if cfg.NoOpen && cfg.Passthrough {
		return nil, fmt.Errorf("fs: NoOpen and Passthrough exclude each other (no OPEN, no backing file)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SnapshotType == "" {
		cfg.SnapshotType = layout.Provisional
	}
	if cfg.GroupWindow <= 0 {
		cfg.GroupWindow = 2 * time.Millisecond
	}
	if cfg.StagingDir == "" {
		cfg.StagingDir = os.TempDir()
	}
	if cfg.FailedDir == "" {
		cfg.FailedDir = filepath.Join(cfg.StagingDir, "failed")
	}
	if err := os.MkdirAll(cfg.StagingDir, 0o700); err != nil {
		return nil, fmt.Errorf("fs: staging directory: %w", err)
	}
	f := &FS{cfg: cfg, store: cfg.Store, cache: cfg.Cache, blobs: cfg.Blobs, log: cfg.Logger,
		ttl: cfg.Cache.TTL(), start: cfg.Now()}
	f.views = cfg.Views
	if f.views == nil {
		f.views = cfg.Cache.NewViews(cfg.Store)
	}
	f.mem.dirs = map[string]bool{}
	f.mem.removed = map[string]map[string]uint32{}
	f.mem.pending = map[string]*memFile{}
	f.recs = staging.NewRecords(cfg.Store, staging.RecordCaches{InvalidateMemories: f.views.InvalidateMemories,
		InvalidateRefs: f.views.InvalidateRefs, SessionCreated: cfg.Cache.SessionCreated, InvalidateSession: cfg.Cache.Invalidate},
		staging.RecordOptions{Now: cfg.Now, Log: cfg.Logger, FailedDir: cfg.FailedDir, WriterFile: cfg.WriterFile})
	f.w = staging.New(staging.Config{Commit: cfg.Commit, SnapshotType: cfg.SnapshotType, Hold: cfg.Hold, Uploads: cfg.Uploads, GroupWindow: cfg.GroupWindow,
		StagingDir: cfg.StagingDir, FailedDir: cfg.FailedDir, Now: cfg.Now, Log: cfg.Logger},
		cfg.Store, cfg.Cache, cfg.Blobs, f.notifyChanged)
	f.notify = newNotifier(f)
	f.ra = readahead.New(cfg.Cache, cfg.Blobs, f.ttl, readahead.Options{Sink: f.storePages, Inos: raInos{f}, Warm: f.warmAhead})
	return f, nil
}

// notifyChanged tells the kernel, from a background goroutine (calling
// it inside a request can deadlock, engineering.md), that names changed.
func (f *FS) notifyChanged(id layout.SessionID, ds []layout.Descriptor) {
	f.notify.enqueue(id, ds)
}

// Root returns the root node.
func (f *FS) Root() gofs.InodeEmbedder { return &rootNode{dirNode: dirNode{f: f, ls: &rootDir{f: f}}} }

// rootNode is the mount root; it records its inode for notifications.
type rootNode struct{ dirNode }

var _ = (gofs.NodeOnAdder)((*rootNode)(nil))

// OnAdd runs once at mount time.
func (r *rootNode) OnAdd(ctx context.Context) { r.f.root = &r.Inode }

// Close stops the background work of the filesystem (the checks of ref
// writes whose outcome was unknown among it) and keeps what was never
// committed (staging.Writer.Shutdown). Call it after the unmount.
func (f *FS) Close() {
	f.ra.Close()
	f.w.Shutdown()
	f.recs.Close()
	f.notify.close()
}

// CommitSession commits everything staged in session id as one snapshot
// written on base, even when nothing is staged (staging.Writer.
// CommitSession): the end of a handler invocation. On error nothing
// landed and the changes stay staged; Close keeps them in the failed
// directory.
func (f *FS) CommitSession(ctx context.Context, id layout.SessionID, base layout.Position, late staging.LateInput) (layout.CommitResult, error) {
	return f.w.CommitSession(ctx, id, base, late)
}

// KeepSession keeps what is staged in session id in the failed directory
// now and reports how many files were kept and how many could not be
// (staging.Writer.KeepSession).
func (f *FS) KeepSession(id layout.SessionID) (kept, lost int) { return f.w.KeepSession(id) }

// KeepOnCrash makes a crash from now on keep what session id has staged
// (staging.Writer.KeepOnCrash): pugfs exec's output once its command
// exited 0.
func (f *FS) KeepOnCrash(id layout.SessionID) { f.w.KeepOnCrash(id) }

// DiscardSession drops everything staged in session id without keeping
// it (a handler that failed: its changes are not output).
func (f *FS) DiscardSession(id layout.SessionID) { f.w.Discard(id) }

// owner sets uid/gid and applies the umask to the permission bits.
func (f *FS) owner(a *fuse.Attr) {
	a.Uid, a.Gid = f.cfg.UID, f.cfg.GID
	a.Mode &^= f.cfg.Umask & 0o777
}

// MountOptions are the kernel-facing options of Mount.
type MountOptions struct {
	AllowOther bool
	Debug      bool
	// FsName is shown in /proc/mounts (the bucket URL, redacted).
	FsName string
	// afterMount, if set (by tests), runs once the mount exists and
	// before it serves anything.
	afterMount func(dir string)
}

// Mount mounts f at dir with DirectMount (root) falling back to
// fusermount3, and returns the running server.
func Mount(dir string, f *FS, mo MountOptions) (*fuse.Server, error) {
	entry := f.ttl
	neg := f.ttl
	opts := &gofs.Options{
		EntryTimeout:    &entry,
		AttrTimeout:     &entry,
		NegativeTimeout: &neg,
		UID:             f.cfg.UID,
		GID:             f.cfg.GID,
		// A file's posix-mode may leave no permission bits (0000, or 0200
		// on a read-only mount); go-fuse would otherwise show those as
		// 0644. Every node sets its permissions itself.
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			AllowOther:  mo.AllowOther,
			Debug:       mo.Debug,
			FsName:      mo.FsName,
			Name:        "pugfs",
			DirectMount: true,
			// "ro" among the options reaches a direct mount(2) only as a
			// superblock option; MS_RDONLY makes the mount itself
			// read-only, as mount(8) and fusermount3 do, so it shows in
			// /proc/self/mountinfo and the kernel refuses every write.
			DirectMountFlags: directMountFlags(f.cfg.ReadOnly),
			MaxWrite:         1 << 20,
			MaxReadAhead:     maxRead,
			// The kernel otherwise asks for security.capability before
			// every write(2) (file_remove_privs: a GETXATTR round trip a
			// MiB, which the kernel never remembers). With KILLPRIV_V2 the
			// server clears privileges itself, so the kernel marks inodes
			// S_NOSEC and stops asking; pugfs shows no setuid, setgid or
			// capability to clear.
			//
			// With ATOMIC_O_TRUNC, open(O_TRUNC) is one OPEN with O_TRUNC
			// instead of an OPEN and a SETATTR(size 0) without a handle,
			// which looked like truncate(2) of the path and was committed
			// at once: the file showed empty, to every mount, until the
			// writer closed it. Now the cut is staged with the open and
			// committed by its close, as any other write.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_ATOMIC_O_TRUNC,
			// Kernel-side permission checks: with allow_other, the mode
			// bits decide who may enter (issue: access).
			Options: mountFlags(f.cfg.ReadOnly, mo.AllowOther),
		},
	}
	if mo.FsName == "" {
		opts.FsName = "pugfs"
	}
	opts.Logger = nil
	// gofs.Mount, with the node tree behind uninterrupted and
	// uncachedTimeouts.
	var raw fuse.RawFileSystem = uninterrupted{uncachedTimeouts{gofs.NewNodeFS(f.Root(), opts)}}
	raw = unsupportedXattrs{raw}
	if f.cfg.NoOpen {
		raw = noOpen{raw}
	}
	if f.cfg.NoXattrs {
		raw = noXattrs{raw}
	}
	raw = counted{raw, &f.kreq}
	srv, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	// The mount exists once NewServer returns. Its device is read now,
	// before anything is served: a script that waits for the mountpoint
	// to appear may unmount it before WaitMount returns, and dir is then
	// the directory under it (the watch for lingering copies took that
	// directory's device and never ended the connection).
	dev := mountDev(dir)
	if mo.afterMount != nil {
		mo.afterMount(dir)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		// On Linux WaitMount only runs go-fuse's poll hack, an open of
		// a file in the mount, which fails once the mount is gone: a
		// mount unmounted that early is served, as after any unmount,
		// until its connection ends. Failing lost the connection of a
		// process holding a copy of the mount (TestUnmountWithNamespaceCopy
		// under load).
		if dev == "" || mountedHere(dev) {
			srv.Unmount()
			return nil, fmt.Errorf("mount %s: %w", dir, err)
		}
		f.log.Info("unmounted before it was ready", "mountpoint", dir)
	}
	if dev == "" {
		f.log.Warn("cannot find the new mount in /proc/self/mountinfo: a copy of it in another mount namespace keeps it alive after an unmount, and the kernel's read-ahead stays at its default", "mountpoint", dir)
	} else {
		go f.endLingering(srv, dev)
		if err := raiseReadAhead(dev, mountReadAheadKB); err != nil {
			// Not root: reads still work, in smaller requests.
			f.log.Debug("kernel read-ahead left at its default", "err", err)
		}
	}
	if err := closeFuseOnExec(); err != nil {
		f.log.Warn("cannot keep the FUSE device from processes this one starts", "err", err)
	}
	if f.cfg.Passthrough {
		if err := probePassthrough(srv, f.cfg.StagingDir); err != nil {
			f.log.Warn("FUSE passthrough unavailable (it needs kernel 6.9 or later and CAP_SYS_ADMIN); large files are read through pugfs", "err", err)
		} else {
			f.passthrough.Store(true)
			f.log.Debug("FUSE passthrough on: large blobs are read by the kernel from their verified disk copy")
		}
	}
	return srv, nil
}

// closeFuseOnExec marks every descriptor of /dev/fuse close-on-exec.
// go-fuse opens the device without O_CLOEXEC, so every program this
// process starts (a pugfs exec handler, and whatever it leaves running)
// held the connection open: a child outliving the mount kept it alive,
// and its next access to the mount waited forever.
func closeFuseOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || t != "/dev/fuse" {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			errs = append(errs, fmt.Errorf("fd %d: %w", fd, err))
		}
	}
	return errors.Join(errs...)
}

func directMountFlags(ro bool) uintptr {
	fl := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV) // go-fuse's default
	if ro {
		fl |= syscall.MS_RDONLY
	}
	return fl
}

func mountFlags(ro, allowOther bool) []string {
	o := []string{fmt.Sprintf("max_read=%d", maxRead)}
	if ro {
		o = append(o, "ro")
	}
	if allowOther {
		o = append(o, "default_permissions")
	}
	return o
}

// rootDir is the mount root: the fixed top-level directories.
type rootDir struct{ f *FS }

func (r *rootDir) entries() []child {
	f := r.f
	return []child{
		{name: "sessions", mode: syscall.S_IFDIR, ino: inoOf("sessions"), ttl: f.ttl, node: func() gofsNode {
			if !f.sharedWritable() {
				return &dirNode{f: f, ls: &sessionsDir{f: f}}
			}
			return &sessionsNode{dirNode{f: f, ls: &sessionsDir{f: f}}}
		}},
		f.dir("by-hour", inoOf("by-hour"), f.ttl, &byHourDir{f: f}),
		f.dir("names", inoOf("names"), f.ttl, &namesDir{f: f}),
		{name: "memories", mode: syscall.S_IFDIR, ino: inoOf("memories"), ttl: f.ttl, node: func() gofsNode {
			return f.memDirChild("memories", "")
		}},
		{name: "refs", mode: syscall.S_IFDIR, ino: inoOf("refs"), ttl: f.ttl, node: func() gofsNode {
			rd := &refsDir{f: f}
			if !f.sharedWritable() {
				return &dirNode{f: f, ls: rd}
			}
			return &refsNode{metaDir: metaDir{dirNode: dirNode{f: f, ls: rd}}}
		}},
		f.dir("objects", inoOf("objects"), f.ttl, &objectsDir{f: f}),
	}
}

func (r *rootDir) list(ctx context.Context) ([]child, error) { return r.entries(), nil }

func (r *rootDir) find(ctx context.Context, name string) (child, error) {
	if name == ".pugmark" {
		return r.f.dir(name, inoOf("root-meta"), r.f.ttl, &rootMetaDir{f: r.f}), nil
	}
	for _, c := range r.entries() {
		if c.name == name {
			return c, nil
		}
	}
	return child{}, syscall.ENOENT
}

func (r *rootDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	setTimes(out, r.f.start)
	return nil
}

// maxRead caps the kernel's READ requests below the 1 MiB of MaxWrite.
// A READ that a verified disk copy answers is spliced from the file into
// /dev/fuse through a pipe, which must hold the reply and a page more;
// pipes grow to /proc/sys/fs/pipe-max-size at most, 1 MiB by default, so
// a 1 MiB READ could never be spliced: go-fuse copied it instead and
// logged a line for every MiB read. Writes stay 1 MiB requests. (go-fuse
// passes max_read=MaxWrite first; on a direct mount the options given
// here come after it and win. The fusermount path puts its own last, but
// an unprivileged mount also keeps the kernel's 128 KiB read-ahead.)
// Serving a verified 256 MiB copy after the page cache was dropped:
// 0.08-0.12 s with 1 MiB READs copied, 0.06-0.08 s spliced.
const maxRead = 1<<20 - 8<<10
