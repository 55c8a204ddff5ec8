package layout

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// mapKeeper is a Keeper in memory (the mount's is blobcache's disk tier).
type mapKeeper struct {
	mu sync.Mutex
	m  map[string]keptBody
}

type keptBody struct {
	st   Stamp
	body []byte
}

func (k *mapKeeper) Kept(key string, st Stamp) ([]byte, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	return e.body, ok && e.st == st
}

func (k *mapKeeper) Keep(key string, st Stamp, body []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]keptBody{}
	}
	k.m[key] = keptBody{st, slices.Clone(body)}
}

func (k *mapKeeper) Has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[key]
	return ok
}

func (k *mapKeeper) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for key := range k.m {
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

// TestKeptObjects: a Store with a Keeper offers it the snapshots and
// manifests it reads, and reads them back from it, with no GET, once a
// listing has shown each object with the stamp it was kept with; never
// before a listing vouched for it, and never once the object was written
// anew (a bucket emptied and filled again with the same session IDs).
func TestKeptObjects(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		w := newStore(t, b, nil) // another writer
		id := newSession(t, w)
		for _, names := range [][]string{{"a"}, {"bb", "ccc"}} {
			if _, err := w.Commit(bg, id, CommitRequest{Descriptors: descs(names...)}); err != nil {
				t.Fatal(err)
			}
		}
		k := &mapKeeper{}
		s := newStore(t, b, &Options{Keeper: k})
		readAll := func() (m *Manifest, snaps [][]Descriptor) {
			t.Helper()
			m, err := s.LoadManifest(bg, id)
			if err != nil {
				t.Fatal(err)
			}
			for v := uint32(1); v <= 2; v++ {
				ds, err := s.ReadSnapshot(bg, id, v)
				if err != nil {
					t.Fatal(err)
				}
				snaps = append(snaps, ds)
			}
			return m, snaps
		}
		gets := func() int64 { return s.Stats().Gets }

		g0 := gets()
		m0, snaps0 := readAll()
		if n := gets() - g0; n != 3 {
			t.Fatalf("first reads: %d GETs, want 3 (kept %d, keeper holds %q)", n, s.Stats().Kept, k.keys())
		}
		mk, _ := ManifestKey(id)
		k1, _ := SnapshotKey(id, 1)
		k2, _ := SnapshotKey(id, 2)
		if got, want := k.keys(), []string{mk, k1, k2}; !slices.Equal(got, sortedCopy(want)) {
			t.Fatalf("kept %q, want %q", got, want)
		}
		// Kept, but no listing has vouched for them: read again.
		g0 = gets()
		readAll()
		if n := gets() - g0; n != 3 || s.Stats().Kept != 0 {
			t.Fatalf("reads before a listing: %d GETs, %d kept, want 3 and 0", n, s.Stats().Kept)
		}
		if _, err := s.ListHourVersions(bg, id.Hour(), 0, nil, nil); err != nil {
			t.Fatal(err)
		}
		g0 = gets()
		m1, snaps1 := readAll()
		if n := gets() - g0; n != 0 || s.Stats().Kept != 3 {
			t.Errorf("reads after a listing: %d GETs, %d kept, want 0 and 3", n, s.Stats().Kept)
		}
		if m1.Session != m0.Session || !equalDescs(snaps0, snaps1) {
			t.Errorf("kept bodies decode differently: %+v %+v", snaps0, snaps1)
		}

		// Snapshot 1 written anew with other content (what a bucket
		// emptied and generated again holds): its stamp differs, so it is
		// read, and the new content is what the Store returns.
		raw2, err := b.ReadAll(bg, k2)
		if err != nil {
			t.Fatal(err)
		}
		putRaw(t, b, k1, raw2, nil)
		if _, err := s.ListHourVersions(bg, id.Hour(), 0, nil, nil); err != nil {
			t.Fatal(err)
		}
		g0 = gets()
		ds, err := s.ReadSnapshot(bg, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if n := gets() - g0; n != 1 || len(ds) != 2 || ds[0].Name != "bb" {
			t.Errorf("snapshot 1 written anew: %d GETs, read %+v; want 1 GET and the new descriptors", n, ds)
		}
	})
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func equalDescs(a, b [][]Descriptor) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j].Name != b[i][j].Name || a[i][j].Digest != b[i][j].Digest || a[i][j].SequenceNumber != b[i][j].SequenceNumber {
				return false
			}
		}
	}
	return true
}

// longKeptSession commits a session of n versions (file f<i> in version
// i+1) and reads them with a fresh Store whose Keeper keeps them: the
// session, what was read, and the Keeper. That first read lists nothing
// (the Keeper had no copies) and GETs every version.
func longKeptSession(t *testing.T, b *blob.Bucket, n int) (SessionID, [][]Descriptor, *mapKeeper) {
	t.Helper()
	w := newStore(t, b, nil)
	id := newSession(t, w)
	for i := range n {
		if _, err := w.Commit(bg, id, CommitRequest{Descriptors: descs(fmt.Sprint("f", i))}); err != nil {
			t.Fatal(err)
		}
	}
	k := &mapKeeper{}
	first := newStore(t, b, &Options{Keeper: k})
	want, err := first.ReadSnapshotRange(bg, id, 1, uint32(n), 8)
	if err != nil {
		t.Fatal(err)
	}
	if got, st := len(k.keys()), first.Stats(); got != n || st.Lists != 0 || st.Gets != int64(n) {
		t.Fatalf("first read: kept %d snapshots with %d LISTs and %d GETs, want %d, none and %d", got, st.Lists, st.Gets, n, n)
	}
	return id, want, k
}

// TestKeptLongRange: a range of more than keptListMin versions whose
// copies the Keeper holds lists the session's snapshots beside its reads,
// newest first as the listing names them, each read waiting for the
// listing to pass its version: a fresh Store reads them all back with no
// GET, in version order. With a Keeper that holds none of them (a first
// mount), or a shorter range, nothing is listed.
func TestKeptLongRange(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		const n = keptListMin + 36
		id, want, k := longKeptSession(t, b, n)
		for _, par := range []int{1, 8, 64} {
			fresh := newStore(t, b, &Options{Keeper: k})
			got, err := fresh.ReadSnapshotRange(bg, id, 1, n, par)
			if err != nil {
				t.Fatal(err)
			}
			if !equalDescs(want, got) || got[0][0].Name != "f0" || got[n-1][0].Name != fmt.Sprint("f", n-1) {
				t.Fatalf("par %d: read back %d versions, not those read first (or out of order)", par, len(got))
			}
			if st := fresh.Stats(); st.Gets != 0 || st.Kept != n || st.Lists < 1 {
				t.Errorf("par %d: %d versions on a fresh Store: %d GETs, %d kept, %d LISTs; want none, %d, at least 1", par, n, st.Gets, st.Kept, st.Lists, n)
			}
		}
		short := newStore(t, b, &Options{Keeper: k})
		if _, err := short.ReadSnapshotRange(bg, id, 1, keptListMin, 8); err != nil {
			t.Fatal(err)
		}
		if st := short.Stats(); st.Lists != 0 || st.Gets != keptListMin {
			t.Errorf("%d versions: %d LISTs and %d GETs, want none and %d", keptListMin, st.Lists, st.Gets, keptListMin)
		}
	})
}

// TestKeptLongRangeWithoutTheListing: the listing that vouches for kept
// copies is a help, never a condition: when its LIST fails, the reads go
// to the bucket at once; when it hangs, they wait keptListPatience for it
// to move and then go to the bucket, and the range ends (the stalled
// LIST with it).
func TestKeptLongRangeWithoutTheListing(t *testing.T) {
	old := keptListPatience
	keptListPatience = 100 * time.Millisecond
	t.Cleanup(func() { keptListPatience = old })
	b := memblob.OpenBucket(nil)
	const n = keptListMin + 10
	id, want, k := longKeptSession(t, b, n)
	for _, tc := range []struct {
		name string
		rule faultblob.Rule
	}{
		{"the LIST fails", faultblob.Rule{Ops: faultblob.OpList, FailProb: 1, Err: faultblob.PermanentError(gcerrors.Internal)}},
		{"the LIST hangs", faultblob.Rule{Ops: faultblob.OpList, Stall: faultblob.NewGate()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
			inj.Add(tc.rule)
			s := newStore(t, faultblob.Wrap(b, inj), &Options{Keeper: k, Retries: -1})
			done := make(chan struct{})
			var got [][]Descriptor
			var err error
			go func() {
				defer close(done)
				got, err = s.ReadSnapshotRange(bg, id, 1, n, 8)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the range waits for the listing")
			}
			if err != nil || !equalDescs(want, got) {
				t.Fatalf("read %d versions, %v", len(got), err)
			}
			if st := s.Stats(); st.Gets != n || st.Lists != 1 {
				t.Errorf("%d GETs and %d LISTs, want %d and 1", st.Gets, st.Lists, n)
			}
		})
	}
}

// TestKeptMemory: memory namespace versions are kept like snapshots: a
// fresh Store reads the latest version of a namespace from the Keeper
// once a listing (ListNamespaces, or LatestMemoryVersion's LIST) showed it
// unchanged, and reads a version written since from the bucket.
func TestKeptMemory(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		w := newStore(t, b, nil)
		const ns = "team/notes"
		writeMem(t, w, ns, MemoryWrite{Put: descs("a")})
		r := writeMem(t, w, ns, MemoryWrite{Put: descs("b")})
		k := &mapKeeper{}
		first := newStore(t, b, &Options{Keeper: k})
		want, err := first.ReadMemory(bg, ns, r.Version)
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range []func(s *Store) error{
			func(s *Store) error { _, err := s.ListNamespaces(bg, nil); return err },
			func(s *Store) error { _, err := s.LatestMemoryVersion(bg, ns); return err },
		} {
			fresh := newStore(t, b, &Options{Keeper: k})
			if _, err := fresh.ReadMemory(bg, ns, r.Version); err != nil {
				t.Fatal(err)
			}
			if err := list(fresh); err != nil {
				t.Fatal(err)
			}
			g0 := fresh.Stats().Gets
			got, err := fresh.ReadMemory(bg, ns, r.Version)
			if err != nil || !equalDescs([][]Descriptor{want}, [][]Descriptor{got}) {
				t.Fatalf("read back %+v, %v", got, err)
			}
			if n := fresh.Stats().Gets - g0; n != 0 || fresh.Stats().Kept != 1 {
				t.Errorf("after a listing: %d GETs, %d kept; want 0 and 1", n, fresh.Stats().Kept)
			}
		}
		r3 := writeMem(t, w, ns, MemoryWrite{Put: descs("c")})
		fresh := newStore(t, b, &Options{Keeper: k})
		if _, err := fresh.ListNamespaces(bg, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := fresh.ReadMemory(bg, ns, r3.Version); err != nil || len(got) != 3 || fresh.Stats().Gets != 1 {
			t.Errorf("a version written since: %d records, %d GETs, %v; want 3 and 1", len(got), fresh.Stats().Gets, err)
		}
	})
}
