package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/staging"
)

// sessionMetaDir is sessions/<id>/.pugmark/.
type sessionMetaDir struct {
	f  *FS
	id layout.SessionID
}

func (m *sessionMetaDir) state(ctx context.Context) (*cache.State, error) {
	return m.f.cache.State(ctx, m.id)
}

func (m *sessionMetaDir) entries(ctx context.Context) ([]child, error) {
	f, id := m.f, m.id
	// The manifest alone: a damaged snapshot fails what depends on the
	// snapshots (version, history), not this listing.
	man, err := f.cache.Manifest(ctx, id)
	if err != nil {
		return nil, err
	}
	sid := id.String()
	out := []child{
		f.genFile("manifest.json", inoOf("manifest", sid), id.Time(), true, func(ctx context.Context) ([]byte, error) {
			return man.Document()
		}),
		// The latest version and checkpoint come from the listing and
		// the snapshots' metadata: a damaged snapshot body does not hide
		// them (historyOf).
		f.genFile("version", inoOf("version", sid), time.Time{}, false, func(ctx context.Context) ([]byte, error) {
			_, latest, err := f.historyOf(ctx, id)
			if err != nil {
				return nil, err
			}
			return []byte(strconv.FormatUint(uint64(latest), 10) + "\n"), nil
		}),
		f.genFile("checkpoint", inoOf("checkpoint", sid), time.Time{}, false, func(ctx context.Context) ([]byte, error) {
			_, latest, err := f.historyOf(ctx, id)
			if err != nil {
				return nil, err
			}
			v, ok, err := f.views.LatestCheckpoint(ctx, id, latest)
			if err != nil {
				return nil, err
			}
			if !ok {
				return []byte("none\n"), nil
			}
			return []byte(strconv.FormatUint(uint64(v), 10) + "\n"), nil
		}),
		f.privateRead(f.genFile("log.jsonl", inoOf("log", sid), time.Time{}, false, perVersion(m.state, func(st *cache.State) ([]byte, error) {
			return logJSONL(st.Log(st.Version))
		}))),
		fixedDir(f.dir("snapshots", inoOf("snapshots", sid), f.ttl, &snapshotsDir{f: f, id: id})),
		fixedDir(f.dir("at", inoOf("at", sid), f.ttl, &atDir{f: f, id: id})),
		fixedDir(f.dir("seq", inoOf("seq", sid), f.ttl, &seqDir{f: f, id: id})),
		fixedDir(f.dir("forks", inoOf("forks", sid), f.ttl, &forksDir{f: f, id: id})),
		fixedDir(f.dir("since-checkpoint", inoOf("since-dir", sid, ""), f.ttl, &sinceDir{f: f, id: id})),
	}
	if f.cfg.Sends && f.sessionWritable(id) {
		sd := &sessionDir{f: f, id: id, parts: strings.Split(staging.SendDir, "/")}
		out = append(out, f.sessionSubdir(sd, "send"))
	}
	if p := man.Parent; p != nil {
		target := fmt.Sprintf("../../%s/.pugmark/at/%d", p.Session, p.Version)
		out = append(out, f.symlink("parent", inoOf("parent", sid), target, id.Time(), historyTTL))
	}
	return out, nil
}

func (m *sessionMetaDir) list(ctx context.Context) ([]child, error) { return m.entries(ctx) }

// metaPrefix is how read-ahead names a session's .pugmark/ files.
const metaPrefix = ".pugmark/"

// warmAhead is read-ahead's Warm: a program that looks up
// .pugmark/checkpoint in one session after another (cat
// sessions/*/.pugmark/checkpoint) has each one's checkpoint found ahead,
// a round trip or more of snapshot metadata each (200 sessions 20 ms
// away: 5.1 s, one after another).
func (f *FS) warmAhead(ctx context.Context, st *cache.State, name string) {
	if name == metaPrefix+"checkpoint" {
		_, _, _ = f.views.LatestCheckpoint(ctx, st.ID, st.Version) // the lookup reports errors
	}
}

func (m *sessionMetaDir) find(ctx context.Context, name string) (child, error) {
	m.f.ra.Lookup(m.id, metaPrefix+name)
	cs, err := m.entries(ctx)
	if err != nil {
		return child{}, err
	}
	for _, c := range cs {
		if c.name == name {
			return c, nil
		}
	}
	return child{}, syscall.ENOENT
}

func (m *sessionMetaDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	st, err := m.state(ctx)
	switch {
	case err == nil:
		setTimes(out, st.UpdatedAt)
	case m.f.damaged(ctx, m.id, err):
		setTimes(out, m.id.Time())
	default:
		return err
	}
	return nil
}

// perVersion memoises content made from a session's state for the latest
// version it was made for: stat(2) and open(2) of log.jsonl render it once
// per version, not once per call.
func perVersion(state func(context.Context) (*cache.State, error), gen func(*cache.State) ([]byte, error)) func(context.Context) ([]byte, error) {
	var mu sync.Mutex
	var made bool
	var version uint32
	var body []byte
	return func(ctx context.Context) ([]byte, error) {
		st, err := state(ctx)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if made && version == st.Version {
			return body, nil // history is immutable: same version, same log
		}
		b, err := gen(st)
		if err != nil {
			return nil, err
		}
		made, version, body = true, st.Version, b
		return body, nil
	}
}

// logJSONL renders log.jsonl: one descriptor a line without data,
// prefixed by where it was found.
func logJSONL(log []layout.Entry) ([]byte, error) {
	var buf bytes.Buffer
	for _, e := range log {
		d := e.Descriptor
		d.Data = nil
		b, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		// Put where the descriptor lives first, then its fields.
		fmt.Fprintf(&buf, `{"session":%q,"version":%d`, e.Session.String(), e.Version)
		if len(b) > 2 {
			buf.WriteByte(',')
			buf.Write(b[1 : len(b)-1])
		}
		buf.WriteString("}\n")
	}
	return buf.Bytes(), nil
}

// parseVersion parses a version name, min or more, written as the
// listing writes it.
func parseVersion(name string, min uint32) (uint32, bool) {
	if name == "" || (len(name) > 1 && name[0] == '0') {
		return 0, false
	}
	v, err := strconv.ParseUint(name, 10, 32)
	if err != nil || uint32(v) < min {
		return 0, false
	}
	return uint32(v), true
}

// snapshotsDir is .pugmark/snapshots/<N>.json.
type snapshotsDir struct {
	f  *FS
	id layout.SessionID
}

// child is <v>.json. st is the session's state, or nil for a damaged
// session (latest): the version is then read alone (cache.Snapshot), so
// that only the damaged one fails, and shows no time.
func (s *snapshotsDir) child(st *cache.State, v uint32) child {
	f, id := s.f, s.id
	var mt time.Time
	if st != nil {
		mt = snapTime(st, v)
	}
	return f.privateRead(f.genFile(fmt.Sprintf("%d.json", v), inoOf("snapjson", id.String(), strconv.Itoa(int(v))), mt, true,
		onceBytes(func(ctx context.Context) ([]byte, error) {
			var ds []layout.Descriptor
			if st != nil {
				ds, _ = st.Snapshot(v)
			} else {
				var err error
				if ds, err = f.cache.Snapshot(ctx, id, v); err != nil {
					return nil, err
				}
			}
			meta, err := f.views.SnapshotMeta(ctx, id, v)
			if err != nil {
				return nil, err
			}
			out := struct {
				Session       string              `json:"session"`
				Version       uint32              `json:"version"`
				Type          layout.SnapshotType `json:"type"`
				TypeMissing   bool                `json:"type-missing,omitempty"`
				TypeInvalid   string              `json:"type-invalid,omitempty"`
				TransactionID string              `json:"transaction-id"`
				Descriptors   []layout.Descriptor `json:"descriptors"`
			}{id.String(), v, meta.Type, meta.TypeMissing, meta.TypeInvalid, strconv.FormatUint(meta.TransactionID, 10), ds}
			b, err := json.MarshalIndent(out, "", "  ")
			return append(b, '\n'), err
		})))
}

func snapTime(st *cache.State, v uint32) time.Time {
	ds, _ := st.Snapshot(v)
	var t time.Time
	for _, d := range ds {
		if d.CreatedAt.After(t) {
			t = d.CreatedAt
		}
	}
	return t
}

func (s *snapshotsDir) list(ctx context.Context) ([]child, error) {
	st, vers, err := s.f.versionsOf(ctx, s.id)
	if err != nil {
		return nil, err
	}
	var out []child
	for _, v := range vers.all() {
		out = append(out, s.child(st, v))
	}
	s.f.views.PrefetchSnapshotMeta(ctx, s.id, vers.all())
	return out, nil
}

func (s *snapshotsDir) find(ctx context.Context, name string) (child, error) {
	st, vers, err := s.f.versionsOf(ctx, s.id)
	if err != nil {
		return child{}, err
	}
	base, ok := cutSuffix(name, ".json")
	if !ok {
		return child{}, syscall.ENOENT
	}
	v, ok := parseVersion(base, 1)
	if !ok || !vers.has(v) {
		return child{}, syscall.ENOENT
	}
	return s.child(st, v), nil
}

func (s *snapshotsDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

func cutSuffix(s, suf string) (string, bool) {
	if len(s) > len(suf) && s[len(s)-len(suf):] == suf {
		return s[:len(s)-len(suf)], true
	}
	return "", false
}

// onceBytes memoises immutable generated content.
func onceBytes(gen func(ctx context.Context) ([]byte, error)) func(ctx context.Context) ([]byte, error) {
	var b []byte
	var done bool
	var mu = make(chan struct{}, 1)
	return func(ctx context.Context) ([]byte, error) {
		mu <- struct{}{}
		defer func() { <-mu }()
		if done {
			return b, nil
		}
		out, err := gen(ctx)
		if err != nil {
			return nil, err
		}
		b, done = out, true
		return b, nil
	}
}

// atDir is .pugmark/at/<N>/: read-only full state at each version.
type atDir struct {
	f  *FS
	id layout.SessionID
}

func (a *atDir) child(v uint32) child {
	sd := &sessionDir{f: a.f, id: a.id, at: v, hist: true}
	return child{name: strconv.FormatUint(uint64(v), 10), mode: syscall.S_IFDIR, ttl: historyTTL,
		ino:  inoOf("at", a.id.String(), strconv.FormatUint(uint64(v), 10)),
		node: func() gofsNode { return a.f.sessionNode(sd) }}
}

func (a *atDir) list(ctx context.Context) ([]child, error) {
	_, vers, err := a.f.versionsOf(ctx, a.id)
	if err != nil {
		return nil, err
	}
	out := []child{a.child(0)}
	for _, v := range vers.all() {
		out = append(out, a.child(v))
	}
	return out, nil
}

func (a *atDir) find(ctx context.Context, name string) (child, error) {
	_, vers, err := a.f.versionsOf(ctx, a.id)
	if err != nil {
		return child{}, err
	}
	v, ok := parseVersion(name, 0)
	if !ok || v > 0 && !vers.has(v) {
		return child{}, syscall.ENOENT
	}
	return a.child(v), nil
}

// versionsOf returns a session's state (nil for a damaged session, as
// historyOf) and the versions its history shows: every one up to the
// latest, or, for a damaged session, those in the bucket
// (cache.DamagedVersions). The session's state is loaded once: a failed
// load is not kept, and loading it again doubled its requests.
func (f *FS) versionsOf(ctx context.Context, id layout.SessionID) (st *cache.State, vers versions, err error) {
	st, latest, err := f.historyOf(ctx, id)
	if err != nil || st != nil {
		return st, versions{latest: latest}, err
	}
	listed, err := f.cache.DamagedVersions(ctx, id)
	if listed == nil {
		listed = []uint32{} // damaged: never every version up to the latest
	}
	return nil, versions{latest: latest, listed: listed}, err
}

// versions are the versions of a session's history: 1..latest, or those
// listed (ascending) when listed is not nil.
type versions struct {
	latest uint32
	listed []uint32
}

// has reports whether v (1 or more) is one of them.
func (vs versions) has(v uint32) bool {
	if vs.listed == nil {
		return v >= 1 && v <= vs.latest
	}
	_, ok := slices.BinarySearch(vs.listed, v)
	return ok
}

// all returns them in order.
func (vs versions) all() []uint32 {
	if vs.listed != nil {
		return vs.listed
	}
	out := make([]uint32, vs.latest)
	for i := range out {
		out[i] = uint32(i) + 1
	}
	return out
}

// historyOf returns a session's state and latest version, for its
// history directories and its version and checkpoint files. A damaged
// session has no state (st is nil), but its versions before the damage
// are still shown (each is read from snapshots 1..N alone:
// cache.StateUpTo), and its latest version and checkpoint do not depend on
// a snapshot's body, so its latest version comes from the bucket then.
func (f *FS) historyOf(ctx context.Context, id layout.SessionID) (st *cache.State, latest uint32, err error) {
	st, err = f.cache.State(ctx, id)
	if err == nil {
		return st, st.Version, nil
	}
	if !f.damaged(ctx, id, err) {
		return nil, 0, err
	}
	latest, err = f.store.LatestVersion(ctx, id)
	return nil, latest, err
}

func (a *atDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	a.f.privateDir(out)
	return nil
}

// seqDir is .pugmark/seq/<n>: the body of the descriptor with sequence
// number n.
type seqDir struct {
	f  *FS
	id layout.SessionID
	// ahead reads the bodies ahead of cat seq/*.
	ahead listAhead
}

func (s *seqDir) child(e layout.Entry) child {
	f := s.f
	name := strconv.FormatInt(e.SequenceNumber, 10)
	return f.privateRead(child{name: name, mode: syscall.S_IFREG, ttl: historyTTL,
		ino: inoOf("seq", s.id.String(), name),
		node: func() gofsNode {
			c := &blobContent{f: f, d: &e.Descriptor, born: s.id.Time(), ahead: &s.ahead, aheadName: name}
			return &fileNode{f: f, c: c, x: descXattrs(&e)}
		}})
}

func (s *seqDir) list(ctx context.Context) ([]child, error) {
	st, err := s.f.cache.State(ctx, s.id)
	if err != nil {
		return nil, err
	}
	var out []child
	var items []aheadItem
	seen := map[int64]bool{}
	for _, e := range st.Log(st.Version) {
		if e.Digest.IsZero() || seen[e.SequenceNumber] {
			continue
		}
		seen[e.SequenceNumber] = true
		c := s.child(e)
		out = append(out, c)
		items = append(items, aheadItem{c.name, e.Descriptor})
	}
	s.ahead.listed(items)
	return out, nil
}

// find looks n up alone (cache.Seq): in a session with a damaged
// snapshot, a descriptor of the others is still there.
func (s *seqDir) find(ctx context.Context, name string) (child, error) {
	n, err := strconv.ParseInt(name, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != name {
		return child{}, syscall.ENOENT
	}
	e, ok, err := s.f.cache.Seq(ctx, s.id, n)
	if err != nil {
		return child{}, err
	}
	if !ok || e.Digest.IsZero() {
		return child{}, syscall.ENOENT
	}
	return s.child(e), nil
}

func (s *seqDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	s.f.privateDir(out)
	return nil
}

// forksDir is .pugmark/forks/<child-id>: links to every child recorded in
// this session's snapshots, pending forks included (§17).
type forksDir struct {
	f  *FS
	id layout.SessionID
}

func (d *forksDir) list(ctx context.Context) ([]child, error) {
	st, err := d.f.cache.State(ctx, d.id)
	if err != nil {
		return nil, err
	}
	var out []child
	for _, b := range st.Forks() {
		out = append(out, d.f.symlink(b.Child.String(), inoOf("fork", d.id.String(), b.Child.String()),
			"../../../"+b.Child.String(), snapTime(st, b.Version), historyTTL))
	}
	return out, nil
}

func (d *forksDir) find(ctx context.Context, name string) (child, error) {
	cs, err := d.list(ctx)
	if err != nil {
		return child{}, err
	}
	for _, c := range cs {
		if c.name == name {
			return c, nil
		}
	}
	return child{}, syscall.ENOENT
}

func (d *forksDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

// fixedDir is c, a directory every session's .pugmark/ has, with an entry
// the kernel may keep: the name never goes away, only its attributes
// change.
func fixedDir(c child) child {
	c.entryTTL = historyTTL
	return c
}
