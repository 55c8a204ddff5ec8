package fs

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
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

func (r *refsDir) list(ctx context.Context) ([]child, error) { return r.entries(ctx) }

func (r *refsDir) find(ctx context.Context, name string) (child, error) {
	cs, err := r.entries(ctx)
	if err != nil {
		return child{}, err
	}
	if c, err := findIn(cs, name); err == nil {
		return c, nil
	}
	// A ref made since the last listing: look it up directly.
	full := name
	if r.kind != "" {
		full = r.kind + "/" + name
	}
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
	return child{name: leaf, mode: syscall.S_IFREG, ino: inoOf("ref", name), ttl: f.ttl,
		node: func() gofsNode { return f.refNode(name) }}
}

func (f *FS) refContent(name string) content { return &bytesContent{gen: f.refGen(name)} }

// refGen generates a ref file's content: its target, one line.
func (f *FS) refGen(name string) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		r, err := f.views.Ref(ctx, name)
		if err != nil {
			return nil, err
		}
		return []byte(r.Target + "\n"), nil
	}
}

// refNode returns a ref file: writable (a Link, compare-and-swap against
// the value seen at open) unless the mount is read-only.
func (f *FS) refNode(name string) gofsNode {
	if f.cfg.NoOpen {
		return &fileNode{f: f, c: f.newSnapContent(f.refGen(name), time.Time{})}
	}
	if !f.sharedWritable() {
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
	if e := r.f.recordAttrErrno(in); e != 0 {
		return e
	}
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
	prev, existed, err := f.recs.WriteRef(context.WithoutCancel(ctx), h.r.name, h.prev, h.existed, body)
	if err != nil {
		return f.errnoOf("write ref "+h.r.name, err)
	}
	h.settle(gen, nil)
	h.prev, h.existed = prev, existed
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
	out.SetEntryTimeout(uncached)
	out.SetAttrTimeout(uncached)
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
	return n.f.errnoOf("unlink ref "+full, n.f.recs.DeleteRef(context.WithoutCancel(ctx), full))
}

func (f *FS) refsKindChild(kind string) child {
	return child{name: kind, mode: syscall.S_IFDIR, ino: inoOf("refkind", kind), ttl: f.ttl, node: func() gofsNode {
		rd := &refsDir{f: f, kind: kind}
		if !f.sharedWritable() {
			return &dirNode{f: f, ls: rd}
		}
		return &refsNode{dirNode: dirNode{f: f, ls: rd}, kind: kind}
	}}
}
