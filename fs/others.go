package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// rootMetaDir is the hidden <mnt>/.pugmark/: stats, the bucket URL, the
// flags of this mount and the data of failed commits (failed.go).
type rootMetaDir struct{ f *FS }

func (r *rootMetaDir) entries() []child {
	f := r.f
	return []child{
		f.genFile("stats", inoOf("stats"), time.Time{}, false, func(ctx context.Context) ([]byte, error) {
			return []byte(f.statsText()), nil
		}),
		f.genFile("bucket", inoOf("bucket"), f.start, true, func(ctx context.Context) ([]byte, error) {
			return []byte(f.cfg.BucketURL + "\n"), nil
		}),
		f.genFile("flags", inoOf("flags"), f.start, true, func(ctx context.Context) ([]byte, error) {
			return []byte(f.cfg.Flags + "\n"), nil
		}),
		{name: "failed", mode: syscall.S_IFDIR, ino: inoOf("failed"), ttl: f.ttl, node: func() gofsNode {
			return &failedDirNode{dirNode: dirNode{f: f, ls: &failedDir{f: f}}}
		}},
	}
}

func (r *rootMetaDir) list(ctx context.Context) ([]child, error) { return r.entries(), nil }
func (r *rootMetaDir) find(ctx context.Context, name string) (child, error) {
	return findIn(r.entries(), name)
}
func (r *rootMetaDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

func findIn(cs []child, name string) (child, error) {
	for _, c := range cs {
		if c.name == name {
			return c, nil
		}
	}
	return child{}, syscall.ENOENT
}

// statsText renders .pugmark/stats for people.
func (f *FS) statsText() string {
	var b strings.Builder
	ls := f.store.Stats()
	fmt.Fprintf(&b, "backend requests: get %d, head %d, put %d, list %d, delete %d\n",
		ls.Gets, ls.Heads, ls.Puts, ls.Lists, ls.Deletes)
	fmt.Fprintf(&b, "backend bytes: read %d, written %d\n", ls.BytesRead, ls.BytesWritten)
	fmt.Fprintf(&b, "backend retries %d, errors %d\n", ls.Retries, ls.Errors)
	fmt.Fprintf(&b, "backend requests in flight: peak %d\n", ls.PeakInFlight)
	fmt.Fprintf(&b, "%s\n", f.cache.Stats())
	fmt.Fprintf(&b, "%s\n", f.blobs.Stats()) // "blob cache <part>: ..." lines
	ws := f.w.Stats()
	fmt.Fprintf(&b, "commits %d (snapshots %d, descriptors %d), commit errors %d, conflicts %d\n",
		ws.Commits, ws.Snapshots, ws.Descriptors, ws.Errors, ws.Conflicts)
	kept, keptBytes := f.failedStats()
	fmt.Fprintf(&b, "failed commits kept %d (bytes %d) in .pugmark/failed/\n", kept, keptBytes)
	if f.cfg.ExtraStats != nil {
		b.WriteString(f.cfg.ExtraStats())
	}
	return b.String()
}

// namesDir is names/<name> -> ../sessions/<id>, from refs/sessions/<name>.
type namesDir struct{ f *FS }

func (n *namesDir) list(ctx context.Context) ([]child, error) {
	refs, err := n.f.views.Refs(ctx)
	if err != nil {
		return nil, err
	}
	var out []child
	for _, r := range refs {
		name, ok := strings.CutPrefix(r, "sessions/")
		if !ok {
			continue
		}
		out = append(out, n.child(name))
	}
	return out, nil
}

// child is names/<name>. Its target is read when asked for (the ref can
// move to another session; within the metadata TTL it is cached), so the
// listing and a lookup give the same inode without reading every ref.
func (n *namesDir) child(name string) child {
	f := n.f
	return child{name: name, mode: syscall.S_IFLNK, ino: inoOf("name", name), ttl: f.ttl,
		node: func() gofsNode {
			return &linkNode{f: f, dyn: func(ctx context.Context) (string, error) {
				id, err := f.resolveName(ctx, name)
				if err != nil {
					return "", err
				}
				return "../sessions/" + id.String(), nil
			}}
		}}
}

func (n *namesDir) find(ctx context.Context, name string) (child, error) {
	if err := layout.ValidateRefName(layout.SessionRefName(name)); err != nil {
		return child{}, syscall.ENOENT
	}
	if _, err := n.f.resolveName(ctx, name); err != nil {
		return child{}, err
	}
	return n.child(name), nil
}

func (n *namesDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

func (f *FS) resolveName(ctx context.Context, name string) (layout.SessionID, error) {
	r, err := f.views.Ref(ctx, layout.SessionRefName(name))
	if err != nil {
		return layout.SessionID{}, err
	}
	id, err := layout.ParseManifestKey(r.Target)
	if err != nil {
		key, _ := layout.RefKey(layout.SessionRefName(name))
		return layout.SessionID{}, fmt.Errorf("session ref %s: %w: target %q is not a manifest key: %v", key, layout.ErrCorrupt, r.Target, err)
	}
	return id, nil
}

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
	if !r.f.cfg.ReadOnly {
		out.Mode = syscall.S_IFDIR | 0o755 // writing refs/<name> is a Link
	}
	return nil
}

// refChild is a ref file: its target, one line.
func (f *FS) refChild(leaf, name string) child {
	return child{name: leaf, mode: syscall.S_IFREG, ino: inoOf("ref", name), ttl: f.ttl,
		node: func() gofsNode { return f.refNode(name) }}
}

func (f *FS) refContent(name string) content {
	return &bytesContent{gen: func(ctx context.Context) ([]byte, error) {
		r, err := f.views.Ref(ctx, name)
		if err != nil {
			return nil, err
		}
		return []byte(r.Target + "\n"), nil
	}}
}

// objectsDir is objects/sha256:<hex>: every blob, raw bytes.
type objectsDir struct{ f *FS }

func (o *objectsDir) list(ctx context.Context) ([]child, error) {
	var out []child
	err := o.f.store.ListBlobs(ctx, func(d layout.Digest, size int64) bool {
		out = append(out, o.f.objectChild(d, size))
		return true
	}, nil)
	return out, err
}

func (o *objectsDir) find(ctx context.Context, name string) (child, error) {
	d, err := layout.ParseBlobKey(layout.ObjectsPrefix + name)
	if err != nil {
		return child{}, syscall.ENOENT
	}
	size, err := o.f.store.BlobSize(ctx, d)
	if err != nil {
		return child{}, err
	}
	return o.f.objectChild(d, size), nil
}

func (o *objectsDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

func (f *FS) objectChild(d layout.Digest, size int64) child {
	return child{name: d.String(), mode: syscall.S_IFREG, ino: inoOf("object", d.Hex()), ttl: historyTTL,
		node: func() gofsNode {
			return &fileNode{f: f, c: &rawContent{f: f, d: d, n: size}, x: func() map[string]string {
				return map[string]string{"user.pugmark.digest": d.String()}
			}}
		}}
}

// rawContent is a blob's stored bytes, verified, not decoded.
type rawContent struct {
	f *FS
	d layout.Digest
	n int64
}

func (r *rawContent) size(ctx context.Context) (int64, error) { return r.n, nil }
func (r *rawContent) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := r.f.blobs.ReadRawAt(ctx, r.d, r.n, p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
func (r *rawContent) mtime() time.Time { return time.Time{} }
func (r *rawContent) immutable() bool  { return true }

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
			for _, d := range recs {
				if layout.ValidateMemoryName(d.Name) != nil || d.Deleted || files[d.Name] {
					continue
				}
				files[d.Name] = true
				out = append(out, m.f.memRecordChild(ns.Name, d))
			}
		}
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
		if next == "" || files[next] || dirs[next] {
			continue
		}
		dirs[next] = true
		sub := next
		if m.prefix != "" {
			sub = m.prefix + "/" + next
		}
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
	if !m.f.cfg.ReadOnly {
		out.Mode = syscall.S_IFDIR | 0o755
	}
	return nil
}

func (f *FS) memRecordChild(ns string, d layout.Descriptor) child {
	e := layout.Entry{Descriptor: d}
	return child{name: d.Name, mode: syscall.S_IFREG, ttl: f.ttl,
		ino:  inoOf("mem", ns, d.Name, d.Digest.String()),
		node: func() gofsNode { return f.memNode(ns, e) }}
}

// memSubdir is a namespace directory under memories/.
func (f *FS) memSubdir(name, ns string) child {
	return child{name: name, mode: syscall.S_IFDIR, ino: inoOf("memdir", ns), ttl: f.ttl,
		node: func() gofsNode { return f.memDirChild(name, ns) }}
}
