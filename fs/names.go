package fs

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// namesDir is names/<name> -> ../sessions/<id>, from refs/sessions/<name>.
type namesDir struct{ f *FS }

func (n *namesDir) list(ctx context.Context) ([]child, error) {
	refs, err := n.f.views.Refs(ctx)
	if err != nil {
		return nil, err
	}
	var out []child
	var names []string
	for _, r := range refs {
		name, ok := strings.CutPrefix(r, "sessions/")
		if _, path := layout.NamePath(r); !ok || !path {
			continue // not a session's name, or one no path reaches
		}
		out = append(out, n.child(name))
		names = append(names, r)
	}
	// The targets are read ahead, wide in parallel, for the readlink(2)
	// of every entry that `ls -l` and `find -L` send one after another;
	// the listing and stat need none (nameLinkSize).
	go n.f.views.PrefetchRefs(context.Background(), names)
	return out, nil
}

// nameLinkSize is the size of every names/ link: its target is
// "../sessions/" and a 32-hex ID.
const nameLinkSize = len("../sessions/") + 32

// child is names/<name>. Its target is read when asked for (the ref can
// move to another session; within the metadata TTL it is cached), so the
// listing and a lookup give the same inode without reading every ref.
func (n *namesDir) child(name string) child {
	f := n.f
	return child{name: name, mode: syscall.S_IFLNK, ino: inoOf("name", name), ttl: f.ttl,
		node: func() gofsNode {
			return &linkNode{f: f, size: nameLinkSize, dyn: func(ctx context.Context) (string, error) {
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
