package fs

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// refsDir is refs/ (kind == "") or refs/<kind>/.
type refsDir struct {
	f    *FS
	kind string
}

func (r *refsDir) entries(ctx context.Context) ([]child, error) {
	refs, err := r.f.views.Refs(ctx)
	if err != nil {
		return nil, err
	}
	var out []child
	kinds := map[string]bool{}
	for _, name := range refs {
		if _, ok := layout.NamePath(name); !ok {
			continue // a name no path reaches (a part over 255 bytes)
		}
		kind, leaf, nested := strings.Cut(name, "/")
		if r.kind == "" {
			if nested {
				kinds[kind] = true
				continue
			}
			out = append(out, r.f.refChild(name, name))
		} else if nested && kind == r.kind {
			out = append(out, r.f.refChild(leaf, name))
		}
	}
	if r.kind == "" {
		r.f.refs.addDirs(kinds)
	}
	// A ref created here and still open shadows the bucket's of its
	// name (it was renamed over it): its close writes that name.
	for name, node := range r.f.refs.pendingRefs() {
		kind, leaf, nested := strings.Cut(name, "/")
		switch {
		case r.kind == "" && nested:
			kinds[kind] = true
		case r.kind == "":
			out = shadow(out, pendingChild(name, node))
		case nested && kind == r.kind:
			out = shadow(out, pendingChild(leaf, node))
		}
	}
	files := map[string]bool{}
	for _, c := range out {
		files[c.name] = true
	}
	for k := range kinds {
		if !files[k] {
			out = append(out, r.f.refsKindChild(k))
		}
	}
	return out, nil
}

// list lists the directory, and reads the values of its refs wide in
// parallel first: the kernel asks the size of every entry, one after
// another, and each is the ref's value.
func (r *refsDir) list(ctx context.Context) ([]child, error) {
	cs, err := r.entries(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range cs {
		if c.mode == syscall.S_IFREG && c.ttl != uncached {
			names = append(names, r.full(c.name))
		}
	}
	r.f.views.PrefetchRefs(ctx, names)
	return cs, nil
}

// full is the name of the ref leaf shows in this directory.
func (r *refsDir) full(leaf string) string {
	if r.kind == "" {
		return leaf
	}
	return r.kind + "/" + leaf
}

func (r *refsDir) find(ctx context.Context, name string) (child, error) {
	cs, err := r.entries(ctx)
	if err != nil {
		return child{}, err
	}
	if c, err := findIn(cs, name); err == nil {
		return c, nil
	}
	// A ref made since the last listing: look it up directly.
	full := r.full(name)
	if layout.ValidateRefName(full) != nil {
		return child{}, syscall.ENOENT
	}
	if _, err := r.f.views.Ref(ctx, full); err != nil {
		return child{}, err
	}
	return r.f.refChild(name, full), nil
}

func (r *refsDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	if r.f.sharedWritable() {
		out.Mode = syscall.S_IFDIR | 0o755 // writing refs/<name> is a Link
	}
	return nil
}

// refChild is a ref file: its target, one line.
func (f *FS) refChild(leaf, name string) child {
	return child{name: leaf, mode: syscall.S_IFREG, ino: f.moved.avoid(inoOf("ref", name)), ttl: f.ttl,
		node: func() gofsNode { return f.refNode(name) }}
}

// shadow returns cs with c in place of the entry of its name, if any.
func shadow(cs []child, c child) []child {
	for i := range cs {
		if cs[i].name == c.name {
			cs[i] = c
			return cs
		}
	}
	return append(cs, c)
}

// pendingChild is the entry of a ref created here and still open: the
// inode the create made, never kept by the kernel, since its content
// changes with every write.
func pendingChild(leaf string, node *refFile) child {
	return child{name: leaf, mode: syscall.S_IFREG, ino: node.StableAttr().Ino, ttl: uncached,
		node: func() gofsNode { return node }}
}

// refSource reads a ref for its file: the target, one line, and the
// time the ref was last written, which is the file's mtime (the mount's
// start said nothing, and `ls -lt refs/` could not show which ref moved
// last).
type refSource struct {
	f    *FS
	name func() string
	mt   atomic.Pointer[time.Time] // the ref's time at the last read
}

func (s *refSource) read(ctx context.Context) ([]byte, error) {
	r, err := s.f.views.Ref(ctx, s.name())
	if err != nil {
		return nil, err
	}
	if !r.ModTime.IsZero() {
		s.mt.Store(&r.ModTime)
	}
	return []byte(r.Target + "\n"), nil
}

// mtime is the ref's time at the last read; zero before one.
func (s *refSource) mtime() time.Time {
	if t := s.mt.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// refContent is the content of ref name's file.
func (f *FS) refContent(name func() string) *bytesContent {
	src := &refSource{f: f, name: name}
	return &bytesContent{gen: src.read, at: src.mtime}
}

// refNode returns a ref file: writable (a Link, compare-and-swap against
// the value seen at open) unless the mount is read-only.
func (f *FS) refNode(name string) gofsNode {
	if f.cfg.NoOpen {
		src := &refSource{f: f, name: func() string { return name }}
		c := f.newSnapContent(src.read, time.Time{})
		c.at = src.mtime
		return &fileNode{f: f, c: c}
	}
	if !f.sharedWritable() {
		return &fileNode{f: f, c: f.refContent(func() string { return name })}
	}
	return f.newRefFile(name)
}

// refFile is a writable ref.
type refFile struct {
	fileNode
	// ref is the ref's name: a rename inside refs/ moves the inode, and
	// with it the name its reads and writes go to.
	ref atomic.Pointer[string]
	// bufs are the descriptors open for writing (refWrites.opened).
	bufs openBufs[*refHandle]
	// commits is held shared by every write of a handle across its look
	// at bufHandle.dropped and the ref's name, and its write; an unlink
	// and a rename take it whole, on every node of the names they change
	// (refsNode.holdCommits), around their bucket calls and the changes
	// of the nodes after them, so that a write that started before has
	// landed (and is removed, or moved) and none starts until what the
	// handles hold is dropped, or their name and base moved.
	//
	// LOCK ORDERING: bufHandle.commitMu, then commits, then refWrites.mu,
	// then openBufs.mu. A rename or unlink holds the commits of several
	// nodes, taken in the order of their numbers, and no commitMu.
	commits sync.RWMutex
}

// newRefFile returns the writable file of ref name.
func (f *FS) newRefFile(name string) *refFile {
	r := &refFile{fileNode: fileNode{f: f, writable: true}}
	r.ref.Store(&name)
	r.c = f.refContent(r.name)
	return r
}

// name is the ref's name now.
func (r *refFile) name() string { return *r.ref.Load() }

var (
	_ = (gofs.NodeOpener)((*refFile)(nil))
	_ = (gofs.NodeGetattrer)((*refFile)(nil))
	_ = (gofs.NodeSetattrer)((*refFile)(nil))
	_ = (gofs.NodeSetxattrer)((*refFile)(nil))
	_ = (gofs.NodeRemovexattrer)((*refFile)(nil))
)

// Setxattr refuses: a ref is a target and nothing else (§9); ENOTSUP,
// as on a memory record.
func (r *refFile) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

// Removexattr refuses, as Setxattr does.
func (r *refFile) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

func (r *refFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) == 0 {
		if body, ok := r.bufs.content(); ok {
			// Written through a descriptor still open (a temporary
			// ref renamed over this one before its close, say), or
			// created here and not written yet: what the descriptors
			// hold, as on a local disk.
			if r.bufs.unsaved() {
				return &refHandle{r: r, bufHandle: bufHandle{buf: body}}, fuse.FOPEN_DIRECT_IO, 0
			}
			if _, err := r.f.store.ReadRef(ctx, r.name()); errors.Is(err, layout.ErrNotFound) {
				return &refHandle{r: r, bufHandle: bufHandle{buf: body}}, fuse.FOPEN_DIRECT_IO, 0
			}
		}
		return r.fileNode.Open(ctx, flags)
	}
	// A rename of the ref (holdCommits) waits for the read of its value
	// and the descriptor's registration, and this for it: one between
	// them did not move the value to the new name, and the close swapped
	// against the old name's, ESTALE (review 43).
	r.commits.RLock()
	defer r.commits.RUnlock()
	prev, err := r.f.store.ReadRef(ctx, r.name())
	if err != nil && !errors.Is(err, layout.ErrNotFound) {
		return nil, 0, r.f.errnoOf("open ref "+r.name(), err)
	}
	h := &refHandle{r: r, prev: prev, existed: err == nil}
	if err == nil && flags&syscall.O_TRUNC == 0 {
		h.buf = []byte(prev.Target + "\n")
	}
	// Emptied: unsaved until written (Release says so if it never is).
	h.dirty = flags&syscall.O_TRUNC != 0
	r.f.refs.opened(r, h)
	return h, fuse.FOPEN_DIRECT_IO, 0
}

var _ = (gofs.NodeReader)((*refFile)(nil))

// Read reads a ref handle's buffer: what a descriptor open for writing
// wrote, or a new ref's content (go-fuse asks the node before the
// handle, and fileNode reads the bucket).
func (r *refFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h, ok := fh.(*refHandle); ok {
		return h.bufHandle.Read(ctx, dest, off)
	}
	return r.fileNode.Read(ctx, fh, dest, off)
}

// Getattr answers for a ref created here and not written yet from what
// its open descriptors hold: the bucket has no such ref, and sed -i's
// fchmod and fchown of its new temporary file were ENOENT.
func (r *refFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	errno := syscall.ENOENT
	if !r.bufs.unsaved() {
		if errno = r.fileNode.Getattr(ctx, fh, out); errno != syscall.ENOENT {
			return errno
		}
	}
	// Written and not closed, or created and not written: what its
	// descriptors hold (what a read by name gets).
	body, open := r.bufs.content()
	if !open {
		return errno
	}
	sz := uint64(len(body))
	out.Mode = syscall.S_IFREG | 0o644
	out.Size, out.Blocks = sz, (sz+511)/512
	setTimes(&out.Attr, r.f.start)
	r.f.owner(&out.Attr)
	out.Nlink = 1
	out.Blksize = ioBlockSize
	out.SetTimeout(uncached)
	return 0
}

func (r *refFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := r.f.refAttrErrno(in); e != 0 {
		return e
	}
	if sz, ok := in.GetSize(); ok {
		if h, ok := fh.(*refHandle); ok {
			if err := h.truncate(sz, true); err != nil {
				return r.f.errnoOf("truncate ref", err)
			}
			return r.Getattr(ctx, fh, out)
		}
		// The O_TRUNC follow-up reaches the handles open for writing;
		// truncate(2) of a ref nobody has open would only make it empty,
		// which no ref can be: nothing to do.
		if _, err := r.bufs.truncate(sz); err != nil {
			return r.f.errnoOf("truncate ref", err)
		}
	}
	return r.Getattr(ctx, fh, out)
}

type refHandle struct {
	bufHandle
	r *refFile
	// prev and existed are the ref as this handle last saw it, the base
	// of its next write's compare-and-swap. GUARDED_BY commitMu with
	// r.commits held shared, or r.commits held whole (a rename moves
	// them to the new name's, and cannot take commitMu: a write holds it
	// while it waits for commits).
	prev    layout.Ref
	existed bool
	// unknown is this handle's last write when its outcome was unknown
	// (EIO): the next write asks whether it landed, and if so swaps
	// against it, not against prev, or its own landed write counted as
	// another writer's change (ESTALE, review 43). GUARDED_BY commitMu.
	unknown *layout.RefOutcomeUnknownError
}

var (
	_ = (gofs.FileFlusher)((*refHandle)(nil))
	_ = (gofs.FileFsyncer)((*refHandle)(nil))
)

// Fsync writes the ref now, as a close would (vim's :w fsyncs, and
// reported the EOPNOTSUPP it got as a failed write). Bytes that are no
// ref (vim fsyncs its swap file, .<name>.swp, a ref's name in refs/)
// are EINVAL and kept nowhere: the caller has the error, and the bytes
// are still in the open file for its close, which keeps them in
// .pugmark/failed/ if it cannot write them either. Each vim edit of a
// ref left two copies of its swap file there.
func (h *refHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.write(ctx, true)
}

var _ = (gofs.FileReleaser)((*refHandle)(nil))

// Release forgets the handle. A ref that was never written through it
// holds no target, so there is nothing to commit.
func (h *refHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	// Emptied (O_TRUNC) or created and never written: no ref can be
	// empty, and a close that writes nothing must succeed (shells dup
	// and close a descriptor before writing to it), so only the log
	// can say that the ref kept its value (or was not made).
	unwritten := h.dirty && !h.touched && !h.dropped
	h.mu.Unlock()
	if unwritten {
		h.r.f.log.Warn("ref not written: it was emptied or created and closed without a line, and a ref is one line holding its target (rm removes one)", "ref", h.r.name())
	}
	if h.r.f.refs.closed(h.r, h) {
		h.r.f.refs.forget(h.r.name(), h.r)
	}
	return 0
}

// Flush writes the ref: the first line of what was written.
func (h *refHandle) Flush(ctx context.Context) syscall.Errno { return h.write(ctx, false) }

// write writes the ref, for a close or, with fsync set, an fsync(2).
func (h *refHandle) write(ctx context.Context, fsync bool) syscall.Errno {
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	body, gen, ok := h.take()
	if !ok {
		return 0
	}
	f := h.r.f
	h.r.commits.RLock()
	defer h.r.commits.RUnlock()
	// The name now that no rename is under way: one that went ahead of
	// this write moved it (and prev) to the new name.
	name := h.r.name()
	if err := staging.CheckRef(name, body); fsync && err != nil {
		return f.errnoOf("fsync ref "+name, err)
	}
	if h.isDropped() {
		h.settle(gen, nil) // removed or renamed over: written nowhere
		return 0
	}
	if u := h.unknown; u != nil && u.Name == name {
		if cur, landed, err := f.recs.ResolveRef(context.WithoutCancel(ctx), u); err == nil && landed {
			h.prev, h.existed = cur, true
		}
		// Not landed: another value is there, and the swap against
		// prev says so; still unknown: the swap against prev replaces
		// the value the earlier write found, as it would have.
	}
	prev, existed, err := f.recs.WriteRef(context.WithoutCancel(ctx), name, h.prev, h.existed, body)
	if err != nil {
		var u *layout.RefOutcomeUnknownError
		if errors.As(err, &u) {
			h.unknown = u
		}
		return f.errnoOf("write ref "+name, err)
	}
	h.settle(gen, nil)
	h.prev, h.existed, h.unknown = prev, existed, nil
	return 0
}

// refsNode is a writable refs/ directory.
type refsNode struct {
	metaDir
	kind string
}

var (
	_ = (gofs.NodeCreater)((*refsNode)(nil))
	_ = (gofs.NodeMkdirer)((*refsNode)(nil))
	_ = (gofs.NodeUnlinker)((*refsNode)(nil))
	_ = (gofs.NodeRenamer)((*refsNode)(nil))
)

// full is the ref name of name in this directory.
func (n *refsNode) full(name string) string {
	if n.kind != "" {
		return n.kind + "/" + name
	}
	return name
}

// Rename points the new name at the target the old one holds and removes
// the old one, for editors' write-a-temporary-file-then-rename (sed -i).
// It is two writes, not one: a ref is its own object (§9), and the link
// of the new name is a compare-and-swap against its value now. Only
// within one directory of refs/ (EXDEV across, as mv then copies).
func (n *refsNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	dst, ok := newParent.(*refsNode)
	if !ok || dst.kind != n.kind {
		return syscall.EXDEV
	}
	const renameNoReplace = 1
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL
	}
	if in := n.GetChild(name); in != nil && in.IsDir() {
		// A directory of refs/ is the prefix of its refs, not an
		// object: mv copies and removes them one by one.
		return syscall.EXDEV
	}
	from, to := n.full(name), n.full(newName)
	if layout.ValidateRefName(to) != nil {
		return syscall.EINVAL
	}
	if from == to {
		return 0
	}
	ctx = context.WithoutCancel(ctx)
	f := n.f
	// The writes in flight of both names land first, and none starts
	// until the rename has and the nodes are changed: one of the old
	// name that landed after it brought that name back (or, for a ref
	// created and not written yet, made it, the new name empty), one of
	// the name renamed over replaced the value moved there (review 40).
	held, release := n.holdCommits(name, newName)
	defer release()
	open := false // a node of the old name has descriptors open for writing
	for _, r := range held {
		open = open || r.name() == from && !r.bufs.empty()
	}
	prev, existed, errno := n.moveRef(ctx, open, from, to, flags&renameNoReplace != 0)
	if errno != 0 {
		return errno
	}
	// The ref renamed over: what its descriptors hold goes nowhere.
	f.refs.forget(to, nil)
	for _, r := range held {
		if r.name() == to {
			r.bufs.drop()
		}
	}
	// The kernel keeps the source's inode under the new name: it reads
	// and writes the new name from now on, its descriptors' writes a
	// compare-and-swap against the new name's value now, and the old
	// name's next lookup gets a node of its own. An older node of the
	// old name (one the kernel replaced at a lookup, a descriptor still
	// open on it) moves with it.
	for _, r := range held {
		if r.name() != from {
			continue
		}
		f.moved.add(r.StableAttr().Ino)
		f.refs.movePending(from, to, r)
		r.ref.Store(&to)
		for _, h := range r.bufs.all() {
			h.prev, h.existed = prev, existed // r.commits held whole
		}
	}
	return 0
}

// holdCommits waits for the writes in flight of every ref file of this
// directory named names, and holds off their next ones until release:
// the kernel's node of each name, and every node of the ref with
// descriptors open for writing (refWrites.writing), since a node the
// kernel replaced at a later lookup of the name still writes it.
func (n *refsNode) holdCommits(names ...string) (held []*refFile, release func()) {
	found := map[*refFile]bool{}
	fulls := make([]string, len(names))
	for i, name := range names {
		fulls[i] = n.full(name)
		if in := n.GetChild(name); in != nil {
			if r, ok := in.Operations().(*refFile); ok {
				found[r] = true
			}
		}
	}
	for _, r := range n.f.refs.openForWriting() {
		if slices.Contains(fulls, r.name()) {
			found[r] = true
		}
	}
	for r := range found {
		held = append(held, r)
	}
	// One order for every caller.
	slices.SortFunc(held, func(a, b *refFile) int { return cmp.Compare(a.StableAttr().Ino, b.StableAttr().Ino) })
	for _, r := range held {
		r.commits.Lock()
	}
	return held, func() {
		for _, r := range held {
			r.commits.Unlock()
		}
	}
}

// refMoveAttempts bounds how often a rename of a ref is made again from
// the bucket's state when another writer changed the old name meanwhile.
const refMoveAttempts = 4

// moveRef points ref to at from's target and removes from, only if from
// still holds what was copied (a compare-and-delete): a value another
// writer put there meanwhile was deleted with it, acknowledged and then
// nowhere (audit 28). A change meanwhile makes the rename again with the
// new value, up to refMoveAttempts times, then ESTALE. It returns the new
// name's ref as written, for the descriptors open on the moved file.
// open says that a node of from has descriptors open for writing.
func (n *refsNode) moveRef(ctx context.Context, open bool, from, to string, noReplace bool) (layout.Ref, bool, syscall.Errno) {
	f := n.f
	var prev, orig layout.Ref
	var existed, origExisted, wrote bool
	// undo puts the new name back as it was before the rename: a failed
	// rename(2) leaves its target alone (review 30).
	undo := func() {
		if !wrote {
			return
		}
		var err error
		if origExisted {
			_, _, err = f.recs.WriteRef(ctx, to, prev, true, []byte(orig.Target+"\n"))
		} else {
			err = f.recs.DeleteRefIf(ctx, to, prev)
		}
		if err != nil {
			f.log.Warn("a failed rename of a ref could not put its target back", "ref", to, "err", err)
		}
	}
	for attempt := 1; ; attempt++ {
		src, err := f.store.ReadRef(ctx, from)
		// A ref created here and still open, not written yet (a temporary
		// file renamed over the ref before its close, Python's
		// NamedTemporaryFile + os.replace): its close writes the new name.
		pending := errors.Is(err, layout.ErrNotFound) && open
		if err != nil && !pending {
			return prev, existed, f.errnoOf("rename ref "+from, err)
		}
		if attempt == 1 {
			prev, err = f.store.ReadRef(ctx, to)
			existed = err == nil
			if err != nil && !errors.Is(err, layout.ErrNotFound) {
				return prev, existed, f.errnoOf("rename ref "+from, err)
			}
			if existed && noReplace {
				return prev, existed, syscall.EEXIST
			}
			orig, origExisted = prev, existed
		}
		if pending {
			return prev, existed, 0
		}
		if prev, existed, err = f.recs.WriteRef(ctx, to, prev, existed, []byte(src.Target+"\n")); err != nil {
			undo()
			return prev, existed, f.errnoOf("rename ref "+from+" to "+to, err)
		}
		wrote = true
		err = f.recs.DeleteRefIf(ctx, from, src)
		if err == nil {
			return prev, existed, 0
		}
		if !errors.Is(err, layout.ErrRefChanged) || attempt == refMoveAttempts {
			undo()
			return prev, existed, f.errnoOf("rename ref "+from, err)
		}
	}
}

func (n *refsNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	full := name
	if n.kind != "" {
		full = n.kind + "/" + name
	}
	if layout.ValidateRefName(full) != nil {
		return nil, nil, 0, syscall.EINVAL
	}
	node := n.f.newRefFile(full)
	in := n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: n.f.moved.avoid(inoOf("ref", full))})
	n.f.refs.setPending(full, node)
	out.Mode = syscall.S_IFREG | 0o644
	n.f.owner(&out.Attr)
	out.SetEntryTimeout(uncached)
	out.SetAttrTimeout(uncached)
	h := &refHandle{r: node, bufHandle: bufHandle{dirty: true}}
	n.f.refs.opened(node, h)
	return in, h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *refsNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.kind != "" || layout.ValidateRefName(name) != nil {
		return nil, syscall.EINVAL
	}
	in, errno := n.f.materialise(ctx, &n.Inode, n.f.refsKindChild(name), out)
	if errno == 0 {
		n.f.refs.setDir(name, true)
	}
	return in, errno
}

var _ = (gofs.NodeRmdirer)((*refsNode)(nil))

// Rmdir removes a directory of refs/ that mkdir made and that holds no
// ref; one that holds refs is ENOTEMPTY (unlink them first).
func (n *refsNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.kind != "" {
		return syscall.ENOENT // refs/ is two levels deep
	}
	refs, err := n.f.views.Refs(ctx)
	if err != nil {
		return n.f.errnoOf("rmdir refs/"+name, err)
	}
	for _, r := range refs {
		if strings.HasPrefix(r, name+"/") {
			return syscall.ENOTEMPTY
		}
	}
	if !n.f.refs.setDir(name, false) {
		return syscall.ENOENT
	}
	return 0
}

// refWrites is what a mount keeps of refs/ beyond the bucket: the
// directories it made by mkdir, kept for the mount's life (or until an
// rmdir), as memories/ keeps the namespaces it made, so that a ref can
// still be written under one once the TTL has passed (a directory of
// refs/ exists in the bucket only as the prefix of its refs); and the
// refs it created that are still open, found by name before their first
// write reaches the bucket (sed -i's and Python's temporary files); and
// the ref nodes with descriptors open for writing.
//
// LOCK ORDERING: refFile.commits, then mu, then openBufs.mu.
type refWrites struct {
	mu      sync.Mutex
	dirs    map[string]bool     // GUARDED_BY(mu)
	pending map[string]*refFile // GUARDED_BY(mu); by ref name
	// writing are the ref nodes with descriptors open for writing,
	// whatever name the kernel now gives them: a node renamed onto a
	// name (its number that of its old one) is replaced by a node of the
	// name's number at the name's next lookup, while a descriptor open on
	// it still writes the name (refsNode.holdCommits). GUARDED_BY(mu).
	writing map[*refFile]bool
}

// opened adds h, open for writing, to r's descriptors, and r to the
// nodes with descriptors open for writing.
func (w *refWrites) opened(r *refFile, h *refHandle) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writing == nil {
		w.writing = map[*refFile]bool{}
	}
	w.writing[r] = true
	r.bufs.add(h)
}

// closed removes h from r's descriptors, and r from the nodes with
// descriptors open for writing when it was the last; it reports whether
// it was.
func (w *refWrites) closed(r *refFile, h *refHandle) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.bufs.remove(h)
	if !r.bufs.empty() {
		return false
	}
	delete(w.writing, r)
	return true
}

// openForWriting returns the nodes with descriptors open for writing.
func (w *refWrites) openForWriting() []*refFile {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.writing))
}

// setDir adds directory kind (on) or removes it, reporting whether it
// was there.
func (w *refWrites) setDir(kind string, on bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := w.dirs[kind]
	if on && w.dirs == nil {
		w.dirs = map[string]bool{}
	}
	if on {
		w.dirs[kind] = true
	} else {
		delete(w.dirs, kind)
	}
	return had
}

// addDirs adds the directories made by mkdir to kinds.
func (w *refWrites) addDirs(kinds map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.dirs {
		kinds[k] = true
	}
}

// setPending notes r, created here and open, as ref name.
func (w *refWrites) setPending(name string, r *refFile) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		w.pending = map[string]*refFile{}
	}
	w.pending[name] = r
}

// movePending moves r from name from to name to, if it is pending.
func (w *refWrites) movePending(from, to string, r *refFile) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending[from] == r {
		delete(w.pending, from)
		w.pending[to] = r
	}
}

// forget drops ref name from the pending refs if it is r (nil: any).
func (w *refWrites) forget(name string, r *refFile) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.pending[name]; got != nil && (r == nil || got == r) {
		delete(w.pending, name)
	}
}

// pendingRefs returns the pending refs by name.
func (w *refWrites) pendingRefs() map[string]*refFile {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.pending)
}

func (n *refsNode) Unlink(ctx context.Context, name string) syscall.Errno {
	full := n.full(name)
	// A write of its descriptors in flight lands first, and none starts
	// until the removal has and what they hold is dropped: one that
	// landed after it made the ref again after rm returned 0 (review 40),
	// also from a node the kernel had replaced (holdCommits).
	held, release := n.holdCommits(name)
	defer release()
	open := false
	for _, r := range held {
		open = open || r.name() == full && !r.bufs.empty()
	}
	err := n.f.recs.DeleteRef(context.WithoutCancel(ctx), full)
	if errors.Is(err, layout.ErrNotFound) && open {
		err = nil // created here and not written yet: nothing to remove
	}
	if err == nil {
		n.f.refs.forget(full, nil)
		for _, r := range held {
			if r.name() == full {
				r.bufs.drop()
			}
		}
	}
	return n.f.errnoOf("unlink ref "+full, err)
}

func (f *FS) refsKindChild(kind string) child {
	return child{name: kind, mode: syscall.S_IFDIR, ino: inoOf("refkind", kind), ttl: f.ttl, node: func() gofsNode {
		rd := &refsDir{f: f, kind: kind}
		if !f.sharedWritable() {
			return &dirNode{f: f, ls: rd}
		}
		return &refsNode{metaDir: metaDir{dirNode: dirNode{f: f, ls: rd}}, kind: kind}
	}}
}
