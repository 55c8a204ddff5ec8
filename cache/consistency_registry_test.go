package cache

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// consistency.md §1: updated_at is the time of the last content append.
// Renames (Registry.SetName), reads, cache refreshes and evictions, empty
// commits and fork bookkeeping run concurrently with readers and listers
// and never move it; a commit that adds descriptors does, in State and in
// the registry row, and reorders the listing.
//
// Seen failing: with fork records counted as content (applySnaps before the
// fix) every reader saw the fork's created-at, and so did Summary (before
// its fix); with SetName stamping
// UpdatedAt with the clock, the listers did; with observe copying the
// manifest's name over the row's (before the fix), the final rename was
// lost on the next refresh.
func TestUpdatedAtMovesOnlyOnContentAppends(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		c := newCache(t, w.store, Options{MetadataTTL: 0})
		s, other := w.session(), w.session()
		t1, t2 := epoch.Add(time.Hour), epoch.Add(2*time.Hour)
		w.commit(s, textDesc("a.txt", "a", t1))
		w.commit(other, textDesc("b.txt", "b", t2))
		if st := mustState(t, c, s); !st.UpdatedAt.Equal(t1) {
			t.Fatalf("UpdatedAt %v, want %v", st.UpdatedAt, t1)
		}
		mustState(t, c, other)
		order := func(want ...layout.SessionID) {
			t.Helper()
			var got []layout.SessionID
			for _, r := range c.registry.List() {
				if r.ID == s || r.ID == other {
					got = append(got, r.ID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("listing order %v, want %v", got, want)
			}
		}
		order(other, s)
		fork, err := w.store.PutBlobBytes(bg, []byte("fork output"), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}

		const rounds = 3
		errc := make(chan error, 64)
		check := func(what string, at time.Time) {
			if !at.Equal(t1) {
				select {
				case errc <- fmt.Errorf("%s: updated_at %v, want %v", what, at, t1):
				default:
				}
			}
		}
		stop := make(chan struct{})
		var wg, busy sync.WaitGroup
		loop := func(fn func(i int)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					fn(i)
				}
			}()
		}
		for range 3 {
			loop(func(int) { // reads and refreshes (TTL 0: every read re-checks)
				st, err := c.State(bg, s)
				if err != nil {
					errc <- err
					return
				}
				check("state", st.UpdatedAt)
			})
		}
		loop(func(i int) { c.registry.SetName(s, fmt.Sprintf("name-%d", i)) })
		loop(func(int) {
			if r, ok := c.registry.Get(s); ok {
				check("row", r.UpdatedAt)
			}
			for _, r := range c.registry.List() {
				if r.ID == s {
					check("listed row", r.UpdatedAt)
				}
			}
		})
		loop(func(i int) {
			if i%2 == 0 {
				c.Evict(s)
			} else {
				c.Invalidate(s)
			}
		})
		// Fork bookkeeping (a fork record in s, the child's manifest and
		// snapshot) and empty commits, through the store and Committed.
		busy.Add(2)
		go func() {
			defer busy.Done()
			for range rounds {
				if _, err := w.store.Fork(bg, s, layout.ForkRequest{Descriptor: layout.Descriptor{
					Digest: fork.Digest, Size: fork.Size, Name: "out.txt"}}); err != nil {
					errc <- err
				}
			}
		}()
		go func() {
			defer busy.Done()
			for range rounds {
				mark := c.MarkOf(s)
				res, err := w.store.Commit(bg, s, layout.CommitRequest{Type: layout.Provisional})
				if err != nil {
					errc <- err
					continue
				}
				c.Committed(s, res, mark)
			}
		}()
		busy.Wait()
		close(stop)
		wg.Wait()
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}

		// A cache that never loaded s summarises it (what a session
		// directory's attributes use) from its latest snapshots.
		if _, at, err := newCache(t, w.store, Options{}).Summary(bg, s); err != nil || !at.Equal(t1) {
			t.Fatalf("summary: updated_at %v, %v; want %v", at, err, t1)
		}
		c.registry.SetName(s, "final")
		st := mustState(t, c, s)
		if want := uint32(1 + 2*rounds); st.Version != want || !st.UpdatedAt.Equal(t1) {
			t.Fatalf("state at version %d (want %d), updated_at %v (want %v)", st.Version, want, st.UpdatedAt, t1)
		}
		row, _ := c.registry.Get(s)
		if row.Version != st.Version || !row.UpdatedAt.Equal(t1) || row.Name != "final" {
			t.Fatalf("row %+v, want version %d, updated_at %v, name final", row, st.Version, t1)
		}
		order(other, s)

		// Content appends move it: through Committed (own commit), and
		// through a refresh; a tombstone is content too.
		t3, t4 := epoch.Add(3*time.Hour), epoch.Add(4*time.Hour)
		c.Committed(s, w.commit(s, textDesc("c.txt", "c", t3)), Mark{})
		if st, _ := c.State(bg, s); !st.UpdatedAt.Equal(t3) {
			t.Fatalf("after a content commit: updated_at %v, want %v", st.UpdatedAt, t3)
		}
		if row, _ := c.registry.Get(s); !row.UpdatedAt.Equal(t3) || row.Name != "final" {
			t.Fatalf("after a content commit: row %+v", row)
		}
		order(s, other)
		gone := textDesc("a.txt", "", t4)
		gone.Deleted, gone.Data, gone.Digest, gone.Size = true, nil, layout.Digest{}, 0
		w.commit(s, gone)
		if st := mustState(t, c, s); !st.UpdatedAt.Equal(t4) {
			t.Fatalf("after a tombstone: updated_at %v, want %v", st.UpdatedAt, t4)
		}
		if row, _ := c.registry.Get(s); !row.UpdatedAt.Equal(t4) {
			t.Fatalf("after a tombstone: row %+v", row)
		}
	})
}

// consistency.md §1: listing copies each row under the state lock and
// sorts outside it. Creation (first loads), commits, eviction (explicit and
// by the LRU bound), renames and lookups run together with listers; every
// listed row is whole (its version and updated_at come from one
// observation, its name belongs to its ID), listings are sorted, and a
// lister that scribbles over the rows it got changes nothing.
//
// Seen failing: with copyRow sharing Parent (a shallow copy) the listers'
// writes to Parent.Version showed up in other listings; with List reading
// the map without the state lock, -race reported the race; with a stale
// load of an evicted session publishing its row (before the fix), rows
// went back to older versions with newer updated_at.
func TestRegistryListPointInTime(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), nil)
	w := &world{t: t, store: store}
	c := newCache(t, store, Options{MetadataTTL: 0, MaxSessions: 4})
	// Session i's commit at version v is created at base(i) + v seconds,
	// so a whole row satisfies UpdatedAt == base(i) + Version seconds.
	base := map[layout.SessionID]time.Time{}
	var sessions []layout.SessionID
	newSession := func(parent *layout.SessionID) layout.SessionID {
		var id layout.SessionID
		if parent == nil {
			id = w.session()
		} else {
			var err error
			id, err = store.Fork(bg, *parent, layout.ForkRequest{Descriptor: textDesc("fork", "f", epoch)})
			if err != nil {
				t.Fatal(err)
			}
		}
		base[id] = epoch.Add(time.Duration(len(sessions)) * time.Hour)
		sessions = append(sessions, id)
		return id
	}
	for range 6 {
		newSession(nil)
	}
	parents := map[layout.SessionID]layout.ParentRef{}
	for _, p := range sessions[:2] {
		ch := newSession(&p)
		m, err := store.LoadManifest(bg, ch)
		if err != nil {
			t.Fatal(err)
		}
		parents[ch] = *m.Parent
	}
	// Children start at version 1 (the fork output); give every session
	// one more commit so the invariant holds from the start.
	// final is written by one writer goroutine per session, read after.
	final := map[layout.SessionID]*uint32{}
	for _, id := range sessions {
		v, _ := store.LatestVersion(bg, id)
		w.commit(id, textDesc("x", "x", base[id].Add(time.Duration(v+1)*time.Second)))
		final[id] = new(v + 1)
	}

	errc := make(chan error, 16)
	fail := func(format string, args ...any) {
		select {
		case errc <- fmt.Errorf(format, args...):
		default:
		}
	}
	checkRow := func(r Row) {
		b, ok := base[r.ID]
		if !ok {
			fail("row for an unknown session %s", r.ID)
			return
		}
		if want := b.Add(time.Duration(r.Version) * time.Second); r.Version > 0 && !r.UpdatedAt.Equal(want) {
			fail("torn row %s: version %d with updated_at %v (want %v)", r.ID, r.Version, r.UpdatedAt, want)
		}
		if r.Name != "" && !strings.HasPrefix(r.Name, r.ID.String()) {
			fail("row %s has another row's name %q", r.ID, r.Name)
		}
		// A row SetName made before the first load has no parent yet.
		if p, forked := parents[r.ID]; r.Version > 0 && (forked != (r.Parent != nil) || (forked && *r.Parent != p)) {
			fail("row %s: parent %+v, want %+v", r.ID, r.Parent, p)
		}
	}
	scribble := func(r *Row) {
		r.Name, r.Version, r.UpdatedAt = "scribbled", 99999, time.Time{}
		if r.Parent != nil {
			r.Parent.Version = 99999
		}
	}
	const commits = 8
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for i, id := range sessions {
		writers.Add(1)
		go func() { // commits, folded in as own commits and by refreshes
			defer writers.Done()
			for range commits {
				v := *final[id] + 1
				mark := c.MarkOf(id)
				res, err := store.Commit(bg, id, layout.CommitRequest{Type: layout.Provisional,
					Descriptors: []layout.Descriptor{textDesc("x", "x", base[id].Add(time.Duration(v)*time.Second))}})
				if err != nil || res.Version != v {
					fail("commit %s: version %d, %v", id, res.Version, err)
					return
				}
				*final[id] = v
				if i%2 == 0 {
					c.Committed(id, res, mark)
				} else if _, err := c.State(bg, id); err != nil {
					fail("state: %v", err)
				}
			}
		}()
	}
	spin := func(fn func(i int)) {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(i)
			}
		}()
	}
	spin(func(i int) { // first loads, and loads after eviction
		if _, err := c.State(bg, sessions[i%len(sessions)]); err != nil {
			fail("state: %v", err)
		}
	})
	spin(func(i int) { c.Evict(sessions[(i*5)%len(sessions)]) })
	spin(func(i int) {
		id := sessions[(i*3)%len(sessions)]
		c.registry.SetName(id, fmt.Sprintf("%s-%d", id, i))
	})
	for range 2 {
		spin(func(int) {
			rows := c.registry.List()
			for i, r := range rows {
				checkRow(r)
				if i > 0 && (r.UpdatedAt.After(rows[i-1].UpdatedAt) ||
					r.UpdatedAt.Equal(rows[i-1].UpdatedAt) && r.ID.String() < rows[i-1].ID.String()) {
					fail("listing out of order at %d: %s", i, ids(rows))
				}
			}
			for i := range rows {
				scribble(&rows[i])
			}
		})
	}
	spin(func(i int) {
		if r, ok := c.registry.Get(sessions[i%len(sessions)]); ok {
			checkRow(r)
			scribble(&r)
		}
	})
	writers.Wait()
	close(stop)
	readers.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	for _, id := range sessions {
		c.registry.SetName(id, id.String()+"-final")
		mustState(t, c, id)
	}
	rows := c.registry.List()
	if len(rows) != len(sessions) {
		t.Fatalf("%d rows for %d sessions", len(rows), len(sessions))
	}
	for _, r := range rows {
		checkRow(r)
		if r.Version != *final[r.ID] || r.Name != r.ID.String()+"-final" {
			t.Fatalf("final row %+v: want version %d", r, *final[r.ID])
		}
	}
}

// TestRegistryFileMergedAndBounded: two mounts sharing the cache
// directory each keep the other's rows in the index file (each wrote
// its own rows over the other's), a session both know keeps its later
// append, and the file holds at most maxRows rows, the sessions
// appended to last (it held every row ever seen, loaded at each start
// and written back).
func TestRegistryFileMergedAndBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.json")
	log := slog.New(slog.DiscardHandler)
	var mu1, mu2 sync.Mutex
	r1, _ := newRegistry(path, time.Hour, &mu1, log)
	r2, _ := newRegistry(path, time.Hour, &mu2, log)
	put := func(r *Registry, mu *sync.Mutex, id byte, at time.Time) {
		mu.Lock()
		r.rows[layout.SessionID{id}] = &Row{ID: layout.SessionID{id}, UpdatedAt: at}
		r.dirty = true
		mu.Unlock()
	}
	read := func() map[layout.SessionID]time.Time {
		t.Helper()
		out := map[layout.SessionID]time.Time{}
		for id, row := range readIndex(t, path) {
			out[id] = row.UpdatedAt
		}
		return out
	}
	put(r1, &mu1, 1, epoch)
	put(r1, &mu1, 3, epoch.Add(3*time.Minute))
	if err := r1.Flush(); err != nil {
		t.Fatal(err)
	}
	put(r2, &mu2, 2, epoch.Add(time.Minute))
	put(r2, &mu2, 3, epoch.Add(time.Minute)) // older than r1's row
	if err := r2.Flush(); err != nil {
		t.Fatal(err)
	}
	got := read()
	want := map[layout.SessionID]time.Time{{1}: epoch, {2}: epoch.Add(time.Minute), {3}: epoch.Add(3 * time.Minute)}
	if len(got) != len(want) {
		t.Fatalf("index holds %v, want %v", got, want)
	}
	for id, at := range want {
		if !got[id].Equal(at) {
			t.Errorf("session %s: %v in the index, want %v", id, got[id], at)
		}
	}
	r1.maxRows = 2
	put(r1, &mu1, 4, epoch.Add(4*time.Minute))
	if err := r1.Flush(); err != nil {
		t.Fatal(err)
	}
	got = read()
	if _, ok := got[layout.SessionID{4}]; len(got) != 2 || !ok || !got[layout.SessionID{3}].Equal(epoch.Add(3*time.Minute)) {
		t.Fatalf("bounded to 2 rows, the index holds %v; want sessions 3 and 4", got)
	}
}

// TestRegistryRowNotTornByOlderState: a row is one observation. A state
// older than the row (a load from a listing that lags the mount's own
// commit) left a row that claimed version 1 with version 2's append
// time, a row no state ever had (review 32); it changes nothing now.
func TestRegistryRowNotTornByOlderState(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		w := newWorld(t, b)
		c := newCache(t, w.store, Options{MetadataTTL: time.Hour, MaxSessions: 1})
		s, other := w.session(), w.session()
		w.commit(s, textDesc("base", "0", epoch))
		if _, err := c.ListSessions(bg); err != nil {
			t.Fatal(err)
		}
		old := mustState(t, c, s)
		mark := c.MarkOf(s)
		t2 := epoch.Add(time.Minute)
		c.Committed(s, w.commit(s, textDesc("mine", "mine", t2)), mark)
		mustState(t, c, other) // evicts s
		st := mustState(t, c, s)
		row, _ := c.registry.Get(s)
		if row.Version != st.Version || !row.UpdatedAt.Equal(st.UpdatedAt) {
			t.Fatalf("registry row {version %d, updated_at %v}; the state it observed last is {version %d, updated_at %v}",
				row.Version, row.UpdatedAt, st.Version, st.UpdatedAt)
		}
		if row.Version < 2 {
			t.Fatalf("registry row went back to version %d after version 2 was observed", row.Version)
		}
		// The older state itself, observed again (a load from a
		// listing that lags): the row stays the newer observation.
		c.mu.Lock()
		c.registry.observeLocked(old)
		c.mu.Unlock()
		if again, _ := c.registry.Get(s); again.Version != row.Version || !again.UpdatedAt.Equal(row.UpdatedAt) {
			t.Fatalf("after observing version %d again, the row is {version %d, updated_at %v}, want {version %d, updated_at %v}",
				old.Version, again.Version, again.UpdatedAt, row.Version, row.UpdatedAt)
		}
	})
}
