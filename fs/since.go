package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// sinceDir is .pugmark/since-checkpoint/ and its subdirectories: what
// arrived after the session's latest checkpoint (provisional and queueing
// snapshots, §6.4), a handler's new input (tree.md "Running a handler").
// Each name shows its newest descriptor among those snapshots, read-only;
// fork records are left out (§11.2 step 4: a handler must not see its own
// fork commands as work), and so are records of cross-session writes this
// session sent (§12.1: they are its output, not its input) and removals
// (log.jsonl has those).
type sinceDir struct {
	f     *FS
	id    layout.SessionID
	parts []string
}

// tree returns the since-checkpoint tree of the session now.
func (s *sinceDir) tree(ctx context.Context) (*cache.Dir, error) {
	st, err := s.f.cache.State(ctx, s.id)
	if err != nil {
		return nil, err
	}
	cp, _, err := s.f.views.LatestCheckpoint(ctx, st.ID, st.Version)
	if err != nil {
		return nil, err
	}
	return cache.BuildTree(sinceCheckpoint(st, cp)), nil
}

// sinceCheckpoint returns the input of a handler run on st: for each
// name, the newest descriptor committed after version checkpoint (0: no
// checkpoint yet), without fork records, sent cross-session writes and
// removals.
func sinceCheckpoint(st *cache.State, checkpoint uint32) map[string]layout.Entry {
	out := map[string]layout.Entry{}
	for v := checkpoint + 1; v <= st.Version && v > checkpoint; v++ {
		ds, _ := st.Snapshot(v)
		for _, d := range ds {
			switch {
			case d.Fork || !d.TargetSession.IsZero() || d.Name == "":
				continue
			case d.Deleted:
				delete(out, d.Name)
			default:
				out[d.Name] = layout.Entry{Descriptor: d, Session: st.ID, Version: v}
			}
		}
	}
	return out
}

func (s *sinceDir) list(ctx context.Context) ([]child, error) {
	t, err := s.tree(ctx)
	if err != nil {
		return nil, err
	}
	d, ok := t.Walk(s.parts)
	if !ok {
		return nil, syscall.ENOENT
	}
	var out []child
	for _, n := range d.Names() {
		out = append(out, s.childOf(d, n))
	}
	return out, nil
}

func (s *sinceDir) find(ctx context.Context, name string) (child, error) {
	t, err := s.tree(ctx)
	if err != nil {
		return child{}, err
	}
	d, ok := t.Walk(s.parts)
	if !ok {
		return child{}, syscall.ENOENT
	}
	if _, ok := d.File(name); !ok {
		if _, ok := d.Sub(name); !ok {
			return child{}, syscall.ENOENT
		}
	}
	return s.childOf(d, name), nil
}

func (s *sinceDir) childOf(d *cache.Dir, name string) child {
	f := s.f
	full := cache.JoinName(appendPart(s.parts, name))
	if e, ok := d.File(name); ok {
		return f.privateRead(child{name: name, mode: syscall.S_IFREG, ttl: f.ttl,
			ino: inoOf("since", s.id.String(), full, e.Digest.String(), e.CreatedAt.String()),
			node: func() gofs.InodeEmbedder {
				return &fileNode{f: f, c: &blobContent{f: f, d: &e.Descriptor, born: s.id.Time()}, x: descXattrs(e)}
			}})
	}
	return f.dir(name, inoOf("since-dir", s.id.String(), full), f.ttl, &sinceDir{f: f, id: s.id, parts: appendPart(s.parts, name)})
}

func (s *sinceDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	s.f.privateDir(out)
	return nil
}
