package layout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Entry is one descriptor of a full-state scan, with the session and
// version whose snapshot holds it.
type Entry struct {
	Descriptor
	Session SessionID
	Version uint32
}

// MaxParentDepth bounds parent chains; a deeper (or cyclic) chain is
// ErrCorrupt rather than a hang.
const MaxParentDepth = 4096

// Ancestor is one link of a parent chain: the session and the version of
// it that is visible to the child.
type Ancestor struct {
	Session SessionID
	Version uint32
}

// ParentChain returns the ancestors of a session, root first, each with
// the version its child sees (§6.5 step 1). A cycle or a chain deeper than
// MaxParentDepth is ErrCorrupt.
func (s *Store) ParentChain(ctx context.Context, id SessionID) ([]Ancestor, error) {
	var chain []Ancestor
	seen := map[SessionID]bool{id: true}
	cur := id
	for {
		m, err := s.LoadManifest(ctx, cur)
		if err != nil {
			if cur != id {
				return nil, fmt.Errorf("parent chain of %s: ancestor %s: %w", id, cur, err)
			}
			return nil, err
		}
		if m.Parent == nil {
			break
		}
		p := *m.Parent
		if seen[p.Session] {
			return nil, fmt.Errorf("parent chain of %s: %w: cycle through %s", id, ErrCorrupt, p.Session)
		}
		if len(chain) >= MaxParentDepth {
			return nil, fmt.Errorf("parent chain of %s: %w: deeper than %d", id, ErrCorrupt, MaxParentDepth)
		}
		seen[p.Session] = true
		chain = append(chain, Ancestor(p))
		cur = p.Session
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// ReadSnapshotRange reads versions from..to (inclusive) of a session with
// at most par requests in flight; result[i] is version from+i. Snapshot
// keys are computed from versions, so no listing is needed, and the reads
// are kept par wide from the first to the last (a first load of thousands
// of snapshots costs about versions/par round trips). Results are
// allocated a window at a time as the reads get there, and the first
// failure stops new reads, so a range that runs past the last snapshot (a
// corrupt parent version, a stray 00000001.json) fails at the first
// missing version instead of allocating for the whole range.
func (s *Store) ReadSnapshotRange(ctx context.Context, id SessionID, from, to uint32, par int) ([][]Descriptor, error) {
	if from == 0 || to < from {
		return nil, nil
	}
	const window = 256
	n := uint64(to) - uint64(from) + 1
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A long range whose copies an earlier mount kept: list the
	// session's snapshots beside the reads, so that the copies are
	// vouched for (kept.go) by one LIST per 1,000 versions instead of
	// read again one GET each. The listing names the newest versions
	// first (reverse-hex names), so the reads go newest first too, each
	// waiting for the listing to pass its version.
	lst := s.keptListing(ctx, id, from, to)
	down := lst != nil
	// A fixed set of workers, not a goroutine per version: each worker's
	// stack grows once to what the backend's client needs, where a fresh
	// goroutine per request grows it again every time (measured: about a
	// tenth of the mount's CPU in a first load of 2,000 snapshots).
	var (
		mu    sync.Mutex       // guards next, parts, first, firstV
		next  uint64           // the next index to read
		parts [][][]Descriptor // parts[w][i] is version from + w*window + i
		first error            // the failure of the lowest version
		// firstV is first's version; 0 while first is nil or a
		// cancellation that a real failure may still replace.
		firstV uint32
	)
	claim := func() (i uint64, part [][]Descriptor, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= n || ctx.Err() != nil {
			return 0, nil, false
		}
		i, next = next, next+1
		if i%window == 0 {
			parts = append(parts, make([][]Descriptor, min(window, n-i)))
		}
		return i, parts[i/window], true
	}
	fail := func(v uint32, err error) {
		mu.Lock()
		defer mu.Unlock()
		real := !errors.Is(err, context.Canceled)
		if first == nil || (real && (firstV == 0 || v < firstV)) {
			first = err
			if real {
				firstV = v
			}
		}
		cancel()
	}
	var wg sync.WaitGroup
	for range min(uint64(max(par, 1)), n) {
		wg.Go(func() {
			for {
				i, part, ok := claim()
				if !ok {
					return
				}
				v := uint32(uint64(from) + i)
				if down {
					v = uint32(uint64(to) - i)
				}
				d, err := s.readSnapshot(ctx, id, v, lst)
				if err != nil {
					fail(v, err)
					return
				}
				part[i%window] = d
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]Descriptor, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	if down {
		slices.Reverse(out)
	}
	return out, nil
}

// FullLog returns the full-state scan of a session at version v (§6.5):
// the parent chain (each ancestor up to the version its child sees, with
// the fork records of other sessions than the chain's dropped, §11.3), then this session's snapshots 1..v, each
// in stored order. Tombstones, fork and cross-session records of the
// session itself are included.
func (s *Store) FullLog(ctx context.Context, id SessionID, v uint32) ([]Entry, error) {
	chain, err := s.ParentChain(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for i, a := range chain {
		snaps, err := s.ReadSnapshotRange(ctx, a.Session, 1, a.Version, 8)
		if err != nil {
			return nil, fmt.Errorf("full log of %s: ancestor %s: %w", id, a.Session, err)
		}
		via := id
		if i+1 < len(chain) {
			via = chain[i+1].Session
		}
		out = AppendAncestorEntries(out, a.Session, snaps, via)
	}
	snaps, err := s.ReadSnapshotRange(ctx, id, 1, v, 8)
	if err != nil {
		return nil, fmt.Errorf("full log of %s: %w", id, err)
	}
	return AppendEntries(out, id, 1, snaps), nil
}

// AppendEntries appends the descriptors of consecutive snapshots (the
// first at version from) to log.
func AppendEntries(log []Entry, session SessionID, from uint32, snaps [][]Descriptor) []Entry {
	for i, ds := range snaps {
		for _, d := range ds {
			log = append(log, Entry{Descriptor: d, Session: session, Version: from + uint32(i)})
		}
	}
	return log
}

// AppendAncestorEntries appends an ancestor's snapshots 1..len(snaps) to
// log, as a full scan of a descendant sees them: the ancestor's fork
// records are dropped but the one of via, the session of the chain it
// was forked into (§11.3 filters the siblings of the fork being
// traversed; dropping them all left the child's own fork record out of
// its log, audit 26). A legacy record naming no target is dropped.
func AppendAncestorEntries(log []Entry, session SessionID, snaps [][]Descriptor, via SessionID) []Entry {
	for i, ds := range snaps {
		for _, d := range ds {
			if d.Fork && (d.TargetSession.IsZero() || d.TargetSession != via) {
				continue
			}
			log = append(log, Entry{Descriptor: d, Session: session, Version: 1 + uint32(i)})
		}
	}
	return log
}

// Slots returns the live named slots of a log (§10): for each name the last
// slot descriptor wins, and a tombstone removes the name. Fork records and
// cross-session write records occupy no slot.
func Slots(log []Entry) map[string]Entry {
	slots := make(map[string]Entry)
	for _, e := range log {
		ApplySlot(slots, e)
	}
	return slots
}

// ApplySlot applies one entry to a slot map (incremental form of Slots).
func ApplySlot(slots map[string]Entry, e Entry) {
	if !e.IsSlot() {
		return
	}
	if e.Deleted {
		delete(slots, e.Name)
		return
	}
	slots[e.Name] = e
}

// Lookup returns the descriptor for name at the end of log (§10 named-slot
// lookup): the last matching slot descriptor, not found if it is a
// tombstone.
func Lookup(log []Entry, name string) (Entry, bool) {
	for i := len(log) - 1; i >= 0; i-- {
		if e := log[i]; e.IsSlot() && e.Name == name {
			return e, !e.Deleted
		}
	}
	return Entry{}, false
}

// AppendTime is what one snapshot says of a session's last content
// append (consistency.md §1): the newest created-at of its descriptors,
// and whether it holds content at all. Fork records are bookkeeping
// (§11.1), not content, and count for neither. A snapshot with content
// but no times gives content true and a zero time: the append time is
// then an earlier snapshot's.
func AppendTime(ds []Descriptor) (newest time.Time, content bool) {
	for _, d := range ds {
		if d.Fork {
			continue
		}
		content = true
		if d.CreatedAt.After(newest) {
			newest = d.CreatedAt
		}
	}
	return newest, content
}
