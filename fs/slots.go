package fs

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/ingest"
	"github.com/pugmark/pugfs/internal/redact"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/readahead"
	"github.com/pugmark/pugfs/staging"
	"golang.org/x/sys/unix"
)

// sessionNode returns the node of a session directory: writable for the
// live tree of a read-write mount, read-only otherwise.
func (f *FS) sessionNode(sd *sessionDir) gofsNode {
	if sd.live() && f.sessionWritable(sd.id) {
		return &sessDirNode{dirNode: dirNode{f: f, ls: sd}, sd: sd}
	}
	return &dirNode{f: f, ls: sd}
}

// slotNode returns the node of a slot file.
func (f *FS) slotNode(d *sessionDir, full string, e *layout.Entry) gofsNode {
	if d.live() && f.sessionWritable(d.id) {
		n := &slotFile{f: f, id: d.id, name: full}
		n.ent.Store(e)
		return n
	}
	return &fileNode{f: f, c: &blobContent{f: f, d: &e.Descriptor, pos: &readahead.Pos{ID: d.id, At: d.at, Name: full}, born: d.id.Time()}, x: descXattrs(e)}
}

// stagedChild is a child for a staged (not yet committed) file.
//
// s is the staged file the caller found. The node keeps it even if the
// file's last close releases it before the node is made: its committed
// entry then answers (a lookup racing that release otherwise made a node
// with nothing behind it, answered ENOENT, and the next open(O_CREAT)
// staged the file anew from nothing: echo hello > f; echo world >> f made
// f "world").
func (f *FS) stagedChild(d *sessionDir, name string, s *staging.File) child {
	full := cache.JoinName(appendPart(d.parts, name))
	ino, gen, kept := f.inos.forStaged(d.id, full, s)
	if !kept {
		ino, gen = inoOf("staged", d.id.String(), full), 0
	}
	return child{name: name, mode: syscall.S_IFREG, ttl: f.ttl, ino: ino, gen: gen,
		node: func() gofsNode {
			n := &slotFile{f: f, id: d.id, name: full}
			if cur := f.w.Staged(d.id, full); cur != nil {
				s = cur
			}
			n.st.Store(s)
			return n
		}}
}

var stagedSeq atomic.Uint64

// linkSeq tells a link's generations apart (Link).
var linkSeq atomic.Uint64

// validLeaf checks a new directory entry's name. Names are stored as
// JSON strings, which carry only UTF-8: other bytes would come back as
// U+FFFD, and two names as one (EILSEQ, as file systems that hold names
// to UTF-8 answer).
func validLeaf(name string) syscall.Errno {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return syscall.EINVAL
	}
	if !utf8.ValidString(name) {
		return syscall.EILSEQ
	}
	if len(name) > layout.MaxNameComponent {
		return syscall.ENAMETOOLONG
	}
	return 0
}

// sessDirNode is a writable directory of a live session.
type sessDirNode struct {
	dirNode
	refuseXattrs // a directory has no descriptor to keep attributes in
	sd           *sessionDir
}

var (
	_ = (gofs.NodeSetattrer)((*sessDirNode)(nil))
)

var (
	_ = (gofs.NodeCreater)((*sessDirNode)(nil))
	_ = (gofs.NodeMkdirer)((*sessDirNode)(nil))
	_ = (gofs.NodeUnlinker)((*sessDirNode)(nil))
	_ = (gofs.NodeRmdirer)((*sessDirNode)(nil))
	_ = (gofs.NodeRenamer)((*sessDirNode)(nil))
	_ = (gofs.NodeLinker)((*sessDirNode)(nil))
	_ = (gofs.NodeSymlinker)((*sessDirNode)(nil))
	_ = (gofs.NodeFsyncer)((*sessDirNode)(nil))
)

// dir returns the directory this node is now. A rename moves the inode
// (the kernel keeps its dentry), so the path is read from the inode tree,
// not from where the node was made.
func (n *sessDirNode) dir() *sessionDir {
	parts, ok := livePath(&n.Inode)
	if !ok || slices.Equal(parts, n.sd.parts) {
		return n.sd
	}
	return &sessionDir{f: n.f, id: n.sd.id, parts: parts}
}

func (n *sessDirNode) full(name string) string {
	return cache.JoinName(appendPart(n.dir().parts, name))
}

// livePath returns the path inside its session of a node of a live
// session tree, from the inode tree; ok is false for an inode that left
// the tree (unlinked, or replaced by a rename).
func livePath(in *gofs.Inode) (parts []string, ok bool) {
	for p, depth := in, 0; depth <= layout.MaxParentDepth; depth++ {
		if d, isDir := p.Operations().(*sessDirNode); isDir && len(d.sd.parts) == 0 {
			slices.Reverse(parts)
			canonicalTarget(parts)
			return parts, true
		}
		name, parent := p.Parent()
		if parent == nil {
			return nil, false
		}
		parts = append(parts, name)
		p = parent
	}
	return nil, false
}

// canonicalTarget writes the target of a path under .pugmark/send/ in
// its canonical lower case: the kernel names the directory as it was
// looked up, and an ID in upper case is the same target (§4.1).
func canonicalTarget(parts []string) {
	if len(parts) > 2 && cache.JoinName(parts[:2]) == staging.SendDir {
		if id, err := layout.ParseSessionID(parts[2]); err == nil {
			parts[2] = id.String()
		}
	}
}

var (
	_ = (gofs.NodeLookuper)((*sessDirNode)(nil))
	_ = (gofs.NodeReaddirer)((*sessDirNode)(nil))
)

// Lookup finds name in the directory this node is now (see dir).
func (n *sessDirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	c, err := n.dir().find(ctx, name)
	if err != nil {
		errno := n.f.errnoOf("lookup "+name, err)
		if errno == syscall.ENOENT {
			// Not kept by the kernel as a negative entry (go-fuse
			// makes one for the metadata TTL when no timeout is set):
			// the absence comes from this mount's view of the session,
			// which a refused commit re-reads at once. A negative entry
			// outlived that re-read: renameat2(RENAME_NOREPLACE) said
			// EEXIST for a file another mount made, and the lstat GNU
			// mv makes next still said ENOENT; coreutils 9.1 then reads
			// a stat buffer it never filled, and mv failed now and then
			// with "cannot overwrite directory". The next lookup of the
			// name is answered from the view, with no bucket request
			// inside the TTL.
			out.SetEntryTimeout(uncached)
		}
		return nil, errno
	}
	return n.f.materialise(ctx, &n.Inode, c, out)
}

// Readdir lists the directory this node is now (see dir).
func (n *sessDirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	cs, err := n.dir().list(ctx)
	if err != nil {
		return nil, n.f.errnoOf("readdir", err)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	es := make([]fuse.DirEntry, len(cs))
	for i, c := range cs {
		es[i] = fuse.DirEntry{Name: c.name, Mode: c.mode, Ino: c.ino}
	}
	return gofs.NewListDirStream(es), 0
}

func (n *sessDirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if e := validLeaf(name); e != 0 {
		return nil, nil, 0, e
	}
	if n.dir().sendDir() {
		return nil, nil, 0, syscall.EPERM // send/ holds target directories only
	}
	f := n.f
	full := n.full(name)
	existed := f.w.Staged(n.sd.id, full) != nil
	// The kernel sends CREATE for a name it does not know (it looked it
	// up, or holds a negative entry): with O_CREAT alone (>>, O_RDWR)
	// the file keeps what another mount may have committed under the
	// name meanwhile (OpenFresh checks); with O_TRUNC it starts empty;
	// with O_EXCL it starts empty and its commit is refused if another
	// mount committed the name meanwhile (OpenExclusive).
	var s *staging.File
	var err error
	switch {
	case flags&syscall.O_EXCL != 0:
		s, err = f.w.OpenExclusive(ctx, n.sd.id, full)
	case flags&syscall.O_TRUNC == 0:
		s, err = f.w.OpenFresh(ctx, n.sd.id, full, func() *layout.Entry { return nil }, false)
	default:
		s, err = f.w.Open(ctx, n.sd.id, full, nil, true)
	}
	if err != nil {
		return nil, nil, 0, f.errnoOf("create "+full, err)
	}
	if !existed && !s.Rebased() {
		// The create mode is kept; an O_CREAT open of a file another
		// open is staging already does not change its mode.
		s.SetCreateMode(mode)
	}
	node := &slotFile{f: f, id: n.sd.id, name: full}
	node.st.Store(s)
	ino, gen, kept := f.inos.forStaged(n.sd.id, full, s)
	if !kept {
		ino, gen = inoOf("staged", n.sd.id.String(), full, strconv.FormatUint(stagedSeq.Add(1), 10)), 0
		f.inos.created(n.sd.id, full, ino, s)
	}
	in := n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino, Gen: gen})
	var ao fuse.AttrOut
	node.Getattr(ctx, nil, &ao)
	out.Attr = ao.Attr
	out.SetEntryTimeout(f.ttl)
	out.SetAttrTimeout(f.ttl)
	h := &whandle{f: f, id: n.sd.id, s: s, n: node, counted: true, append: flags&syscall.O_APPEND != 0, whole: flags&syscall.O_TRUNC != 0}
	if h.whole {
		s.OpenedWhole()
	}
	return in, h, h.openFlags(), 0
}

var _ = (gofs.NodeMknoder)((*sessDirNode)(nil))

// Mknod makes a regular file as an exclusive create closed at once: GNU
// tar makes a file so (mknodat(S_IFREG)) when it has extended attributes
// to set before its bytes, and a refused mknod lost the whole file to
// tar --xattrs. The empty file is committed as any file closed is. The
// layout keeps files only: FIFOs, sockets and devices are ENOTSUP.
func (n *sessDirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if t := mode & syscall.S_IFMT; t != syscall.S_IFREG && t != 0 {
		return nil, syscall.ENOTSUP
	}
	in, fh, _, errno := n.Create(ctx, name, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, mode&0o7777, out)
	if errno != 0 {
		return nil, errno
	}
	h := fh.(*whandle)
	errno = h.Flush(ctx)
	h.Release(ctx)
	return in, errno
}

func (n *sessDirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if e := validLeaf(name); e != 0 {
		return nil, e
	}
	d := n.dir()
	if c, err := d.find(ctx, name); err == nil && c.name != "" {
		return nil, syscall.EEXIST
	}
	if d.sendDir() {
		// Every target there exists (EEXIST above); a name that is no
		// session cannot be one.
		return nil, syscall.ENOENT
	}
	if err := n.f.w.Mkdir(n.sd.id, d.full(name)); err != nil {
		return nil, n.f.errnoOf("mkdir "+d.full(name), err)
	}
	sub := &sessionDir{f: n.f, id: n.sd.id, parts: appendPart(d.parts, name)}
	return n.f.materialise(ctx, &n.Inode, n.f.sessionSubdir(sub, name), out)
}

func (n *sessDirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	victim := n.GetChild(name)
	full := n.full(name)
	if err := n.f.w.Unlink(ctx, n.sd.id, appendPart(n.dir().parts, name)); err != nil {
		return n.f.errnoOf("unlink "+full, err)
	}
	markGone(victim)
	n.f.inos.forget(n.sd.id, full)
	return 0
}

// markGone notes that the file at in lost its name: descriptors still
// open on it fstat nlink 0 (posixtest FstatDeleted, NlinkZero).
func markGone(in *gofs.Inode) {
	if in == nil {
		return
	}
	if f, ok := in.Operations().(*slotFile); ok {
		f.gone.Store(true)
	}
}

func (n *sessDirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	f := n.f
	full := n.full(name)
	return f.errnoOf("rmdir "+full, f.w.Rmdir(ctx, n.sd.id, full))
}

func (n *sessDirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	dst, ok := newParent.(*sessDirNode)
	if !ok {
		return syscall.EXDEV
	}
	if dst.sd.id != n.sd.id {
		return syscall.EXDEV
	}
	if e := validLeaf(newName); e != 0 {
		return e
	}
	const renameNoReplace, renameExchange = 1, 2
	if flags&renameExchange != 0 {
		return syscall.EINVAL
	}
	src, victim := n.GetChild(name), dst.GetChild(newName)
	if victim != nil && victim == src {
		victim = nil // a rename of a file onto itself (a hard link would be another)
	}
	from, to := n.full(name), dst.full(newName)
	if src != nil {
		if sf, ok := src.Operations().(*slotFile); ok {
			// The number the kernel knows the file by moves with
			// it, whatever made it (inoKeeper).
			sf.keepIno(from, src.StableAttr().Ino)
		}
	}
	if err := n.f.w.Rename(ctx, n.sd.id, from, to, flags&renameNoReplace != 0); err != nil {
		return n.f.errnoOf("rename "+from, err)
	}
	markGone(victim)
	n.f.inos.renamed(n.sd.id, from, to)
	if src != nil {
		if sf, ok := src.Operations().(*slotFile); ok {
			sf.showRenamed(ctx, to)
		}
	}
	return 0
}

// showRenamed makes the node of a file just renamed to to show the
// descriptor the rename gave that name: its inode moves with the
// dentry, which the kernel trusts for the entry TTL without a lookup,
// so it went on showing the old name's descriptor (the version,
// sequence number and content type of its extended attributes: a.json
// renamed a.html read application/json) until the metadata TTL ran out,
// while other mounts showed the new one at once. A state it cannot read
// leaves the node as it was, for the next lookup to refresh.
func (n *slotFile) showRenamed(ctx context.Context, to string) {
	st, err := n.f.cache.State(ctx, n.id)
	if err != nil {
		return
	}
	slots, _ := n.f.w.Live(st)
	if e, ok := slots(to); ok {
		n.adopt(e)
	}
}

// Link is link(2) of a file of this session (staging.Writer.Link): the
// new name is a file of its own that shares the content, with one link,
// so tar's and rsync -H's hard links extract as copies. A file of
// another session, or of no session (a history file, a memory), is
// EXDEV, as for rename.
//
// When the link committed the source's bytes, the new name shows the
// source's inode number for as long as both show those bytes (a node of
// its own all the same, under another generation: inoKeeper.linkedFor):
// git clone of a repository in the same session links each object and
// checks that the new name is the source's inode (git 2.45.1, and
// distributions' backports), and failed with "hardlink different from
// source". Written to, the new name gets a number of its own
// (writesThrough); so does it when its source is written to.
func (n *sessDirNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	src, ok := target.(*slotFile)
	if !ok || src.id != n.sd.id {
		return nil, syscall.EXDEV
	}
	if e := validLeaf(name); e != 0 {
		return nil, e
	}
	parts, ok := livePath(src.EmbeddedInode())
	if !ok {
		return nil, syscall.ENOENT // unlinked since the kernel looked it up
	}
	from, to := cache.JoinName(parts), n.full(name)
	s, e := src.current()
	d, clean := layout.Digest{}, e != nil
	if s != nil {
		d, clean = s.CleanDigest()
	} else if e != nil {
		d = e.Digest
	}
	if err := n.f.w.Link(ctx, n.sd.id, from, to); err != nil {
		return nil, n.f.errnoOf("link "+from, err)
	}
	if clean && n.f.w.Staged(n.sd.id, to) == nil {
		// Committed as a descriptor of the source's blob. (A source
		// with bytes not committed yet is staged again under the new
		// name, which has a number of its own.)
		// A generation of this link's own: one of the name alone was
		// that of a node of an earlier link of the name still held
		// (moved away, or removed while open), which go-fuse then
		// answered for this one (review 26).
		gen := inoOf("link", n.sd.id.String(), to, strconv.FormatUint(linkSeq.Add(1), 10))
		n.f.inos.linked(n.sd.id, to, from, src.StableAttr().Ino, gen, d)
	}
	return n.Lookup(ctx, name, out)
}

func (n *sessDirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if e := validLeaf(name); e != 0 {
		return nil, e
	}
	f := n.f
	full := n.full(name)
	// The mount fetches with its own rights, which on a shared mount are
	// more than the caller's: the policy decides for the caller the
	// kernel names (issue #17).
	var c ingest.Caller
	if fc, ok := fuse.FromContext(ctx); ok {
		c = ingest.Caller{UID: fc.Uid, GID: fc.Gid, PID: fc.Pid}
	}
	shown := redact.URL(target)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Minute)
	defer cancel()
	src, err := f.cfg.Ingest.Open(ictx, target, c)
	if errors.Is(err, ingest.ErrRefused) {
		f.log.Warn("ingest refused", "url", shown, "name", full, "session", n.sd.id.String(), "uid", c.UID, "gid", c.GID, "pid", c.PID, "err", err)
		return nil, f.errnoOf("ingest "+shown, err) // EACCES
	}
	if errors.Is(err, layout.ErrInvalid) {
		// A plain path, or a source that is no regular file: a session
		// holds no symbolic links, and tree.md answers anything but an
		// ingestable URL with EACCES.
		f.log.Debug("symlink refused: not an ingestable URL", "target", shown, "name", full, "err", err)
		return nil, syscall.EACCES
	}
	if err != nil {
		f.log.Error("ingest failed", "url", shown, "name", full, "uid", c.UID, "pid", c.PID, "err", err)
		return nil, f.errnoOf("ingest "+shown, err)
	}
	var mode *uint32
	if src.HasMode {
		mode = &src.Mode
	}
	d, err := f.w.Ingest(ictx, n.sd.id, full, shown, src, src.Size, mode, layout.BlobOptions{ContentType: src.ContentType, ContentEncoding: src.ContentEncoding})
	src.Close()
	if err != nil {
		f.log.Error("ingest failed", "url", shown, "name", full, "uid", c.UID, "pid", c.PID, "err", err)
		return nil, f.errnoOf("ingest "+shown, err)
	}
	f.log.Info("ingested", "url", shown, "name", full, "session", n.sd.id.String(), "digest", d.Digest.String(), "size", d.Size, "uid", c.UID, "pid", c.PID)
	// The kernel fails a symlink(2) whose reply is not a symlink (EIO),
	// so answer with one, never cached: the next lookup finds the
	// ingested file in its place.
	node := &linkNode{f: f, target: target, mt: d.CreatedAt}
	in := n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFLNK,
		Ino: inoOf("ingest-link", n.sd.id.String(), full, strconv.FormatUint(stagedSeq.Add(1), 10))})
	var ao fuse.AttrOut
	node.Getattr(ctx, nil, &ao)
	out.Attr = ao.Attr
	out.SetEntryTimeout(uncached)
	out.SetAttrTimeout(uncached)
	return in, 0
}

func (n *sessDirNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if err := n.f.w.FsyncSession(ctx, n.sd.id); err != nil {
		return n.f.errnoOf("fsync session", err)
	}
	return 0
}

func (n *sessDirNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.f.chownErrno(in); e != 0 {
		return e
	}
	// chmod/utimes on a session directory: a directory has no
	// descriptor to keep them in (tree.md: its mtime is its latest
	// append); report the attributes as they are, so touch, cp -p and
	// rsync -a do not fail.
	return n.Getattr(ctx, fh, out)
}

var (
	_ = (gofs.NodeSetxattrer)((*sessDirNode)(nil))
	_ = (gofs.NodeRemovexattrer)((*sessDirNode)(nil))
)

// slotFile is a file of a live session. Its content is, in order: the
// staged bytes of a write in progress, what the last local commit through
// this inode made it, or the descriptor it was looked up with.
type slotFile struct {
	gofs.Inode
	f    *FS
	id   layout.SessionID
	name string
	// ent is the committed entry the inode was looked up with, or
	// adopted later (adopt): a rename or a metadata change commits a new
	// descriptor of the same bytes, which keeps the inode.
	ent atomic.Pointer[layout.Entry]
	// st is the staged file this inode was created or last opened for
	// writing with. Atomic: opens of one inode run in parallel.
	st atomic.Pointer[staging.File]
	// gone is set once unlink or a rename over it removed the name: an
	// open file without a name has no links (posixtest FstatDeleted).
	gone atomic.Bool
	// pt is the passthrough mode of the committed content (pinned.go);
	// ptMu orders passthrough opens against what they pass through, the
	// blob ptDigest (a leaf lock).
	pt       ptState
	ptMu     sync.Mutex
	ptDigest layout.Digest
	// dropped is the staged file and its rebase count the kernel's
	// pages and size were last dropped for (dropRebased); droppedMu
	// guards both (a leaf lock).
	droppedMu sync.Mutex
	dropped   struct {
		st      *staging.File
		rebases uint64
	}
}

var (
	_ = (gofs.NodeStatfser)((*slotFile)(nil))
)

var (
	_ = (gofs.NodeOpener)((*slotFile)(nil))
	_ = (gofs.NodeReader)((*slotFile)(nil))
	_ = (gofs.NodeGetattrer)((*slotFile)(nil))
	_ = (gofs.NodeSetattrer)((*slotFile)(nil))
	_ = (gofs.NodeGetxattrer)((*slotFile)(nil))
	_ = (gofs.NodeSetxattrer)((*slotFile)(nil))
	_ = (gofs.NodeListxattrer)((*slotFile)(nil))
	_ = (gofs.NodeRemovexattrer)((*slotFile)(nil))
	_ = (gofs.NodeFsyncer)((*slotFile)(nil))
)

// Fsync commits what fsync(2) of this file covers: with --commit=fsync
// every staged change of the session, else this file if it is staged.
// A descriptor without a write handle (opened read-only) works too, as
// sync(1) opens files read-only; nothing staged is nothing to do.
func (n *slotFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*whandle); ok {
		return h.Fsync(ctx, flags)
	}
	s, _ := n.current()
	if err := n.f.w.Sync(ctx, n.id, s); err != nil {
		return n.f.errnoOf("fsync "+n.slot(), err)
	}
	return 0
}

// slot returns the slot name this file has now: a rename moves the inode,
// so the name is read from the inode tree (see sessDirNode.dir).
func (n *slotFile) slot() string {
	if parts, ok := livePath(&n.Inode); ok && len(parts) > 0 {
		return cache.JoinName(parts)
	}
	return n.name
}

// base is what a new staged file of this inode starts from: its
// committed entry, looked up when the staged file is made (openFrom).
func (n *slotFile) base() *layout.Entry {
	_, e := n.current()
	return e
}

// current returns the staged file in progress, or the committed entry.
func (n *slotFile) current() (*staging.File, *layout.Entry) {
	if s := n.f.w.Staged(n.id, n.slot()); s != nil {
		if c := s.Shows(); c != nil {
			// Its commit failed and close(2) said EIO: until the writer
			// changes it again, the file is what it was before, not the
			// refused bytes (which its release keeps in failed/).
			return nil, c
		}
		return s, nil
	}
	if st := n.st.Load(); st != nil {
		if st.OpenUnlinked() {
			// Removed while open: what the open descriptors still
			// hold, committed or not (posixtest FstatDeleted). Once
			// the last of them is released its spill file is closed,
			// and the inode shows what it was committed as.
			return st, nil
		}
		if c := st.Committed(); c != nil {
			return nil, c
		}
		if c := st.Shows(); c != nil {
			return nil, c
		}
	}
	return nil, n.ent.Load()
}

// writesThrough makes s, staged by a write through this inode (an open
// for writing, a truncate), what the inode shows, and keeps the inode's
// number for whatever s is committed as: the file written through an
// inode is the same file after its commit. A new number per commit (the
// number names the content) broke what holds a file across another
// process's rewrite of it: flock and fcntl locks locked the old inode
// (read-modify-write loops under flock lost updates), SQLite's second
// connection took the database for moved (SQLITE_READONLY_DBMOVED), and
// tail -f stopped at the first append. The kernel's pages of the inode
// are the written bytes, so keeping them stays right; content another
// mount commits still comes under a new number.
//
// A name that shared its number with a hard link's other names (Link)
// shares it no longer: they show other bytes from now on. The name
// written keeps the number, its writer's inode, and the others get
// another (inoKeeper.written); their kernel entries are dropped, from
// the notifier's goroutine (notify.go), or stat showed them under the
// old number until the metadata TTL, and cp f c refused to copy "the
// same file" (audit 41).
func (n *slotFile) writesThrough(s *staging.File) {
	n.st.Store(s)
	a, name := n.StableAttr(), n.slot()
	parted, ok := n.f.inos.written(n.id, name, a.Ino, a.Gen, s)
	if !ok {
		// A link's new name whose sharing ended before: its next
		// lookup gives it a number of its own already, and the file
		// written keeps another.
		n.f.inos.created(n.id, name, inoOf("staged", n.id.String(), name, strconv.FormatUint(stagedSeq.Add(1), 10)), s)
	}
	if len(parted) > 0 {
		n.f.notify.names(n.id, parted)
	}
}

// keepIno makes ino the kept number of the file this inode shows at name,
// unless one is kept already.
func (n *slotFile) keepIno(name string, ino uint64) {
	if n.StableAttr().Gen != 0 {
		// A link's new name: its number is its source's
		// (inoKeeper.linkedFor), or kept with its generation once
		// written (inoKeeper.written).
		return
	}
	s, e := n.current()
	if s != nil {
		if _, _, ok := n.f.inos.forStaged(n.id, name, s); !ok {
			n.f.inos.created(n.id, name, ino, s)
		}
		return
	}
	if e != nil {
		if _, _, ok := n.f.inos.forFile(n.id, name, e.Digest); !ok {
			n.f.inos.committed(n.id, name, ino, e.Digest)
		}
	}
}

// adopt makes e this inode's committed entry when it holds the bytes the
// inode shows now (same digest and size), so that a rename or a chmod,
// which commit a new descriptor of the same blob, keep the inode number
// and its page cache. It reports whether e was adopted.
func (n *slotFile) adopt(e layout.Entry) bool {
	st := n.st.Load()
	s, cur := n.current()
	if s != nil {
		// Staged: the same file only once its bytes are what they were
		// committed as (closed, its release not yet run).
		if d, ok := s.CleanDigest(); !ok || d != e.Digest {
			return false
		}
	} else if cur == nil || cur.Digest != e.Digest || cur.Size != e.Size {
		return false
	}
	n.ent.Store(&e)
	if st != nil {
		// The entry adopted is newer than what the finished staged file
		// became; an open that staged the file anew meanwhile wins.
		n.st.CompareAndSwap(st, nil)
	}
	return true
}

func (n *slotFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Nlink = 1
	if n.gone.Load() {
		out.Nlink = 0
	}
	s, e := n.current()
	switch {
	case s != nil:
		a := s.Stat()
		out.Mode = syscall.S_IFREG | a.Mode
		out.Size, out.Blocks = uint64(a.Size), (uint64(a.Size)+511)/512
		setTimes(&out.Attr, a.Mtime)
	case e != nil:
		sz, err := n.f.blobs.Size(ctx, &e.Descriptor)
		if err != nil {
			return n.f.errnoOf("getattr "+n.slot(), err)
		}
		out.Size, out.Blocks = uint64(sz), (uint64(sz)+511)/512
		n.f.descAttr(&out.Attr, &e.Descriptor, false, n.id.Time())
	default:
		return syscall.ENOENT
	}
	n.f.owner(&out.Attr)
	out.Blksize = ioBlockSize
	return 0
}

func (n *slotFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	write := flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0
	if !write {
		if s, _ := n.current(); s != nil {
			if n.pt.busy(ctx) {
				return nil, 0, syscall.ETXTBSY // pinned.go: the kernel would refuse it (EIO)
			}
			if n.f.w.Retain(n.id, s) {
				// Read past the page cache, which is left alone: an open
				// that drops it waits for the page a WRITE holds, which
				// is all of a first write's fetch of the committed bytes
				// (audit 6: cat waited seconds behind an editor's save).
				// The pages are what writes through this inode made.
				return &whandle{f: n.f, id: n.id, s: s, n: n, readOnly: true, counted: true}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_KEEP_CACHE, 0
			}
			// Released meanwhile: the committed entry answers, below.
		}
		if fh, fl, ok, errno := n.openCommitted(ctx); ok || errno != 0 {
			return fh, fl, errno
		}
		return nil, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0 // no handle: nothing to flush (fileNode.Open)
	}
	if n.pt.busy(ctx) {
		// Being read through passthrough: the kernel refuses any other
		// open of the inode (pinned.go), so say what a running program's
		// file says instead of its EIO.
		return nil, 0, syscall.ETXTBSY
	}
	// The file as the bucket holds it now is opened, even if another
	// mount changed it since the kernel looked it up (OpenFresh). A file
	// another mount removed is ESTALE (staging.ErrChanged): the kernel
	// looks the name up again and retries the open once, which finds no
	// file (or creates one, for O_CREAT). truncate(2) and setxattr(2) of
	// a path are retried the same way.
	s, err := n.f.w.OpenFresh(ctx, n.id, n.slot(), n.base, flags&syscall.O_TRUNC != 0)
	if err != nil {
		return nil, 0, n.f.errnoOf("open "+n.slot(), err)
	}
	n.writesThrough(s)
	h := &whandle{f: n.f, id: n.id, s: s, n: n, counted: true, append: flags&syscall.O_APPEND != 0, whole: flags&syscall.O_TRUNC != 0}
	if h.whole {
		s.OpenedWhole()
	}
	if s.Rebased() {
		// The kernel's size of the file is older than the file. Its
		// reads refresh it by themselves when they reach past that size
		// (and the open dropped its pages); a stat would still show it
		// until the attribute timeout. The notification goes out after
		// this handler returns: sent from inside a request, it can
		// deadlock against the kernel (notify.go).
		go n.NotifyContent(-1, 0) // attributes only
	}
	return h, h.openFlags(), 0
}

// openCommitted opens the committed content for reading through
// passthrough when the mount and the content allow it (ok false: they do
// not). A file whose passthrough handles still read another blob (its
// content changed under the same inode) is busy: go-fuse would hand the
// new open the old backing file.
func (n *slotFile) openCommitted(ctx context.Context) (gofs.FileHandle, uint32, bool, syscall.Errno) {
	_, e := n.current()
	if e == nil || !n.f.passthrough.Load() {
		return nil, 0, false, 0
	}
	n.ptMu.Lock()
	defer n.ptMu.Unlock()
	if n.ptDigest != e.Digest && n.pt.busy(ctx) {
		return nil, 0, false, syscall.ETXTBSY
	}
	fh, fl, ok, errno := n.f.openPassthrough(ctx, &n.pt, &blobContent{f: n.f, d: &e.Descriptor})
	if ok {
		n.ptDigest = e.Digest
	}
	return fh, fl, ok, errno
}

func (n *slotFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h, ok := fh.(*whandle); ok {
		return h.Read(ctx, dest, off)
	}
	s, e := n.current()
	if s != nil {
		k, err := s.ReadAt(ctx, dest, off)
		if errors.Is(err, staging.ErrClosed) {
			// Its last release forgot it since current(): the content
			// is the committed entry now.
			s, e = n.current()
			if s != nil {
				k, err = s.ReadAt(ctx, dest, off)
			}
		}
		if s != nil {
			if err != nil {
				return nil, n.f.errnoOf("read "+n.slot(), err)
			}
			return fuse.ReadResultData(dest[:k]), 0
		}
	}
	if e == nil {
		return nil, syscall.ENOENT
	}
	var pos *readahead.Pos
	if off == 0 {
		pos = &readahead.Pos{ID: n.id, Name: n.slot()}
	}
	res, err := n.f.readContent(ctx, &blobContent{f: n.f, d: &e.Descriptor, pos: pos}, dest, off)
	if err != nil {
		return nil, n.f.errnoOf("read "+n.slot(), err)
	}
	return res, 0
}

func (n *slotFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	// chown first: a refused setattr changes nothing.
	if e := n.f.chownErrno(in); e != 0 {
		return e
	}
	if _, ok := in.GetSize(); !ok {
		// utimes or chmod of a file being written (touch does this while
		// its descriptor is open) is a touch: the close then commits a new
		// empty file at once instead of leaving it to the asynchronous
		// release. The times and mode themselves are kept below.
		if s, _ := n.current(); s != nil {
			s.Touch()
		}
	}
	if sz, ok := in.GetSize(); ok {
		if h, ok := fh.(*whandle); ok && !h.readOnly {
			if err := h.s.Truncate(ctx, int64(sz)); err != nil {
				return n.f.errnoOf("truncate "+n.slot(), err)
			}
			h.wrote.Store(h.s.Gen())
		} else {
			// truncate(2) of a path (open(O_TRUNC) is an OPEN with
			// O_TRUNC, ATOMIC_O_TRUNC): committed at once, as close(2)
			// would, and undone if that fails (staging.Writer.TruncateName).
			s, err := n.f.w.TruncateName(ctx, n.id, n.slot(), n.base, int64(sz), fh == nil)
			if s != nil {
				n.writesThrough(s)
			}
			if err != nil {
				return n.f.errnoOf("truncate "+n.slot(), err)
			}
		}
	}
	if c, ok := attrChangeOf(in); ok {
		if e := n.changeAttrs(ctx, c); e != 0 {
			return e
		}
	}
	return n.Getattr(ctx, fh, out)
}

// changeAttrs keeps a chmod or utimes of a slot file as posix-mode /
// posix-mtime metadata (staging.Writer.SetAttrs): on the staged copy when
// the file has one, else as a new descriptor of the same blob.
func (n *slotFile) changeAttrs(ctx context.Context, c staging.AttrChange) syscall.Errno {
	name := n.slot()
	// The new descriptor of the same bytes keeps the number the kernel
	// knows (ino.go), also for a file this mount never wrote: a number
	// that changed under a chmod let a second flock of the file in while
	// the first held the old inode.
	n.keepIno(name, n.StableAttr().Ino)
	r, err := n.f.w.SetAttrs(ctx, n.id, name, c, n.base, n.ent.Load())
	if err != nil {
		return n.f.errnoOf("setattr "+name, err)
	}
	switch {
	case r.File != nil:
		n.st.Store(r.File)
	case r.Entry != nil && !n.adopt(*r.Entry):
		// Another writer changed the bytes meanwhile: the next lookup
		// shows the file it made.
		n.f.log.Debug("setattr: content changed under a metadata change", "session", n.id, "name", name)
	}
	return 0
}

func (n *slotFile) xattrs() map[string]string {
	s, e := n.current()
	if s != nil {
		if c := s.CommittedAsIs(); c != nil {
			// Closed, committed, its release not come yet: the
			// descriptor's attributes, as once it is released. Built
			// from the staged file, digest, version and the rest were
			// missing (ENODATA) for a moment after close(2) returned.
			return descXattrs(c)()
		}
		a := s.Attrs()
		m := map[string]string{}
		for k, v := range a.Meta {
			m["user.pugmark.meta."+k] = v
		}
		if a.ContentType != "" {
			m["user.pugmark.content-type"] = a.ContentType
		}
		if a.SchemaURL != "" {
			m["user.pugmark.schema-url"] = a.SchemaURL
		}
		return m
	}
	if e != nil {
		return descXattrs(e)()
	}
	return nil
}

func (n *slotFile) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return getxattr(n.xattrs, attr, dest)
}

func (n *slotFile) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return listxattr(n.xattrs, dest)
}

func (n *slotFile) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if settableXattr(attr) {
		// XATTR_CREATE and XATTR_REPLACE, as setxattr(2) has them: they
		// were ignored, and a create over a value replaced it (audit 17).
		_, exists := n.xattrs()[attr]
		switch {
		case flags&unix.XATTR_CREATE != 0 && exists:
			return syscall.EEXIST
		case flags&unix.XATTR_REPLACE != 0 && !exists:
			return syscall.ENODATA
		}
	}
	return n.changeXattr(ctx, attr, string(data), false)
}

func (n *slotFile) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if _, exists := n.xattrs()[attr]; settableXattr(attr) && !exists {
		return syscall.ENODATA // removexattr(2) of an attribute the file has not
	}
	return n.changeXattr(ctx, attr, "", true)
}

// changeXattr sets descriptor metadata: on the staged file when a write is
// in progress, else as a new descriptor with the same blob, committed now.
func (n *slotFile) changeXattr(ctx context.Context, attr, val string, remove bool) syscall.Errno {
	key, isMeta := strings.CutPrefix(attr, "user.pugmark.meta.")
	if !isMeta && attr != "user.pugmark.content-type" && attr != "user.pugmark.schema-url" {
		if strings.HasPrefix(attr, "user.pugmark.") {
			// Derived from the descriptor: not an attribute that can
			// be set. ENOTSUP, not EPERM: cp -a and mv from another
			// session (whose digest, version... they copy) pass over
			// it quietly, where EPERM was a warning per attribute.
			return syscall.ENOTSUP
		}
		return syscall.ENOTSUP
	}
	if isMeta && key == "" {
		return syscall.EINVAL
	}
	if !remove && (!utf8.ValidString(key) || !utf8.ValidString(val)) {
		// A descriptor's metadata is JSON strings: bytes that are not
		// UTF-8 were stored as U+FFFD, while this mount went on showing
		// them as set (audit 17). Refused, as such a name is.
		return syscall.EILSEQ
	}
	if isMeta && key == layout.MetaPosixMode && !remove && !layout.ValidPosixMode(val) {
		// A mode no reader can use (0o600, " 600"): refused, where it was
		// stored and the file then showed readers' fallback (audit 14).
		return syscall.EINVAL
	}
	if !remove {
		// Checked against what the file has now, before staging: two
		// setxattrs racing can overshoot by one value, not without bound.
		if e := xattrBound(n.xattrs(), attr, val); e != 0 {
			return e
		}
	}
	s, err := n.f.w.OpenFresh(ctx, n.id, n.slot(), n.base, false)
	if err != nil {
		return n.f.errnoOf("setxattr "+n.slot(), err)
	}
	n.writesThrough(s) // its commit keeps this inode's number, as a chmod's
	err = n.f.w.ChangeAttrs(ctx, n.id, s, func(a *staging.Attrs) {
		switch {
		case isMeta && remove:
			delete(a.Meta, key)
		case isMeta:
			if a.Meta == nil {
				a.Meta = map[string]string{}
			}
			a.Meta[key] = val
		case attr == "user.pugmark.content-type":
			a.ContentType = val
		default:
			a.SchemaURL = val
		}
	})
	if err != nil {
		return n.f.errnoOf("setxattr "+n.slot(), err)
	}
	return 0
}

// whandle is an open file handle on a staged file.
type whandle struct {
	f        *FS
	id       layout.SessionID
	s        *staging.File
	n        *slotFile
	readOnly bool
	counted  bool
	// append marks an O_APPEND open: its writes go at the staged file's
	// end (staging.File.Append), whatever offset the kernel sent.
	append bool
	// whole marks an O_TRUNC open: what it writes replaces the file, so
	// while it is open the file's commits are not refused for another
	// writer's commit since the shared staged file's last commit
	// (staging.File.OpenedWhole).
	whole bool
	// wrote is the staged file's generation after this descriptor's last
	// write (staging.File.Gen), for its close (FlushSince); 0 before any.
	wrote    atomic.Uint64
	released atomic.Bool
}

// openFlags are the FUSE open flags of a writable handle. An O_APPEND one
// bypasses the page cache: its writes land at the staged file's end,
// which may differ from where the kernel would have put them in its
// pages.
func (h *whandle) openFlags() uint32 {
	if h.append {
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}

var (
	_ = (gofs.FileReader)((*whandle)(nil))
	_ = (gofs.FileWriter)((*whandle)(nil))
	_ = (gofs.FileFlusher)((*whandle)(nil))
	_ = (gofs.FileFsyncer)((*whandle)(nil))
	_ = (gofs.FileReleaser)((*whandle)(nil))
	_ = (gofs.FileGetattrer)((*whandle)(nil))
)

func (h *whandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	k, err := h.s.ReadAt(ctx, dest, off)
	if err != nil {
		return nil, h.f.errnoOf("read "+h.s.Name(), err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (h *whandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.readOnly {
		return 0, syscall.EBADF
	}
	var k int
	var err error
	if h.append {
		k, err = h.s.Append(ctx, data)
	} else {
		k, err = h.s.WriteAt(ctx, data, off)
	}
	if err != nil {
		return uint32(k), h.f.errnoOf("write "+h.s.Name(), err)
	}
	h.wrote.Store(h.s.Gen())
	return uint32(k), 0
}

func (h *whandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.n.Getattr(ctx, h, out)
}

func (h *whandle) Flush(ctx context.Context) syscall.Errno {
	if h.readOnly {
		return 0
	}
	defer h.dropIfRebased(h.s.Rebases())
	if err := h.f.w.FlushSince(ctx, h.id, h.s, h.wrote.Load()); err != nil {
		return h.f.errnoOf("close "+h.s.Name(), err)
	}
	return 0
}

// dropIfRebased drops the kernel's pages and size of the file when a
// commit moved the appended bytes of its staged file onto another
// writer's content since they were last dropped: the notifier calls it
// after every commit naming the file, for the commits no descriptor of
// the file asked for (an fsync of another file with --commit=fsync, or
// of the session directory) and that whandle.dropIfRebased therefore
// misses. Never from inside a request (notify.go).
func (n *slotFile) dropIfRebased() {
	if st := n.st.Load(); st != nil {
		n.dropRebased(st)
	}
}

// dropRebased drops the kernel's pages and size of the file when st
// was rebased since they were last dropped for it: once for each
// rebase, whether the commit's notice or the descriptor whose close or
// fsync made it comes first (each dropped them, and the kernel read the
// file again, at every close of two mounts' appends: review 9).
func (n *slotFile) dropRebased(st *staging.File) {
	n.droppedMu.Lock()
	// Read under the lock: a rebase count only grows, and two callers
	// that read it outside could record the older one last (review 10).
	r := st.Rebases()
	drop := r != 0 && (n.dropped.st != st || n.dropped.rebases < r)
	if drop {
		n.dropped.st, n.dropped.rebases = st, r
	}
	n.droppedMu.Unlock()
	if drop {
		n.NotifyContent(0, 0)
	}
}

// dropIfRebased drops the kernel's pages and size of the file when a
// commit since the file was at rebases (staging.File.Rebases) moved its
// appended bytes onto another writer's content: the kernel's are older
// than the file. From a goroutine: sent from inside a request, a
// notification can deadlock against the kernel (notify.go).
func (h *whandle) dropIfRebased(rebases uint64) {
	if h.s.Rebases() != rebases {
		go h.n.dropRebased(h.s)
	}
}

func (h *whandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	s := h.s
	if h.readOnly {
		s = nil // nothing of it to commit (a close of it commits nothing either)
	}
	defer h.dropIfRebased(h.s.Rebases())
	if err := h.f.w.Sync(ctx, h.id, s); err != nil {
		return h.f.errnoOf("fsync "+h.s.Name(), err)
	}
	return 0
}

func (h *whandle) Release(ctx context.Context) syscall.Errno {
	if h.released.Swap(true) || !h.counted {
		return 0
	}
	// The backstop: Flush normally committed already, and a failure
	// there went back to close(2) and is not retried (staging's Release).
	// Release errors reach no program, so this one is logged.
	defer h.dropIfRebased(h.s.Rebases())
	release := h.f.w.Release
	if h.readOnly {
		release = h.f.w.ReleaseRead
	}
	if err := release(ctx, h.id, h.s); err != nil {
		h.f.log.Error("commit on release failed", "session", h.id, "name", h.s.Name(), "err", err)
	}
	if h.whole {
		h.s.ClosedWhole()
	}
	return 0
}
