package fsck

import (
	"context"
	"strings"
	"sync"

	"github.com/pugmark/pugfs/layout"
)

// maxRef bounds a ref read: one line.
const maxRef = 64 << 10

// checkRefs reads every ref (§9): one line, no-cache, and for session refs
// a manifest whose name matches (§9.1). It then checks the other
// direction: every named manifest has its ref.
func (c *checker) checkRefs(ctx context.Context) error {
	var mu sync.Mutex
	targets := map[string]string{}
	err := c.parallel(ctx, len(c.refs), func(i int) {
		r := c.refs[i]
		if t, ok := c.checkRef(ctx, r); ok {
			mu.Lock()
			targets[r.name] = t
			mu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	for _, se := range c.sortedSessions() {
		if se.manifest == nil || se.manifest.Name == "" {
			continue
		}
		name := layout.SessionRefName(se.manifest.Name)
		t, ok := targets[name]
		switch {
		case !ok:
			c.errorf("§9.1", se.manifestKey, "manifest is named %q but refs/%s does not exist (or is unreadable)", se.manifest.Name, name)
		case t != se.manifestKey:
			c.warnf("§9.2", se.manifestKey, "manifest is named %q but refs/%s points at %s: this session lost the name (a dangling manifest of a §9.2 race, or the name moved)", se.manifest.Name, name, t)
		}
	}
	return nil
}

// checkRef returns the ref's target when it is one line.
func (c *checker) checkRef(ctx context.Context, r refEntry) (string, bool) {
	kind, name, hasKind := strings.Cut(r.name, "/")
	if !hasKind {
		name, kind = kind, ""
	}
	if !NameIsPath(name) {
		c.warnf("decisions/names", r.key, "ref name %q has a component over %d bytes; the tree cannot show it", name, MaxNameComponent)
	}
	if hasKind && kind != "sessions" {
		c.infof("§9", r.key, "ref kind %q is not one pugmark defines (only sessions/)", kind)
	}
	o := c.read(ctx, r.key, maxRef)
	if o == nil {
		return "", false
	}
	c.checkHeaders(o, "ref", layout.CacheNoCache, "text/plain", "-")
	t := strings.TrimRight(string(o.body), "\r\n")
	switch {
	case strings.ContainsAny(t, "\r\n"):
		c.errorf("§9", r.key, "ref body is more than one line")
		return "", false
	case t == "":
		c.errorf("§9", r.key, "ref body is empty; want one line naming the target")
		return "", false
	}
	if kind != "sessions" {
		return t, true
	}
	id, err := layout.ParseManifestKey(t)
	if err != nil {
		c.errorf("§9.1", r.key, "session ref body %q is not a manifest key: %v", trunc(t), err)
		return t, true
	}
	se := c.sessions[id]
	switch {
	case se == nil || !se.hasManifest:
		c.errorf("§9.1", r.key, "session ref points at %s, which does not exist", t)
	case se.manifest != nil && se.manifest.Name != name:
		// §9.1 expects names to be reassigned to a different session
		// (its re-check is there for that), and a manifest never
		// changes its name: a moved name always points at a manifest
		// named otherwise. Resolvable, so not an error; said, since it
		// is also what a mistaken write of the ref looks like.
		c.warnf("§9.1", r.key, "session ref points at %s, whose manifest is named %q, not %q: the name was reassigned to that session", t, se.manifest.Name, name)
	}
	return t, true
}

func trunc(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
