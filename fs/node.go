package fs

import (
	"cmp"
	"context"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// gofsNode is a node implementation.
type gofsNode = gofs.InodeEmbedder

// child describes one directory entry before it becomes an inode.
type child struct {
	name string
	mode uint32 // syscall.S_IFDIR, S_IFREG or S_IFLNK
	ino  uint64
	// gen is the node's generation: zero but for a hard link's new name
	// while it shows its source's number (FS.slotNum). go-fuse tells
	// nodes apart by number and generation.
	gen uint64
	// node builds the node; only called when the kernel does not know
	// the inode yet.
	node func() gofs.InodeEmbedder
	// ttl is the entry/attr timeout for this child: long for history,
	// the metadata TTL for what commits can change.
	ttl time.Duration
	// entryTTL, if set, is the entry timeout instead: for a name that
	// never goes away once it is there (a session, .pugmark/ and its
	// fixed directories) while its attributes still change. With a TTL
	// of 0 every path walk through such a name was a lookup, and each a
	// check of the bucket, for an answer that cannot change.
	entryTTL time.Duration
	// refresh, if set, makes an inode that already has the child's
	// number show the child's state: a new descriptor of the same bytes
	// (a chmod, a rename) keeps the number (inoKeeper).
	refresh func(in *gofs.Inode)
	// attr, if set, fills the child's attributes as the listing that
	// made it knew them, instead of the node's Getattr: READDIRPLUS of
	// sessions/ is answered from the listing's freshness pass, not with
	// a check of the bucket per entry.
	attr func(out *fuse.Attr)
	// lazy marks an entry a listing has no attributes for: READDIRPLUS
	// returns it without any, and the kernel looks it up if it needs
	// them.
	lazy bool
}

// lister is what a directory kind implements; dirNode adapts it to
// go-fuse. hidden entries (.pugmark) are found by find but not listed.
type lister interface {
	list(ctx context.Context) ([]child, error)
	find(ctx context.Context, name string) (child, error)
	dirAttr(ctx context.Context, out *fuse.Attr) error
}

// dirNode is a read-only directory over a lister. Writable directories
// embed it and add the write operations.
type dirNode struct {
	gofs.Inode
	f  *FS
	ls lister
}

var (
	_ = (gofs.NodeCreater)((*dirNode)(nil))
	_ = (gofs.NodeLinker)((*dirNode)(nil))
	_ = (gofs.NodeMkdirer)((*dirNode)(nil))
	_ = (gofs.NodeRenamer)((*dirNode)(nil))
	_ = (gofs.NodeRmdirer)((*dirNode)(nil))
	_ = (gofs.NodeSetattrer)((*dirNode)(nil))
	_ = (gofs.NodeStatfser)((*dirNode)(nil))
	_ = (gofs.NodeSymlinker)((*dirNode)(nil))
	_ = (gofs.NodeUnlinker)((*dirNode)(nil))
)

var (
	_ = (gofs.NodeLookuper)((*dirNode)(nil))
	_ = (gofs.NodeReaddirer)((*dirNode)(nil))
	_ = (gofs.NodeGetattrer)((*dirNode)(nil))
)

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if len(name) > layout.MaxNameComponent {
		return nil, syscall.ENAMETOOLONG
	}
	c, err := d.ls.find(ctx, name)
	if err != nil {
		return nil, d.f.errnoOf("lookup "+name, err)
	}
	return d.f.materialise(ctx, &d.Inode, c, out)
}

// materialise turns a child into an inode and fills the entry reply.
func (f *FS) materialise(ctx context.Context, parent *gofs.Inode, c child, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	in := parent.GetChild(c.name)
	if in == nil || in.StableAttr().Ino != c.ino || in.StableAttr().Gen != c.gen {
		in = parent.NewInode(ctx, c.node(), gofs.StableAttr{Mode: c.mode, Ino: c.ino, Gen: c.gen})
	}
	if c.refresh != nil {
		// Also after NewInode, which makes a new node every time. When
		// the kernel still holds another node under the number (its
		// name dropped, a descriptor open), go-fuse answers with that
		// one once this lookup returns (v2.12 registerNew), and this
		// refresh and the attributes below went to the new node it
		// drops: the old one shows its own entry until it is
		// forgotten. Numbers are therefore kept for the same bytes only
		// (inoKeeper), and a node that comes to show other bytes gives
		// its number up (memory records: FS.moved).
		c.refresh(in)
	}
	if c.attr != nil {
		c.attr(&out.Attr)
	} else if g, ok := in.Operations().(gofs.NodeGetattrer); ok {
		var ao fuse.AttrOut
		if errno := g.Getattr(ctx, nil, &ao); errno != 0 {
			return nil, errno
		}
		out.Attr = ao.Attr
	}
	out.Attr.Ino = c.ino
	out.SetEntryTimeout(cmp.Or(c.entryTTL, c.ttl))
	out.SetAttrTimeout(c.ttl)
	return in, 0
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	cs, err := d.ls.list(ctx)
	if err != nil {
		return nil, d.f.errnoOf("readdir", err)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	es := make([]fuse.DirEntry, len(cs))
	for i, c := range cs {
		es[i] = fuse.DirEntry{Name: c.name, Mode: c.mode, Ino: c.ino}
	}
	return gofs.NewListDirStream(es), 0
}

// OpendirHandle returns a handle that keeps the listing it read, so that
// READDIRPLUS is answered from it (FileLookuper) instead of one Lookup,
// with its own bucket checks, per entry. Listings of history never change:
// the kernel may keep them across opens (FOPEN_CACHE_DIR).
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	ls := listerOf(d)
	var fl uint32
	if fx, ok := ls.(fixedLister); ok && fx.fixed() {
		fl = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return &listHandle{d: d, ls: ls}, fl, 0
}

// listerOf returns what directory node d lists now: a renamed directory
// of a live session lists its new path (sessDirNode.dir).
func listerOf(d *dirNode) lister {
	if s, ok := d.Operations().(*sessDirNode); ok {
		return s.dir()
	}
	return d.ls
}

// fixedLister is a lister whose listing can never change (history).
type fixedLister interface{ fixed() bool }

// listHandle is an open directory: "." and "..", then the children as
// listed at the first read (or the last rewind), in name order.
type listHandle struct {
	d  *dirNode
	ls lister

	mu     sync.Mutex
	cs     []child
	loaded bool
	next   int
	// ends counts the reads that found the end of the listing: at the
	// second, the kernel has taken in every entry (pagestore.go).
	ends int
}

var (
	_ = (gofs.NodeOpendirHandler)((*dirNode)(nil))
	_ = (gofs.FileReaddirenter)((*listHandle)(nil))
	_ = (gofs.FileSeekdirer)((*listHandle)(nil))
	_ = (gofs.FileLookuper)((*listHandle)(nil))
	_ = (gofs.FileReleasedirer)((*listHandle)(nil))
)

// load reads the listing; h.mu is held.
func (h *listHandle) load(ctx context.Context) syscall.Errno {
	if h.loaded {
		return 0
	}
	cs, err := h.ls.list(ctx)
	if err != nil {
		return h.d.f.errnoOf("readdir", err)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	h.cs, h.loaded, h.next = cs, true, 0
	return 0
}

func (h *listHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := h.load(ctx); errno != 0 {
		return nil, errno
	}
	if h.next >= dots+len(h.cs) {
		if h.ends++; h.ends == 2 {
			h.listed()
		}
		return nil, 0
	}
	h.next++
	if h.next <= dots {
		return h.dot(h.next), 0
	}
	c := h.cs[h.next-1-dots]
	return &fuse.DirEntry{Name: c.name, Mode: c.mode, Ino: c.ino, Off: uint64(h.next)}, 0
}

// listed tells the page store that the kernel holds the inodes of a
// session directory's entries. The listing's end comes twice: in the
// request whose reply carries the last entries, which the kernel has not
// taken in yet, and in the next one, which it sends after it has.
func (h *listHandle) listed() {
	if d, ok := h.ls.(*sessionDir); ok {
		at := uint32(0)
		if !d.live() {
			at = d.at
		}
		h.d.f.listed(storeDir{d.id, at, cache.JoinName(d.parts)})
	}
}

// dots is how many entries come before the children: "." and "..", which
// ls -a and every local file system show (go-fuse leaves them to the
// directory's stream, and the kernel does not add them).
const dots = 2

// dot returns the entry at position off (1: ".", 2: ".."); the kernel
// takes neither's attributes from READDIRPLUS.
func (h *listHandle) dot(off int) *fuse.DirEntry {
	e := &fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: h.d.StableAttr().Ino, Off: uint64(off)}
	if off == 2 {
		e.Name = ".."
		if _, p := h.d.Parent(); p != nil {
			e.Ino = p.StableAttr().Ino
		}
	}
	return e
}

// Seekdir moves to an offset Readdirent gave out; 0 (rewinddir) lists
// the directory again.
func (h *listHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 {
		h.loaded = false
	}
	if errno := h.load(ctx); errno != 0 {
		return errno
	}
	if off > uint64(dots+len(h.cs)) {
		return syscall.EINVAL
	}
	h.next = int(off)
	return 0
}

// Lookup answers READDIRPLUS for the entry Readdirent just gave out, from
// the listing.
func (h *listHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	h.mu.Lock()
	var c child
	found := false
	for i := h.next - 1 - dots; i >= 0 && i < len(h.cs); i-- {
		if h.cs[i].name == name {
			c, found = h.cs[i], true
			break
		}
	}
	h.mu.Unlock()
	if !found {
		if l, ok := h.d.Operations().(gofs.NodeLookuper); ok {
			return l.Lookup(ctx, name, out)
		}
		return nil, syscall.ENOENT
	}
	if c.lazy {
		// An error leaves the entry without attributes (node ID 0),
		// which the kernel takes as "look it up when needed", not as
		// ENOENT.
		return nil, syscall.EAGAIN
	}
	return h.d.f.materialise(ctx, &h.d.Inode, c, out)
}

func (h *listHandle) Releasedir(ctx context.Context, flags uint32) {}

func (d *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if err := d.f.fillDirAttr(&out.Attr, func(a *fuse.Attr) error { return d.ls.dirAttr(ctx, a) }); err != nil {
		return d.f.errnoOf("getattr", err)
	}
	return 0
}

// fillDirAttr fills the attributes of a directory whose own part (times,
// write bits) fill sets.
func (f *FS) fillDirAttr(a *fuse.Attr, fill func(a *fuse.Attr) error) error {
	a.Mode = syscall.S_IFDIR | 0o555
	setTimes(a, f.start) // what has no time of its own shows the mount's
	if err := fill(a); err != nil {
		return err
	}
	f.owner(a)
	a.Nlink = 2
	return nil
}

// Statfs reports what statvfs(2) and pathconf(3) callers need: the name
// length limit (decisions.md "Names as paths": 255), a block size and,
// on a mount that writes, the space writes have: the staging directory
// holds every written byte until its commit, so its free space is what
// a program checking before it writes (df, shutil.disk_usage, an
// installer) must see; zeros said the disk was full. A bucket has no
// capacity of its own, so a read-only mount reports none. go-fuse
// answers zeros for nodes without Statfs, so every node kind has one.
func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return d.f.statfs(out)
}

// Statfs: see dirNode.Statfs.
func (n *fileNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return n.f.statfs(out)
}

// Statfs: see dirNode.Statfs.
func (l *linkNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return l.f.statfs(out)
}

// Statfs: see dirNode.Statfs.
func (n *slotFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return n.f.statfs(out)
}

// Statfs: see dirNode.Statfs.
func (n *memFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return n.f.statfs(out)
}

func (f *FS) statfs(out *fuse.StatfsOut) syscall.Errno {
	const bsize = 4096
	out.Bsize = bsize
	out.Frsize = bsize
	out.NameLen = layout.MaxNameComponent
	if f.cfg.ReadOnly {
		return 0
	}
	var st unix.Statfs_t
	if err := unix.Statfs(f.cfg.StagingDir, &st); err != nil {
		f.log.Warn("statfs of the staging directory", "dir", f.cfg.StagingDir, "err", err)
		return 0
	}
	blocks := func(n uint64) uint64 { return n * uint64(st.Frsize) / bsize }
	out.Blocks, out.Bfree, out.Bavail = blocks(st.Blocks), blocks(st.Bfree), blocks(st.Bavail)
	out.Files, out.Ffree = st.Files, st.Ffree
	return 0
}

// Unlink, Rmdir and the other writes on read-only directories: go-fuse
// makes unimplemented Unlink/Rmdir succeed silently, so refuse them.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }

// Rmdir refuses: see Unlink.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }

// Mkdir refuses on read-only directories.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Create refuses on read-only directories.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

// Symlink refuses on read-only directories.
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Link refuses on read-only directories, as every write there does:
// left to go-fuse, link(2) was ENOTSUP there (audit 21).
func (d *dirNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Rename refuses on read-only directories.
func (d *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EROFS
}

// Setattr refuses on read-only directories.
func (d *dirNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// content is what a read-only file shows.
type content interface {
	// size of the file as shown.
	size(ctx context.Context) (int64, error)
	readAt(ctx context.Context, p []byte, off int64) (int, error)
	mtime() time.Time
	// immutable content may stay in the page cache across opens.
	immutable() bool
}

// fileNode is a read-only file over a content.
type fileNode struct {
	gofs.Inode
	f *FS
	c content
	x xattrs
	// writable is set by embedders that accept writes (refs).
	writable bool
	// pt is the passthrough mode of blob content (pinned.go).
	pt ptState
	// private takes the group's and others' read bits away: a view
	// that shows any file's bytes, on a shared mount (Config.Shared).
	private bool
}

var (
	_ = (gofs.NodeSetattrer)((*fileNode)(nil))
	_ = (gofs.NodeSetxattrer)((*fileNode)(nil))
	_ = (gofs.NodeStatfser)((*fileNode)(nil))
)

// xattrs supplies extended attributes; nil for none.
type xattrs func() map[string]string

var (
	_ = (gofs.NodeOpener)((*fileNode)(nil))
	_ = (gofs.NodeReader)((*fileNode)(nil))
	_ = (gofs.NodeGetattrer)((*fileNode)(nil))
	_ = (gofs.NodeGetxattrer)((*fileNode)(nil))
	_ = (gofs.NodeListxattrer)((*fileNode)(nil))
)

func (n *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	sz, err := n.c.size(ctx)
	if err != nil {
		return n.f.errnoOf("getattr", err)
	}
	out.Mode = syscall.S_IFREG | 0o444
	if n.writable {
		out.Mode = syscall.S_IFREG | 0o644
	}
	out.Size = uint64(sz)
	out.Blocks = (uint64(sz) + 511) / 512
	setTimes(&out.Attr, n.f.start)
	setTimes(&out.Attr, n.c.mtime())
	if b, ok := n.c.(*blobContent); ok {
		// A committed descriptor (history, a read-only mount, seq/):
		// its posix-mode and posix-mtime, as on the live tree.
		n.f.descAttr(&out.Attr, b.d, !n.writable, b.born)
	}
	if n.private {
		out.Mode &^= 0o077
	}
	n.f.owner(&out.Attr)
	out.Nlink = 1
	out.Blksize = ioBlockSize
	if _, ok := n.c.(*snapContent); ok {
		// Without OPEN the kernel re-reads such a file's pages only once
		// its attributes expire (noopen.go): every read asks, and the
		// cache's own TTL decides how fresh the snapshot is.
		out.SetTimeout(uncached)
	}
	return 0
}

// uncached is the timeout of an entry or of attributes the kernel must
// not keep. Not 0 here: go-fuse replaces a timeout of 0 with the mount's
// default (Options.EntryTimeout, AttrTimeout). uncachedTimeouts, below
// the node tree, sends it to the kernel as 0, since the kernel would
// round 1 ns up to a whole tick and trust the entry meanwhile.
const uncached = time.Nanosecond

// ioBlockSize is the st_blksize of files: cp, cat and friends size their
// buffers by it, and 1 MiB (the mount's MaxWrite and MaxReadAhead) makes
// a copy into or out of the mount 1 MiB requests instead of 128 KiB ones.
const ioBlockSize = 1 << 20

func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	if n.c.immutable() {
		if fh, fl, ok, errno := n.f.openPassthrough(ctx, &n.pt, n.c); ok || errno != 0 {
			return fh, fl, errno
		}
		// Nothing to flush on close of a read-only open without a
		// handle: NOFLUSH saves the kernel's FLUSH round trip, one of
		// three per file for grep -r over cached files.
		return nil, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
	}
	// Mutable generated content: read straight through, so a size that
	// changed since the last stat cannot cut the file short. It is made
	// once per open, not once per read(2): log.jsonl of a large session
	// is megabytes, and a reader sees one version of it.
	if b, ok := n.c.(*bytesContent); ok {
		body, err := b.gen(ctx)
		if err != nil {
			return nil, 0, n.f.errnoOf("open", err)
		}
		return &snapHandle{b: body}, fuse.FOPEN_DIRECT_IO, 0
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

// snapHandle is an open generated file: its content as of the open.
type snapHandle struct{ b []byte }

func (n *fileNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h, ok := fh.(*snapHandle); ok {
		if off >= int64(len(h.b)) {
			return fuse.ReadResultData(nil), 0
		}
		return fuse.ReadResultData(h.b[off:min(off+int64(len(dest)), int64(len(h.b)))]), 0
	}
	res, err := n.f.readContent(ctx, n.c, dest, off)
	if err != nil {
		return nil, n.f.errnoOf("read", err)
	}
	return res, 0
}

func (n *fileNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return getxattr(n.x, attr, dest)
}

func (n *fileNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return listxattr(n.x, dest)
}

// Setattr refuses: read-only file.
func (n *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// Setxattr refuses: read-only file.
func (n *fileNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.EROFS
}

// xattrPrefix is what every attribute pugfs shows starts with.
const xattrPrefix = "user.pugmark."

// posixXattrs are the attributes of the POSIX metadata keys, which
// listxattr leaves out (xattrNames).
var posixXattrs = map[string]bool{
	xattrPrefix + "meta." + layout.MetaPosixMode:  true,
	xattrPrefix + "meta." + layout.MetaPosixMtime: true,
}

func getxattr(x xattrs, attr string, dest []byte) (uint32, syscall.Errno) {
	// ls -l asks every file for security.selinux and the POSIX ACLs:
	// answered without building the file's attributes.
	if x == nil || !strings.HasPrefix(attr, xattrPrefix) {
		return 0, syscall.ENODATA
	}
	v, ok := x()[attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(v) > xattrSizeMax {
		// What getxattr(2) says of a value past XATTR_SIZE_MAX: the
		// kernel could not carry it, and "no such attribute" would hide
		// that the bucket has one.
		return 0, syscall.E2BIG
	}
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func listxattr(x xattrs, dest []byte) (uint32, syscall.Errno) {
	if x == nil {
		return 0, 0
	}
	var buf []byte
	for _, k := range xattrNames(x()) {
		buf = append(buf, k...)
		buf = append(buf, 0)
	}
	if len(dest) == 0 {
		return uint32(len(buf)), 0
	}
	if len(dest) < len(buf) {
		return uint32(len(buf)), syscall.ERANGE
	}
	return uint32(copy(dest, buf)), 0
}

// xattrNames returns the names listxattr lists: pugfs's own attributes,
// then the user.pugmark.meta.* keys, each in name order, as many as fit
// in the kernel's 64 KiB (XATTR_LIST_MAX), past which no tool could list
// any, and none whose value is over 64 KiB (getxattr says E2BIG of it: a
// listed name reads). A file whose metadata does not fit (thousands of
// keys, from the bucket) lists what fits, and getxattr still reads each
// key by name.
//
// posix-mode and posix-mtime are not listed: they are the file's mode and
// mtime, which stat shows and chmod and utimes set. Listed, tools that
// copy both a file's mode and its extended attributes fought over them:
// `rsync -aX` chmod'ed a file 0600, then removed the posix-mode the source
// file has no attribute for, and the file was 0644, again at every run
// (audit 12). getxattr still reads them by name.
func xattrNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for k, v := range m {
		if len(v) <= xattrSizeMax && !posixXattrs[k] {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		mi, mj := strings.HasPrefix(names[i], "user.pugmark.meta."), strings.HasPrefix(names[j], "user.pugmark.meta.")
		if mi != mj {
			return mj
		}
		return names[i] < names[j]
	})
	total := 0
	for i, k := range names {
		if total += len(k) + 1; total > xattrListMax {
			return names[:i]
		}
	}
	return names
}

// linkNode is a symbolic link.
type linkNode struct {
	gofs.Inode
	f      *FS
	target string
	// dyn, if set, gives the target instead of target.
	dyn func(ctx context.Context) (string, error)
	// size, if set, is the length of every target dyn gives, so that a
	// stat reads nothing.
	size int
	mt   time.Time
}

var (
	_ = (gofs.NodeGetattrer)((*linkNode)(nil))
	_ = (gofs.NodeStatfser)((*linkNode)(nil))
)

var _ = (gofs.NodeReadlinker)((*linkNode)(nil))

func (l *linkNode) get(ctx context.Context) (string, syscall.Errno) {
	if l.dyn == nil {
		return l.target, 0
	}
	t, err := l.dyn(ctx)
	if err != nil {
		return "", l.f.errnoOf("readlink", err)
	}
	return t, 0
}

func (l *linkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, errno := l.get(ctx)
	return []byte(t), errno
}

func (l *linkNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	size := l.size
	if size == 0 {
		t, errno := l.get(ctx)
		if errno != 0 {
			return errno
		}
		size = len(t)
	}
	out.Mode = syscall.S_IFLNK | 0o777
	out.Size = uint64(size)
	setTimes(&out.Attr, l.f.start)
	setTimes(&out.Attr, l.mt)
	l.f.owner(&out.Attr)
	out.Nlink = 1
	return 0
}

func setTimes(a *fuse.Attr, t time.Time) {
	if t.IsZero() {
		return
	}
	a.SetTimes(&t, &t, &t)
}

// bytesContent is generated content computed on demand.
type bytesContent struct {
	gen func(ctx context.Context) ([]byte, error)
	mt  time.Time
	// at, if set, gives the content's own time as of the last gen,
	// which is its mtime when not zero (a ref's: refSource).
	at    func() time.Time
	fixed bool
}

func (b *bytesContent) size(ctx context.Context) (int64, error) {
	body, err := b.gen(ctx)
	return int64(len(body)), err
}

func (b *bytesContent) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	body, err := b.gen(ctx)
	if err != nil {
		return 0, err
	}
	if off >= int64(len(body)) {
		return 0, nil
	}
	return copy(p, body[off:]), nil
}

func (b *bytesContent) mtime() time.Time {
	if b.at != nil {
		if t := b.at(); !t.IsZero() {
			return t
		}
	}
	return b.mt
}

func (b *bytesContent) immutable() bool { return b.fixed }

// genFile returns a child that is a generated file.
func (f *FS) genFile(name string, ino uint64, mt time.Time, fixed bool, gen func(ctx context.Context) ([]byte, error)) child {
	ttl := f.ttl
	switch {
	case fixed:
		ttl = historyTTL
	case f.cfg.NoOpen:
		ttl = uncached // a snapContent: see fileNode.Getattr
	}
	return child{name: name, mode: syscall.S_IFREG, ino: ino, ttl: ttl, node: func() gofs.InodeEmbedder {
		if !fixed && f.cfg.NoOpen {
			return &fileNode{f: f, c: f.newSnapContent(gen, mt)}
		}
		return &fileNode{f: f, c: &bytesContent{gen: gen, mt: mt, fixed: fixed}}
	}}
}

// privateRead makes c, a view that shows the bytes of files whatever
// their modes (a blob of objects/, a snapshot's JSON and the log with
// their inline data), readable by the mount's owner alone on a shared
// mount: a file of mode 0600 was refused to other users by path and in
// history, and handed to them by these (audit 3). History too (at/<N>/,
// seq/, since-checkpoint/): a version shows the mode it was written
// with, and a chmod 600 after the write (echo > f; chmod 600 f, the
// usual way) left the first version readable by all for good (audit 14).
// A mode set later cannot reach back into the versions before it, so
// none is shown to other users.
func (f *FS) privateRead(c child) child {
	if !f.cfg.Shared {
		return c
	}
	node := c.node
	c.node = func() gofs.InodeEmbedder {
		n := node()
		if fn, ok := n.(*fileNode); ok {
			fn.private = true
		}
		return n
	}
	return c
}

// privateDir makes a directory of views privateRead keeps to the mount's
// owner (objects/, a session's at/, seq/, since-checkpoint/) the owner's
// on a shared mount: mode 0500, so that other users cannot list or look
// up what its files would show (the names and sizes of removed files,
// whether a content is stored: review 12, audit 14).
func (f *FS) privateDir(out *fuse.Attr) {
	if f.cfg.Shared {
		out.Mode = syscall.S_IFDIR | 0o500
	}
}

// symlink returns a child that is a symbolic link.
func (f *FS) symlink(name string, ino uint64, target string, mt time.Time, ttl time.Duration) child {
	return child{name: name, mode: syscall.S_IFLNK, ino: ino, ttl: ttl, node: func() gofs.InodeEmbedder {
		return &linkNode{f: f, target: target, mt: mt}
	}}
}

// dir returns a child that is a directory over ls.
func (f *FS) dir(name string, ino uint64, ttl time.Duration, ls lister) child {
	return child{name: name, mode: syscall.S_IFDIR, ino: ino, ttl: ttl, node: func() gofs.InodeEmbedder {
		return &dirNode{f: f, ls: ls}
	}}
}

// historyTTL is the kernel cache lifetime of immutable entries.
const historyTTL = 24 * time.Hour
