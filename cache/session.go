package cache

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/schedblob"
)

// Session is the cache's handle on one session. Its state is replaced
// wholesale (copy-on-write) so readers never lock.
type Session struct {
	id layout.SessionID
	c  *Cache

	// mu serialises this session's loads, refreshes and commit
	// bookkeeping (consistency.md §3); taken before Cache.mu.
	mu sync.Mutex
	st atomic.Pointer[State]
	// checked is the UnixNano time captured before the last LIST that
	// confirmed st; 0 forces a re-check.
	checked atomic.Int64
	// inval counts Invalidate calls, so that a refresh in flight when one
	// comes does not mark its (older) result as checked.
	inval atomic.Uint64
	// loading is the context of the load or refresh running under mu, if
	// any: a program that comes to wait for a load that read-ahead
	// started promotes it (schedblob.Promote), so that it is not served
	// behind speculative work.
	loading atomic.Pointer[context.Context]
	// blocked counts the blocking callers waiting for mu.
	blocked atomic.Int32
	// evicted is guarded by Cache.mu. An evicted Session is unreachable
	// from the map; a load still running on it may finish and return its
	// state to its callers, but it no longer publishes registry rows.
	evicted bool
	// floor is a version known to exist (a commit of this mount), guarded
	// by mu: a refresh never settles below it, because LIST may lag
	// (§2.5) and a stale listing must not hide our own commits.
	floor uint32
	// damage is the last load's failure on a damaged snapshot, guarded by
	// mu: a refresh that finds the same latest version within
	// damageRecheck answers it again without reading the snapshots
	// (immutable: the damage is the same). Every lookup of such a session
	// past the TTL read them all again, and one that decodes past the
	// limit (a zstd bomb) cost 0.14 s of CPU each time (audit 24).
	damage *loadDamage
}

// loadDamage is a load that failed on a damaged snapshot (ErrCorrupt),
// with the latest version it was loading and until when it stands.
type loadDamage struct {
	fp    uint32
	err   error
	until time.Time
}

// damageRecheck is how long a load's damage is answered from memory
// while the session's latest version stays where it was.
const damageRecheck = time.Minute

// State is an immutable view of a session at one version. Everything in
// it is shared and must not be modified.
type State struct {
	ID       layout.SessionID
	Manifest *layout.Manifest
	// Version is the latest version this state covers: the fingerprint
	// captured before its snapshots were read.
	Version uint32
	// UpdatedAt is the time of the last content append (consistency.md
	// §1): the newest created-at of the latest snapshot that added
	// descriptors; the session ID's hour when there is none.
	UpdatedAt time.Time
	// LastSeq is the sequence number of the last descriptor.
	LastSeq int64

	ancestors []layout.Entry        // parent chain's visible entries
	snaps     [][]layout.Descriptor // own snapshots 1..Version
	// The live slots at Version are root, a map shared with the states
	// before this one and never changed, with delta over it: the names
	// changed since root. A commit copied the whole map, and a close
	// into a session of 50,000 files took 69 ms where an empty one took
	// 3 (audit 31); the delta is folded into a new root once it grows
	// past about the square root of it (foldAt), so a commit costs
	// O(√slots).
	// full is the two made one, built the first time Slots asks.
	root     map[string]layout.Entry
	delta    map[string]slotChange
	fullOnce sync.Once
	full     map[string]layout.Entry

	treeOnce sync.Once
	tree     *Dir
	// treeBuilt is tree once built; a successor derives its own tree
	// from it (treeFrom) when it can.
	treeBuilt atomic.Pointer[Dir]
	treeFrom  *treeDelta
}

// Position is where a commit based on this state starts.
func (st *State) Position() layout.Position {
	return layout.Position{Version: st.Version, LastSeq: st.LastSeq}
}

// Snapshot returns the delta committed at version v (1..Version).
func (st *State) Snapshot(v uint32) ([]layout.Descriptor, bool) {
	if v == 0 || v > st.Version {
		return nil, false
	}
	return st.snaps[v-1], true
}

// slotChange is a name's slot as a State's delta has it: its entry, or
// gone (removed).
type slotChange struct {
	e    layout.Entry
	gone bool
}

// Slot returns the live descriptor for name.
func (st *State) Slot(name string) (layout.Entry, bool) {
	if c, ok := st.delta[name]; ok {
		if c.gone {
			return layout.Entry{}, false
		}
		return c.e, true
	}
	e, ok := st.root[name]
	return e, ok
}

// Slots returns the live slots; the map is shared and read-only. With
// changes over the root, it is built once (O(slots)): callers that look
// names up one at a time use Slot.
func (st *State) Slots() map[string]layout.Entry {
	if len(st.delta) == 0 {
		return st.root
	}
	st.fullOnce.Do(func() { st.full = st.merged() })
	return st.full
}

// merged returns root and delta made one, in a new map.
func (st *State) merged() map[string]layout.Entry {
	out := make(map[string]layout.Entry, len(st.root)+len(st.delta))
	for k, v := range st.root {
		out[k] = v
	}
	for k, c := range st.delta {
		if c.gone {
			delete(out, k)
		} else {
			out[k] = c.e
		}
	}
	return out
}

// slotCount is about the number of live slots (the root's).
func (st *State) slotCount() int { return len(st.root) }

// Log returns the full-state scan (§6.5) at version v <= Version: parent
// chain first, then own snapshots 1..v.
func (st *State) Log(v uint32) []layout.Entry {
	if v > st.Version {
		v = st.Version
	}
	out := make([]layout.Entry, len(st.ancestors), len(st.ancestors)+int(v)*2)
	copy(out, st.ancestors)
	return layout.AppendEntries(out, st.ID, 1, st.snaps[:v])
}

// SlotsAt returns the live slots at version v <= Version.
func (st *State) SlotsAt(v uint32) map[string]layout.Entry {
	if v >= st.Version {
		return st.Slots()
	}
	return layout.Slots(st.Log(v))
}

// SlotAt returns the live descriptor for name at version v <= Version,
// as SlotsAt(v) holds it, without building the slots of v: the last
// slot entry of the name in the own snapshots up to v, else in the
// ancestors (§10's named-slot lookup).
func (st *State) SlotAt(name string, v uint32) (layout.Entry, bool) {
	if v >= st.Version {
		return st.Slot(name)
	}
	for i := int(v) - 1; i >= 0; i-- {
		ds := st.snaps[i]
		for j := len(ds) - 1; j >= 0; j-- {
			if e := (layout.Entry{Descriptor: ds[j], Session: st.ID, Version: uint32(i) + 1}); e.IsSlot() && e.Name == name {
				return e, !e.Deleted
			}
		}
	}
	return layout.Lookup(st.ancestors, name)
}

// RemovedAfter reports whether one of the session's own snapshots above
// version v removed name.
func (st *State) RemovedAfter(name string, v uint32) bool {
	for i := int(v); i < int(st.Version); i++ {
		for _, d := range st.snaps[i] {
			if d.Deleted && d.Name == name && d.IsSlot() {
				return true
			}
		}
	}
	return false
}

// Seq returns the descriptor with sequence number n in the full log.
// Sequence numbers increase along the log (§7.3): the ancestors are binary
// searched, then the own snapshot whose range holds n; the log is not
// copied, so a lookup of seq/<n> in a large session stays cheap. A bucket
// that breaks the order still gets an answer, by a scan.
func (st *State) Seq(n int64) (layout.Entry, bool) {
	a := st.ancestors
	if i := sort.Search(len(a), func(i int) bool { return a[i].SequenceNumber >= n }); i < len(a) && a[i].SequenceNumber == n {
		return a[i], true
	}
	snaps := st.snaps[:st.Version]
	own := func(v int, d layout.Descriptor) layout.Entry {
		return layout.Entry{Descriptor: d, Session: st.ID, Version: uint32(v) + 1}
	}
	for v, ds := range snaps {
		if len(ds) == 0 || ds[0].SequenceNumber > n || ds[len(ds)-1].SequenceNumber < n {
			continue
		}
		if j := sort.Search(len(ds), func(j int) bool { return ds[j].SequenceNumber >= n }); j < len(ds) && ds[j].SequenceNumber == n {
			return own(v, ds[j]), true
		}
	}
	for _, e := range a {
		if e.SequenceNumber == n {
			return e, true
		}
	}
	for v, ds := range snaps {
		for _, d := range ds {
			if d.SequenceNumber == n {
				return own(v, d), true
			}
		}
	}
	return layout.Entry{}, false
}

// Forks returns the children recorded in this session's own snapshots
// (§17), pending ones included.
func (st *State) Forks() []layout.Branch { return layout.BranchesIn(1, st.snaps) }

// Tree returns the directory tree of the live slots.
func (st *State) Tree() *Dir {
	st.treeOnce.Do(func() {
		if d := st.treeFrom; d != nil && 2*len(d.changed) < st.slotCount() {
			st.tree = d.apply(st.Slot)
		} else {
			st.tree = BuildTree(st.Slots())
		}
		st.treeFrom = nil // let the predecessor go
		st.treeBuilt.Store(st.tree)
	})
	return st.tree
}

// State returns the session's state, re-checking the bucket when the last
// check is older than the TTL.
func (s *Session) State(ctx context.Context) (*State, error) {
	c := s.c
	if st := s.st.Load(); st != nil && s.fresh() {
		c.stats.hits.Add(1)
		return st, nil
	}
	if schedblob.IsSpeculative(ctx) {
		s.mu.Lock()
	} else {
		// Either this sees the speculative load's context, or that load
		// sees this waiter when it publishes its context: one of the two
		// promotes it.
		s.blocked.Add(1)
		if lc := s.loading.Load(); lc != nil {
			schedblob.Promote(*lc)
		}
		s.mu.Lock()
		s.blocked.Add(-1)
	}
	defer s.mu.Unlock()
	if st := s.st.Load(); st != nil && s.fresh() {
		c.stats.hits.Add(1)
		return st, nil // refreshed while we waited: single flight
	}
	s.loading.Store(&ctx)
	defer s.loading.Store(nil)
	if s.blocked.Load() > 0 {
		schedblob.Promote(ctx)
	}
	return s.refreshLocked(ctx)
}

// Peek returns a session's state as cached, without asking the bucket
// even when it is older than the TTL; ok is false when none is loaded.
// Read-ahead uses it to place a read in the session's tree without a
// request on the reader's path.
func (c *Cache) Peek(id layout.SessionID) (*State, bool) {
	if st, ok := c.frozenOf(id); ok {
		return st, true
	}
	c.mu.Lock()
	s, ok := c.sessions.Peek(id)
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	st := s.st.Load()
	return st, st != nil
}

func (s *Session) fresh() bool {
	ttl := s.c.opts.MetadataTTL
	if ttl <= 0 {
		return false
	}
	return s.c.opts.Now().UnixNano()-s.checked.Load() < int64(ttl)
}

// refreshLocked brings the state up to the latest version. s.mu is held.
func (s *Session) refreshLocked(ctx context.Context) (*State, error) {
	c := s.c
	inval := s.inval.Load()
	// The fingerprint (consistency.md §4): the latest version a listing's
	// freshness pass or a check of the session's hour partition found
	// within the TTL, as of when it listed, or one LIST of our own
	// (freshVersion). A traversal of the sessions (cat sessions/*/x) then
	// loads and re-checks each state without a LIST per session.
	fp, checkedAt, err := c.freshVersion(ctx, s.id)
	if err != nil {
		return nil, err
	}
	prev := s.st.Load()
	if floor := max(s.floor, c.floorOf(s.id)); floor > fp {
		// A commit of this mount the listing does not show yet (LIST
		// may lag, §2.5). The state holds it already, or it is to be
		// read now: then one GET first tells whether the bucket lost
		// it since (restored, the session removed), where a floor
		// kept across an eviction made the session EIO (review 33).
		if prev != nil && prev.Version >= floor {
			fp = floor
		} else if _, err := c.store.ReadSnapshotRange(ctx, s.id, floor, floor, 1); err == nil {
			fp = floor
		} else if errors.Is(err, layout.ErrNotFound) {
			s.floor = 0
			c.dropFloor(s.id)
		} else {
			return nil, err
		}
	}
	if prev != nil && fp == prev.Version {
		s.markChecked(checkedAt, inval)
		return prev, nil
	}
	if prev != nil && fp < prev.Version {
		// The listing shows fewer versions than we already read. LIST
		// may lag (§2.5, §14.3) but GET of a created key may not: if our
		// latest version is still there, the listing is stale, and
		// going back to it would hide commits, this mount's own
		// included, until the listing catches up.
		if _, err := c.store.ReadSnapshotRange(ctx, s.id, prev.Version, prev.Version, 1); err == nil {
			s.markChecked(checkedAt, inval)
			return prev, nil
		} else if !errors.Is(err, layout.ErrNotFound) {
			return nil, err
		}
	}
	if d := s.damage; d != nil && d.fp == fp && c.opts.Now().Before(d.until) {
		return nil, d.err
	}
	var st *State
	if prev == nil || fp < prev.Version {
		// First load, or the bucket went backwards (restored from a
		// backup: our latest version is gone): build from scratch.
		c.stats.loads.Add(1)
		st, err = s.build(ctx, fp)
	} else {
		c.stats.refreshes.Add(1)
		st, err = s.extend(ctx, prev, fp)
	}
	if err != nil {
		if errors.Is(err, layout.ErrCorrupt) {
			s.damage = &loadDamage{fp: fp, err: err, until: c.opts.Now().Add(damageRecheck)}
		}
		return nil, err
	}
	s.damage = nil
	s.publishLocked(st, checkedAt, inval)
	return st, nil
}

// publishLocked installs st and updates the registry row.
func (s *Session) publishLocked(st *State, checkedAt time.Time, inval uint64) {
	s.st.Store(st)
	s.markChecked(checkedAt, inval)
	s.c.observe(s, st)
}

// markChecked records that the bucket confirmed the state at checkedAt,
// unless Invalidate came since inval was read: that refresh is older than
// the change Invalidate announced, so the state stays due for a re-check.
func (s *Session) markChecked(checkedAt time.Time, inval uint64) {
	if s.inval.Load() == inval {
		s.checked.Store(checkedAt.UnixNano())
	}
}

// build loads the state at version fp from scratch. The snapshots are
// read while the manifest and the parent chain are: their keys follow
// from the version numbers, so a first load costs the round trip of the
// manifest and the snapshots together, not one after the other. An error
// of the manifest or the chain comes first: it says what the session is
// (not found, or a broken chain) better than a snapshot read does.
func (s *Session) build(ctx context.Context, fp uint32) (*State, error) {
	c := s.c
	type read struct {
		snaps [][]layout.Descriptor
		err   error
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan read, 1)
	go func() {
		snaps, err := c.readSnaps(sctx, s.id, 1, fp)
		got <- read{snaps, err}
	}()
	m, err := c.manifest(ctx, s.id)
	if fp > 0 && errors.Is(err, layout.ErrNotFound) {
		// Snapshots are written after the manifest (§5.1): snapshots
		// without one are a damaged session, not a missing one.
		err = fmt.Errorf("load session %s: %w: it has snapshots up to version %d and no manifest (%v)", s.id, layout.ErrCorrupt, fp, err)
	}
	var anc []layout.Entry
	if err == nil {
		anc, err = c.ancestorLog(ctx, s.id, m)
	}
	if err != nil {
		cancel()
		<-got
		return nil, err
	}
	r := <-got
	snaps := r.snaps
	if r.err != nil {
		return nil, fmt.Errorf("load session %s: %w", s.id, gapIsDamage(r.err, fp))
	}
	c.stats.snapshotsRead.Add(int64(len(snaps)))
	slots := make(map[string]layout.Entry)
	for _, e := range anc {
		layout.ApplySlot(slots, e)
	}
	st := &State{ID: s.id, Manifest: m, ancestors: anc, LastSeq: m.FirstSequenceNumber - 1, UpdatedAt: s.id.Time()}
	if n := len(anc); n > 0 {
		st.LastSeq = max(st.LastSeq, anc[n-1].SequenceNumber)
	}
	st.applySnaps(snaps, 1, func(e layout.Entry) { layout.ApplySlot(slots, e) })
	st.root = slots
	return st, nil
}

// extend returns prev plus versions prev.Version+1..fp: one snapshot read
// per new version, and a copy of the slot map (states are immutable).
func (s *Session) extend(ctx context.Context, prev *State, fp uint32) (*State, error) {
	c := s.c
	snaps, err := c.readSnaps(ctx, s.id, prev.Version+1, fp)
	if err != nil {
		return nil, fmt.Errorf("refresh session %s: %w", s.id, gapIsDamage(err, fp))
	}
	c.stats.snapshotsRead.Add(int64(len(snaps)))
	return prev.with(prev.Version+1, snaps), nil
}

// gapIsDamage turns a snapshot that is not found, at or below the latest
// version fp a listing showed, into damage: versions are consecutive and
// never deleted (§7.3), so a missing one is a gap in the session's
// history. Left a "not found", it made the session look absent: an
// empty directory, with no error and no log line.
func gapIsDamage(err error, fp uint32) error {
	if !errors.Is(err, layout.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: a snapshot at or below the latest version %d is missing (%v)", layout.ErrCorrupt, fp, err)
}

// foldAt is the size of a delta over a root of n slots past which with
// folds it into a new root: about the square root of n, so that copying
// the delta at each commit and the fold now and then each cost O(√n) a
// commit, where copying the whole map cost O(n).
func foldAt(n int) int { return int(math.Sqrt(float64(n))) + 64 }

// with returns a new state with snaps appended starting at version from:
// prev's root shared, its delta copied with the changes added (folded
// into a new root past foldAt).
func (prev *State) with(from uint32, snaps [][]layout.Descriptor) *State {
	st := &State{ID: prev.ID, Manifest: prev.Manifest, ancestors: prev.ancestors,
		LastSeq: prev.LastSeq, UpdatedAt: prev.UpdatedAt, Version: prev.Version, root: prev.root}
	delta := make(map[string]slotChange, len(prev.delta)+4)
	for k, c := range prev.delta {
		delta[k] = c
	}
	// prev.snaps is only ever appended to by its successor under the
	// session lock, so sharing the backing array is safe: older states
	// see only their own length.
	st.snaps = prev.snaps[:prev.Version]
	st.applySnaps(snaps, from, func(e layout.Entry) {
		if e.IsSlot() {
			delta[e.Name] = slotChange{e: e, gone: e.Deleted}
		}
	})
	st.delta = delta
	if len(delta) > foldAt(len(st.root)) {
		st.root, st.delta = st.merged(), nil
	}
	if base := prev.treeBuilt.Load(); base != nil {
		d := &treeDelta{base: base, prev: prev.Slot}
		for _, ds := range snaps {
			for i := range ds {
				if ds[i].IsSlot() {
					d.changed = append(d.changed, ds[i].Name)
				}
			}
		}
		st.treeFrom = d
	}
	return st
}

// UpdatedAtVersion is the time of the last content append at or before
// version v, as UpdatedAt is at the latest version: history at version v
// never shows a later one. It is the ID's hour when no snapshot up to v
// has a time.
func (st *State) UpdatedAtVersion(v uint32) time.Time {
	for ; v > 0; v-- {
		ds, _ := st.Snapshot(v)
		if newest, _ := layout.AppendTime(ds); !newest.IsZero() {
			return newest
		}
	}
	return st.ID.Time()
}

// applySnaps appends snaps (the first at version from) to st, giving
// each of their entries to apply.
func (st *State) applySnaps(snaps [][]layout.Descriptor, from uint32, apply func(layout.Entry)) {
	for i, ds := range snaps {
		v := from + uint32(i)
		st.snaps = append(st.snaps, ds)
		st.Version = v
		for _, d := range ds {
			apply(layout.Entry{Descriptor: d, Session: st.ID, Version: v})
			st.LastSeq = d.SequenceNumber
		}
		if newest, _ := layout.AppendTime(ds); !newest.IsZero() {
			st.UpdatedAt = newest
		}
	}
}

// Mark is when a commit to a session began and how often the session had
// been invalidated then (MarkOf). Committed takes the commit for a check
// of the session as of that time. The zero Mark claims nothing.
type Mark struct {
	at    int64 // UnixNano, from Options.Now
	inval uint64
}

// MarkOf returns session id's Mark now. Take it before the commit's
// first request.
func (c *Cache) MarkOf(id layout.SessionID) Mark {
	return Mark{at: c.opts.Now().UnixNano(), inval: c.entry(id).inval.Load()}
}

// Committed folds a commit this mount made into the cached state, so the
// writer sees it at once. If the commit is not the next version (others
// landed in between), the state is marked for re-check instead.
//
// A commit that is the next version is also a check of the session, as
// of m: it landed with a conditional create of the next free version
// (§13), and versions are dense, so every snapshot that existed when it
// began is in the state now. A writer that commits one change after
// another (rsync's close, chmod, utimes and rename of each file) then
// sends no LIST between them. An Invalidate since m announced a change
// the commit may not cover, and keeps the state due for a re-check.
func (c *Cache) Committed(id layout.SessionID, res layout.CommitResult, m Mark) {
	s := c.entry(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = max(s.floor, res.Version)
	c.raiseFloor(id, res.Version)
	prev := s.st.Load()
	if prev == nil || res.Version != prev.Version+1 {
		s.checked.Store(0)
		return
	}
	st := prev.with(res.Version, [][]layout.Descriptor{res.Descriptors})
	s.st.Store(st)
	c.observe(s, st)
	if m.at > s.checked.Load() {
		s.markChecked(time.Unix(0, m.at), m.inval)
	}
}

// Dir is a directory of the live tree built from slot names (decisions.md
// "Names as paths"). Its files and subdirectories are maps shared with
// the directory it was derived from (clone), with the names changed since
// over them (layered). A Dir is not changed once a State holds it.
type Dir struct {
	files layered[layout.Entry]
	dirs  layered[Dir]
	// Hidden counts names that have no path.
	Hidden int
}

// newDir returns an empty directory.
func newDir() *Dir {
	return &Dir{files: newLayered[layout.Entry](), dirs: newLayered[Dir]()}
}

// File returns the entry of the file name in d.
func (d *Dir) File(name string) (*layout.Entry, bool) { return d.files.get(name) }

// FileCount is the number of files in d.
func (d *Dir) FileCount() int { return d.files.n }

// Files yields each file of d, in no order.
func (d *Dir) Files() iter.Seq2[string, *layout.Entry] { return d.files.all() }

// Sub returns the subdirectory name of d.
func (d *Dir) Sub(name string) (*Dir, bool) { return d.dirs.get(name) }

// SubCount is the number of subdirectories of d.
func (d *Dir) SubCount() int { return d.dirs.n }

// Subs yields each subdirectory of d, in no order.
func (d *Dir) Subs() iter.Seq2[string, *Dir] { return d.dirs.all() }

// Names returns the directory's entries, sorted.
func (d *Dir) Names() []string {
	out := make([]string, 0, d.files.n+d.dirs.n)
	for n := range d.Files() {
		out = append(out, n)
	}
	for n := range d.Subs() {
		if _, ok := d.File(n); !ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Walk returns the directory at path components parts.
func (d *Dir) Walk(parts []string) (*Dir, bool) {
	for _, p := range parts {
		if _, isFile := d.File(p); isFile {
			return nil, false
		}
		next, ok := d.Sub(p)
		if !ok {
			return nil, false
		}
		d = next
	}
	return d, true
}

// BuildTree lays out slots as a tree. A name that is both a file and a
// prefix of another (a and a/b) shows the file.
func BuildTree(slots map[string]layout.Entry) *Dir {
	root := newDir()
	names := make([]string, 0, len(slots))
	for n := range slots {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := slots[n]
		parts, ok := layout.NamePath(n)
		if !ok {
			root.Hidden++
			continue
		}
		d := root
		for _, p := range parts[:len(parts)-1] {
			next, ok := d.Sub(p)
			if !ok {
				next = newDir()
				d.dirs.set(p, next)
			}
			d = next
		}
		d.files.set(parts[len(parts)-1], &e)
	}
	return root
}

// JoinName is the slot name of path components.
func JoinName(parts []string) string { return strings.Join(parts, "/") }
