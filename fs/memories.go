package fs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// memDir is memories/ (prefix "") or memories/<prefix>/: the records of
// namespace prefix, and the next level of namespaces below it.
type memDir struct {
	f      *FS
	prefix string
}

// entries returns the directory's records and namespace directories.
// recErr is the error reading the records of the namespace at this prefix:
// the deeper namespaces are still listed, since they do not depend on it.
func (m *memDir) entries(ctx context.Context) (out []child, recErr error, err error) {
	nss, err := m.f.views.Namespaces(ctx)
	if err != nil {
		return nil, nil, err
	}
	files := map[string]bool{}
	for _, ns := range nss {
		if ns.Name == m.prefix && ns.Version > 0 {
			recs, err := m.f.views.Memory(ctx, ns.Name, ns.Version)
			if err != nil {
				recErr = err
				continue
			}
			// A name held twice is its last record (§8.3: a write
			// replaces earlier entries), as in a session (§10); a name
			// that is no path (over 255 bytes) is not shown, as there.
			last := make(map[string]int, len(recs))
			for i, d := range recs {
				last[d.Name] = i
			}
			for i, d := range recs {
				if _, isPath := layout.NamePath(d.Name); layout.ValidateMemoryName(d.Name) != nil || !isPath ||
					d.Deleted || last[d.Name] != i || files[d.Name] {
					continue
				}
				files[d.Name] = true
				out = append(out, m.f.memRecordChild(ns.Name, ns.Version, d))
			}
		}
	}
	// A record created here and still open shadows the bucket's of its
	// name (it was renamed over it): its close commits that name.
	for _, c := range m.f.memPending(m.prefix) {
		out = shadow(out, c)
		files[c.name] = true
	}
	dirs := map[string]bool{}
	for _, ns := range nss {
		rest := ns.Name
		if m.prefix != "" {
			var ok bool
			if rest, ok = strings.CutPrefix(ns.Name, m.prefix+"/"); !ok {
				continue
			}
		}
		next, _, _ := strings.Cut(rest, "/")
		if next == "" || dirs[next] {
			continue
		}
		sub := next
		if m.prefix != "" {
			sub = m.prefix + "/" + next
		}
		if m.f.hiddenNamespace(sub, nss) {
			continue
		}
		if files[next] {
			// A path is a file or a directory: the record wins, as a
			// session's file wins over its directory (decisions.md).
			if _, warned := m.f.shadowed.LoadOrStore(sub, true); !warned {
				m.f.log.Warn("memory namespace hidden by a record of the same name; read it with the layout tools",
					"namespace", sub, "record", next, "in", m.prefix)
			}
			continue
		}
		dirs[next] = true
		out = append(out, m.f.memSubdir(next, sub))
	}
	out = append(out, m.f.memOverlay(m.prefix, files, dirs)...)
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, recErr, nil
}

func (m *memDir) list(ctx context.Context) ([]child, error) {
	cs, recErr, err := m.entries(ctx)
	if err == nil {
		err = recErr
	}
	return cs, err
}

func (m *memDir) find(ctx context.Context, name string) (child, error) {
	cs, recErr, err := m.entries(ctx)
	if err != nil {
		return child{}, err
	}
	c, err := findIn(cs, name)
	if err != nil && recErr != nil {
		return child{}, recErr // it may be a record we could not read
	}
	return c, err
}

func (m *memDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	if m.f.sharedWritable() {
		out.Mode = syscall.S_IFDIR | 0o755
	}
	return nil
}

func (f *FS) memRecordChild(ns string, version uint32, d layout.Descriptor) child {
	// Its user.pugmark.version is the namespace version it was read at.
	e := layout.Entry{Descriptor: d, Version: version}
	return child{name: d.Name, mode: syscall.S_IFREG, ttl: f.ttl,
		ino:  f.moved.avoid(inoOf("mem", ns, d.Name, d.Digest.String())),
		node: func() gofsNode { return f.memNode(ns, e) }}
}

// memSubdir is a namespace directory under memories/.
func (f *FS) memSubdir(name, ns string) child {
	return child{name: name, mode: syscall.S_IFDIR, ino: inoOf("memdir", ns), ttl: f.ttl,
		node: func() gofsNode { return f.memDirChild(name, ns) }}
}

// memNode returns the node of a memory record file.
func (f *FS) memNode(ns string, e layout.Entry) gofsNode {
	if !f.sharedWritable() {
		return &fileNode{f: f, c: &blobContent{f: f, d: &e.Descriptor}, x: descXattrs(&e)}
	}
	return &memFile{f: f, ns: ns, e: e, has: true}
}

// memDirNode is a writable directory under memories/.
type memDirNode struct {
	metaDir
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
	if !f.sharedWritable() {
		return &dirNode{f: f, ls: md}
	}
	return &memDirNode{metaDir: metaDir{dirNode: dirNode{f: f, ls: md}}, prefix: prefix}
}

func (n *memDirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.prefix == "" {
		return nil, nil, 0, syscall.EPERM // a record needs a namespace
	}
	if layout.ValidateMemoryName(name) != nil {
		return nil, nil, 0, syscall.EINVAL
	}
	node := &memFile{f: n.f, ns: n.prefix, e: layout.Entry{Descriptor: layout.Descriptor{Name: name}}}
	h := &memHandle{n: node, bufHandle: bufHandle{dirty: true}, write: true}
	if errno := n.createOn(ctx, node, h, flags); errno != 0 {
		return nil, nil, 0, errno
	}
	if m := mode & layout.KeptModeBits; m != recordMode && !node.has {
		h.meta = map[string]string{layout.MetaPosixMode: layout.FormatPosixMode(m)}
	}
	h.appending, h.appendedFrom = flags&syscall.O_APPEND != 0, len(h.buf)
	// A number of its own: a file of the name created again while the
	// last one is still open after its unlink (vim's swap file) is
	// another file.
	ino := inoOf("mem-new", n.prefix, name, strconv.FormatUint(stagedSeq.Add(1), 10))
	in := n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino})
	node.bufs.add(h)
	n.f.openedForWriting(node)
	n.f.mem.mu.Lock()
	n.f.mem.pending[memKey(n.prefix, name)] = node
	n.f.mem.mu.Unlock()
	out.Mode = syscall.S_IFREG | layout.PosixMode(h.meta, recordMode)
	n.f.owner(&out.Attr)
	out.SetEntryTimeout(uncached)
	out.SetAttrTimeout(uncached)
	return in, h, fuse.FOPEN_DIRECT_IO, 0
}

// createOn sets up h, the first descriptor of node, a record the kernel
// found absent, for what the create builds on. The kernel's answer may be
// a TTL old: with O_CREAT alone (>>, O_RDWR) the record another mount
// committed meanwhile is kept and built on (one LIST, as an open for
// writing does), and a record found absent, here or with O_EXCL, is
// fresh (memFile.fresh), guarded as absent: a record another writer commits
// under the name before this one refuses the write, or, for a
// descriptor that only appended, takes its bytes after the other's.
// Two mounts' first >> of one new record both closed with 0, the later
// line replacing the earlier (audit 8 #2). O_TRUNC replaces whatever is
// there, as on any file system.
func (n *memDirNode) createOn(ctx context.Context, node *memFile, h *memHandle, flags uint32) syscall.Errno {
	if flags&syscall.O_TRUNC != 0 {
		return 0
	}
	if flags&syscall.O_EXCL == 0 {
		cur, ok, err := n.f.latestRecord(ctx, n.prefix, node.e.Name)
		if err != nil {
			return n.f.errnoOf("create memory "+n.prefix+"/"+node.e.Name, err)
		}
		if ok {
			body, err := readAll(ctx, n.f, &cur.Descriptor)
			if err != nil {
				return n.f.errnoOf("create memory "+n.prefix+"/"+node.e.Name, err)
			}
			node.e, node.has = cur, true
			h.buf, h.base, h.dirty, h.meta = body, &cur.Digest, false, maps.Clone(cur.Metadata)
			return 0
		}
	}
	node.fresh = true
	h.absent = flags&syscall.O_APPEND != 0
	return 0
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
	delete(n.f.mem.removed, sub)
	n.f.mem.mu.Unlock()
	return n.f.materialise(ctx, &n.Inode, n.f.memSubdir(name, sub), out)
}

// Unlink removes a record in a new version of its namespace. A record
// created here and still open, not committed yet (vim's swap file), is
// dropped: what is written through its descriptors goes nowhere, as with
// any unlinked file, and nothing is committed at its close.
func (n *memDirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.prefix == "" {
		return syscall.EPERM
	}
	dropped := n.f.dropPending(n.prefix, name)
	// The commits of its descriptors in flight land first, and none
	// starts until the removal has, when what they hold is dropped: a
	// close's commit that landed after the removal brought the record
	// back (review 40).
	held, release := n.holdCommits(name)
	err := n.f.recs.RemoveMemory(context.WithoutCancel(ctx), n.prefix, name)
	if dropped && errors.Is(err, staging.ErrNotExist) {
		err = nil // it was never committed
	}
	if err == nil {
		for _, mf := range held {
			mf.bufs.drop()
		}
	}
	release()
	return n.f.errnoOf("unlink memory "+n.prefix+"/"+name, err)
}

// holdCommits waits for the commits in flight of the record files of
// this directory named names, and holds off their next ones until
// release.
func (n *memDirNode) holdCommits(names ...string) (held []*memFile, release func()) {
	// The kernel's node of each name, and every node of the name with a
	// descriptor open for writing: a descriptor opened before the
	// record's last commit is on the node the name had then, and its
	// commit was missed (review 42).
	found := map[*memFile]bool{}
	for _, name := range names {
		if in := n.GetChild(name); in != nil {
			if mf, ok := in.Operations().(*memFile); ok {
				found[mf] = true
			}
		}
	}
	n.f.mem.mu.Lock()
	for mf := range n.f.mem.writing {
		mf.mu.Lock()
		if mf.ns == n.prefix && slices.Contains(names, mf.e.Name) {
			found[mf] = true
		}
		mf.mu.Unlock()
	}
	n.f.mem.mu.Unlock()
	for mf := range found {
		held = append(held, mf)
	}
	// One order for every caller: two renames of the same names the
	// other way round take them alike.
	slices.SortFunc(held, func(a, b *memFile) int { return cmp.Compare(a.StableAttr().Ino, b.StableAttr().Ino) })
	for _, mf := range held {
		mf.commits.Lock()
	}
	return held, func() {
		for _, mf := range held {
			mf.commits.Unlock()
		}
	}
}

// dropPending unlinks the open record name of namespace ns created here
// (memWrites.pending), and reports whether there was one.
func (f *FS) dropPending(ns, name string) bool {
	f.mem.mu.Lock()
	node := f.mem.pending[memKey(ns, name)]
	delete(f.mem.pending, memKey(ns, name))
	f.mem.mu.Unlock()
	if node == nil {
		return false
	}
	node.drop()
	return true
}

// drop drops what the descriptors open on the record now hold (its name
// is going) and waits for their commits in flight.
func (n *memFile) drop() {
	n.bufs.drop()
	n.commits.Lock()
	//lint:ignore SA2001 the lock is taken to wait for the commits in flight
	n.commits.Unlock()
}

// dropOpen drops what the descriptors open on the record file name of
// this directory hold, if the kernel has its node: the name is removed or
// renamed over, and a write through them must not bring it back.
func (n *memDirNode) dropOpen(name string) {
	if in := n.GetChild(name); in != nil {
		if mf, ok := in.Operations().(*memFile); ok {
			mf.drop()
		}
	}
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
	if ch := n.GetChild(name); n.prefix == "" || (ch != nil && ch.IsDir()) {
		// A namespace is a log of versions, no object to move: EXDEV
		// makes mv copy its records (EINVAL had mv say it cannot move
		// a directory into itself).
		return syscall.EXDEV
	}
	if flags&renameExchange != 0 {
		return syscall.EINVAL
	}
	if layout.ValidateMemoryName(newName) != nil {
		return syscall.EINVAL
	}
	if name == newName {
		return 0
	}
	f := n.f
	f.mem.mu.Lock()
	src, over := f.mem.pending[memKey(n.prefix, name)], f.mem.pending[memKey(n.prefix, newName)]
	f.mem.mu.Unlock()
	if src != nil {
		src.mu.Lock()
		has := src.has
		src.mu.Unlock()
		if !has {
			// Created here and not committed yet (a temporary file
			// renamed over the record while still open): it commits
			// under the new name at its close, replacing the record.
			if flags&renameNoReplace != 0 {
				if _, err := (&memDir{f: f, prefix: n.prefix}).find(ctx, newName); err == nil {
					return syscall.EEXIST
				}
			}
			if over != nil {
				f.dropPending(n.prefix, newName)
			}
			n.dropOpen(newName)
			f.mem.mu.Lock()
			delete(f.mem.pending, memKey(n.prefix, name))
			f.mem.pending[memKey(n.prefix, newName)] = src
			f.mem.mu.Unlock()
			src.rename(newName)
			return 0
		}
	}
	// The commits in flight of both records land first, and none starts
	// until the rename has: one of the source that landed after it
	// brought the old name back, one of the target the name the moved
	// record took (review 40).
	held, release := n.holdCommits(name, newName)
	err := f.recs.RenameMemory(context.WithoutCancel(ctx), n.prefix, name, newName, flags&renameNoReplace != 0)
	if err == nil {
		var kernels *memFile // the kernel's node of the old name: moved below
		if in := n.GetChild(name); in != nil {
			kernels, _ = in.Operations().(*memFile)
		}
		for _, mf := range held {
			mf.mu.Lock()
			was := mf.e.Name
			mf.mu.Unlock()
			switch {
			case was == newName:
				mf.bufs.drop() // renamed over
			case was == name && mf != kernels:
				mf.rename(newName) // an older node of the record moves with it
			}
		}
		// Descriptors still open on the record write to its new name,
		// and the old name's next lookup gets a node of its own. Before
		// the commits are let go: an open waiting for them read the old
		// name off the node and put it back (review 44).
		if in := n.GetChild(name); in != nil {
			f.moved.add(in.StableAttr().Ino)
			if kernels != nil {
				kernels.rename(newName)
			}
		}
	}
	release()
	if err != nil {
		return f.errnoOf("rename memory "+n.prefix+"/"+name, err)
	}
	if over != nil {
		f.dropPending(n.prefix, newName)
	}
	if src != nil {
		f.mem.mu.Lock()
		delete(f.mem.pending, memKey(n.prefix, name))
		f.mem.pending[memKey(n.prefix, newName)] = src
		f.mem.mu.Unlock()
	}
	return 0
}

// rename makes the record's later commits go to name.
func (n *memFile) rename(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.e.Name = name
	n.fresh = false // replaces what is there, as a rename does
	n.renames++
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
	nss, err := n.f.views.Namespaces(ctx)
	if err != nil {
		return n.f.errnoOf("rmdir memory "+sub, err)
	}
	vers := map[string]uint32{}
	for _, ns := range nss {
		if ns.Name == sub || strings.HasPrefix(ns.Name, sub+"/") {
			vers[ns.Name] = ns.Version
		}
	}
	n.f.mem.mu.Lock()
	defer n.f.mem.mu.Unlock()
	if !n.f.mem.dirs[sub] && len(vers) == 0 {
		return syscall.ENOENT
	}
	delete(n.f.mem.dirs, sub)
	if len(vers) > 0 {
		// Emptied (rm -r): its log stays in the bucket.
		n.f.mem.removed[sub] = vers
	}
	return 0
}

// hiddenNamespace reports whether namespace sub was removed on this
// mount (memWrites.removed) and nothing under it changed since, by the
// bucket's namespaces nss.
func (f *FS) hiddenNamespace(sub string, nss []layout.Namespace) bool {
	f.mem.mu.Lock()
	vers := f.mem.removed[sub]
	f.mem.mu.Unlock()
	if vers == nil {
		return false
	}
	for _, ns := range nss {
		if (ns.Name == sub || strings.HasPrefix(ns.Name, sub+"/")) && vers[ns.Name] != ns.Version {
			return false // written since, here or elsewhere: shown again
		}
	}
	return true
}

// memPending lists the records of namespace ns created here and still
// open: a program finds the file it created by its name (stat, unlink,
// rename) before its close commits it.
func (f *FS) memPending(ns string) []child {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	var out []child
	for key, node := range f.mem.pending {
		kns, name, _ := strings.Cut(key, "\x00")
		if kns != ns {
			continue
		}
		out = append(out, child{name: name, mode: syscall.S_IFREG, ttl: uncached,
			ino:  node.StableAttr().Ino,
			node: func() gofsNode { return node }})
	}
	return out
}

// memKey is the key of record name of namespace ns in memWrites.pending.
func memKey(ns, name string) string { return ns + "\x00" + name }

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

// memWrites is what a mount keeps of its memory directories (the
// records themselves are written by staging.Records).
//
// LOCK ORDERING: mu, then openBufs.mu (released looks at a node's
// descriptors under mu).
type memWrites struct {
	mu sync.Mutex
	// dirs are namespaces made by mkdir that have no record yet.
	dirs map[string]bool // GUARDED_BY(mu)
	// removed are namespaces emptied and then removed with rmdir, with
	// the versions of it and of the namespaces under it at the rmdir. A
	// namespace is a log the bucket keeps, so it is hidden on this mount
	// instead, for as long as none of those versions changes
	// (hiddenNamespace).
	removed map[string]map[string]uint32 // GUARDED_BY(mu)
	// pending are records created by this mount whose descriptors are
	// still open, by memKey, until their last release (or an unlink):
	// listed and found by name before their close commits them.
	pending map[string]*memFile // GUARDED_BY(mu)
	// writing are the record nodes with descriptors open for writing,
	// whatever name the kernel now gives them: a commit gives a record a
	// new digest and its name a new node, while a descriptor open on the
	// old one still commits (holdCommits). GUARDED_BY(mu).
	writing map[*memFile]bool
}

// openedForWriting records n as having a descriptor open for writing.
func (f *FS) openedForWriting(n *memFile) {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	if f.mem.writing == nil {
		f.mem.writing = map[*memFile]bool{}
	}
	f.mem.writing[n] = true
}

// memFile is a memory record. Writes are buffered whole (records are
// small) and committed on close as a memory merge (§8.3).
type memFile struct {
	gofs.Inode
	// A memory record has no descriptor metadata to keep attributes in
	// (§8).
	refuseXattrs
	f    *FS
	ns   string
	bufs openBufs[*memHandle]
	// mu guards e, has and fresh: the record as last read or committed.
	mu  sync.Mutex
	e   layout.Entry
	has bool
	// fresh is set for a record created here under a name found absent
	// (createOn) until its first commit: a record another writer
	// commits under the name first refuses it (a zero base), unless it
	// was renamed over a record since, which it then replaces.
	fresh bool
	// renames counts the renames of the record (memHandle.absent).
	renames int
	// commits is held shared by every commit of a handle across its
	// look at bufHandle.dropped and its write; an unlink takes it whole
	// after dropping the handles, so that a commit that started before
	// it has landed (and is removed) when it removes the record.
	// LOCK ORDERING: bufHandle.commitMu, then commits, then mu.
	commits sync.RWMutex
}

var (
	_ = (gofs.NodeGetattrer)((*memFile)(nil))
	_ = (gofs.NodeOpener)((*memFile)(nil))
	_ = (gofs.NodeSetattrer)((*memFile)(nil))
	_ = (gofs.NodeStatfser)((*memFile)(nil))
	_ = (gofs.NodeSetxattrer)((*memFile)(nil))
	_ = (gofs.NodeRemovexattrer)((*memFile)(nil))
)

func (n *memFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Nlink = 1
	n.mu.Lock()
	e, has := n.e, n.has
	n.mu.Unlock()
	meta := e.Metadata
	if h, ok := fh.(*memHandle); ok {
		meta = h.metadata()
		h.mu.Lock()
		out.Size = uint64(len(h.buf))
		h.mu.Unlock()
	} else if !has || n.bufs.unsaved() {
		// Created and not committed yet, or written and not closed:
		// what its descriptors hold (what a read by name gets).
		if body, ok := n.bufs.content(); ok {
			out.Size = uint64(len(body))
		}
	} else {
		sz, err := n.f.blobs.Size(ctx, &e.Descriptor)
		if err != nil {
			return n.f.errnoOf("getattr memory", err)
		}
		out.Size = uint64(sz)
	}
	out.Mode = syscall.S_IFREG | layout.PosixMode(meta, recordMode)
	// After the mode: the umask applies to it. Applied before, a record
	// stored 0777 (or chmod 666) was writable by every user of a shared
	// mount (audit 29).
	n.f.owner(&out.Attr)
	setTimes(&out.Attr, layout.ShownMtime(meta, e.CreatedAt, time.Time{}))
	return 0
}

func (n *memFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	h := &memHandle{n: n, write: flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0}
	n.mu.Lock()
	has := n.has
	n.mu.Unlock()
	if h.write && !has {
		n.commitOthers(ctx)
	}
	// A rename or rm of the record (holdCommits) waits for the look
	// below, and this for it: one that went between the read of the
	// node's name and the write of what the LIST found back into it was
	// undone, its old name put back on the node, and this descriptor's
	// write made the old record again (review 43).
	n.commits.RLock()
	n.mu.Lock()
	e, has := n.e, n.has
	n.mu.Unlock()
	if h.write && flags&syscall.O_TRUNC == 0 {
		// Built on what the record holds now (one LIST of the namespace),
		// not on what a lookup within the metadata TTL saw: another
		// mount's write of it since would refuse the commit (a lost
		// update otherwise), so >> appends to it, as for session files.
		cur, ok, err := n.f.latestRecord(ctx, n.ns, e.Name)
		if err != nil {
			n.commits.RUnlock()
			return nil, 0, n.f.errnoOf("open memory", err)
		}
		if ok != has || (ok && cur.Digest != e.Digest) {
			if !ok {
				// Removed by another writer: the node keeps its name, or
				// every later write of the path was EINVAL (review 31).
				cur = layout.Entry{Descriptor: layout.Descriptor{Name: e.Name}}
			}
			e, has = cur, ok
			n.mu.Lock()
			n.e, n.has = e, has
			n.mu.Unlock()
		}
	}
	n.commits.RUnlock()
	appendingNew := h.write && !has && flags&(syscall.O_APPEND|syscall.O_TRUNC) == syscall.O_APPEND
	if (!has || (!h.write && n.bufs.unsaved())) && flags&syscall.O_TRUNC == 0 && !appendingNew {
		// Created here and not committed yet, or written through a
		// descriptor still open (a temporary file renamed over this
		// one before its close): what the descriptors hold, as on a
		// local disk.
		h.buf, _ = n.bufs.content()
		has = false
	}
	if appendingNew {
		// Appending to a record created here and not committed yet:
		// its own bytes alone, which its commit puts after whatever
		// the record holds by then. With the other descriptors' bytes
		// too, those landed twice: with this commit, and again with
		// their own, as appended bytes (audit 9 #2).
		has = false
		n.mu.Lock()
		h.absent, h.absentRenames = n.fresh, n.renames
		n.mu.Unlock()
	}
	if has && flags&syscall.O_TRUNC == 0 {
		body, err := readAll(ctx, n.f, &e.Descriptor)
		if err != nil {
			return nil, 0, n.f.errnoOf("open memory", err)
		}
		h.buf = body
		if h.write {
			h.base = &e.Digest
		}
	}
	if flags&syscall.O_TRUNC != 0 {
		h.dirty, h.trunc = true, true
	}
	// The record's mode stays; new content has its own time.
	h.meta = maps.Clone(e.Metadata)
	if h.write && has {
		h.inherited = maps.Clone(e.Metadata)
		if h.inherited == nil {
			h.inherited = map[string]string{} // read, with none
		}
	}
	if flags&syscall.O_TRUNC != 0 {
		delete(h.meta, layout.MetaPosixMtime)
	}
	h.appending, h.appendedFrom = flags&syscall.O_APPEND != 0, len(h.buf)
	if h.write {
		n.bufs.add(h)
		n.f.openedForWriting(n)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// commitOthers commits what the descriptors open on a record created
// here hold and have not committed, for a descriptor opened to write on
// it (close-to-open): it then builds on that record, as on any, and the
// others' closes find nothing left to commit. Each held its own bytes:
// a second descriptor that read the creator's bytes and added its own
// committed both, and the creator's close then put its bytes on again
// (appended) or replaced the second's (written at an offset; review 6).
// A commit that fails here is the creator's close's to report: it
// commits again. A creator that has written nothing yet (exec 3>rec) is
// committed too, as its release would: empty, it replaced the second
// descriptor's line at that release (review 7).
func (n *memFile) commitOthers(ctx context.Context) {
	for _, o := range n.bufs.all() {
		o.mu.Lock()
		skip := o.dropped || !o.dirty
		if !skip {
			// A failed one too: its close commits it again, unguarded
			// once this one's commit cleared the record's freshness,
			// over this one's bytes (review 8).
			o.touched = true
		}
		o.mu.Unlock()
		if skip {
			continue
		}
		if errno := o.Flush(ctx); errno != 0 {
			n.f.log.Info("memory record not committed before another descriptor opened it; its own close commits it again", "namespace", n.ns, "errno", errno.Error())
		}
	}
}

func (n *memFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.f.chownErrno(in); e != 0 {
		return e
	}
	if c, ok := attrChangeOf(in); ok {
		// Kept as posix-mode / posix-mtime in the record's descriptor,
		// as for a session's file (decisions.md): on the descriptors
		// open for writing, committed by their close, or else as a
		// version of its own.
		if errno := n.setAttrs(ctx, fh, c); errno != 0 {
			return errno
		}
	}
	if sz, ok := in.GetSize(); ok {
		if h, ok := fh.(*memHandle); ok {
			if err := h.truncate(sz, true); err != nil {
				return n.f.errnoOf("truncate memory "+n.ns, err)
			}
		} else if open, err := n.bufs.truncate(sz); err != nil {
			return n.f.errnoOf("truncate memory "+n.ns, err)
		} else if !open {
			// truncate(2) of a record nobody has open: a commit of its
			// own.
			hh, _, errno := n.Open(ctx, syscall.O_RDWR)
			if errno != 0 {
				return errno
			}
			h := hh.(*memHandle)
			if err := h.truncate(sz, true); err != nil {
				h.Release(ctx)
				return n.f.errnoOf("truncate memory "+n.ns, err)
			}
			errno = h.Flush(ctx)
			h.Release(ctx)
			if errno != 0 {
				return errno
			}
		}
	}
	return n.Getattr(ctx, fh, out)
}

// setAttrs makes a chmod or utimes of the record: on the handle fh or,
// without one, on every descriptor open for writing; when none is, the
// record is committed again with the change (the same bytes).
func (n *memFile) setAttrs(ctx context.Context, fh gofs.FileHandle, c staging.AttrChange) syscall.Errno {
	if h, ok := fh.(*memHandle); ok && h.write {
		h.setAttrs(c, time.Time{})
		return 0
	}
	if hs := n.bufs.all(); len(hs) > 0 {
		for _, h := range hs {
			h.setAttrs(c, time.Time{})
		}
		return 0
	}
	// Made on the record as the bucket holds it (the open reads it), and
	// on what it holds at the commit if another writer changed it
	// meanwhile (memHandle.attrsAlone).
	hh, _, errno := n.Open(ctx, syscall.O_RDWR)
	if errno != 0 {
		return errno
	}
	h := hh.(*memHandle)
	h.attrsOnly, h.keptTime = true, c.Mtime == nil && !c.MtimeNow
	// Unchanged content keeps its time (chmod does not move mtime).
	n.mu.Lock()
	keep := layout.ShownMtime(n.e.Metadata, n.e.CreatedAt, time.Time{})
	gone := !n.has && !n.fresh
	n.mu.Unlock()
	if gone {
		// Another writer removed it since the lookup: a chmod made it
		// again, empty (review 31).
		h.Release(ctx)
		return syscall.ENOENT
	}
	h.setAttrs(c, keep)
	errno = h.Flush(ctx)
	h.Release(ctx)
	return errno
}

// latestRecord returns record name of namespace ns as the bucket holds
// it now: its last record of the name in the latest version (§8.3), or
// ok false when it has none.
func (f *FS) latestRecord(ctx context.Context, ns, name string) (e layout.Entry, ok bool, err error) {
	v, err := f.store.LatestMemoryVersion(ctx, ns)
	if err != nil || v == 0 {
		return e, false, err
	}
	recs, err := f.views.Memory(ctx, ns, v)
	if err != nil {
		return e, false, err
	}
	for _, d := range recs {
		if d.Name == name && !d.Deleted {
			e, ok = layout.Entry{Descriptor: d}, true
		}
	}
	return e, ok, nil
}

func readAll(ctx context.Context, f *FS, d *layout.Descriptor) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		if off > maxBuffered {
			return nil, fmt.Errorf("memory record %s: more than %d bytes: %w", d.Name, maxBuffered, errTooLargeToBuffer)
		}
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

type memHandle struct {
	bufHandle
	n     *memFile
	write bool
	// base is the digest of the record the content was built on: the
	// one read at open (without O_TRUNC), then each one this handle
	// committed. Guarded by commitMu. A commit over a record another
	// writer changed since is refused (Records.PutMemory).
	base *layout.Digest
	// absent marks an appending handle built on the name's absence: of a
	// record created here (createOn), or opened to append to one created
	// here and not committed yet. Until it commits, its commits are
	// guarded by that absence (as memFile.fresh guards), also once
	// another descriptor's commit cleared fresh, unless the record was
	// renamed since absentRenames (memFile.renames): a rename replaces.
	// The creating descriptor committed unguarded after the second's
	// commit and replaced its line. Set before the handle is shared.
	absent        bool
	absentRenames int
	// attrsOnly marks the handle setAttrs opens for a chmod or utimes of
	// a record nobody has open: its commit carries the record's own
	// bytes, so a refused one keeps no copy of them (Records.PutMemoryAttrs).
	// Set before the handle is shared.
	attrsOnly bool
	// keptTime marks an attrsOnly handle whose change set no time (a
	// chmod keeps the record's): made again on another writer's newer
	// bytes, it keeps their time (Records.PutMemoryAttrs). Set before
	// the handle is shared.
	keptTime bool
	// trunc marks a handle opened with O_TRUNC: its content is its own
	// from the open on. Set before the handle is shared.
	trunc bool
	// inherited is the metadata of the record the handle opened (nil
	// for none), then of the record its last commit made: a rewrite
	// keeps the metadata other writers gave the record since, but for
	// what this handle changed (RewriteMemory). Set before the handle is
	// shared, then GUARDED_BY commitMu (Flush).
	inherited map[string]string
}

// attrsAlone reports whether the handle changed the record's attributes
// alone (touch, futimens, fchmod through it): no byte written or cut.
func (h *memHandle) attrsAlone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attrsOnly || h.written == 0 && !h.trunc
}

var (
	_ = (gofs.FileFlusher)((*memHandle)(nil))
	_ = (gofs.FileFsyncer)((*memHandle)(nil))
)

var _ = (gofs.FileReleaser)((*memHandle)(nil))

// Release commits what no close has tried to: a record created, or
// truncated by open(O_TRUNC), and never written.
func (h *memHandle) Release(ctx context.Context) syscall.Errno {
	h.n.bufs.remove(h)
	defer h.n.released()
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

// released forgets a record created here once its last descriptor is
// closed: committed or not, it is no longer pending.
func (n *memFile) released() {
	if !n.bufs.empty() {
		return
	}
	n.f.mem.mu.Lock()
	defer n.f.mem.mu.Unlock()
	if !n.bufs.empty() {
		// An open since the look above: Open adds its descriptor before
		// it records the node as writing (openedForWriting), so under
		// mem.mu a node still writing shows it, and stays listed for
		// holdCommits.
		return
	}
	delete(n.f.mem.writing, n)
	n.mu.Lock()
	key := memKey(n.ns, n.e.Name)
	n.mu.Unlock()
	if n.f.mem.pending[key] == n {
		delete(n.f.mem.pending, key)
	}
}

// Flush commits the record: store the blob, merge it into the namespace.
// A write that changes nothing writes no new version. A record unlinked
// while open before any commit commits nothing.
func (h *memHandle) Flush(ctx context.Context) syscall.Errno {
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	body, gen, ok := h.take()
	if !ok {
		return 0
	}
	n := h.n
	f := n.f
	n.commits.RLock()
	defer n.commits.RUnlock()
	n.mu.Lock()
	e, fresh := n.e, n.fresh
	fresh = fresh || h.absent && h.absentRenames == n.renames
	n.mu.Unlock()
	if h.isDropped() {
		h.settle(gen, nil)
		return 0
	}
	desc := e.Descriptor
	desc.Metadata = h.metadata()
	var d layout.Descriptor
	var err error
	merged := body
	base := h.base
	if base == nil && fresh {
		base = new(layout.Digest) // built on no record (createOn)
	}
	if from := h.appendOnly(); from >= 0 && base != nil {
		// Only appended: onto the record as it is at the commit, as
		// O_APPEND does, when another writer changed it since.
		current := func(ctx context.Context) ([]byte, *layout.Digest, error) {
			cur, ok, err := f.latestRecord(ctx, n.ns, e.Name)
			if err != nil || !ok {
				return nil, nil, err
			}
			b, err := readAll(ctx, f, &cur.Descriptor)
			return b, &cur.Digest, err
		}
		d, merged, err = f.recs.AppendMemory(context.WithoutCancel(ctx), n.ns, desc, body, base, len(body)-from, h.inherited, current)
	} else if h.attrsAlone() && base != nil && !base.IsZero() {
		// On the record as it is, when another writer changed it
		// since the open: the attributes are this handle's, the bytes
		// that writer's (audit 28: touch under a stream of another
		// mount's appends was ESTALE, keeping a copy of the record).
		d, merged, err = f.recs.PutMemoryAttrs(context.WithoutCancel(ctx), n.ns, desc, body, base, h.inherited, h.keptTime, func(ctx context.Context) ([]byte, *layout.Descriptor, error) {
			cur, ok, err := f.latestRecord(ctx, n.ns, e.Name)
			if err != nil || !ok {
				return nil, nil, err
			}
			b, err := readAll(ctx, f, &cur.Descriptor)
			return b, &cur.Descriptor, err
		})
	} else if base == nil && h.inherited != nil {
		d, err = f.recs.RewriteMemory(context.WithoutCancel(ctx), n.ns, desc, body, h.inherited)
	} else if base != nil && !base.IsZero() && h.inherited != nil {
		d, err = f.recs.EditMemory(context.WithoutCancel(ctx), n.ns, desc, body, *base, h.inherited)
	} else {
		d, err = f.recs.PutMemory(context.WithoutCancel(ctx), n.ns, desc, body, base)
	}
	if err != nil {
		h.settle(gen, err)
		return f.errnoOf("write memory "+n.ns+"/"+e.Name, err)
	}
	h.committedAs(body, merged)
	h.base = &d.Digest
	// The record's metadata as it landed, merged with another writer's
	// (a chmod from another mount kept): the descriptor shows it, and
	// builds its next commit on it. It kept the metadata read at the
	// open, so fstat through it showed the mode the merge had dropped,
	// and an fchmod back to that mode was a no-op (review 43).
	h.mu.Lock()
	h.meta = layout.MergeMetadata(desc.Metadata, h.meta, d.Metadata)
	h.mu.Unlock()
	h.inherited = maps.Clone(d.Metadata)
	if h.inherited == nil {
		h.inherited = map[string]string{}
	}
	n.mu.Lock()
	if n.has && n.e.Digest != d.Digest {
		// The node's number names the content it was looked up with
		// (memRecordChild), which it no longer shows: a lookup that
		// derives that number again, once the record holds those
		// bytes again, must not get this node back (go-fuse returns
		// the node it has under a number), or it read the newer bytes
		// the record no longer holds, for as long as the kernel kept
		// the node (an open descriptor).
		f.moved.add(n.StableAttr().Ino)
	}
	n.e, n.has, n.fresh = layout.Entry{Descriptor: d}, true, false
	n.mu.Unlock()
	h.settle(gen, nil)
	return 0
}

func (h *memHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno { return h.Flush(ctx) }
