package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/readahead"
	"github.com/pugmark/pugfs/staging"
)

// sessionsDir is sessions/: every session in the bucket, and any ID by
// lookup even when listing would be expensive.
type sessionsDir struct{ f *FS }

// list is one freshness pass (cache.ListSessions): every session, with
// the attributes the pass found, so that READDIRPLUS (ls -l) is answered
// from it; an entry it has none for goes out without attributes.
func (s *sessionsDir) list(ctx context.Context) ([]child, error) {
	ls, err := s.f.cache.ListSessions(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]layout.SessionID, len(ls))
	for i, e := range ls {
		ids[i] = e.ID
	}
	s.f.ra.Listed(ids)
	out := make([]child, 0, len(ls))
	for _, e := range ls {
		c := s.f.sessionChild(e.ID.String(), e.ID)
		if e.Known {
			c.attr = s.f.sessionAttr(e.ID, e.UpdatedAt)
		} else {
			c.lazy = true
		}
		out = append(out, c)
	}
	return out, nil
}

func (s *sessionsDir) find(ctx context.Context, name string) (child, error) {
	id, err := layout.ParseSessionID(name)
	if err != nil {
		return child{}, syscall.ENOENT
	}
	if _, err := layout.ManifestKey(id); err != nil {
		return child{}, syscall.ENOENT // an ID whose hour has no partition (past year 9999)
	}
	_, at, err := s.f.cache.Find(ctx, id)
	if err != nil {
		if !s.f.damaged(ctx, id, err) {
			return child{}, err
		}
		at = id.Time() // as sessionDir.dirAttr shows a damaged session
	}
	// The entry's attributes are what this lookup found: asking the
	// node would check the bucket again, a second LIST per lookup with
	// a TTL of 0.
	c := s.f.sessionChild(name, id)
	c.attr = s.f.sessionAttr(id, at)
	return c, nil
}

// sessionAttr fills the attributes of session id's directory whose last
// content append is at, as a listing or a lookup found it.
func (f *FS) sessionAttr(id layout.SessionID, at time.Time) func(*fuse.Attr) {
	return func(a *fuse.Attr) {
		_ = f.fillDirAttr(a, func(a *fuse.Attr) error { f.sessionRootAttr(a, id, at); return nil })
	}
}

// damaged reports whether err, from loading session id, is a damaged
// snapshot of a session that exists (its manifest reads). Such a session
// is still a directory: what depends on the damaged snapshot (its files,
// version, history) fails with EIO, and what does not (.pugmark/'s
// manifest.json and parent link) works (tree.md "Errors a user sees").
func (f *FS) damaged(ctx context.Context, id layout.SessionID, err error) bool {
	if !errors.Is(err, layout.ErrCorrupt) {
		return false
	}
	_, merr := f.cache.Manifest(ctx, id)
	return merr == nil
}

func (s *sessionsDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	setTimes(out, s.f.start)
	if s.f.sharedWritable() {
		out.Mode = syscall.S_IFDIR | 0o755 // mkdir creates a session
	}
	return nil
}

// sessionChild is the live directory of a session.
func (f *FS) sessionChild(name string, id layout.SessionID) child {
	sd := &sessionDir{f: f, id: id}
	return child{name: name, mode: syscall.S_IFDIR, ino: inoOf("session", id.String()), ttl: f.ttl, entryTTL: historyTTL,
		node: func() gofs.InodeEmbedder { return f.sessionNode(sd) }}
}

// sessionDir lists one directory of a session's tree: the live state
// (at == 0) or the state at a version (read-only history).
type sessionDir struct {
	f     *FS
	id    layout.SessionID
	parts []string // path inside the session
	// hist marks a read-only view of version at (.pugmark/at/<N>).
	hist bool
	at   uint32

	memoMu sync.Mutex // guards memo
	// memo is the last listing built from a tree directory, kept where
	// the children depend on nothing else (memoisable): a read-only
	// mount's or a history view's. A tree directory never changes (a new
	// state copies what it changes), so while the view shows the same
	// one, a readdir reuses the children instead of building them and
	// warming their sizes again.
	memo struct {
		dir  *cache.Dir
		kids []child
	}
}

func (d *sessionDir) live() bool { return !d.hist }

// state is the session's state the directory shows: for history at
// version N, one that holds versions 1..N even when a later snapshot is
// damaged (cache.StateUpTo).
func (d *sessionDir) state(ctx context.Context) (*cache.State, error) {
	if d.live() {
		return d.f.cache.State(ctx, d.id)
	}
	return d.f.cache.StateUpTo(ctx, d.id, d.at)
}

// view returns the state and the slots the directory shows.
func (d *sessionDir) view(ctx context.Context) (*cache.State, *cache.Dir, error) {
	st, err := d.state(ctx)
	if err != nil {
		return nil, nil, err
	}
	if d.live() {
		_, tree := d.f.w.Live(st)
		return st, tree, nil
	}
	if d.at > st.Version {
		return nil, nil, syscall.ENOENT
	}
	return st, d.f.treeAt(st, d.at), nil
}

func (d *sessionDir) list(ctx context.Context) ([]child, error) {
	var local func(seen map[string]bool) []child
	if d.live() {
		local = d.overlay() // before the state: see staging.Writer.Overlay
		// A glob (sessions/*/name) reads each session's directory: the
		// same directory across sessions is a name stream too.
		d.f.ra.Lookup(d.id, cache.JoinName(d.parts)+"/")
	}
	st, tree, err := d.view(ctx)
	if err != nil {
		return nil, err
	}
	dir, ok := tree.Walk(d.parts)
	var out []child
	if ok {
		kids := d.children(ctx, st, dir)
		out = make([]child, 0, len(kids))
		for _, c := range kids {
			if !(d.live() && d.f.w.Hidden(d.id, d.full(c.name))) {
				out = append(out, c)
			}
		}
	}
	if local != nil {
		at := make(map[string]int, len(out))
		// The hidden .pugmark/ is not listed, also when staged files
		// under .pugmark/send/ make it a local directory.
		seen := make(map[string]bool, len(out)+1)
		seen[".pugmark"] = len(d.parts) == 0
		for i, c := range out {
			at[c.name] = i
			seen[c.name] = true
		}
		for _, c := range local(seen) {
			// A staged file shadows the committed entry of its name:
			// a node made from that entry (READDIRPLUS answers from
			// this listing) showed the bytes the staged file's commit
			// replaces once the staged file was forgotten.
			if i, ok := at[c.name]; ok {
				out[i] = c
			} else {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// children returns the children of dir's slots and subdirectories, in
// name order, the hidden .pugmark/ left out; the caller must not change
// the slice. Where memoisable, the last call's are reused for the same
// dir.
func (d *sessionDir) children(ctx context.Context, st *cache.State, dir *cache.Dir) []child {
	memo := d.memoisable()
	if memo {
		d.memoMu.Lock()
		dir0, kids := d.memo.dir, d.memo.kids
		d.memoMu.Unlock()
		if dir0 == dir {
			return kids
		}
	}
	d.f.warmSizes(ctx, dir)
	names := dir.Names()
	kids := make([]child, 0, len(names))
	for _, name := range names {
		if d.metaName(name) {
			continue // the hidden .pugmark/ shadows a slot of that name
		}
		if c, ok := d.childOf(st, dir, name); ok {
			kids = append(kids, c)
		}
	}
	if memo {
		d.memoMu.Lock()
		d.memo.dir, d.memo.kids = dir, kids
		d.memoMu.Unlock()
	}
	return kids
}

// memoisable reports whether the children of a tree directory depend on
// the directory alone: on a read-write mount a live file's child also
// carries the inode number a rename kept (slotChild), which changes
// without the tree changing.
func (d *sessionDir) memoisable() bool { return d.hist || !d.f.sessionWritable(d.id) }

// full returns the slot name of name in this directory.
func (d *sessionDir) full(name string) string { return cache.JoinName(appendPart(d.parts, name)) }

// overlay notes the local entries of the directory (staged files, local
// directories) and returns what makes their children.
func (d *sessionDir) overlay() func(seen map[string]bool) []child {
	local := d.f.w.Overlay(d.id, cache.JoinName(d.parts))
	return func(seen map[string]bool) []child {
		ls := local(seen)
		out := make([]child, len(ls))
		for i, l := range ls {
			out[i] = d.localChild(l)
		}
		return out
	}
}

// localChild is the child of a local entry: a staged file's, or a local
// directory's.
func (d *sessionDir) localChild(l staging.Local) child {
	if l.File != nil {
		return d.f.stagedChild(d, l.Name, l.File)
	}
	sub := &sessionDir{f: d.f, id: d.id, parts: appendPart(d.parts, l.Name)}
	return d.f.sessionSubdir(sub, l.Name)
}

// metaName reports whether name is the hidden .pugmark/ of a live
// session's root directory.
func (d *sessionDir) metaName(name string) bool {
	return name == ".pugmark" && len(d.parts) == 0 && d.live()
}

// fixed reports whether the listing can never change: history.
func (d *sessionDir) fixed() bool { return d.hist }

func (d *sessionDir) find(ctx context.Context, name string) (child, error) {
	if len(name) > layout.MaxNameComponent {
		return child{}, syscall.ENAMETOOLONG
	}
	if d.live() {
		// Before the state is read: a glob over sessions/*/name loads
		// the next sessions' states meanwhile.
		d.f.ra.Lookup(d.id, d.full(name))
	}
	if d.metaName(name) {
		c := d.f.dir(name, inoOf("session-meta", d.id.String()), d.f.ttl, &sessionMetaDir{f: d.f, id: d.id})
		c.entryTTL = historyTTL
		return c, nil
	}
	if d.sendDir() {
		// The ID of any session is a target directory, whether or not
		// this mount wrote to it yet; anything else is not (a write to
		// no session could never be delivered).
		target, err := d.f.sendTarget(ctx, name)
		if err != nil {
			return child{}, err
		}
		// An ID in upper case is that ID (§4.1), as under sessions/: the
		// files written under it go to the canonical name.
		return d.f.sessionSubdir(&sessionDir{f: d.f, id: d.id, parts: appendPart(d.parts, target.String())}, name), nil
	}
	if d.live() {
		if s, ok := d.f.w.Lookup(d.id, d.full(name)); ok && (s != nil || !d.fileOverEmptyDir(ctx, name)) {
			return d.localChild(staging.Local{Name: name, File: s}), nil
		}
		if d.f.w.Hidden(d.id, d.full(name)) {
			return child{}, syscall.ENOENT
		}
	}
	st, tree, err := d.view(ctx)
	if err != nil {
		return child{}, err
	}
	dir, ok := tree.Walk(d.parts)
	if !ok {
		return child{}, syscall.ENOENT
	}
	c, ok := d.childOf(st, dir, name)
	if !ok {
		return child{}, syscall.ENOENT
	}
	if c.mode == syscall.S_IFDIR && d.live() {
		// A directory's attributes are those of the state this lookup
		// read: asking its node would check the bucket again, a second
		// LIST per lookup with a TTL of 0. (A name that is both a file
		// and a directory is the file: childOf.)
		own := &sessionDir{f: d.f, id: d.id, parts: appendPart(d.parts, name)}
		c.attr = func(a *fuse.Attr) {
			_ = d.f.fillDirAttr(a, func(a *fuse.Attr) error { own.ownAttr(a, st.UpdatedAt); return nil })
		}
	}
	return c, nil
}

// fileOverEmptyDir reports whether the bucket holds a file name where
// this mount has an empty directory of its own (made with mkdir, which
// the bucket never sees), and drops that directory if so: another mount
// committed the file since, and it showed here as the empty directory
// until rmdir, where every other mount, and a listing here, showed the
// file.
func (d *sessionDir) fileOverEmptyDir(ctx context.Context, name string) bool {
	_, tree, err := d.view(ctx)
	if err != nil {
		return false
	}
	dir, ok := tree.Walk(d.parts)
	if !ok {
		return false
	}
	if _, isFile := dir.File(name); !isFile {
		return false
	}
	return d.f.w.Rmdir(ctx, d.id, d.full(name)) == nil
}

// sendDir reports whether d is the live .pugmark/send/ of its session.
func (d *sessionDir) sendDir() bool {
	return d.live() && cache.JoinName(d.parts) == staging.SendDir
}

// sendTarget returns the session name is the ID of, in either case (one manifest read,
// cached for good): .pugmark/send/<name>/ is then a target. ENOENT if it
// is not.
func (f *FS) sendTarget(ctx context.Context, name string) (layout.SessionID, error) {
	id, err := layout.ParseSessionID(name)
	if err != nil {
		return id, syscall.ENOENT
	}
	if _, err := layout.ManifestKey(id); err != nil {
		return id, syscall.ENOENT
	}
	if _, err := f.cache.Manifest(ctx, id); err != nil {
		return id, err // ErrSessionNotFound is ENOENT
	}
	return id, nil
}

func (d *sessionDir) childOf(st *cache.State, dir *cache.Dir, name string) (child, bool) {
	if e, ok := dir.File(name); ok {
		return d.f.slotChild(d, name, e), true
	}
	if _, ok := dir.Sub(name); ok {
		sub := &sessionDir{f: d.f, id: d.id, parts: appendPart(d.parts, name), hist: d.hist, at: d.at}
		return d.f.sessionSubdir(sub, name), true
	}
	return child{}, false
}

func appendPart(parts []string, name string) []string {
	out := make([]string, len(parts)+1)
	copy(out, parts)
	out[len(parts)] = name
	return out
}

func (f *FS) sessionSubdir(sub *sessionDir, name string) child {
	ttl := f.ttl
	if !sub.live() {
		ttl = historyTTL
	}
	return child{name: name, mode: syscall.S_IFDIR, ttl: ttl,
		ino:  sdirIno(sub.id, viewKey(sub), cache.JoinName(sub.parts)),
		node: func() gofs.InodeEmbedder { return f.sessionNode(sub) }}
}

func (d *sessionDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	var updated time.Time
	switch {
	case !d.live():
		// History at version N shows the last content append at or
		// before N, never a later one.
		st, err := d.state(ctx)
		if err != nil {
			return err
		}
		updated = st.UpdatedAtVersion(d.at)
	case len(d.parts) == 0:
		// A session's own directory: a light summary is enough, so that
		// ls -l sessions/ does not load every session. A damaged one
		// shows its hour, as an empty session does.
		_, t, err := d.f.cache.Summary(ctx, d.id)
		if err != nil && !d.f.damaged(ctx, d.id, err) {
			return err
		}
		if err != nil {
			t = d.id.Time()
		}
		d.f.sessionRootAttr(out, d.id, t)
		return nil
	default:
		st, err := d.f.cache.State(ctx, d.id)
		if err != nil {
			return err
		}
		updated = st.UpdatedAt
	}
	d.ownAttr(out, updated)
	return nil
}

// ownAttr sets what is d's own in its attributes when the session's last
// content append (at d's version, for history) is updated.
func (d *sessionDir) ownAttr(out *fuse.Attr, updated time.Time) {
	setTimes(out, updated)
	if d.live() && d.f.sessionWritable(d.id) {
		out.Mode = syscall.S_IFDIR | 0o755
	}
}

// sessionRootAttr sets what is a session directory's own in its
// attributes: its last content append, and write bits where it takes
// writes.
func (f *FS) sessionRootAttr(out *fuse.Attr, id layout.SessionID, updated time.Time) {
	setTimes(out, updated)
	if f.sessionWritable(id) {
		out.Mode = syscall.S_IFDIR | 0o755
	}
}

// slotChild is a file backed by a descriptor. The inode is keyed on
// session, version view, name and digest, so new content is a new inode
// and old pages can stay cached (FOPEN_KEEP_CACHE) for the old one.
//
// e is the tree's entry, shared and never changed: the child and its
// node keep the pointer rather than a copy (a listing of 10,000 files
// made 10,000 copies of every descriptor, twice).
func (f *FS) slotChild(d *sessionDir, name string, e *layout.Entry) child {
	full := cache.JoinName(appendPart(d.parts, name))
	ttl := f.ttl
	if !d.live() {
		ttl = historyTTL
	}
	ino, gen := f.slotNum(d.id, viewKey(d), full, e)
	c := child{name: name, mode: syscall.S_IFREG, ino: ino, gen: gen, ttl: ttl, node: func() gofs.InodeEmbedder {
		return f.slotNode(d, full, e)
	}}
	if d.live() && f.sessionWritable(d.id) {
		c.refresh = func(in *gofs.Inode) {
			if n, ok := in.Operations().(*slotFile); ok {
				n.adopt(*e)
			}
		}
	}
	if !d.live() {
		c = f.privateRead(c) // history: see privateRead
	}
	return c
}

// blobContent is a file showing a descriptor's (decoded) body; pos,
// when set, is where it shows in a session's tree, for read-ahead.
type blobContent struct {
	f *FS
	// d is the descriptor shown, shared with the tree it came from:
	// descriptors are immutable once decoded.
	d   *layout.Descriptor
	pos *readahead.Pos
	// born is the mtime shown when the descriptor has no time (descMtime):
	// its session's hour; zero (the mount's start) outside a session.
	born time.Time
	// ahead, if set, is the listing this file is aheadName of, read
	// ahead of a program reading it in order (seq/).
	ahead     *listAhead
	aheadName string
}

func (b *blobContent) size(ctx context.Context) (int64, error) { return b.f.blobs.Size(ctx, b.d) }
func (b *blobContent) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	b.started(ctx, off)
	n, err := b.f.blobs.ReadAt(ctx, b.d, p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// started tells the traversal read-ahead that a read from off began: a
// read of a file's start moves the traversal on, wherever it is served
// from (bucket, memory, or a pinned copy).
func (b *blobContent) started(ctx context.Context, off int64) {
	if off != 0 {
		return
	}
	if b.ahead != nil {
		b.ahead.read(b.f, b.aheadName)
		return
	}
	b.f.ra.Read(b.pos, b.d, callerThread(ctx))
}

// callerThread is the thread that made the request ctx serves (FUSE
// sends the caller's thread ID), 0 when it is not known.
func callerThread(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

func (b *blobContent) mtime() time.Time { return descMtime(b.d, b.born) }
func (b *blobContent) immutable() bool  { return true }

// descXattrs are the extended attributes of a slot file (tree.md).
func descXattrs(e *layout.Entry) xattrs {
	return func() map[string]string {
		d := e.Descriptor
		m := map[string]string{
			"user.pugmark.digest":  d.Digest.String(),
			"user.pugmark.version": strconv.FormatUint(uint64(e.Version), 10),
		}
		if d.SequenceNumber != 0 { // memory records have none
			m["user.pugmark.sequence-number"] = strconv.FormatInt(d.SequenceNumber, 10)
		}
		if d.ContentType != "" {
			m["user.pugmark.content-type"] = d.ContentType
		}
		if d.ContentEncoding != "" {
			m["user.pugmark.content-encoding"] = d.ContentEncoding
		}
		if !d.CreatedAt.IsZero() {
			m["user.pugmark.created-at"] = d.CreatedAt.UTC().Format(time.RFC3339Nano)
		}
		if d.SchemaURL != "" {
			m["user.pugmark.schema-url"] = d.SchemaURL
		}
		if e.Session != (layout.SessionID{}) {
			m["user.pugmark.session"] = e.Session.String()
		}
		for k, v := range d.Metadata {
			m["user.pugmark.meta."+k] = v
		}
		return kernelXattrs(m)
	}
}

// The kernel's limits on extended attributes (linux/limits.h).
const (
	xattrNameMax = 255
	xattrSizeMax = 64 << 10
	xattrListMax = 64 << 10
)

// kernelXattrs drops the names the kernel cannot carry: empty, holding a
// NUL (listxattr's separator: "a\x00b" would list as two names, neither
// found) or longer than 255 bytes. A value over 64 KiB stays, for getxattr
// to say E2BIG about, and listxattr lists what fits in 64 KiB (xattrNames);
// every attribute is still there by name. Metadata comes from the bucket:
// what is dropped here stays in log.jsonl.
func kernelXattrs(m map[string]string) map[string]string {
	for k := range m {
		if k == "" || len(k) > xattrNameMax || strings.IndexByte(k, 0) >= 0 {
			delete(m, k)
		}
	}
	return m
}

// treeAt returns the tree of st's session at version v, cached.
func (f *FS) treeAt(st *cache.State, v uint32) *cache.Dir {
	return f.cache.TreeAt(st, v)
}

// viewKey distinguishes the live tree from each history version in inode
// keys.
func viewKey(d *sessionDir) string {
	if d.live() {
		return liveView
	}
	return strconv.FormatUint(uint64(d.at), 10)
}

// sessionsNode is sessions/ on a read-write mount.
type sessionsNode struct{ dirNode }

var _ = (gofs.NodeMkdirer)((*sessionsNode)(nil))

// Mkdir creates the session with that ID (idempotent, §5.1). An ID in
// upper case is that ID (§4.1: parsers take either case), as a lookup
// takes it; the listing shows the canonical lower case.
func (n *sessionsNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	id, err := layout.ParseSessionID(name)
	if err == nil && id.IsZero() {
		err = fmt.Errorf("%w: the all-zero ID is no session (§4.1)", layout.ErrInvalid)
	}
	if err == nil {
		err = n.f.recs.CreateSession(context.WithoutCancel(ctx), id)
	}
	if errors.Is(err, layout.ErrInvalid) {
		// EINVAL alone does not say that a random 32-hex name's first
		// 8 digits are an hour past year 9999.
		n.f.log.Info("mkdir in sessions/ refused: not a session ID this bucket can hold ("+
			"32 hex digits, the first 8 the hour it was made; pugfs session new prints one)", "name", name, "err", err)
	}
	if err != nil {
		return nil, n.f.errnoOf("create session "+name, err)
	}
	return n.f.materialise(ctx, &n.Inode, n.f.sessionChild(name, id), out)
}
