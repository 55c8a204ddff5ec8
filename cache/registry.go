package cache

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Row is one session's registry entry. Rows returned by the registry are
// copies: changing one changes nothing else (consistency.md §1).
type Row struct {
	ID      layout.SessionID `json:"id"`
	Name    string           `json:"name,omitempty"`
	Version uint32           `json:"version"`
	// UpdatedAt is the last content append; name changes, reads and
	// refreshes never move it.
	UpdatedAt time.Time         `json:"updated_at"`
	Parent    *layout.ParentRef `json:"parent,omitempty"`
}

// Registry holds a row per known session, optionally persisted to a file
// with a deferred, ordered flush (consistency.md §1).
type Registry struct {
	state *sync.Mutex // the cache's global state lock; guards rows, dirty, timer
	rows  map[layout.SessionID]*Row
	dirty bool
	// timer is the deferred flush pending, nil when none: a mutation
	// while a flush writes arms the next one (markDirtyLocked), since
	// the flush cleared it under the state lock.
	timer *time.Timer

	path  string
	delay time.Duration
	log   *slog.Logger
	// flushMu serialises publication: capture under state, write after
	// releasing it. Taken before state, never while holding it.
	flushMu sync.Mutex
	// hookWrite, if set (tests only; guarded by state), runs inside Flush
	// with the captured rows, after the state lock is released and before
	// the file is written.
	hookWrite func(rows []Row)
	// maxRows bounds the rows the file holds (maxIndexRows).
	maxRows int
}

// maxIndexRows bounds the index file: the sessions last appended to are
// kept. It was every row any mount sharing the directory ever saw,
// loaded at each start and written back.
const maxIndexRows = 1 << 17

func newRegistry(path string, delay time.Duration, state *sync.Mutex, log *slog.Logger) (*Registry, error) {
	if delay <= 0 {
		delay = 2 * time.Second
	}
	r := &Registry{state: state, rows: map[layout.SessionID]*Row{}, path: path, delay: delay, log: log, maxRows: maxIndexRows}
	if path == "" {
		return r, nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return r, nil
	}
	if err != nil {
		log.Warn("registry index unreadable; starting empty", "path", path, "err", err)
		return r, nil
	}
	var rows []Row
	if err := json.Unmarshal(b, &rows); err != nil {
		log.Warn("registry index corrupt; starting empty", "path", path, "err", err)
		return r, nil
	}
	for i := range rows {
		row := rows[i]
		r.rows[row.ID] = &row
	}
	return r, nil
}

// observeLocked records a state's row; the state lock is held. A content
// append (a newer UpdatedAt) moves the timestamp; nothing else does. The
// manifest's name only names a new row: a name set since (SetName: a
// rename, a new ref) is not undone by a refresh. A state older than the
// row (a load from a lagging listing) changes nothing: it left the row
// with its version and the newer state's time, a pair no state had
// (review 32).
func (r *Registry) observeLocked(st *State) {
	row, ok := r.rows[st.ID]
	if !ok {
		row = &Row{ID: st.ID, Name: st.Manifest.Name}
		r.rows[st.ID] = row
	} else if st.Version < row.Version {
		return
	}
	changed := !ok || row.Version != st.Version || (row.Parent == nil) != (st.Manifest.Parent == nil)
	row.Version = st.Version
	row.Parent = st.Manifest.Parent
	if st.UpdatedAt.After(row.UpdatedAt) {
		row.UpdatedAt = st.UpdatedAt
		changed = true
	}
	if changed {
		r.markDirtyLocked()
	}
}

// SetName changes a row's name without touching its timestamp (a rename
// or a new ref is not a content append).
func (r *Registry) SetName(id layout.SessionID, name string) {
	r.state.Lock()
	defer r.state.Unlock()
	row, ok := r.rows[id]
	if !ok {
		row = &Row{ID: id}
		r.rows[id] = row
	}
	if row.Name != name {
		row.Name = name
		r.markDirtyLocked()
	}
}

// markDirtyLocked marks the rows changed since the last capture and arms
// a deferred flush.
func (r *Registry) markDirtyLocked() {
	r.dirty = true
	r.armLocked()
}

// armLocked schedules a deferred flush unless one is pending.
func (r *Registry) armLocked() {
	if r.path != "" && r.timer == nil {
		r.timer = time.AfterFunc(r.delay, func() { _ = r.Flush() }) // Flush logs its failures
	}
}

// Get returns a copy of a session's row.
func (r *Registry) Get(id layout.SessionID) (Row, bool) {
	r.state.Lock()
	defer r.state.Unlock()
	row, ok := r.rows[id]
	if !ok {
		return Row{}, false
	}
	return copyRow(row), true
}

func copyRow(row *Row) Row {
	c := *row
	if row.Parent != nil {
		p := *row.Parent
		c.Parent = &p
	}
	return c
}

// List returns copies of every row, newest content first (absent times
// sort as zero). Rows are copied under the state lock; sorting happens
// after it is released.
func (r *Registry) List() []Row {
	r.state.Lock()
	out := make([]Row, 0, len(r.rows))
	for _, row := range r.rows {
		out = append(out, copyRow(row))
	}
	r.state.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].UpdatedAt.Equal(out[j].UpdatedAt) {
			return out[i].UpdatedAt.After(out[j].UpdatedAt)
		}
		return out[i].ID.String() < out[j].ID.String()
	})
	return out
}

// Flush publishes the rows to the index file if anything changed since
// the last flush. An older capture never overwrites a newer one: captures
// and writes are ordered by flushMu, and mutations made during a write
// leave the registry dirty for the next flush. A failed write is logged as
// a warning and returned; the rows stay in memory, dirty, for the next
// flush.
func (r *Registry) Flush() error {
	if r.path == "" {
		return nil
	}
	r.lockFlush()
	defer r.flushMu.Unlock()
	r.state.Lock()
	r.timer = nil
	if !r.dirty {
		r.state.Unlock()
		return nil
	}
	rows := make([]Row, 0, len(r.rows))
	for _, row := range r.rows {
		rows = append(rows, copyRow(row))
	}
	r.dirty = false
	hook := r.hookWrite
	r.state.Unlock()

	if hook != nil {
		hook(rows)
	}
	rows = r.mergeWithFile(rows)
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID.String() < rows[j].ID.String() })
	b, err := json.MarshalIndent(rows, "", " ")
	if err == nil {
		err = writeFileAtomic(r.path, b)
	}
	r.state.Lock()
	if err != nil {
		r.dirty = true // keep it for the next attempt
		r.state.Unlock()
		// Logged after the state lock is released: a log write is I/O.
		r.log.Warn("registry flush failed; state kept in memory", "path", r.path, "err", err)
		return err
	}
	r.state.Unlock()
	return nil
}

// mergeWithFile adds to rows what the index file holds of sessions they
// do not have (another mount sharing the directory wrote them: written
// over, they were lost), and for a session both have keeps the newer row
// (newerRow); then it keeps the maxRows rows appended to last.
// Called with flushMu held, not the state lock.
func (r *Registry) mergeWithFile(rows []Row) []Row {
	if b, err := os.ReadFile(r.path); err == nil {
		var onDisk []Row
		if json.Unmarshal(b, &onDisk) == nil {
			at := make(map[layout.SessionID]int, len(rows))
			for i, row := range rows {
				at[row.ID] = i
			}
			for _, d := range onDisk {
				if i, ok := at[d.ID]; !ok {
					rows = append(rows, d)
				} else if newerRow(d, rows[i]) {
					rows[i] = d
				}
			}
		}
	}
	if len(rows) > r.maxRows {
		sort.Slice(rows, func(i, j int) bool { return rows[i].UpdatedAt.After(rows[j].UpdatedAt) })
		rows = rows[:r.maxRows]
	}
	return rows
}

// newerRow reports whether a is a later observation of its session than
// b: a later version (versions only grow; an empty commit or a fork
// record moves it and not the time, and another mount's older row
// replaced a newer one: review 32), or the same version appended to
// later.
func newerRow(a, b Row) bool {
	if a.Version != b.Version {
		return a.Version > b.Version
	}
	return a.UpdatedAt.After(b.UpdatedAt)
}

// lockFlush waits for this flush's turn to capture and publish (a named
// frame, so that tests can see a flush waiting here).
func (r *Registry) lockFlush() { r.flushMu.Lock() }

// Close flushes pending changes.
func (r *Registry) Close() error {
	r.state.Lock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.state.Unlock()
	return r.Flush()
}

// writeFileAtomic replaces path with b: a temp file in the same
// directory, synced, then renamed over it, so a reader sees the old file
// or the new one, whole.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".index-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write registry index %s: %w", path, err)
	}
	return nil
}
