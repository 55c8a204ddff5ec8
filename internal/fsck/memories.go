package fsck

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/pugmark/pugfs/layout"
)

// checkMemories reads every version of every memory namespace (§8).
func (c *checker) checkMemories(ctx context.Context) error {
	nss := make([]*nsEntry, 0, len(c.namespaces))
	for _, ns := range c.namespaces {
		nss = append(nss, ns)
	}
	sort.Slice(nss, func(i, j int) bool { return nss[i].name < nss[j].name })
	if err := c.parallel(ctx, len(nss), func(i int) { c.checkNamespace(ctx, nss[i]) }); err != nil {
		return err
	}
	// A record name that is also a nested namespace ("team" holding a
	// record "notes" beside memories/team/notes/) is both a file and a
	// directory in the tree.
	for _, ns := range nss {
		for _, name := range ns.names {
			p := ns.name + "/" + name
			if c.namespaces[p] != nil || c.hasNamespaceUnder(p+"/") {
				c.infof("decisions/names", layout.MemoriesPrefix+ns.name+"/", "record %q is also the name of a nested namespace %s; the tree shows the record", name, p)
			}
		}
	}
	return nil
}

func (c *checker) hasNamespaceUnder(prefix string) bool {
	for n := range c.namespaces {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

func (c *checker) checkNamespace(ctx context.Context, ns *nsEntry) {
	dir := layout.MemoriesPrefix + ns.name + "/"
	for _, g := range gaps(ns.versions) {
		c.errorf("§8.1", dir, "%s missing: memory versions must be contiguous from 1 to the latest (%d)", rangeText(g), ns.latest)
	}
	for _, v := range ns.versions {
		if ctx.Err() != nil {
			return
		}
		key, _ := layout.MemoryKey(ns.name, v)
		o := c.read(ctx, key, layout.DefaultMaxDecoded)
		if o == nil {
			continue
		}
		c.stats.memoryFiles.Add(1)
		if c.checkHeaders(o, "memory file", layout.CacheImmutable, "application/json", layout.EncodingZstd) {
			if t, ok := o.attrs.Metadata[layout.MetaTransactionID]; !ok {
				c.warnf("§13.2", key, "no %s metadata (decisions.md: memory files carry it too)", layout.MetaTransactionID)
			} else if n, err := strconv.ParseUint(t, 10, 64); err != nil || n == 0 {
				c.errorf("§13.2", key, "%s is %q; want a non-zero decimal uint64", layout.MetaTransactionID, t)
			}
		}
		elems, ok := c.decodeArray(o, "§8.2", "memory file")
		if !ok {
			continue
		}
		seen := map[string]int{}
		var names []string
		for i, raw := range elems {
			c.stats.descriptors.Add(1)
			d, _, _, err := decodeDescriptor(raw)
			if err != nil {
				c.errorf("§8.2", key, "record %d does not parse: %v", i, oneLine(err))
				continue
			}
			where := descWhere("record", i, &d)
			switch j, dup := seen[d.Name]; {
			case d.Name == "" || strings.Contains(d.Name, "/"):
				c.errorf("§8.3", key, "%s: record names must be non-empty and contain no /", where)
			case layout.ValidateMemoryName(d.Name) != nil:
				// §8.3 allows it; no path can show it (".", "..",
				// NUL, not UTF-8), so the mount leaves it out.
				c.warnf("§8.3", key, "%s: a name no path can show; the mount does not list it", where)
			case dup:
				// §8.3's merge keeps one record a name; a reader takes
				// the last, as a merge that appended it would have.
				c.warnf("§8.3", key, "%s: same name as record %d; a merge replaces records of one name, so readers take the last", where, j)
			default:
				seen[d.Name] = i
				names = append(names, d.Name)
			}
			c.checkDescriptor(key, where, &d, raw)
			c.checkEnvelope(key, where, d.Commit)
		}
		if v == ns.latest {
			ns.names = names
		}
	}
}

// checkEnvelope checks a memory record's commit envelope (§8.2): present,
// naming a session and a transaction; the writer's snapshot should exist
// (readers validate that).
func (c *checker) checkEnvelope(key, where string, cm *layout.MemoryCommit) {
	if cm == nil {
		c.errorf("§8.2", key, "%s: no commit envelope", where)
		return
	}
	if cm.Transaction == 0 {
		c.errorf("§8.2", key, "%s: commit envelope has transaction 0; transaction IDs are non-zero (§13.2)", where)
	}
	if cm.Session.IsZero() {
		c.errorf("§8.2", key, "%s: commit envelope names no session", where)
		return
	}
	se := c.sessions[cm.Session]
	switch {
	case se == nil || !se.hasManifest:
		c.warnf("§8.2", key, "%s: written by session %s, which does not exist", where, cm.Session)
	case cm.Version > se.latest:
		c.warnf("§8.2", key, "%s: written at %s@%d, but that session's latest version is %d", where, cm.Session, cm.Version, se.latest)
	}
}
