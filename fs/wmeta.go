package fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// The write side of sessions/ (mkdir creates a session), memories/ and
// refs/.

// sessionsNode is sessions/ on a read-write mount.
type sessionsNode struct{ dirNode }

var _ = (gofs.NodeMkdirer)((*sessionsNode)(nil))

// Mkdir creates the session with that ID (idempotent, §5.1).
func (n *sessionsNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	id, err := layout.ParseSessionID(name)
	if err != nil || id.IsZero() || name != id.String() {
		return nil, syscall.EINVAL
	}
	if _, _, err := n.f.store.CreateSession(context.WithoutCancel(ctx), &layout.Manifest{Session: id, FirstSequenceNumber: 1}); err != nil {
		return nil, n.f.errnoOf("create session "+name, err)
	}
	n.f.cache.SessionCreated(id)
	n.f.cache.Invalidate(id)
	return n.f.materialise(ctx, &n.Inode, n.f.sessionChild(name, id), out)
}

// memNode returns the node of a memory record file.
func (f *FS) memNode(ns string, e layout.Entry) gofsNode {
	if f.cfg.ReadOnly {
		return &fileNode{f: f, c: &blobContent{f: f, d: e.Descriptor}, x: descXattrs(e)}
	}
	return &memFile{f: f, ns: ns, e: e, has: true}
}

// memDirNode is a writable directory under memories/.
type memDirNode struct {
	dirNode
	prefix string
}

var (
	_ = (gofs.NodeCreater)((*memDirNode)(nil))
	_ = (gofs.NodeMkdirer)((*memDirNode)(nil))
	_ = (gofs.NodeRmdirer)((*memDirNode)(nil))
	_ = (gofs.NodeUnlinker)((*memDirNode)(nil))
)

func (f *FS) memDirChild(name, prefix string) gofsNode {
	md := &memDir{f: f, prefix: prefix}
	if f.cfg.ReadOnly {
		return &dirNode{f: f, ls: md}
	}
	return &memDirNode{dirNode: dirNode{f: f, ls: md}, prefix: prefix}
}

func (n *memDirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.prefix == "" {
		return nil, nil, 0, syscall.EPERM // a record needs a namespace
	}
	if layout.ValidateMemoryName(name) != nil {
		return nil, nil, 0, syscall.EINVAL
	}
	node := &memFile{f: n.f, ns: n.prefix, e: layout.Entry{Descriptor: layout.Descriptor{Name: name}}}
	in := n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf("mem-new", n.prefix, name)})
	h := &memHandle{n: node, bufHandle: bufHandle{dirty: true}, write: true}
	node.bufs.add(&h.bufHandle)
	out.Mode = syscall.S_IFREG | 0o644
	n.f.owner(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	return in, h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *memDirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	sub := name
	if n.prefix != "" {
		sub = n.prefix + "/" + name
	}
	if layout.ValidateNamespace(sub) != nil {
		return nil, syscall.EINVAL
	}
	n.f.mem.mu.Lock()
	n.f.mem.dirs[sub] = true
	n.f.mem.mu.Unlock()
	return n.f.materialise(ctx, &n.Inode, n.f.memSubdir(name, sub), out)
}

func (n *memDirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.prefix == "" {
		return syscall.EPERM
	}
	res, err := n.f.store.WriteMemory(context.WithoutCancel(ctx), n.prefix, layout.MemoryWrite{Remove: []string{name}})
	n.f.views.InvalidateMemories()
	if err != nil {
		return n.f.errnoOf("unlink memory "+n.prefix+"/"+name, err)
	}
	if !res.Changed {
		return syscall.ENOENT
	}
	return 0
}

var _ = (gofs.NodeRenamer)((*memDirNode)(nil))

// Rename moves a record inside its namespace as one memory commit (the
// old name removed, the same blob under the new one), so that editors'
// write-a-temp-file-then-rename works on records too. Across namespaces
// it is EXDEV (mv then copies and removes).
func (n *memDirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	dst, ok := newParent.(*memDirNode)
	if !ok || dst.prefix != n.prefix {
		return syscall.EXDEV
	}
	const renameNoReplace, renameExchange = 1, 2
	if n.prefix == "" || flags&renameExchange != 0 {
		return syscall.EINVAL
	}
	if layout.ValidateMemoryName(newName) != nil {
		return syscall.EINVAL
	}
	if name == newName {
		return 0
	}
	f := n.f
	ctx = context.WithoutCancel(ctx)
	what := "rename memory " + n.prefix + "/" + name
	v, err := f.store.LatestMemoryVersion(ctx, n.prefix)
	if err != nil {
		return f.errnoOf(what, err)
	}
	var recs []layout.Descriptor
	if v > 0 {
		if recs, err = f.store.ReadMemory(ctx, n.prefix, v); err != nil {
			return f.errnoOf(what, err)
		}
	}
	var src *layout.Descriptor
	for i := range recs {
		switch recs[i].Name {
		case name:
			src = &recs[i]
		case newName:
			if flags&renameNoReplace != 0 {
				return syscall.EEXIST
			}
		}
	}
	if src == nil {
		return syscall.ENOENT
	}
	cm, err := f.memCommit(ctx)
	if err != nil {
		return f.errnoOf(what, err)
	}
	moved := src.Clone()
	moved.Name, moved.Commit, moved.SequenceNumber = newName, nil, 0
	moved.CreatedAt = f.cfg.Now().UTC()
	_, err = f.store.WriteMemory(ctx, n.prefix, layout.MemoryWrite{Put: []layout.Descriptor{moved}, Remove: []string{name}, Commit: cm})
	f.views.InvalidateMemories()
	if err != nil {
		return f.errnoOf(what, err)
	}
	return 0
}

func (n *memDirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	sub := name
	if n.prefix != "" {
		sub = n.prefix + "/" + name
	}
	md := &memDir{f: n.f, prefix: sub}
	cs, err := md.list(ctx)
	if err != nil {
		return n.f.errnoOf("rmdir memory "+sub, err)
	}
	if len(cs) > 0 {
		return syscall.ENOTEMPTY
	}
	n.f.mem.mu.Lock()
	defer n.f.mem.mu.Unlock()
	if !n.f.mem.dirs[sub] {
		return syscall.ENOENT
	}
	delete(n.f.mem.dirs, sub)
	return 0
}

// memOverlay lists namespaces made by mkdir that have no record yet.
func (f *FS) memOverlay(prefix string, files, dirs map[string]bool) []child {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	var out []child
	for ns := range f.mem.dirs {
		rest := ns
		if prefix != "" {
			var ok bool
			if rest, ok = strings.CutPrefix(ns, prefix+"/"); !ok {
				continue
			}
		}
		next, _, _ := strings.Cut(rest, "/")
		if next == "" || files[next] || dirs[next] {
			continue
		}
		dirs[next] = true
		sub := next
		if prefix != "" {
			sub = prefix + "/" + next
		}
		out = append(out, f.memSubdir(next, sub))
	}
	return out
}

// memWrites is what a mount keeps of its memory writes.
//
// LOCK ORDERING: idMu and mu are leaves; neither is held with the other.
type memWrites struct {
	mu sync.Mutex
	// dirs are namespaces made by mkdir that have no record yet.
	dirs map[string]bool // GUARDED_BY(mu)
	// idMu serialises the making of id, the session this mount names
	// as the writer of its memory records (§8.2), on the first memory
	// write.
	idMu sync.Mutex
	id   layout.SessionID // GUARDED_BY(idMu)
}

// memFile is a memory record. Writes are buffered whole (records are
// small) and committed on close as a memory merge (§8.3).
type memFile struct {
	gofs.Inode
	f    *FS
	ns   string
	bufs openBufs
	// mu guards e and has: the record as last read or committed.
	mu  sync.Mutex
	e   layout.Entry
	has bool
}

var (
	_ = (gofs.NodeGetattrer)((*memFile)(nil))
	_ = (gofs.NodeOpener)((*memFile)(nil))
	_ = (gofs.NodeSetattrer)((*memFile)(nil))
	_ = (gofs.NodeStatfser)((*memFile)(nil))
)

// openBufs are the write handles open on a memory record or ref file.
// open(O_TRUNC) of an existing file arrives as an open without O_TRUNC
// followed by a truncate without a handle (engineering.md): the truncate
// must reach the handle the open just made.
type openBufs struct {
	mu sync.Mutex
	hs map[*bufHandle]bool
}

func (o *openBufs) add(h *bufHandle) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hs == nil {
		o.hs = map[*bufHandle]bool{}
	}
	o.hs[h] = true
}

func (o *openBufs) remove(h *bufHandle) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.hs, h)
}

// truncate sets every open handle's content to sz bytes; it reports
// whether there was any.
func (o *openBufs) truncate(sz uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for h := range o.hs {
		h.truncate(sz, false)
	}
	return len(o.hs) > 0
}

func (n *memFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Nlink = 1
	n.f.owner(&out.Attr)
	if h, ok := fh.(*memHandle); ok {
		h.mu.Lock()
		out.Size = uint64(len(h.buf))
		h.mu.Unlock()
		return 0
	}
	n.mu.Lock()
	e, has := n.e, n.has
	n.mu.Unlock()
	if !has {
		return 0
	}
	sz, err := n.f.blobs.Size(ctx, &e.Descriptor)
	if err != nil {
		return n.f.errnoOf("getattr memory", err)
	}
	out.Size = uint64(sz)
	setTimes(&out.Attr, e.CreatedAt)
	return 0
}

func (n *memFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	h := &memHandle{n: n, write: flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0}
	n.mu.Lock()
	e, has := n.e, n.has
	n.mu.Unlock()
	if has && flags&syscall.O_TRUNC == 0 {
		body, err := readAll(ctx, n.f, &e.Descriptor)
		if err != nil {
			return nil, 0, n.f.errnoOf("open memory", err)
		}
		h.buf = body
	}
	if flags&syscall.O_TRUNC != 0 {
		h.dirty = true
	}
	if h.write {
		n.bufs.add(&h.bufHandle)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *memFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if h, ok := fh.(*memHandle); ok {
			h.truncate(sz, true)
		} else if !n.bufs.truncate(sz) {
			// truncate(2) of a record nobody has open: a commit of its
			// own.
			hh, _, errno := n.Open(ctx, syscall.O_RDWR)
			if errno != 0 {
				return errno
			}
			h := hh.(*memHandle)
			h.truncate(sz, true)
			errno = h.Flush(ctx)
			h.Release(ctx)
			if errno != 0 {
				return errno
			}
		}
	}
	return n.Getattr(ctx, fh, out)
}

func readAll(ctx context.Context, f *FS, d *layout.Descriptor) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		k, err := f.blobs.ReadAt(ctx, d, buf, off)
		out.Write(buf[:k])
		off += int64(k)
		if errors.Is(err, io.EOF) || (err == nil && k == 0) {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// bufHandle is an open handle whose content is held whole in memory:
// memory records and refs, which are small. Embedders commit it on Flush.
//
// LOCK ORDERING: commitMu, then mu; a memory handle's commit takes the
// memFile's mu briefly with neither held across a backend call.
type bufHandle struct {
	// commitMu serialises the commits of the handle (the closes of dup'd
	// descriptors flush it at once) and guards what embedders keep
	// between commits (refHandle.prev, existed). It is held across the
	// backend calls, which mu must never be: a stat or a read of the
	// open file goes on while its commit runs.
	commitMu sync.Mutex
	// mu guards the fields below.
	mu  sync.Mutex
	buf []byte
	// gen counts changes of buf, so that a commit knows whether what it
	// stored is still the content.
	gen   uint64
	dirty bool
	// touched is set once content was written (or truncated) through
	// this handle. Flush commits only touched content: shells dup and
	// close a new descriptor before writing to it, and committing that
	// empty file would add a version (or, for a ref, fail).
	touched bool
	// failed is set when the commit of the current content failed and
	// the error went back to close(2); the release does not retry it.
	failed bool
}

var (
	_ = (gofs.FileReader)((*bufHandle)(nil))
	_ = (gofs.FileWriter)((*bufHandle)(nil))
)

// take returns a copy of the content to commit and its generation; ok is
// false when there is nothing to commit. The caller holds commitMu.
func (h *bufHandle) take() (body []byte, gen uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty || !h.touched {
		return nil, 0, false
	}
	return bytes.Clone(h.buf), h.gen, true
}

// settle records the outcome of committing generation gen: the content is
// clean if it is still what was committed, failed if its commit failed.
func (h *bufHandle) settle(gen uint64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen {
		return // changed meanwhile: still dirty, and not what failed
	}
	if err != nil {
		h.failed = true
	} else {
		h.dirty = false
	}
}

func (h *bufHandle) truncate(sz uint64, touch bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if int(sz) <= len(h.buf) {
		h.buf = h.buf[:sz]
	} else {
		h.buf = append(h.buf, make([]byte, int(sz)-len(h.buf))...)
	}
	h.dirty, h.failed = true, false
	h.gen++
	h.touched = h.touched || touch
}

func (h *bufHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off >= int64(len(h.buf)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(append([]byte(nil), h.buf[off:min(int64(len(h.buf)), off+int64(len(dest)))]...)), 0
}

func (h *bufHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if end := off + int64(len(data)); end > int64(len(h.buf)) {
		h.buf = append(h.buf, make([]byte, end-int64(len(h.buf)))...)
	}
	copy(h.buf[off:], data)
	h.dirty, h.touched, h.failed = true, true, false
	h.gen++
	return uint32(len(data)), 0
}

type memHandle struct {
	bufHandle
	n     *memFile
	write bool
}

var (
	_ = (gofs.FileFlusher)((*memHandle)(nil))
	_ = (gofs.FileFsyncer)((*memHandle)(nil))
)

var _ = (gofs.FileReleaser)((*memHandle)(nil))

// Release commits what no close has tried to: a record created, or
// truncated by open(O_TRUNC), and never written.
func (h *memHandle) Release(ctx context.Context) syscall.Errno {
	h.n.bufs.remove(&h.bufHandle)
	h.mu.Lock()
	pending := h.dirty && !h.failed
	h.touched = true
	h.mu.Unlock()
	if pending {
		if errno := h.Flush(context.Background()); errno != 0 {
			h.n.mu.Lock()
			name := h.n.e.Name
			h.n.mu.Unlock()
			h.n.f.log.Error("memory write on release failed", "namespace", h.n.ns, "name", name, "errno", errno.Error())
		}
	}
	return 0
}

// memCommit returns the commit envelope of this mount's memory writes
// (§8.2). A mount is not a session, so it makes one, on its first memory
// write, to name as the writer: readers and fsck find it.
func (f *FS) memCommit(ctx context.Context) (layout.MemoryCommit, error) {
	w := &f.mem
	w.idMu.Lock()
	defer w.idMu.Unlock()
	if w.id.IsZero() {
		m := f.store.NewRootManifest()
		m.Agent = "pugfs"
		m.Metadata = map[string]string{"pugfs": "writer of the memory records of a mount"}
		if _, _, err := f.store.CreateSession(ctx, m); err != nil {
			return layout.MemoryCommit{}, err
		}
		f.cache.SessionCreated(m.Session)
		w.id = m.Session
	}
	return layout.MemoryCommit{Session: w.id}, nil
}

// Flush commits the record: store the blob, merge it into the namespace.
// A write that changes nothing writes no new version.
func (h *memHandle) Flush(ctx context.Context) syscall.Errno {
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	body, gen, ok := h.take()
	if !ok {
		return 0
	}
	n := h.n
	f := n.f
	n.mu.Lock()
	e := n.e
	n.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	fail := func(err error) syscall.Errno {
		h.settle(gen, err)
		return f.errnoOf("write memory "+n.ns+"/"+e.Name, err)
	}
	cm, err := f.memCommit(ctx)
	if err != nil {
		return fail(err)
	}
	bi, err := f.store.PutBlobBytes(ctx, body, layout.BlobOptions{ContentType: staging.ContentTypeOf(e.Name, body)})
	if err != nil {
		return fail(err)
	}
	d := layout.Descriptor{Name: e.Name, Digest: bi.Digest, Size: bi.Size, CreatedAt: f.cfg.Now().UTC(),
		ContentType: staging.ContentTypeOf(e.Name, body), Metadata: maps.Clone(e.Metadata), SchemaURL: e.SchemaURL}
	if len(body) <= layout.InlineLimit {
		d.Data = body
	}
	res, err := f.store.WriteMemory(ctx, n.ns, layout.MemoryWrite{Put: []layout.Descriptor{d}, Commit: cm})
	f.views.InvalidateMemories()
	if err != nil {
		return fail(err)
	}
	for _, r := range res.Records {
		if r.Name == d.Name {
			d = r
		}
	}
	n.mu.Lock()
	n.e, n.has = layout.Entry{Descriptor: d}, true
	n.mu.Unlock()
	h.settle(gen, nil)
	return 0
}

func (h *memHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno { return h.Flush(ctx) }

// refNode returns a ref file: writable (a Link, compare-and-swap against
// the value seen at open) unless the mount is read-only.
func (f *FS) refNode(name string) gofsNode {
	if f.cfg.ReadOnly {
		return &fileNode{f: f, c: f.refContent(name)}
	}
	return &refFile{fileNode: fileNode{f: f, c: f.refContent(name), writable: true}, name: name}
}

// refFile is a writable ref.
type refFile struct {
	fileNode
	name string
	bufs openBufs
}

var (
	_ = (gofs.NodeOpener)((*refFile)(nil))
	_ = (gofs.NodeSetattrer)((*refFile)(nil))
)

func (r *refFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) == 0 {
		return r.fileNode.Open(ctx, flags)
	}
	prev, err := r.f.store.ReadRef(ctx, r.name)
	if err != nil && !errors.Is(err, layout.ErrNotFound) {
		return nil, 0, r.f.errnoOf("open ref "+r.name, err)
	}
	h := &refHandle{r: r, prev: prev, existed: err == nil}
	if err == nil && flags&syscall.O_TRUNC == 0 {
		h.buf = []byte(prev.Target + "\n")
	}
	r.bufs.add(&h.bufHandle)
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (r *refFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if h, ok := fh.(*refHandle); ok {
			h.truncate(sz, true)
			return r.fileNode.Getattr(ctx, fh, out)
		}
		// The O_TRUNC follow-up reaches the handles open for writing;
		// truncate(2) of a ref nobody has open would only make it empty,
		// which no ref can be: nothing to do.
		r.bufs.truncate(sz)
	}
	return r.fileNode.Getattr(ctx, fh, out)
}

type refHandle struct {
	bufHandle
	r       *refFile
	prev    layout.Ref
	existed bool
}

var (
	_ = (gofs.FileFlusher)((*refHandle)(nil))
)

var _ = (gofs.FileReleaser)((*refHandle)(nil))

// Release forgets the handle. A ref that was never written through it
// holds no target, so there is nothing to commit.
func (h *refHandle) Release(ctx context.Context) syscall.Errno {
	h.r.bufs.remove(&h.bufHandle)
	return 0
}

// Flush writes the ref: the first line of what was written.
func (h *refHandle) Flush(ctx context.Context) syscall.Errno {
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	body, gen, ok := h.take()
	if !ok {
		return 0
	}
	f := h.r.f
	ctx = context.WithoutCancel(ctx)
	target := strings.TrimRight(string(body), "\r\n")
	if strings.ContainsAny(target, "\r\n") || target == "" {
		return syscall.EINVAL
	}
	var err error
	if h.existed {
		err = f.store.RenameRef(ctx, h.r.name, h.prev, target)
		if errors.Is(err, layout.ErrWeakCAS) {
			f.log.Warn("ref replaced without compare-and-swap: the backend has no If-Match", "ref", h.r.name)
			err = nil
		}
	} else {
		err = f.store.Link(ctx, h.r.name, target)
	}
	f.views.InvalidateRefs()
	if err != nil {
		return f.errnoOf("write ref "+h.r.name, err)
	}
	h.settle(gen, nil)
	if nr, rerr := f.store.ReadRef(ctx, h.r.name); rerr == nil {
		h.prev, h.existed = nr, true
	}
	return 0
}

// refsNode is a writable refs/ directory.
type refsNode struct {
	dirNode
	kind string
}

var (
	_ = (gofs.NodeCreater)((*refsNode)(nil))
	_ = (gofs.NodeMkdirer)((*refsNode)(nil))
	_ = (gofs.NodeUnlinker)((*refsNode)(nil))
)

func (n *refsNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	full := name
	if n.kind != "" {
		full = n.kind + "/" + name
	}
	if layout.ValidateRefName(full) != nil {
		return nil, nil, 0, syscall.EINVAL
	}
	node := &refFile{fileNode: fileNode{f: n.f, c: n.f.refContent(full), writable: true}, name: full}
	in := n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf("ref", full)})
	out.Mode = syscall.S_IFREG | 0o644
	n.f.owner(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	h := &refHandle{r: node, bufHandle: bufHandle{dirty: true}}
	node.bufs.add(&h.bufHandle)
	return in, h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *refsNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.kind != "" || layout.ValidateRefName(name) != nil {
		return nil, syscall.EINVAL
	}
	return n.f.materialise(ctx, &n.Inode, n.f.refsKindChild(name), out)
}

func (n *refsNode) Unlink(ctx context.Context, name string) syscall.Errno {
	full := name
	if n.kind != "" {
		full = n.kind + "/" + name
	}
	if _, err := n.f.store.ReadRef(ctx, full); err != nil {
		return n.f.errnoOf("unlink ref "+full, err)
	}
	err := n.f.store.DeleteRef(context.WithoutCancel(ctx), full)
	n.f.views.InvalidateRefs()
	if err != nil {
		return n.f.errnoOf("unlink ref "+full, err)
	}
	return 0
}

func (f *FS) refsKindChild(kind string) child {
	return child{name: kind, mode: syscall.S_IFDIR, ino: inoOf("refkind", kind), ttl: f.ttl, node: func() gofsNode {
		rd := &refsDir{f: f, kind: kind}
		if f.cfg.ReadOnly {
			return &dirNode{f: f, ls: rd}
		}
		return &refsNode{dirNode: dirNode{f: f, ls: rd}, kind: kind}
	}}
}
