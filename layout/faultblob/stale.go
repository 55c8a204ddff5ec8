package faultblob

import (
	"strings"
	"time"

	"gocloud.dev/blob/driver"
)

// This file holds the Injector's side of the stale-listing model
// (Rule.StaleFor): which keys were written or deleted through the wrapper
// recently enough that a listing must not yet reflect the change.

// updateStaleLocked recomputes the longest StaleFor of the installed
// rules. Without any stale rule nothing is tracked and old records are
// dropped.
func (in *Injector) updateStaleLocked() {
	in.maxStale = 0
	for _, rs := range in.rules {
		in.maxStale = max(in.maxStale, rs.r.StaleFor)
	}
	if in.maxStale == 0 {
		clear(in.records)
		in.pruneAt = minPrune
	}
}

// windowLocked returns the staleness window that applies to listed key:
// the longest StaleFor of the list rules whose Match selects it.
func (in *Injector) windowLocked(key string) time.Duration {
	var w time.Duration
	for _, rs := range in.rules {
		r := &rs.r
		if r.StaleFor > w && (r.Ops == 0 || r.Ops&OpList != 0) && r.Match.Matches(key) {
			w = r.StaleFor
		}
	}
	return w
}

// youngWriteLocked reports whether key was PUT through the wrapper less
// than its window w ago.
func (in *Injector) youngWriteLocked(key string, w time.Duration, now time.Time) bool {
	rec, ok := in.records[key]
	return ok && !rec.deleted && now.Sub(rec.at) < w
}

// wantGhost reports whether a delete of key must capture the key's
// attributes so that listings can keep showing it.
func (in *Injector) wantGhost(key string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.maxStale == 0 {
		return false
	}
	w := in.windowLocked(key)
	return w > 0 && !in.youngWriteLocked(key, w, in.now())
}

// recordWrite notes a successful PUT or COPY to key.
func (in *Injector) recordWrite(key string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.maxStale == 0 {
		return
	}
	if in.windowLocked(key) == 0 {
		delete(in.records, key)
		return
	}
	now := in.now()
	in.records[key] = record{at: now}
	in.maybePruneLocked(now)
}

// recordDelete notes a successful DELETE of key; g is what the key looked
// like before (nil if unknown).
func (in *Injector) recordDelete(key string, g *ghost) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.maxStale == 0 {
		return
	}
	now := in.now()
	w := in.windowLocked(key)
	if w == 0 || g == nil || in.youngWriteLocked(key, w, now) {
		// Either untracked, or the listing never showed the key: as of
		// the window's start it did not exist.
		delete(in.records, key)
		return
	}
	in.records[key] = record{at: now, deleted: true, obj: *g}
	in.maybePruneLocked(now)
}

func (in *Injector) maybePruneLocked(now time.Time) {
	if len(in.records) < in.pruneAt {
		return
	}
	for k, rec := range in.records {
		if now.Sub(rec.at) >= in.maxStale {
			delete(in.records, k)
		}
	}
	in.pruneAt = max(minPrune, 2*len(in.records))
}

// staleView is what a listing under some prefix must not reflect yet.
type staleView struct {
	hidden map[string]bool      // keys PUT within their window
	ghosts []*driver.ListObject // keys DELETEd within their window
}

// staleView returns the records that affect a listing of prefix now, or
// nil if none do (the listing can then go straight to the inner bucket).
// Expired records are dropped on the way.
func (in *Injector) staleView(prefix string) *staleView {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.maxStale == 0 || len(in.records) == 0 {
		return nil
	}
	now := in.now()
	var v *staleView
	for k, rec := range in.records {
		age := now.Sub(rec.at)
		if age >= in.maxStale {
			delete(in.records, k)
			continue
		}
		if !strings.HasPrefix(k, prefix) || age >= in.windowLocked(k) {
			continue
		}
		if v == nil {
			v = &staleView{hidden: make(map[string]bool)}
		}
		if rec.deleted {
			v.ghosts = append(v.ghosts, &driver.ListObject{
				Key:     k,
				Size:    rec.obj.size,
				ModTime: rec.obj.modTime,
				MD5:     rec.obj.md5,
			})
		} else {
			v.hidden[k] = true
		}
	}
	return v
}

// collapse applies a listing delimiter to a sorted flat listing under
// prefix: keys with the delimiter after the prefix become one "directory"
// entry each, in place. Sorted input gives sorted output, because all keys
// under a directory are contiguous and sort after the directory's name.
func collapse(flat []*driver.ListObject, prefix, delim string) []*driver.ListObject {
	if delim == "" {
		return flat
	}
	out := flat[:0:0]
	for _, o := range flat {
		rest := o.Key[len(prefix):]
		i := strings.Index(rest, delim)
		if i < 0 {
			out = append(out, o)
			continue
		}
		dir := prefix + rest[:i+len(delim)]
		if n := len(out); n > 0 && out[n-1].IsDir && out[n-1].Key == dir {
			continue
		}
		out = append(out, &driver.ListObject{Key: dir, IsDir: true})
	}
	return out
}
