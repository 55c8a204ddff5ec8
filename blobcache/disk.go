package blobcache

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// diskCache is the optional on-disk tier of Cache, under DiskDir/blobs:
//
//	sha256/<2 hex>/<64 hex>  a whole body whose content hashes to the name:
//	                         a verified stored blob, or a large decoded body
//	info/<2 hex>/<64 hex>    what is known of the blob with that digest
//	                         (sniff result, decoded sizes and digests), small
//	kept/<2 hex>/<64 hex>    a snapshot or manifest body, named by the
//	                         SHA-256 of its key (kept.go)
//	<sub>/<2 hex>/.w-<rand>  an entry being written (its name known)
//	tmp/.w-<rand>            a decoded body being written (its name not)
//
// Files are written under a temp name and renamed into place (temp files
// older than an hour are a crash's leftovers, removed by the scans), so
// a reader sees a
// whole file or none, and two processes sharing the directory at most
// write the same content twice. A body file is trusted only after it was
// hashed whole in this process (on first use after open) and each chunk
// re-read later is checked against the hash recorded then, so torn writes,
// bit rot and another writer cannot produce wrong bytes. Info records carry
// their own checksum and are the only claims taken from disk: they link a
// blob to the digest of its decoded body.
//
// All access goes through an os.Root, so no symbolic link can lead out of
// the directory; entries are opened with O_NOFOLLOW, and scans, eviction
// and clearing skip symbolic links (removing a link removes the link).
//
// The bound is kept LRU-ish: an in-memory index, rebuilt from a scan at
// startup and before evictions (so entries of other processes count),
// ordered by last use; the file mtime carries the last use across
// processes and restarts. An entry larger than half the bound is not kept.
// A full disk or an unwritable directory disables the tier with one warning;
// other failures are warnings and the cache keeps working.
type diskCache struct {
	root *os.Root
	dir  string // root's path, for messages
	max  int64
	log  *slog.Logger
	now  func() time.Time

	// Test hooks: the removal of one entry, and the creation of a temp
	// file, so that tests can fake failures that root cannot trigger.
	removeFn func(name string) error
	createFn func(name string) (*os.File, error)
	// spaceFn reports the space available to the cache and the size of
	// its file system, in bytes (diskSpace; a test hook).
	spaceFn func() (avail, size int64, err error)

	disabled  atomic.Bool
	evictions atomic.Int64
	// keptSeen is set once the directory is known to hold kept copies
	// (kept.go): a scan found one or this process wrote one.
	keptSeen atomic.Bool

	// evictMu is held by the eviction under way: one at a time. An
	// eviction a new copy starts skips when one runs (evict); one asked
	// for room waits for it (giveBack). Taken before mu.
	evictMu sync.Mutex

	// mu guards the fields below (GUARDED_BY(mu)). It is never held
	// across I/O, nor together with Cache.mu (see the package doc).
	mu       sync.Mutex
	index    map[string]*diskEntry
	total    int64
	lastScan time.Time
	shards   map[string]bool // shard directories checked to be real directories
	// sinceSpace counts the bytes added since the free space was last
	// checked (diskSpaceEvery); room is what the last check found could
	// be added before the free space falls to its floor. A check is due
	// when either is reached: half the room, or diskSpaceEvery, so that
	// a nearly full file system is checked at every few copies and a
	// roomy one every 64 MiB. Checked every 64 MiB alone, 60 MiB of
	// copies filled a file system with 20 MiB free (audit 3).
	sinceSpace, room int64
	// writing is what the copies being written have reserved of the
	// room (reserve): read-ahead writes many at once, and they filled
	// the file system before any of them was added.
	writing int64
}

type diskEntry struct {
	size    int64
	used    time.Time
	touched time.Time // last mtime update
}

const (
	diskSubdir      = "blobs"
	diskData        = "sha256"
	diskInfo        = "info"
	diskKept        = "kept"
	diskTmp         = "tmp"
	diskTmpMaxAge   = time.Hour // older temp files are leftovers of a crash
	diskTempPrefix  = ".w-"     // a temp file's name, in tmp/ or a shard
	diskRescanEvery = 10 * time.Second
	diskTouchEvery  = time.Minute
	diskInfoMax     = 4096
	diskInfoMagic   = "pugfs-blob-info 1"
	// diskFreePercent of the cache directory's file system is left free,
	// as mountpoint-s3's cache does: the bound (10 GiB at least) would
	// otherwise fill a nearly full disk, and the staged writes of the
	// mount, in the same directory, would fail with ENOSPC because of
	// copies that can be fetched again.
	diskFreePercent = 5
	// diskSpaceEvery is how many bytes are added between checks of the
	// free space.
	diskSpaceEvery = 64 << 20
)

// newDiskCache opens (creating) the cache under dir. An error means the
// directory is unusable; the caller goes memory-only.
func newDiskCache(dir string, max int64, log *slog.Logger, now func() time.Time) (*diskCache, error) {
	// 0700: the cache holds the bodies of every blob the mount read, and
	// a shared mount may read blobs some of its users may not (a cache
	// made by an older pugfs is tightened too).
	top := filepath.Join(dir, diskSubdir)
	if err := os.MkdirAll(top, 0o700); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(top)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory (symbolic links are not followed)", top)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(top, fi.Mode().Perm()&0o700); err != nil {
			log.Warn("cache: cannot make the disk cache private to the mount's user", "dir", top, "err", err)
		}
	}
	root, err := os.OpenRoot(top)
	if err != nil {
		return nil, err
	}
	dc := &diskCache{
		root: root, dir: top, max: max, log: log, now: now,
		index: make(map[string]*diskEntry), shards: make(map[string]bool),
	}
	dc.removeFn = root.Remove
	dc.spaceFn = func() (int64, int64, error) { return diskSpaceOf(top) }
	dc.createFn = func(name string) (*os.File, error) {
		return root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	for _, sub := range []string{diskData, diskInfo, diskKept, diskTmp} {
		if err := dc.realDir(sub, true); err != nil {
			root.Close()
			return nil, err
		}
	}
	// Probe: a directory we cannot write to is no cache. (createFn, not
	// create: the caller reports the failure, once.)
	probe := path.Join(diskTmp, "probe-"+diskRandom())
	f, err := dc.createFn(probe)
	if err != nil {
		root.Close()
		return nil, err
	}
	f.Close()
	_ = root.Remove(probe)
	dc.cleanTmp()
	dc.scan()
	if short := dc.shortfall(); short > 0 {
		dc.evict(short)
	}
	return dc, nil
}

func (dc *diskCache) enabled() bool { return !dc.disabled.Load() }

// maxEntry is the largest entry kept: one body may not push everything
// else out.
func (dc *diskCache) maxEntry() int64 { return dc.max / 2 }

func (dc *diskCache) usage() (bytes, evictions int64) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	return dc.total, dc.evictions.Load()
}

// fail handles a failed write (create, write, rename, mkdir): a full disk
// or a permission or read-only file system problem disables the tier (one
// warning); anything else is a warning.
func (dc *diskCache) fail(op, name string, err error) {
	if diskFatal(err) {
		if dc.disabled.CompareAndSwap(false, true) {
			dc.log.Warn("cache: disk cache disabled, continuing memory-only", "dir", dc.dir, "op", op, "path", name, "err", err)
		}
		return
	}
	dc.warn(op, name, err)
}

// warn reports a failure that leaves the tier usable: an entry that cannot
// be read, listed or removed (consistency.md §5) costs that entry, not the
// cache.
func (dc *diskCache) warn(op, name string, err error) {
	dc.log.Warn("cache: disk cache: "+op+" failed", "dir", dc.dir, "path", name, "err", err)
}

// realDir checks that name is a directory and not a symbolic link. With
// create it makes the directory, replacing a symbolic link planted in its
// place (the link is removed, never followed).
func (dc *diskCache) realDir(name string, create bool) error {
	if create {
		if err := dc.root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	fi, err := dc.root.Lstat(name)
	if err != nil {
		return err
	}
	if create && fi.Mode()&fs.ModeSymlink != 0 {
		dc.log.Warn("cache: replacing a symbolic link in the disk cache with a directory", "path", filepath.Join(dc.dir, name))
		if err := dc.removeEntry(name); err != nil {
			return err
		}
		if err := dc.root.Mkdir(name, 0o700); err != nil {
			return err
		}
		return dc.realDir(name, false)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory (symbolic links are not followed)", filepath.Join(dc.dir, name))
	}
	return nil
}

// shard returns the directory of an entry, checking (once) that it is a
// real directory, and creating it for writes.
func (dc *diskCache) shard(sub, hexName string, create bool) (string, error) {
	dir := path.Join(sub, hexName[:2])
	dc.mu.Lock()
	ok := dc.shards[dir]
	dc.mu.Unlock()
	if ok {
		return dir, nil
	}
	if err := dc.realDir(dir, create); err != nil {
		return dir, err
	}
	dc.mu.Lock()
	dc.shards[dir] = true
	dc.mu.Unlock()
	return dir, nil
}

// openEntry opens the body file of sum, if present, regular and of the
// given size (size < 0: any). The caller verifies its content.
func (dc *diskCache) openEntry(sum layout.Digest, size int64) (*os.File, bool) {
	return dc.openFile(diskData, sum, size)
}

func (dc *diskCache) openFile(sub string, sum layout.Digest, size int64) (*os.File, bool) {
	if !dc.enabled() {
		return nil, false
	}
	h := sum.Hex()
	dir, err := dc.shard(sub, h, false)
	if err != nil {
		return nil, false
	}
	rel := path.Join(dir, h)
	f, err := dc.root.OpenFile(rel, os.O_RDONLY|diskNoFollow, 0)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			dc.log.Debug("cache: disk cache entry not usable", "path", rel, "err", err)
		}
		return nil, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || (size >= 0 && fi.Size() != size) {
		f.Close()
		if err == nil && fi.Mode().IsRegular() {
			// A body file of the wrong size is a torn write that survived a
			// crash, or a copy cut short since; it can never verify.
			dc.log.Warn("cache: disk cache copy has the wrong size; removing it", "path", rel, "size", fi.Size(), "want", size)
			dc.drop(sub, sum)
		}
		return nil, false
	}
	dc.touch(rel, fi.Size())
	return f, true
}

// touch records a use of rel; the mtime carries it to other processes and
// the next startup (at most once a minute per entry).
func (dc *diskCache) touch(rel string, size int64) {
	now := dc.now()
	dc.mu.Lock()
	e := dc.index[rel]
	if e == nil {
		e = &diskEntry{size: size, touched: now}
		dc.index[rel] = e
		dc.total += size
	}
	e.used = now
	bump := now.Sub(e.touched) > diskTouchEvery
	if bump {
		e.touched = now
	}
	dc.mu.Unlock()
	if bump {
		_ = dc.root.Chtimes(rel, now, now) // best effort: only the eviction order suffers
	}
}

// drop removes the entry of sum in sub (a body that failed verification).
func (dc *diskCache) drop(sub string, sum layout.Digest) {
	h := sum.Hex()
	rel := path.Join(sub, h[:2], h)
	if err := dc.removeEntry(rel); err != nil {
		dc.warn("remove", rel, err)
		return
	}
	dc.forget(rel)
}

func (dc *diskCache) forget(rel string) {
	dc.mu.Lock()
	if e := dc.index[rel]; e != nil {
		dc.total -= e.size
		delete(dc.index, rel)
	}
	dc.mu.Unlock()
}

// diskTemp is a file being written: in its entry's shard directory when
// the entry's name is known (createFor), else in tmp/.
type diskTemp struct {
	dc   *diskCache
	f    *os.File
	rel  string
	n    int64
	done bool
	// reserved is what createReserved reserved of the room; given back
	// when the file is committed or aborted.
	reserved int64
}

// reserve reserves size bytes of the room above the free-space floor for
// a copy about to be written, and reports whether there was that much:
// else the copy is not made (the blob is served all the same). Room
// that looks short is looked at again first, as evictions and other
// programs give space back.
func (dc *diskCache) reserve(size int64) bool {
	fits := func() bool {
		dc.mu.Lock()
		defer dc.mu.Unlock()
		if dc.writing+size > dc.room-dc.sinceSpace {
			return false
		}
		dc.writing += size
		return true
	}
	if fits() {
		return true
	}
	dc.mu.Lock()
	dc.sinceSpace = 0
	dc.mu.Unlock()
	if short := dc.shortfall(); short > 0 {
		dc.evict(short)
		dc.shortfall()
	}
	return fits()
}

// createReserved is createFor of an entry of size bytes, which it
// reserves first (reserve): nil when there is no room for it.
func (dc *diskCache) createReserved(sub, hexName string, size int64) *diskTemp {
	if !dc.reserve(size) {
		return nil
	}
	t, err := dc.createFor(sub, hexName)
	if err != nil {
		dc.release(size)
		return nil
	}
	t.reserved = size
	return t
}

// release gives back what a copy reserved.
func (dc *diskCache) release(size int64) {
	dc.mu.Lock()
	dc.writing -= size
	dc.mu.Unlock()
}

// create starts a temp file in tmp/, for an entry whose name is known only
// once it is written (a decoded body, named by its own digest).
func (dc *diskCache) create() (*diskTemp, error) {
	return dc.createIn(diskTmp)
}

// createFor starts the temp file of entry sub/<shard>/hexName in that
// shard directory. Many entries written at once (a traversal caching
// thousands of small blobs) then spread over the shards rather than
// contend for one directory, and the rename that installs each stays in
// its directory: ext4 serialises the creates of a directory and
// allocates their inodes near it, and one tmp/ for all of them doubled
// the CPU of caching 2,000 blobs of 2 KiB.
func (dc *diskCache) createFor(sub, hexName string) (*diskTemp, error) {
	dir, err := dc.shard(sub, hexName, true)
	if err != nil {
		dc.fail("mkdir", dir, err)
		return nil, err
	}
	return dc.createIn(dir)
}

func (dc *diskCache) createIn(dir string) (*diskTemp, error) {
	rel := path.Join(dir, diskTempPrefix+diskRandom())
	f, err := dc.createFn(rel)
	if err != nil {
		dc.fail("create", rel, err)
		return nil, err
	}
	return &diskTemp{dc: dc, f: f, rel: rel}, nil
}

func (t *diskTemp) write(p []byte) error {
	if _, err := t.f.Write(p); err != nil {
		t.dc.fail("write", t.rel, err)
		return err
	}
	t.n += int64(len(p))
	return nil
}

// commit installs the file as the body entry of sum, leaving t.f open for
// the caller (the renamed file, or an anonymous one if the entry is not
// kept). It reports whether the entry is now in the cache.
func (t *diskTemp) commit(sum layout.Digest) bool {
	t.done = true
	dc := t.dc
	dc.release(t.reserved)
	h := sum.Hex()
	if t.n > dc.maxEntry() {
		_ = dc.root.Remove(t.rel)
		return false
	}
	_ = t.f.Chmod(0o444) // entries are immutable; a stray writer gets EACCES
	rel, err := dc.install(t.rel, diskData, h)
	if err != nil {
		dc.fail("rename", rel, err)
		_ = dc.root.Remove(t.rel)
		return false
	}
	dc.added(rel, t.n)
	return true
}

// install renames the temp file tmpRel to sub/<shard>/<hexName>. A shard
// directory removed meanwhile (another process cleared the cache) is
// created again and the rename retried once.
func (dc *diskCache) install(tmpRel, sub, hexName string) (string, error) {
	dir, err := dc.shard(sub, hexName, true)
	rel := path.Join(dir, hexName)
	if err != nil {
		return rel, err
	}
	err = dc.root.Rename(tmpRel, rel)
	if errors.Is(err, fs.ErrNotExist) {
		dc.mu.Lock()
		delete(dc.shards, dir)
		dc.mu.Unlock()
		if _, err = dc.shard(sub, hexName, true); err == nil {
			err = dc.root.Rename(tmpRel, rel)
		}
	}
	return rel, err
}

// abort discards the file. It is a no-op on nil and after commit.
func (t *diskTemp) abort() {
	if t == nil || t.done {
		return
	}
	t.done = true
	t.dc.release(t.reserved)
	t.f.Close()
	_ = t.dc.root.Remove(t.rel)
}

// diskSpaceOf is diskSpace; tests replace it to fake a nearly full disk
// before a cache opens.
var diskSpaceOf = diskSpace

// added records a new entry and evicts if the bound is exceeded, or the
// file system's free space fell below its floor (diskFreePercent).
func (dc *diskCache) added(rel string, size int64) {
	now := dc.now()
	dc.mu.Lock()
	if e := dc.index[rel]; e != nil {
		dc.total -= e.size
	}
	dc.index[rel] = &diskEntry{size: size, used: now, touched: now}
	dc.total += size
	over := dc.total > dc.max
	dc.sinceSpace += size
	check := dc.sinceSpace >= min(diskSpaceEvery, dc.room/2) || over
	if check {
		dc.sinceSpace = 0
	}
	dc.mu.Unlock()
	var short int64
	if check {
		short = dc.shortfall()
	}
	if over || short > 0 {
		dc.evict(short)
	}
}

// shortfall is how many bytes the cache should give back so that
// diskFreePercent of its file system is free, plus one percent more so
// that evictions stay rare; 0 when enough is free or the space cannot be
// known.
func (dc *diskCache) shortfall() int64 {
	avail, size, err := dc.spaceFn()
	if err != nil || size <= 0 {
		dc.setRoom(math.MaxInt64 / 4) // unknown: the bound alone
		return 0
	}
	floor := size / 100 * diskFreePercent
	dc.setRoom(avail - floor)
	if avail < floor {
		return floor - avail + size/100
	}
	return 0
}

// setRoom records what the last check of the free space found could be
// added before the floor.
func (dc *diskCache) setRoom(room int64) {
	dc.mu.Lock()
	dc.room = max(room, 0)
	dc.mu.Unlock()
}

// evict removes least recently used entries until the cache is at 90% of
// its bound (hysteresis: evictions, and the rescans before them, are rare)
// and at least short bytes smaller than it was; nothing while another
// eviction runs.
func (dc *diskCache) evict(short int64) {
	if dc.evictMu.TryLock() {
		defer dc.evictMu.Unlock()
		dc.evictLocked(short)
	}
}

// giveBack evicts until the file system has n bytes more free, or no
// entry is left, after the eviction under way, and returns the bytes it
// made free. Counted by the file system, not by the names removed: a copy
// held open (pinned for a passthrough read) frees nothing when it goes
// (review 39); without the file system's figures, by the names.
func (dc *diskCache) giveBack(n int64) int64 {
	dc.evictMu.Lock()
	defer dc.evictMu.Unlock()
	before, _, err := dc.spaceFn()
	var removed, gained int64
	for range 8 {
		r := dc.evictLocked(n - gained)
		removed += r
		if r == 0 || err != nil {
			break
		}
		after, _, serr := dc.spaceFn()
		if serr != nil {
			err = serr
			break
		}
		if gained = after - before; gained >= n {
			break
		}
	}
	if err != nil {
		return removed
	}
	return max(gained, 0)
}

// evictLocked is evict, and returns the bytes of the entries it removed.
// Caller holds evictMu.
func (dc *diskCache) evictLocked(short int64) (freed int64) {
	dc.mu.Lock()
	rescan := dc.now().Sub(dc.lastScan) > diskRescanEvery
	dc.mu.Unlock()
	if rescan {
		dc.scan()
	}
	type victim struct {
		rel string
		e   *diskEntry
	}
	dc.mu.Lock()
	all := make([]victim, 0, len(dc.index))
	for rel, e := range dc.index {
		all = append(all, victim{rel, e})
	}
	total := dc.total
	dc.mu.Unlock()
	slices.SortFunc(all, func(a, b victim) int { return a.e.used.Compare(b.e.used) })
	target := min(dc.max/10*9, total-short)
	for _, v := range all {
		if total <= target {
			break
		}
		if err := dc.removeEntry(v.rel); err != nil {
			dc.warn("evict", v.rel, err)
			continue
		}
		total -= v.e.size
		freed += v.e.size
		dc.evictions.Add(1)
		dc.mu.Lock()
		if dc.index[v.rel] == v.e {
			dc.total -= v.e.size
			delete(dc.index, v.rel)
		}
		dc.mu.Unlock()
	}
	return freed
}

// removeEntry removes one file or empty directory (consistency.md §5). An
// entry that cannot be removed because it is write-protected (or sits in a
// write-protected directory) is made writable and removal is retried once.
// Symbolic links are removed as links; the chmod never goes through one.
func (dc *diskCache) removeEntry(rel string) error {
	err := dc.removeFn(rel)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	fixed := false
	if fi, lerr := dc.root.Lstat(rel); lerr == nil && fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o200 == 0 {
		if dc.root.Chmod(rel, fi.Mode().Perm()|0o200) == nil {
			fixed = true
		}
	}
	if parent := path.Dir(rel); parent != "." {
		if fi, lerr := dc.root.Lstat(parent); lerr == nil && fi.IsDir() && fi.Mode().Perm()&0o200 == 0 {
			if dc.root.Chmod(parent, fi.Mode().Perm()|0o200) == nil {
				fixed = true
			}
		}
	}
	if !fixed {
		return err
	}
	if err := dc.removeFn(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// scan rebuilds the index from the directory, keeping newer use times this
// process knows. Only regular files with well-formed names count; symbolic
// links and anything else are skipped, never followed.
func (dc *diskCache) scan() {
	start := dc.now()
	fresh := make(map[string]*diskEntry)
	var total int64
	for _, sub := range []string{diskData, diskInfo, diskKept} {
		shards, err := dc.readDir(sub)
		if err != nil {
			dc.warn("scan", sub, err)
			continue
		}
		for _, sd := range shards {
			if !sd.IsDir() || len(sd.Name()) != 2 {
				continue
			}
			dir := path.Join(sub, sd.Name())
			ents, err := dc.readDir(dir)
			if err != nil {
				dc.warn("scan", dir, err)
				continue
			}
			for _, de := range ents {
				if de.Type().IsRegular() && strings.HasPrefix(de.Name(), diskTempPrefix) {
					dc.cleanTemp(path.Join(dir, de.Name()), de)
					continue
				}
				if !de.Type().IsRegular() || !diskHexName(de.Name()) || de.Name()[:2] != sd.Name() {
					continue
				}
				fi, err := de.Info()
				if err != nil {
					continue
				}
				fresh[path.Join(dir, de.Name())] = &diskEntry{size: fi.Size(), used: fi.ModTime(), touched: fi.ModTime()}
				total += fi.Size()
				if sub == diskKept {
					dc.keptSeen.Store(true)
				}
			}
		}
	}
	dc.mu.Lock()
	for rel, e := range fresh {
		if old := dc.index[rel]; old != nil && old.used.After(e.used) {
			e.used, e.touched = old.used, old.touched
		}
	}
	for rel, old := range dc.index {
		// Added while the scan ran: the listing may have missed it.
		if _, ok := fresh[rel]; !ok && !old.used.Before(start) {
			fresh[rel] = old
			total += old.size
		}
	}
	dc.index, dc.total, dc.lastScan = fresh, total, start
	dc.mu.Unlock()
}

func (dc *diskCache) readDir(rel string) ([]fs.DirEntry, error) {
	f, err := dc.root.OpenFile(rel, os.O_RDONLY|diskNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// cleanTmp removes the temp files of tmp/ older than diskTmpMaxAge (scan
// does so in the shards).
func (dc *diskCache) cleanTmp() {
	ents, err := dc.readDir(diskTmp)
	if err != nil {
		return
	}
	for _, de := range ents {
		dc.cleanTemp(path.Join(diskTmp, de.Name()), de)
	}
}

// cleanTemp removes the temp file (or directory) rel if it is older than
// diskTmpMaxAge: a younger one may be another process's write in
// progress.
func (dc *diskCache) cleanTemp(rel string, de fs.DirEntry) {
	fi, err := de.Info()
	if err != nil || fi.ModTime().After(dc.now().Add(-diskTmpMaxAge)) {
		return
	}
	if err := dc.removeTree(rel, de); err != nil {
		dc.warn("clean", rel, err)
	}
}

// clear removes every entry, temp files included.
func (dc *diskCache) clear() error {
	var errs []error
	for _, sub := range []string{diskData, diskInfo, diskKept, diskTmp} {
		ents, err := dc.readDir(sub)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, de := range ents {
			if err := dc.removeTree(path.Join(sub, de.Name()), de); err != nil {
				dc.warn("clear", path.Join(sub, de.Name()), err)
				errs = append(errs, err)
			}
		}
	}
	dc.mu.Lock()
	dc.index, dc.total = make(map[string]*diskEntry), 0
	dc.shards = make(map[string]bool)
	dc.mu.Unlock()
	return errors.Join(errs...)
}

// removeTree removes rel and, if it is a real directory (not a link to
// one), what is inside it.
func (dc *diskCache) removeTree(rel string, de fs.DirEntry) error {
	if de.IsDir() {
		ents, err := dc.readDir(rel)
		if errors.Is(err, fs.ErrPermission) {
			if fi, lerr := dc.root.Lstat(rel); lerr == nil && fi.IsDir() {
				_ = dc.root.Chmod(rel, fi.Mode().Perm()|0o700)
				ents, err = dc.readDir(rel)
			}
		}
		if err != nil {
			return err
		}
		var errs []error
		for _, e := range ents {
			if err := dc.removeTree(path.Join(rel, e.Name()), e); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return dc.removeEntry(rel)
}

func diskRandom() string {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return hex.EncodeToString(rnd[:])
}

func diskHexName(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// diskEncodeInfo renders the persisted part of a blobShape: the sniff
// result and the decoded sizes and digests, with a checksum line so that a
// damaged record is detected rather than believed.
func diskEncodeInfo(sh blobShape) []byte {
	var b bytes.Buffer
	b.WriteString(diskInfoMagic + "\n")
	if sh.sniffed {
		s := "none"
		switch {
		case sh.sniffBad:
			s = "bad"
		case sh.sniff != blobRaw:
			s = sh.sniff.encoding()
		}
		fmt.Fprintf(&b, "sniff %s\n", s)
	}
	for s := blobGzip; s < blobSpaces; s++ {
		if in := sh.dec[s]; in.known {
			fmt.Fprintf(&b, "%s %d %s\n", s.encoding(), in.size, in.sum.Hex())
		}
	}
	sum := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "check %s\n", hex.EncodeToString(sum[:]))
	return b.Bytes()
}

// diskDecodeInfo parses a record of diskEncodeInfo.
func diskDecodeInfo(data []byte) (blobShape, bool) {
	var sh blobShape
	i := bytes.LastIndex(data, []byte("check "))
	if i < 0 || !bytes.HasPrefix(data, []byte(diskInfoMagic+"\n")) {
		return sh, false
	}
	want := sha256.Sum256(data[:i])
	if strings.TrimSpace(string(data[i+len("check "):])) != hex.EncodeToString(want[:]) {
		return sh, false
	}
	for _, line := range strings.Split(string(data[len(diskInfoMagic)+1:i]), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case len(f) == 2 && f[0] == "sniff":
			sh.sniffed = true
			switch f[1] {
			case "bad":
				sh.sniffBad = true
			case "none":
			default:
				if sh.sniff = blobSpaceOf(f[1]); sh.sniff == blobRaw {
					return blobShape{}, false
				}
			}
		case len(f) == 3:
			s := blobSpaceOf(f[0])
			n, err := strconv.ParseInt(f[1], 10, 64)
			sum, derr := layout.ParseDigest("sha256:" + f[2])
			if s == blobRaw || err != nil || n < 0 || derr != nil {
				return blobShape{}, false
			}
			sh.dec[s] = blobDecInfo{known: true, size: n, sum: sum}
		default:
			return blobShape{}, false
		}
	}
	return sh, true
}

// readInfo returns the info record of d, if there is a valid one.
func (dc *diskCache) readInfo(d layout.Digest) (blobShape, bool) {
	f, ok := dc.openFile(diskInfo, d, -1)
	if !ok {
		return blobShape{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, diskInfoMax+1))
	if err != nil || len(data) > diskInfoMax {
		return blobShape{}, false
	}
	sh, ok := diskDecodeInfo(data)
	if !ok {
		dc.log.Warn("cache: disk cache info record is damaged; removing it", "dir", dc.dir, "digest", d.String())
		dc.drop(diskInfo, d)
	}
	return sh, ok
}

// writeInfo replaces the info record of d (temp file and rename: a reader
// sees the old record or the new one).
func (dc *diskCache) writeInfo(d layout.Digest, sh blobShape) {
	if !dc.enabled() {
		return
	}
	t, err := dc.createFor(diskInfo, d.Hex())
	if err != nil {
		return
	}
	data := diskEncodeInfo(sh)
	if err := t.write(data); err != nil {
		t.abort()
		return
	}
	t.done = true
	t.f.Close()
	rel, err := dc.install(t.rel, diskInfo, d.Hex())
	if err != nil {
		dc.fail("rename", rel, err)
		_ = dc.root.Remove(t.rel)
		return
	}
	dc.added(rel, int64(len(data)))
}
