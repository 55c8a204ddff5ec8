package fsck

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/pugmark/pugfs/layout"
)

// maxManifest bounds a manifest read; real ones are a few hundred bytes.
const maxManifest = 1 << 20

// checkManifests reads every manifest (§5): headers, JSON, the ID against
// the path, the first sequence number and the name.
func (c *checker) checkManifests(ctx context.Context) error {
	ss := c.sortedSessions()
	return c.parallel(ctx, len(ss), func(i int) { c.checkManifest(ctx, ss[i]) })
}

func (c *checker) checkManifest(ctx context.Context, se *sessionEntry) {
	if !se.hasManifest {
		if len(se.versions) > 0 {
			c.errorf("§5", se.manifestKey, "session %s has %d snapshot(s) but no manifest", se.id, len(se.versions))
		}
		return
	}
	o := c.read(ctx, se.manifestKey, maxManifest)
	if o == nil {
		return
	}
	c.checkHeaders(o, "manifest", layout.CacheImmutable, "application/json", "-")
	body, err := layout.DecodeBody(o.body, "", maxManifest)
	if err != nil {
		c.errorf("§5", o.key, "manifest does not decode: %v", oneLine(err))
		return
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		c.errorf("§5", o.key, "manifest is not a JSON object")
		return
	}
	var m layout.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		c.errorf("§5", o.key, "manifest does not parse: %v", oneLine(err))
		return
	}
	if m.Session.IsZero() {
		c.errorf("§5", o.key, "manifest has no session ID")
		return
	}
	if m.Session != se.id {
		c.errorf("§5", o.key, "manifest names session %s, but its path is that of %s", m.Session, se.id)
	}
	if m.Parent != nil && m.Parent.Session.IsZero() {
		if m.Parent.Version != 0 {
			c.warnf("§5", o.key, "parent has version %d but no session; read as no parent", m.Parent.Version)
		}
		m.Parent = nil
	}
	if _, ok := raw["first-sequence-number"]; !ok {
		c.warnf("§5", o.key, "manifest has no first-sequence-number (read as 0)")
	}
	// Any int64 starts a sequence (§7.3); a fork's is checked against its
	// parent below.
	if m.Parent == nil && m.FirstSequenceNumber != 1 {
		c.warnf("decisions/first-seq", o.key, "root session starts at first-sequence-number %d; decisions.md: a new root session starts at 1", m.FirstSequenceNumber)
	}
	if m.Name != "" {
		if err := layout.ValidateRefName(layout.SessionRefName(m.Name)); err != nil {
			c.errorf("§9.1", o.key, "manifest name %q cannot be a session ref: %v", m.Name, err)
		}
	}
	se.manifest = &m
}

// checkParents checks every parent pointer (§5, §11.2): the parent exists,
// its version exists, and no chain is a cycle or deeper than layout
// accepts.
func (c *checker) checkParents() {
	ss := c.sortedSessions()
	for _, se := range ss {
		m := se.manifest
		if m == nil || m.Parent == nil {
			continue
		}
		p := c.sessions[m.Parent.Session]
		switch {
		case m.Parent.Session == se.id:
			// Reported as a cycle below.
		case p == nil || !p.hasManifest:
			c.errorf("§5", se.manifestKey, "dangling parent: session %s does not exist", m.Parent.Session)
		case m.Parent.Version > p.latest:
			c.errorf("§11.2", se.manifestKey, "parent is %s at version %d, but that session's latest version is %d", m.Parent.Session, m.Parent.Version, p.latest)
		}
	}
	// Each session has at most one parent, so the parent graph is a
	// functional graph: follow each chain once, colouring nodes.
	const (
		unseen = iota
		onPath
		done
	)
	state := map[layout.SessionID]int{}
	for _, start := range ss {
		var path []*sessionEntry
		cur := start
		for cur != nil && state[cur.id] == unseen {
			state[cur.id] = onPath
			path = append(path, cur)
			if cur.manifest == nil || cur.manifest.Parent == nil {
				break
			}
			cur = c.sessions[cur.manifest.Parent.Session]
		}
		if cur != nil && state[cur.id] == onPath && cur.manifest != nil && cur.manifest.Parent != nil {
			// cur is on the current path: the cycle is path[from cur].
			var members []*sessionEntry
			for i, p := range path {
				if p == cur {
					members = path[i:]
					break
				}
			}
			ids := make([]string, len(members))
			for i, p := range members {
				ids[i] = p.id.String()
			}
			for _, p := range members {
				c.errorf("§5", p.manifestKey, "parent chain is a cycle: %s -> %s", strings.Join(ids, " -> "), ids[0])
			}
		}
		if len(path) > layout.MaxParentDepth {
			c.errorf("§5", start.manifestKey, "parent chain is deeper than %d sessions; readers refuse it", layout.MaxParentDepth)
		}
		for _, p := range path {
			state[p.id] = done
		}
	}
}

// checkSnapshots reads every snapshot of every session, in version order.
func (c *checker) checkSnapshots(ctx context.Context) error {
	ss := c.sortedSessions()
	return c.parallel(ctx, len(ss), func(i int) { c.checkSessionSnapshots(ctx, ss[i]) })
}

func (c *checker) checkSessionSnapshots(ctx context.Context, se *sessionEntry) {
	for _, g := range gaps(se.versions) {
		c.errorf("§6.1", se.dir+"snapshots/", "%s missing: versions must be contiguous from 1 to the latest (%d)", rangeText(g), se.latest)
	}
	present := make(map[uint32]bool, len(se.versions))
	for _, v := range se.versions {
		present[v] = true
	}
	se.lastSeq = make([]int64, se.latest+1)
	se.known = make([]bool, se.latest+1)
	var expected int64
	expKnown := false
	if se.manifest != nil {
		expected, expKnown = se.manifest.FirstSequenceNumber, true
		se.lastSeq[0], se.known[0] = expected-1, true
	}
	slots := map[string]bool{}
	for v := uint32(1); v <= se.latest && v != 0; v++ {
		if ctx.Err() != nil {
			return
		}
		if !present[v] {
			expKnown = false
			continue
		}
		key, _ := layout.SnapshotKey(se.id, v)
		o := c.read(ctx, key, layout.DefaultMaxDecoded)
		if o == nil {
			expKnown = false
			continue
		}
		c.stats.snapshots.Add(1)
		var typ layout.SnapshotType
		if c.checkHeaders(o, "snapshot", layout.CacheImmutable, "application/json", layout.EncodingZstd) {
			typ = c.checkSnapshotMeta(o, se.id, v)
		}
		elems, ok := c.decodeArray(o, "§6.2", "snapshot")
		if !ok {
			expKnown = false
			continue
		}
		for i, raw := range elems {
			c.stats.descriptors.Add(1)
			d, seq, seqOK, err := decodeDescriptor(raw)
			if err != nil {
				c.errorf("§7", key, "descriptor %d does not parse: %v", i, oneLine(err))
			}
			switch {
			case !seqOK:
				expKnown = false
			case !expKnown:
				expected, expKnown = seq+1, true
			case seq == expected:
				expected++
			case seq < expected:
				c.errorf("§7.3", key, "descriptor %d has sequence number %d, want %d: a duplicate or out of order", i, seq, expected)
			default:
				c.errorf("§7.3", key, "descriptor %d has sequence number %d, want %d: %d number(s) skipped", i, seq, expected, seq-expected)
				expected = seq + 1
			}
			if err != nil {
				continue
			}
			where := descWhere("descriptor", i, &d)
			if !bytes.Contains(raw, []byte(`"sequence-number"`)) {
				c.warnf("§7.3", key, "%s has no sequence-number (read as 0): every descriptor of a snapshot carries one", where)
			}
			if bytes.Contains(raw, []byte(`"fork-session-id"`)) {
				if d.Fork {
					c.infof("§7.2", key, "%s: legacy fork-session-id form (read as fork = true); new writes use fork and target-session", where)
				} else {
					c.infof("§7.2", key, "%s: fork-session-id of zeros (read as no fork record)", where)
				}
			}
			c.checkDescriptor(key, where, &d, raw)
			c.collect(se, v, key, where, &d)
			if v == 1 && i == 0 {
				dc := d
				se.v1 = &dc
			}
			if d.IsSlot() {
				slots[d.Name] = !d.Deleted
			}
		}
		if v == 1 {
			se.v1Type = typ
		}
		se.lastSeq[v], se.known[v] = expected-1, expKnown
	}
	c.checkNamePrefixes(se.dir, slots)
}

// checkSnapshotMeta checks the §6.2 object metadata (decisions.md table)
// and returns the snapshot's type ("" when it has none or a bad one).
func (c *checker) checkSnapshotMeta(o *object, id layout.SessionID, v uint32) layout.SnapshotType {
	md := o.attrs.Metadata
	var typ layout.SnapshotType
	if t, ok := md[layout.MetaSnapshotType]; !ok {
		c.warnf("§6.2", o.key, "no %s metadata; readers take it as checkpoint (legacy)", layout.MetaSnapshotType)
	} else if st, err := layout.ParseSnapshotType(t); err != nil || string(st) != t {
		c.errorf("§6.2", o.key, "%s is %q; want checkpoint, provisional or queueing", layout.MetaSnapshotType, t)
	} else {
		typ = st
	}
	if t, ok := md[layout.MetaTransactionID]; !ok {
		c.warnf("§13.2", o.key, "no %s metadata (legacy); a lost-response retry cannot recognise its own commit", layout.MetaTransactionID)
	} else if n, err := strconv.ParseUint(t, 10, 64); err != nil || n == 0 {
		c.errorf("§13.2", o.key, "%s is %q; want a non-zero decimal uint64", layout.MetaTransactionID, t)
	}
	if s, ok := md[layout.MetaSnapshotSession]; !ok {
		c.warnf("§6.2", o.key, "no %s metadata", layout.MetaSnapshotSession)
	} else if got, err := layout.ParseSessionID(s); err != nil || got != id {
		c.errorf("§6.2", o.key, "%s is %q; the key is of session %s", layout.MetaSnapshotSession, s, id)
	}
	if s, ok := md[layout.MetaSnapshotVersion]; !ok {
		c.warnf("§6.2", o.key, "no %s metadata", layout.MetaSnapshotVersion)
	} else if s != strconv.FormatUint(uint64(v), 10) {
		c.errorf("§6.2", o.key, "%s is %q; the key is of version %d", layout.MetaSnapshotVersion, s, v)
	}
	return typ
}

// collect records fork, cross-session and delivered records for the
// cross-checks after all sessions are read, and checks their own shape.
func (c *checker) collect(se *sessionEntry, v uint32, key, where string, d *layout.Descriptor) {
	switch {
	case d.Fork:
		switch {
		case d.TargetSession.IsZero():
			c.errorf("§11", key, "%s: fork record without a target-session", where)
		case d.TargetSession == se.id:
			c.errorf("§11", key, "%s: fork record targets its own session", where)
		default:
			se.forks = append(se.forks, forkRec{version: v, key: key, target: d.TargetSession, d: *d})
		}
	case !d.TargetSession.IsZero():
		if d.TargetSession == se.id {
			c.warnf("§12.3", key, "%s: cross-session write to its own session; writers drop target-session at commit", where)
		} else {
			se.cross = append(se.cross, crossRec{version: v, key: key, target: d.TargetSession})
		}
	}
	switch {
	case !d.SourceSession.IsZero() && d.SourceVersion == 0:
		c.errorf("§12.2", key, "%s: source-session without source-version", where)
	case d.SourceSession.IsZero() && d.SourceVersion != 0:
		c.errorf("§12.2", key, "%s: source-version without source-session", where)
	case !d.SourceSession.IsZero():
		if d.SourceSession == se.id {
			c.warnf("§12.2", key, "%s: delivered from its own session", where)
		} else {
			se.delivered = append(se.delivered, deliveredRec{version: v, key: key, source: d.SourceSession, sourceVersion: d.SourceVersion})
		}
	}
}

// checkNamePrefixes reports live names that are also a directory prefix
// of another live name ("a" and "a/b"): valid, but the tree shows only the
// file (decisions.md "Names as paths"). It looks at the session's own log,
// not its parent chain.
func (c *checker) checkNamePrefixes(key string, slots map[string]bool) {
	for name, live := range slots {
		if first, _, _ := strings.Cut(name, "/"); !live || first == ".pugmark" {
			continue // not shown live (checkDescriptor says so)
		}
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && slots[name[:i]] {
				c.infof("decisions/names", key, "%q is a file and also the directory of %q; the tree shows the file, the other is reachable through the log", name[:i], name)
			}
		}
	}
}

// checkForksAndDeliveries runs the checks that need every session read:
// fork children (§7.3, §11, §17) and cross-session writes (§12).
func (c *checker) checkForksAndDeliveries() {
	type crossKey struct {
		source  layout.SessionID
		version uint32
		target  layout.SessionID
	}
	crossIdx := map[crossKey]bool{}
	deliveredIdx := map[crossKey]bool{}
	ss := c.sortedSessions()
	for _, se := range ss {
		for _, x := range se.cross {
			crossIdx[crossKey{se.id, x.version, x.target}] = true
		}
		for _, d := range se.delivered {
			deliveredIdx[crossKey{d.source, d.sourceVersion, se.id}] = true
		}
	}
	for _, se := range ss {
		for _, f := range se.forks {
			child := c.sessions[f.target]
			switch {
			case child == nil || !child.hasManifest:
				c.infof("§11.1", f.key, "pending fork: child %s is recorded at version %d but not materialised yet (phase 2 runs on the parent's next invocation)", f.target, f.version)
			case child.manifest == nil:
				// Its manifest is broken; reported already.
			case child.manifest.Parent == nil || child.manifest.Parent.Session != se.id:
				c.warnf("§11.2", f.key, "fork record at version %d targets %s, which exists but is not a child of this session", f.version, f.target)
			case child.latest == 0:
				c.infof("§13.6", f.key, "fork child %s has a manifest but no snapshot 1 yet (partly materialised; the next invocation completes it)", f.target)
			}
		}
		for _, x := range se.cross {
			t := c.sessions[x.target]
			switch {
			case t == nil || !t.hasManifest:
				c.warnf("§12", x.key, "cross-session write at version %d to %s, which does not exist", x.version, x.target)
			case !deliveredIdx[crossKey{se.id, x.version, x.target}]:
				c.infof("§12.2", x.key, "cross-session write at version %d to %s is not delivered yet", x.version, x.target)
			}
		}
		for _, d := range se.delivered {
			src := c.sessions[d.source]
			switch {
			case src == nil || !src.hasManifest:
				c.warnf("§12.2", d.key, "delivered from %s@%d, a session that does not exist", d.source, d.sourceVersion)
			case !crossIdx[crossKey{d.source, d.sourceVersion, se.id}] && d.sourceVersion <= src.latest:
				c.warnf("§12.2", d.key, "delivered from %s@%d, but that snapshot holds no cross-session write to this session", d.source, d.sourceVersion)
			case d.sourceVersion > src.latest:
				c.warnf("§12.2", d.key, "delivered from %s@%d, but that session's latest version is %d", d.source, d.sourceVersion, src.latest)
			}
		}
		c.checkForkChild(se)
	}
}

// checkForkChild checks a session with a parent against the parent's
// log: its first sequence number (§7.3, §11.2), that branch discovery
// finds it (§17), and that snapshot 1 is the copy of the fork record
// (§11.2 step 3).
func (c *checker) checkForkChild(se *sessionEntry) {
	m := se.manifest
	if m == nil || m.Parent == nil {
		return
	}
	p := c.sessions[m.Parent.Session]
	if p == nil || !p.hasManifest || p.manifest == nil || m.Parent.Session == se.id {
		return
	}
	pv := m.Parent.Version
	if pv < uint32(len(p.known)) && p.known[pv] {
		if want := p.lastSeq[pv] + 1; m.FirstSequenceNumber != want {
			c.errorf("§7.3", se.manifestKey, "fork child starts at first-sequence-number %d; the parent's last sequence number at version %d is %d, so want %d (§11.2)", m.FirstSequenceNumber, pv, p.lastSeq[pv], want)
		}
	}
	var rec *forkRec
	for i := range p.forks {
		if p.forks[i].target == se.id {
			rec = &p.forks[i]
			break
		}
	}
	if rec == nil {
		c.warnf("§17", se.manifestKey, "parent %s has no fork record for this session, so branch discovery cannot find it", m.Parent.Session)
		return
	}
	if se.v1 == nil {
		return
	}
	d := se.v1
	if d.Fork || !d.TargetSession.IsZero() || d.Digest != rec.d.Digest || d.Name != rec.d.Name {
		c.warnf("§11.2", se.dir+"snapshots/"+layout.VersionFileName(1), "snapshot 1 does not start with the copy of the fork record at %s@%d (same name and digest, fork false, no target)", m.Parent.Session, rec.version)
	}
	if se.v1Type != "" && se.v1Type != layout.Checkpoint {
		c.warnf("§11.2", se.dir+"snapshots/"+layout.VersionFileName(1), "fork child's snapshot 1 is %s; materialisation commits it as checkpoint", se.v1Type)
	}
}
