package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/cache"
	pfs "github.com/pugmark/pugfs/fs"
	"github.com/pugmark/pugfs/ingest"
	"github.com/pugmark/pugfs/internal/redact"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/blobwrap"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/layout/logblob"
	"github.com/pugmark/pugfs/layout/schedblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
	"golang.org/x/sys/unix"
)

// runMount mounts cfg.BucketURL on cfg.Mountpoint and serves it until ctx
// is cancelled (SIGINT/SIGTERM), then unmounts.
func runMount(ctx context.Context, cfg mountConfig) (err error) {
	defer func() { err = redact.Err(err, cfg.BucketURL) }()
	// main leaves the stop signals to the mount: once it stops waiting
	// (below), or fails to start, the next one kills. They were ignored,
	// every one, until a SIGKILL (review 42).
	defer signal.Reset(stopSignals...)
	level := slog.LevelInfo
	if cfg.Debug {
		level = slog.LevelDebug
	}
	env, err := prepareMount(ctx, cfg, mountLogger(cfg, level), false)
	if err != nil {
		return err
	}
	defer env.close()
	if err := env.probed(); err != nil {
		return err
	}
	log, f := env.log, env.fs
	srv, err := pfs.Mount(cfg.Mountpoint, f, pfs.MountOptions{AllowOther: cfg.AllowOther, Debug: cfg.Debug, FsName: env.shownURL})
	if err != nil {
		return mountError(err)
	}
	log.Info("mounted", "bucket", env.shownURL, "mountpoint", cfg.Mountpoint, "read-only", cfg.ReadOnly)
	if len(cfg.IngestFrom) > 0 {
		shown := make([]string, len(cfg.IngestFrom))
		for i, p := range cfg.IngestFrom {
			shown[i] = p.String()
		}
		log.Info("ln -s may ingest from", "prefixes", strings.Join(shown, ","))
	}
	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			srv.Unmount()
			return fmt.Errorf("metrics address %s: %v", cfg.MetricsAddr, err)
		}
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			f.WriteMetrics(w)
		}), ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
		log.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics")
		if cfg.MetricsPublic {
			log.Warn("metrics are served beyond this machine: anyone who can reach the address sees the bucket's name and the mount's activity", "addr", ln.Addr().String())
		}
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		return nil // unmounted from outside (fusermount3 -u, umount)
	case <-ctx.Done():
	}
	// A second stop signal (a supervisor's retry, Ctrl-C pressed again)
	// stops the wait at once, and the files not committed are kept as
	// after the wait; a third one kills. Killed by the second, pugfs lost
	// the files whose closes were committing, kept nowhere, and left the
	// mountpoint dead (audit 37). Taken from before the log line says
	// the mount is stopping.
	second := make(chan os.Signal, 1)
	signal.Notify(second, stopSignals...)
	log.Info("unmounting", "mountpoint", cfg.Mountpoint)
	unmounted := make(chan error, 1)
	go func() { unmounted <- unmountServer(srv, cfg.Mountpoint, log) }()
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	// What is left once this returns (the last commits, within
	// --request-timeout and its retries) is pugfs's to finish; a stop
	// signal then kills, before the deferred cleanups run.
	defer signal.Reset(stopSignals...)
	select {
	case <-done:
		return <-unmounted
	case sig := <-second:
		// Detached now: the unmount may still be retrying on a busy
		// mountpoint, and exiting with it mounted left it dead
		// (ENOTCONN) for every program until someone unmounted it
		// (review 42).
		if err := syscall.Unmount(cfg.Mountpoint, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			log.Warn("detaching the mountpoint failed", "mountpoint", cfg.Mountpoint, "err", err)
		}
		log.Warn("a second stop signal: stopping now; what is open for writing or being committed is kept in failed/, and a third signal kills pugfs",
			"signal", sig.String(), "mountpoint", cfg.Mountpoint)
		return nil
	case <-grace.C:
		// Detached, and still in use (a writer keeps its descriptor):
		// waiting for it kept pugfs running for as long, its staged
		// bytes neither committed nor kept, until the supervisor's
		// SIGKILL lost them (review 5). Stopping now keeps them in
		// failed/ (FS.Close); the descriptors get ENOTCONN.
		log.Warn("the mount is still in use after the stop signal; stopping: what is open for writing is kept in failed/, and the open descriptors fail from now on",
			"mountpoint", cfg.Mountpoint, "after", stopGrace)
		return nil
	}
}

// stopGrace is how long a stopped mount waits for its last users (files
// still open on it) once it is unmounted, or detached if busy.
const stopGrace = 10 * time.Second

// unmountServer unmounts srv from dir, retrying while the mountpoint is
// busy and detaching it (MNT_DETACH) if it stays busy.
func unmountServer(srv *fuse.Server, dir string, log *slog.Logger) error {
	for i := 0; ; i++ {
		err := srv.Unmount()
		if err == nil {
			return nil
		}
		if fstype, _ := topMount(dir); !strings.HasPrefix(fstype, "fuse") {
			// Detached already (umount -l; a handler that unmounted
			// its own mount): the connection ends once nothing uses
			// it (the FS ends it then, endLingering), and what it
			// served until then is all there is. Failing here lost a
			// handler's output (the handler audit).
			log.Warn("the mount was detached by someone else; waiting for its last user", "mountpoint", dir)
			srv.Wait()
			return nil
		}
		if i == 0 {
			log.Warn("mountpoint busy; retrying, and detaching it if it stays busy", "err", err)
		}
		if i >= 20 {
			if derr := syscall.Unmount(dir, syscall.MNT_DETACH); derr != nil {
				return fmt.Errorf("unmount %s: %v", dir, err)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountLogger is the mount's log: stderr from level on, with every
// credential of the bucket URL scrubbed.
func mountLogger(cfg mountConfig, level slog.Level) *slog.Logger {
	// Nothing the mount prints or shows carries a credential: errors of
	// drivers and backends can hold the whole bucket URL. Their texts lose
	// the gocloud prefixes each layer of the bucket's stack added.
	secrets := redact.Secrets(cfg.BucketURL)
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Value.Kind() {
			case slog.KindString:
				a.Value = slog.StringValue(redact.Scrub(a.Value.String(), secrets))
			case slog.KindAny:
				if e, ok := a.Value.Any().(error); ok {
					a.Value = slog.StringValue(redact.Scrub(blobwrap.Text(e.Error()), secrets))
				}
			}
			return a
		}}))
}

// mountEnv is everything a mount serves from, made by prepareMount: the
// bucket behind its wrappers, the store, the caches and the filesystem.
type mountEnv struct {
	log   *slog.Logger
	store *layout.Store
	cache *cache.Cache
	views *cache.Views
	fs    *pfs.FS
	// probed waits for the check that the bucket answers (probe), which
	// runs while the rest is made: call it before anything is served.
	probed func() error
	// shownURL is the bucket URL without credentials.
	shownURL string
	// stateDir holds staging/ and failed/.
	stateDir, failedDir string
	// noBucket is set when the probe found that the bucket does not
	// exist.
	noBucket atomic.Bool
	closers  []func()
}

// close releases what prepareMount made, last made first; the
// filesystem's Close keeps what was never committed in failed/.
func (e *mountEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// prepareMount opens the bucket of cfg and builds the filesystem a mount
// serves (without mounting it). hold makes fsync commit nothing: pugfs
// exec commits with FS.CommitSession) and shows .pugmark/send/, whose
// cross-session writes exec delivers.
func prepareMount(ctx context.Context, cfg mountConfig, log *slog.Logger, hold bool) (_ *mountEnv, err error) {
	env := &mountEnv{log: log}
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	secrets := redact.Secrets(cfg.BucketURL)
	// The probe below says whether a cloud bucket exists: its LIST is
	// counted with the mount's requests, and made beside the mount's
	// first work rather than before it (a round trip at every start).
	b, u, err := openBucketURL(ctx, cfg.BucketURL, false)
	if err != nil {
		return nil, err
	}
	// The first of the closers, so run last: what this start made for a
	// bucket that does not exist goes once everything in it is closed.
	made := madeFor(cfg, u)
	env.closers = append(env.closers, func() {
		if env.noBucket.Load() {
			for _, d := range made {
				os.RemoveAll(d)
			}
		}
	})
	env.shownURL = redact.URL(u)
	sched := schedblob.New(cfg.MaxRequests)
	var reqLog *slog.Logger
	if cfg.Debug {
		reqLog = log
	}
	b = blob.NewBucket(decorators(blobwrap.Portable(b), cfg.RequestTimeout, sched, reqLog))
	env.closers = append(env.closers, func() { b.Close() })
	sopts := layout.Options{MaxDecoded: mountMaxDecoded}
	if !onLocalDisk(cfg.BucketURL) {
		sopts.PutBlindBelow = remotePutBlindBelow
	}
	keeper := &keeperSlot{ns: keptNamespace(u)}
	if keepsObjects(cfg) {
		sopts.Keeper = keeper
	}
	store := layout.New(b, &sopts)
	env.store = store
	// The probe's round trip overlaps the local work below (and pugfs
	// exec's first requests); a failed probe is the error the caller
	// sees, whatever else failed after it.
	probeErr := make(chan error, 1)
	go func() { probeErr <- probe(ctx, store, log) }()
	env.probed = sync.OnceValue(func() error {
		err := <-probeErr
		if create := missingBucket(u); err != nil && create != "" && gcerrors.Code(err) == gcerrors.NotFound {
			env.noBucket.Store(true)
			return errors.New(create)
		}
		if err != nil {
			return fmt.Errorf("bucket %s is not usable: %v%s", redact.URL(u), err, probeHint(err))
		}
		return nil
	})
	defer func() {
		if err != nil {
			if perr := env.probed(); perr != nil {
				err = perr
			}
		}
	}()
	stateDir, err := stateDirFor(cfg, u)
	if err == nil {
		err = writableDir(stateDir)
	}
	if err != nil {
		// An unwritable cache directory (a read-only file system, a
		// full disk) must not stop a mount that mostly reads: stage in
		// the temporary directory instead, and say so.
		fb, ferr := tempStateDir(u)
		if ferr != nil {
			// Taken by another user (or not a directory): a fresh one
			// of our own, which the next mount does not find again.
			log.Warn("the temporary state directory is not private; using a new one", "dir", fb, "err", ferr)
			fb, ferr = os.MkdirTemp(os.TempDir(), fmt.Sprintf("pugfs-%d-", os.Getuid()))
		}
		log.Warn("cannot write the cache directory; staging writes in the temporary directory instead", "dir", stateDir, "err", err, "instead", fb)
		if ferr == nil {
			ferr = writableDir(fb)
		}
		if ferr != nil {
			return nil, fmt.Errorf("no writable directory for staged writes: %s: %v; %s: %v", stateDir, err, fb, ferr)
		}
		stateDir = fb
	}
	// Staged writes and the failed directory are the bucket's own: a
	// --cache-dir shared by mounts of several buckets showed one
	// bucket's failed commits in every other's .pugmark/failed/, and
	// its sweep moved a dead mount's kept bytes to whichever bucket
	// mounted next (audit 12).
	own := bucketStateDir(cfg, stateDir, u)
	failed := filepath.Join(own, "failed")
	env.stateDir, env.failedDir = stateDir, failed
	if old, ok := legacyStateDir(cfg, stateDir, u); ok {
		// What an older pugfs kept of this bucket under the URL as
		// given: its dead mounts' staging, and its failed commits,
		// which may be the only copy of a write (review 33).
		sweepStaging(old, failed, log)
		if n, _ := keepFailed(filepath.Join(old, "failed"), failed, log); n > 0 {
			log.Warn("moved the data of failed commits an older pugfs kept for this bucket under another directory name into its failed directory", "from", filepath.Join(old, "failed"), "files", n, "failed", failed)
		}
	}
	cleanStaging(own, failed, log)
	if own != stateDir {
		sweepOthers(stateDir, own, log)
		reportLegacyFailed(filepath.Join(stateDir, "failed"), log)
	}
	staging, release, err := ownDir(filepath.Join(own, "staging"))
	if err != nil {
		return nil, fmt.Errorf("staging directory in %s: %w", own, err)
	}
	env.closers = append(env.closers, func() { os.RemoveAll(staging); release() })
	if os.Getenv("GOMEMLIMIT") == "" {
		// The blob cache holds up to --cache-size of chunks; without a
		// limit Go's collector lets the heap grow to about twice that
		// before it runs. A soft limit a little above the budget keeps
		// the process near what the user asked for.
		debug.SetMemoryLimit(cfg.CacheSize + 48<<20)
	}
	copts := cache.Options{MetadataTTL: cfg.MetadataTTL, Logger: log}
	// The blob cache may have as many reads in flight as the mount's
	// scheduler lets through (--max-requests), not only its own default
	// of 32: a traversal's prefetches of small bodies get most of them
	// (blobcache.PrefetchLimits), and at 20 ms a request 16 bodies at a
	// time was what held cat sessions/*/b.txt back. Never fewer than that
	// default, which leaves the chunk read-ahead's reads room beside a
	// program's own.
	inFlight := max(cfg.MaxRequests, 4*blobcache.DefaultParallel)
	bopts := blobcache.Options{MemBytes: cfg.CacheSize, MaxInFlight: inFlight, SpillDir: staging, SniffEncoding: cfg.SniffEncoding, Logger: log}
	if onLocalDisk(cfg.BucketURL) {
		// A verify pass keeps PassParts ranged reads in flight to hide a
		// remote bucket's latency. A local disk has none to hide, and a
		// window past the CPU's last-level cache makes the hash read
		// every byte back from memory: a cold pass over a 512 MiB blob
		// took 0.54-0.59 s with 64 MiB in flight and 0.37-0.47 s with
		// 16 MiB, where SHA-256 alone takes 0.31 s.
		bopts.PassParts = localPassParts
	}
	if cfg.CacheDir != cacheDirOff {
		// On by default: what never changes is kept for the next mount
		// of the bucket, in the directory the staged writes use (the
		// per-bucket one under the user's cache directory unless
		// --cache-dir says otherwise). Several mounts may share it.
		if os.MkdirAll(own, 0o700) == nil {
			copts.IndexPath = filepath.Join(own, "index.json")
			copts.SummaryPath = filepath.Join(own, "summaries")
		}
		bopts.DiskDir = filepath.Join(stateDir, "blobs")
		// At least 10 GiB: the disk cache keeps a blob of up to half its
		// bound, and a blob it keeps is never fetched twice however small
		// the memory budget (blobcache/files.go).
		bopts.DiskBytes = max(cfg.CacheSize*4, blobcache.DefaultDiskBytes)
		if onLocalDisk(cfg.BucketURL) {
			// The bucket's own files are as near as a copy would be: a
			// small body is not copied (a create and a rename per blob,
			// a fifth of the CPU of a cold grep -r). Passthrough still
			// needs the verified copy of a large one.
			bopts.DiskMinBytes = pfs.PassthroughMin
		}
	}
	c, err := cache.New(store, copts)
	if err != nil {
		return nil, err
	}
	env.closers = append(env.closers, func() { c.Close() })
	env.cache, env.views = c, c.NewViews(store)
	bc, err := blobcache.New(store, bopts)
	if err != nil {
		return nil, err
	}
	env.closers = append(env.closers, func() { bc.Close() })
	keeper.bc.Store(bc)
	mode := pfs.CommitOnClose
	if cfg.Commit == commitOnFsync {
		mode = pfs.CommitOnFsync
	}
	f, err := pfs.New(pfs.Config{
		Store: store, Cache: c, Blobs: bc, Views: env.views,
		BucketURL: redact.URL(u), Flags: shownFlags(os.Args[1:], secrets),
		ReadOnly: cfg.ReadOnly, Shared: cfg.AllowOther, NoOpen: cfg.FastPath == fastNoOpen, Passthrough: cfg.FastPath == fastPassthrough, NoXattrs: cfg.NoXattrs, Commit: mode, SnapshotType: cfg.SnapshotType, Hold: hold, Sends: hold, Uploads: uploadsFor(cfg.MaxRequests),
		StagingDir: staging, FailedDir: failed, WriterFile: filepath.Join(own, "memory-writer"), UID: cfg.UID, GID: cfg.GID, Umask: cfg.Umask, Logger: log,
		Ingest:     &ingest.Policy{Prefixes: cfg.IngestFrom, MaxSize: cfg.IngestMaxSize},
		ExtraStats: extraStats(sched, faultStats(b)),
	})
	if err != nil {
		return nil, err
	}
	env.fs = f
	env.closers = append(env.closers, f.Close)
	return env, nil
}

// uploadsFor is how many blob uploads of one commit go at once: three
// quarters of --max-requests, as far as the process's descriptors allow
// (an upload holds a few: the staged file, a connection or the bucket's
// file; 64 are left for the rest). 48 at once made a pugfs exec under
// `ulimit -n 150` fail with EMFILE. The bound is a commit's: commits of
// several sessions at once each have it (pugfs exec commits one).
func uploadsFor(maxRequests int) int {
	n := max(1, maxRequests*3/4)
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 1<<20 {
		n = min(n, max(1, (int(lim.Cur)-64)/3))
	}
	return n
}

// keepsObjects reports whether the mount keeps the snapshots and
// manifests it reads in the cache directory (layout.Keeper), for the
// next mount: on a remote bucket with a cache directory. A local bucket's
// files are as near as a copy, and a mem:// bucket starts empty every
// time while the cache directory of its URL would outlive it.
func keepsObjects(cfg mountConfig) bool {
	return cfg.CacheDir != cacheDirOff && !onLocalDisk(cfg.BucketURL) &&
		!strings.HasPrefix(cfg.BucketURL, "mem:") && !strings.Contains(cfg.BucketURL, "+mem:")
}

// keeperSlot is the store's layout.Keeper: the blob cache's disk tier,
// which is made after the store it reads through (until then, and
// without a disk tier, nothing is kept).
type keeperSlot struct {
	bc atomic.Pointer[blobcache.Cache]
	// ns prefixes every key (keptNamespace): one cache directory may
	// serve several buckets, and a key names an object in one bucket.
	ns string
}

// keptNamespace is the prefix of the keys a mount of bucket URL u keeps
// in the cache directory. Blobs are named by their digest and checked
// against it, so mounts of any bucket share them; a snapshot's key and
// stamp (size, time to the second) are not enough: two buckets holding
// the same sessions (one a copy of the other) with commits of one size
// in one second showed one bucket's file on a mount of the other when
// they shared --cache-dir (audit 3).
func keptNamespace(u string) string {
	return "bucket " + bucketID(u) + " "
}

// defaultStateDir is the state directory of bucket URL u without a
// --cache-dir: a directory of its own in the user's cache directory.
func defaultStateDir(u string) string {
	return defaultStateDirNamed(bucketID(u))
}

// defaultStateDirNamed is defaultStateDir of the bucket named id.
func defaultStateDirNamed(id string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "pugfs", id)
}

// madeFor lists the directories a mount of bucket URL u would make for
// it alone that do not exist yet: removed again if the bucket turns out
// not to exist (a typo in a URL left a directory in ~/.cache: review 24).
func madeFor(cfg mountConfig, u string) []string {
	dir := defaultStateDir(u)
	if cfg.CacheDir != "" && cfg.CacheDir != cacheDirOff {
		dir = bucketStateDir(cfg, cfg.CacheDir, u)
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return []string{dir}
	}
	return nil
}

// bucketStateDir is where the cache directory keeps what belongs to one
// bucket (the session index, the summaries): the state directory itself
// when it is the bucket URL's own (the default), else a directory of the
// URL's own under it, as --cache-dir may be shared by several buckets.
func bucketStateDir(cfg mountConfig, stateDir, u string) string {
	if cfg.CacheDir == "" || cfg.CacheDir == cacheDirOff {
		return stateDir
	}
	return filepath.Join(stateDir, "buckets", bucketID(u))
}

// legacyStateDir is where a pugfs that named a bucket's directories by
// its URL as given (legacyBucketID) kept what a mount of u left, when
// that is not where it is kept now: a crash's leftovers there are swept
// into the bucket's failed directory of today.
func legacyStateDir(cfg mountConfig, stateDir, u string) (string, bool) {
	old := legacyBucketID(u)
	if old == bucketID(u) {
		return "", false
	}
	if cfg.CacheDir == "" || cfg.CacheDir == cacheDirOff {
		if stateDir != defaultStateDir(u) {
			return "", false // the temporary directory's fallback
		}
		return defaultStateDirNamed(old), true
	}
	return filepath.Join(stateDir, "buckets", old), true
}

// Kept implements layout.Keeper.
func (k *keeperSlot) Kept(key string, st layout.Stamp) ([]byte, bool) {
	if bc := k.bc.Load(); bc != nil {
		return bc.Kept(k.ns+key, st)
	}
	return nil, false
}

// Has implements layout.Keeper.
func (k *keeperSlot) Has(key string) bool {
	if bc := k.bc.Load(); bc != nil {
		return bc.Has(k.ns + key)
	}
	return false
}

// Keep implements layout.Keeper.
func (k *keeperSlot) Keep(key string, st layout.Stamp, body []byte) {
	if bc := k.bc.Load(); bc != nil {
		bc.Keep(k.ns+key, st, body)
	}
}

// remotePutBlindBelow: on a bucket that is not a local directory, a
// blob under this size is uploaded without asking first whether it is
// there (layout.Options.PutBlindBelow). At 20 ms a request, each small
// file that tar or cp closed cost three round trips in series (HEAD,
// blob PUT, snapshot PUT); the HEAD saves an upload only when the
// content is already stored, and 256 KiB takes about one round trip to
// send at 100 Mbit/s.
const remotePutBlindBelow = 256 << 10

// mountMaxDecoded bounds the decoded size of one snapshot, manifest or
// memory file read by a mount, and (at 512 bytes each) the descriptors
// decoded from it: some 65,000 descriptors, where pugfs's own commits hold
// a handful. A mount decodes many objects at once and must not be taken
// down by one bad one: layout's default (256 MiB) let a single snapshot
// cost half a gigabyte; at 32 MiB a decompression bomb costs a mount
// under 100 MiB while it is read (TestReliabilityBadBucketContent).
const mountMaxDecoded = 32 << 20

// mountError is a failed FUSE mount's error (pfs.Mount's, which names
// the directory) with what to do about it. A user other than root mounts
// through fusermount3, which prints its reason on stderr itself (the
// line above pugfs's) and exits 1, which go-fuse reports as "exited with
// code 256": a hint about /dev/fuse beside it sent people to the wrong
// place when the reason was --allow-other without user_allow_other.
func mountError(err error) error {
	msg := strings.TrimSpace(err.Error())
	switch {
	case strings.Contains(msg, "fusermount exited"):
		dir, _, _ := strings.Cut(msg, ": fusermount")
		return fmt.Errorf("%s: fusermount3 refused it; its reason is the line above", dir)
	case strings.Contains(msg, "fusermount") && strings.Contains(msg, "executable file not found"):
		return fmt.Errorf("%s (a user other than root mounts through fusermount3: install fuse3)", msg)
	default:
		return fmt.Errorf("%s (is /dev/fuse there, and are you root or is fusermount3 installed?)", msg)
	}
}

// probeFor bounds the check that a bucket answers, retries included,
// and probeAttempts the LISTs it sends.
const (
	probeFor      = 30 * time.Second
	probeAttempts = 5
)

// probe checks that the bucket answers, so a wrong URL or missing
// credentials fail the mount instead of every later request. A transient
// failure (a 500, a timeout) is retried with backoff, as every later
// request is: one unlucky LIST must not fail the mount. The first retry
// is logged, so that a refused endpoint or a host still booting does not
// keep a mount silent for the whole of probeFor.
func probe(ctx context.Context, store *layout.Store, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, probeFor)
	defer cancel()
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := store.Probe(ctx)
		if err == nil || attempt+1 >= probeAttempts || ctx.Err() != nil {
			return err
		}
		if refused(err) {
			return err // retrying cannot help
		}
		if attempt == 0 {
			// Silence and an error are told apart: the line said "not
			// answering" of a server that answered 500 (audit 10).
			what := "bucket answered with an error; trying again"
			if gcerrors.Code(err) == gcerrors.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
				what = "bucket not answering; trying again"
			}
			log.Warn(what, "attempts", probeAttempts, "within", probeFor, "err", err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return err
		}
		delay *= 2
	}
}

// refused reports an error that asking again cannot change: a missing
// bucket, credentials refused, a request the server rejects as malformed
// (an HTTP 4xx but the ones S3 uses for a passing state: 408, 409 and
// 429; the SDK itself asks again after a 400 RequestTimeout). S3's 400
// for a bucket name it does not accept was retried as if the bucket
// were silent (audit 10).
func refused(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.Unimplemented:
		return true
	}
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) {
		c := st.HTTPStatusCode()
		return c >= 400 && c < 500 && c != 408 && c != 409 && c != 429
	}
	return false
}

// probeHint is what to look at for a probe's error the SDK's text does
// not explain: a 400 to a LIST is the request, not the bucket's
// content (a bucket name the server does not accept, a wrong region).
func probeHint(err error) string {
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) && st.HTTPStatusCode() == 400 {
		return " (the server rejected the request itself: is the bucket name one it accepts, and the region right?)"
	}
	// The AWS SDK, finding no credentials, asks the EC2 metadata service
	// last and reports its refusal (audit 25).
	if msg := err.Error(); strings.Contains(msg, "failed to refresh cached credentials") || strings.Contains(msg, "no EC2 IMDS role found") {
		return " (no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
	}
	return ""
}

// shownFlags is the command line as .pugmark/flags shows it: URLs
// redacted, and no credential anywhere. A URL may be a whole argument or
// one of a list (--ingest-from=URL,URL; -o ingest_from=URL,allow_other
// from mount(8)): each is redacted on its own, and the secrets of every
// one are scrubbed from every argument. Redacting only arguments that
// were URLs as a whole showed --ingest-from's passwords and tokens to
// every user of a shared mount (audit 14).
//
// An argument is read both ways, as one URL and as a list, for the
// secrets it holds: a secret query value may hold a comma itself (review
// 12), and then the whole argument's secrets scrub what the list's parts
// left. A part that does not parse as a URL is not shown past its scheme
// (redact.URL).
func shownFlags(args, secrets []string) string {
	for _, a := range args {
		if k := strings.Index(a, "://"); k >= 0 {
			cut := strings.LastIndexByte(a[:k], '=') + 1
			secrets = append(secrets, redact.Secrets(a[cut:])...)
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		a = redact.Scrub(a, secrets)
		parts := strings.Split(a, ",")
		for j, p := range parts {
			k := strings.Index(p, "://")
			if k < 0 {
				continue
			}
			// What precedes the URL: a flag's or an option's name, and
			// the blanks a list allows (ingest.ParsePrefixes trims them).
			cut := strings.LastIndexByte(p[:k], '=') + 1
			u := strings.TrimSpace(p[cut:])
			secrets = append(secrets, redact.Secrets(u)...)
			parts[j] = p[:cut] + redact.URL(u)
		}
		out[i] = strings.Join(parts, ",")
	}
	for i := range out {
		out[i] = redact.Scrub(out[i], secrets)
	}
	return strings.Join(out, " ")
}

// writableDir makes dir if needed and checks that files can be made in it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".pugfs-probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// tempStateDir is the state directory of bucket URL u in the temporary
// directory, $TMPDIR/pugfs-<uid>/<hash of u>, for a mount whose cache
// directory cannot be written: the same one for every mount of the
// bucket, so a crash's parked files are found by the next, and private
// (privateDir), or an error.
func tempStateDir(u string) (string, error) {
	parent := filepath.Join(os.TempDir(), fmt.Sprintf("pugfs-%d", os.Getuid()))
	dir := filepath.Join(parent, bucketID(u))
	if err := privateDir(parent); err != nil {
		return dir, err
	}
	return dir, privateDir(dir)
}

// stateDirFor is where the mount keeps staging files and its disk cache:
// the cache directory if given, else a per-bucket directory in the user's
// cache directory ($XDG_CACHE_HOME, else ~/.cache).
func stateDirFor(cfg mountConfig, u string) (string, error) {
	if cfg.CacheDir != "" && cfg.CacheDir != cacheDirOff {
		return cfg.CacheDir, nil
	}
	dir := defaultStateDir(u)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return dir, fmt.Errorf("state directory %s: %w", dir, err)
	}
	return dir, nil
}

// cleanStaging removes the staging directories of mounts that are gone (a
// pugfs killed with SIGKILL, a machine that crashed), so they do not pile
// up: what they hold was never acknowledged (a write is acknowledged only
// when its commit lands), and a clean exit removes its own. Salvage files
// of failed commits inside them are moved to failedDir first, and the
// files kept there are reported.
func cleanStaging(stateDir, failedDir string, log *slog.Logger) {
	sweepStaging(stateDir, failedDir, log)
	reportFailed(stateDir, failedDir, log)
}

// sweepOthers is cleanStaging of the other buckets' directories in a
// cache directory shared by several (cacheDir/buckets/*, and cacheDir
// itself, where pugfs kept every bucket's before), each into its own
// failed directory, unreported: a mount killed is swept by the next
// mount to use the directory, of whichever bucket, as before staging
// went per bucket; its kept bytes stay with its bucket.
func sweepOthers(cacheDir, own string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "buckets", "*"))
	for _, dir := range append(dirs, cacheDir) {
		if dir != own {
			sweepStaging(dir, filepath.Join(dir, "failed"), log)
		}
	}
}

// reportLegacyFailed warns of the files in dir, the failed directory
// that a --cache-dir held for every bucket before each bucket's went
// under buckets/ (and where sweepOthers keeps what a dead mount of such
// a pugfs left): no mount shows them under .pugmark/failed/ any more,
// and they may be the only copy of a write whose close failed (review
// 9).
func reportLegacyFailed(dir string, log *slog.Logger) {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if n > 0 {
		log.Warn("data of failed commits kept by an earlier pugfs for a mount of some bucket with this cache directory is not shown under .pugmark/failed/ (each bucket's is kept under buckets/<hash of its URL>/failed/ now); copy back what you need and delete the rest", "dir", dir, "files", n)
	}
}

// sweepStaging removes the staging directories under stateDir of mounts
// that are gone, their salvage files and parked files moved to failedDir
// first.
func sweepStaging(stateDir, failedDir string, log *slog.Logger) {
	orphans(filepath.Join(stateDir, "staging"), func(dir string) {
		_, lost := keepFailed(filepath.Join(dir, "failed"), failedDir, log)
		parked, lostParked := keepParked(dir, failedDir, log)
		if lost+lostParked > 0 {
			// Removed, what could not be kept would be gone.
			log.Warn("a mount or pugfs exec run that is gone left files in its staging directory that could not be kept (logged above); the directory stays, and the next mount tries again", "dir", dir, "files", lost+lostParked)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("could not remove the staging directory of a mount that is gone", "dir", dir, "err", err)
			return
		}
		// Files still open for writing were unnamed files, gone with
		// the process. Nothing can tell whether there were any; a mount
		// killed is worth a warning all the same.
		if parked > 0 {
			log.Warn("a mount or pugfs exec run that is gone (killed, or its machine crashed) left its staging directory, now removed; files it had closed and not known to be committed (--commit=fsync before an fsync; a pugfs exec run's output once its command had exited 0, whose checkpoint may have landed) are kept in the failed directory; files still open for writing, and renames and removals not yet fsynced, died with it", "dir", dir, "kept", parked, "failed", failedDir)
			return
		}
		log.Warn("a mount or pugfs exec run that is gone (killed, or its machine crashed) left its staging directory, now removed; what it had staged and not committed died with it: files still open for writing, with --commit=fsync renames and removals not yet fsynced, and what the command of a pugfs exec run killed before it exited had written", "dir", dir)
	})
}

// keepParked moves the files a dead mount parked (closed, waiting for an
// fsync: staging.Writer names them <session>/<name>.<time> in
// parked-*) to failedDir/<session>/, as its unmount would have kept them,
// and returns how many it moved and how many it could not. A pugfs exec
// run's parked files are
// plain numbers, outside any session directory, until its command exited
// 0: a run killed before then keeps nothing of an unfinished output;
// one killed while committing keeps it all.
func keepParked(dir, failedDir string, log *slog.Logger) (kept, failed int) {
	sessions, _ := filepath.Glob(filepath.Join(dir, "parked-*", "*"))
	for _, sd := range sessions {
		if fi, err := os.Lstat(sd); err == nil && fi.IsDir() {
			dst := filepath.Join(failedDir, filepath.Base(sd))
			// An unmount killed while it kept its files had linked
			// some into the failed directory already, their parked
			// names still there: not twice (review 20).
			there := inodesIn(dst)
			filepath.WalkDir(sd, func(p string, d os.DirEntry, err error) error {
				if fi, ierr := os.Lstat(p); err == nil && ierr == nil && fi.Mode().IsRegular() && there[inodeOf(fi)] {
					os.Remove(p)
				}
				return nil
			})
			k, f := keepFailed(sd, dst, log)
			kept, failed = kept+k, failed+f
		}
	}
	return kept, failed
}

// linkCount is how many names fi's file has (1 where the system does
// not say).
func linkCount(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// inode is a file's identity on its machine.
type inode struct{ dev, ino uint64 }

// inodeOf is fi's inode (zero where the system says none).
func inodeOf(fi os.FileInfo) inode {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return inode{uint64(st.Dev), st.Ino}
	}
	return inode{}
}

// inodesIn returns the inodes of the regular files directly in dir.
func inodesIn(dir string) map[inode]bool {
	ents, _ := os.ReadDir(dir)
	out := map[inode]bool{}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			out[inodeOf(fi)] = true
		}
	}
	return out
}

// reportFailed says how many files the failed directory keeps: a
// warning when some arrived since the last one (their times say so,
// against the newest the state directory remembers reporting), else an
// info line. pugfs exec logs warnings only, on the handler's stderr, and
// said the same on every run for as long as anything was kept.
func reportFailed(stateDir, failedDir string, log *slog.Logger) {
	n := 0
	var newest time.Time
	filepath.WalkDir(failedDir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		n++
		if fi, err := d.Info(); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		return nil
	})
	if n == 0 {
		return
	}
	mark := filepath.Join(stateDir, "failed-reported")
	var reported time.Time
	if b, err := os.ReadFile(mark); err == nil {
		if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			reported = time.Unix(0, ns)
		}
	}
	if !newest.After(reported) {
		log.Info("data of failed commits is still kept", "dir", failedDir, "files", n)
		return
	}
	log.Warn("data of failed commits is kept; copy back what you need and delete the rest", "dir", failedDir, "files", n)
	// Written whole by a rename: two mounts starting at once each
	// leave a complete mark.
	tmp := mark + "." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(newest.UnixNano(), 10)+"\n"), 0o600); err == nil {
		if err := os.Rename(tmp, mark); err != nil {
			os.Remove(tmp)
		}
	}
}

// keepFailed moves the salvage files under src (src/<session>/<file>) to
// dst/<session>/, and returns how many it moved and how many it could
// not (logged): the caller must not remove src then, or those are lost.
func keepFailed(src, dst string, log *slog.Logger) (kept, failed int) {
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		err = os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o700)
		if err == nil {
			err = keepOne(p, filepath.Join(dst, rel))
		}
		if err != nil {
			log.Error("could not keep the data of a failed commit; it stays where it is, for the next mount to try again", "path", p, "err", err)
			failed++
		} else {
			kept++
		}
		return nil
	})
	return kept, failed
}

// keepOne moves the file p to the name to, or a free name beside it
// (to.moved, to.moved-2, ...): a name kept earlier is never overwritten.
// A file with another name (a local bucket's blob: the spill file the
// upload linked into the bucket before the mount died, review 23) is
// copied, so that the kept copy, edited in place, does not change the
// bucket; when the copy fails (a full disk), it is moved all the same.
func keepOne(p, to string) error {
	for i := 1; ; i++ {
		name := to
		switch {
		case i == 2:
			name = to + ".moved"
		case i > 2:
			name = fmt.Sprintf("%s.moved-%d", to, i-1)
		}
		var err error
		if fi, serr := os.Lstat(p); serr == nil && linkCount(fi) > 1 {
			if err = copyOut(p, name); err == nil || errors.Is(err, os.ErrExist) {
				if err == nil {
					return nil
				}
				continue
			}
		}
		err = unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// A file system without RENAME_NOREPLACE: a name seen free.
			if _, serr := os.Lstat(name); serr == nil {
				continue
			}
			err = os.Rename(p, name)
		}
		return err
	}
}

// copyOut copies the file src to the new name dst, whole or not at all
// (an unnamed file given its name once written and synced), and removes
// src.
func copyOut(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if _, err := os.Lstat(dst); err == nil {
		return os.ErrExist
	}
	fd, err := unix.Open(filepath.Dir(dst), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(fd), dst)
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", out.Fd()), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return os.ErrExist
		}
		return err
	}
	return os.Remove(src)
}

// pugfsRunning reports whether pid is a running pugfs (a reused pid of
// another program does not count).
func pugfsRunning(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	return bytes.Contains(cmdline, []byte("pugfs"))
}

// decorators stacks the mount's bucket decorators over next as drivers,
// for one portable bucket over them all (blobwrap.Over): a portable
// bucket each cost a sixth of a cold grep -r's CPU on a local bucket.
//
// Every request gets a deadline, so a backend that stops answering fails
// FUSE calls with EIO instead of hanging them; layout.Store retries a
// timed-out attempt like any transient failure. One scheduler serves
// every request of the mount, outside the deadline so that time spent
// queued is not counted against an attempt; the --debug log (reqLog, nil
// for none) is outside both, so a line's time is what the caller waited.
func decorators(next driver.Bucket, timeout time.Duration, sched *schedblob.Scheduler, reqLog *slog.Logger) driver.Bucket {
	// Queued requests give up on a silent bucket by the same timeout
	// (each retry of a request queued behind the others again); the
	// deadline tells the scheduler of uploads whose bytes keep leaving.
	sched.SetSilence(timeout)
	d := deadlineblob.OverLive(next, timeout, sched.Alive)
	d = schedblob.Over(d, sched)
	if reqLog != nil {
		d = logblob.Over(d, reqLog)
	}
	return d
}

// extraStats adds the request scheduler's line to .pugmark/stats, then
// the fault injector's lines when there is one.
func extraStats(s *schedblob.Scheduler, faults func() string) func() string {
	return func() string {
		out := s.Stats().String() + "\n"
		if faults != nil {
			out += faults()
		}
		return out
	}
}

// faultStats reports the injected faults of a fault+ bucket in
// .pugmark/stats, one line per request kind, so that tests driving the
// mount from outside can tell what was injected; nil for other buckets.
func faultStats(b *blob.Bucket) func() string {
	var inj *faultblob.Injector
	if !b.As(&inj) || inj == nil {
		return nil
	}
	return func() string {
		s := inj.Stats()
		var sb strings.Builder
		for _, op := range []faultblob.Op{faultblob.OpGet, faultblob.OpHead, faultblob.OpPut, faultblob.OpList, faultblob.OpDelete, faultblob.OpCopy} {
			o := s.Ops[op]
			fmt.Fprintf(&sb, "faults %s: requests %d, delayed %d, stalled %d, errors %d, lost %d\n", op, o.Requests, o.Delayed, o.Stalled, o.Errors, o.Lost)
		}
		fmt.Fprintf(&sb, "faults list: hidden keys %d, ghost keys %d\n", s.HiddenKeys, s.GhostKeys)
		if inj.CountPrefix() != "" {
			// One line, so that tests can read it with one pattern.
			fmt.Fprintf(&sb, "faults counted %s: get %d, head %d, put %d, list %d, delete %d, copy %d\n", inj.CountPrefix(),
				s.Ops[faultblob.OpGet].Counted, s.Ops[faultblob.OpHead].Counted, s.Ops[faultblob.OpPut].Counted,
				s.Ops[faultblob.OpList].Counted, s.Ops[faultblob.OpDelete].Counted, s.Ops[faultblob.OpCopy].Counted)
		}
		return sb.String()
	}
}

var _ = errors.New

// localPassParts is the verify pass's ranged reads in flight on a bucket
// on a local disk: 4 parts of 4 MiB.
const localPassParts = 4
