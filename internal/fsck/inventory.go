package fsck

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/layout"
)

// blobEntry is one objects/sha256:<hex> key.
type blobEntry struct {
	key  string
	size int64
	// refs counts descriptors and memory records naming the blob; bumped
	// concurrently by the snapshot and memory phases.
	refs atomic.Int64
	// Set by the blob phase (read-only afterwards): read tells whether the
	// body was read, sniff the encoding its first bytes announce, objEnc
	// the object's own Content-Encoding, and decodeErr why the body did
	// not decode per objEnc, or else per sniff (nil if it did, or was
	// not decoded).
	read      bool
	sniff     string
	objEnc    string
	decodeErr error
}

// sessionEntry is one session directory.
type sessionEntry struct {
	id          layout.SessionID
	dir         string
	manifestKey string
	hasManifest bool
	versions    []uint32 // listed version files, ascending
	latest      uint32   // highest listed version

	// Set by the manifest phase.
	manifest *layout.Manifest

	// Set by the snapshot phase (each session by one goroutine).
	// lastSeq[v] is the last sequence number at or below version v
	// (lastSeq[0] = first-sequence-number - 1); known[v] says whether it
	// could be determined (a gap or an unreadable snapshot below v makes
	// it unknown).
	lastSeq   []int64
	known     []bool
	forks     []forkRec
	cross     []crossRec
	delivered []deliveredRec
	// v1 is snapshot 1's first descriptor, to check a fork child's copy
	// of its fork record (§11.2 step 3).
	v1 *layout.Descriptor
	// v1Type is snapshot 1's type, "" when unknown.
	v1Type layout.SnapshotType
}

type forkRec struct {
	version uint32
	key     string
	target  layout.SessionID
	d       layout.Descriptor
}

type crossRec struct {
	version uint32
	key     string
	target  layout.SessionID
}

type deliveredRec struct {
	version       uint32
	key           string
	source        layout.SessionID
	sourceVersion uint32
}

// nsEntry is one memory namespace.
type nsEntry struct {
	name     string
	versions []uint32
	latest   uint32
	// names of the latest version's records, set by the memory phase.
	names []string
}

type refEntry struct {
	name string
	key  string
}

// list walks the four prefixes (§1) and sorts every key into the
// inventory, reporting keys of the wrong shape.
func (c *checker) list(ctx context.Context) error {
	walk := func(prefix string, fn func(o *blob.ListObject)) error {
		// Page by page, so that one failed page is retried instead of
		// failing the whole check.
		token := blob.FirstPageToken
		for {
			var page []*blob.ListObject
			var next []byte
			err := retry(ctx, func() error {
				var err error
				page, next, err = c.b.ListPage(ctx, token, 1000, &blob.ListOptions{Prefix: prefix})
				return err
			})
			if err != nil {
				return fmt.Errorf("fsck: list %s: %w", prefix, err)
			}
			for _, o := range page {
				c.nListed.Add(1)
				fn(o)
			}
			if len(next) == 0 {
				return nil
			}
			token = next
		}
	}
	if err := walk(layout.ObjectsPrefix, c.listBlob); err != nil {
		return err
	}
	if err := walk(layout.SessionsPrefix, c.listSessionKey); err != nil {
		return err
	}
	if err := walk(layout.MemoriesPrefix, c.listMemoryKey); err != nil {
		return err
	}
	if err := walk(layout.RefsPrefix, c.listRef); err != nil {
		return err
	}
	for _, se := range c.sessions {
		sort.Slice(se.versions, func(i, j int) bool { return se.versions[i] < se.versions[j] })
		if n := len(se.versions); n > 0 {
			se.latest = se.versions[n-1]
		}
	}
	for _, ns := range c.namespaces {
		sort.Slice(ns.versions, func(i, j int) bool { return ns.versions[i] < ns.versions[j] })
		if n := len(ns.versions); n > 0 {
			ns.latest = ns.versions[n-1]
		}
	}
	return nil
}

func (c *checker) listBlob(o *blob.ListObject) {
	d, err := layout.ParseBlobKey(o.Key)
	if err != nil {
		c.errorf("§3", o.Key, "not a blob key: want objects/sha256:<64 lowercase hex> (%v)", err)
		return
	}
	c.blobs[d] = &blobEntry{key: o.Key, size: o.Size}
}

func (c *checker) listSessionKey(o *blob.ListObject) {
	sk, err := layout.ParseSessionKey(o.Key)
	if err != nil {
		c.errorf("§4.2", o.Key, "not a session key: %v", err)
		return
	}
	se := c.sessions[sk.ID]
	if se == nil {
		dir, _ := layout.SessionDir(sk.ID)
		mk, _ := layout.ManifestKey(sk.ID)
		se = &sessionEntry{id: sk.ID, dir: dir, manifestKey: mk}
		c.sessions[sk.ID] = se
	}
	switch rest := sk.Rest; {
	case rest == "manifest.json":
		se.hasManifest = true
	case strings.HasPrefix(rest, "snapshots/"):
		name := strings.TrimPrefix(rest, "snapshots/")
		if strings.Contains(name, "/") {
			c.errorf("§4.3", o.Key, "unexpected key below snapshots/ (snapshot files are snapshots/<8 hex>.json)")
			return
		}
		v, err := layout.ParseVersionFileName(name)
		if err != nil {
			c.errorf("§6.1", o.Key, "not a snapshot file name: %v (readers skip it)", err)
			return
		}
		se.versions = append(se.versions, v)
	case rest == "":
		c.errorf("§4.2", o.Key, "an object where the session directory should be")
	default:
		c.errorf("§4.3", o.Key, "unexpected key in a session directory (only manifest.json and snapshots/<8 hex>.json belong there)")
	}
}

func (c *checker) listMemoryKey(o *blob.ListObject) {
	ns, v, err := layout.ParseMemoryKey(o.Key)
	if err != nil {
		c.errorf("§8.1", o.Key, "not a memory file key: %v (want memories/<namespace>/<8 hex>.json)", err)
		return
	}
	e := c.namespaces[ns]
	if e == nil {
		e = &nsEntry{name: ns}
		c.namespaces[ns] = e
		if !NameIsPath(ns) {
			c.warnf("decisions/names", o.Key, "memory namespace %q has a path component over %d bytes; it cannot be shown as a directory", ns, MaxNameComponent)
		}
	}
	e.versions = append(e.versions, v)
}

func (c *checker) listRef(o *blob.ListObject) {
	name := strings.TrimPrefix(o.Key, layout.RefsPrefix)
	if err := layout.ValidateRefName(name); err != nil {
		c.errorf("§9", o.Key, "not a ref key: %v", err)
		return
	}
	c.refs = append(c.refs, refEntry{name: name, key: o.Key})
}

// sortedSessions returns the sessions in ID order, for deterministic
// parallel phases.
func (c *checker) sortedSessions() []*sessionEntry {
	out := make([]*sessionEntry, 0, len(c.sessions))
	for _, se := range c.sessions {
		out = append(out, se)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out
}

// gaps returns the versions missing from 1..latest of a sorted list, as
// ranges, so a gap of a million versions is one finding.
func gaps(vs []uint32) [][2]uint32 {
	var out [][2]uint32
	next := uint32(1)
	for _, v := range vs {
		if v > next {
			out = append(out, [2]uint32{next, v - 1})
		}
		next = v + 1
	}
	return out
}

func rangeText(r [2]uint32) string {
	if r[0] == r[1] {
		return fmt.Sprintf("version %d is", r[0])
	}
	return fmt.Sprintf("versions %d..%d are", r[0], r[1])
}
