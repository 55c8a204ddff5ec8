package readahead

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// Read-ahead without a kernel: a real session cache over a memory bucket
// for the states, and a recorder for the bodies, so that what read-ahead
// asks for can be compared with what a traversal would read next.

// bodyLog records the prefetches read-ahead asks for.
type bodyLog struct {
	bytes int64 // PrefetchLimits' bytes
	mu    sync.Mutex
	names []string
}

func (b *bodyLog) PrefetchLimits() (int64, int) { return b.bytes, 4 }

func (b *bodyLog) Prefetchable(d *layout.Descriptor) bool { return d != nil && d.Size > 0 }

func (b *bodyLog) Prefetch(ctx context.Context, d *layout.Descriptor) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.names = append(b.names, d.Name)
	return true, nil
}

func (b *bodyLog) got() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Clone(b.names)
	slices.Sort(out)
	return out
}

// raRig is a read-ahead over one loaded session of n files of size bytes,
// f00, f01, ... in traversal order.
type raRig struct {
	ra    *ReadAhead
	log   *bodyLog
	c     *cache.Cache
	id    layout.SessionID
	files []layout.Descriptor
}

func newRig(t *testing.T, n int, size int, budget int64) *raRig {
	t.Helper()
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	var ds []layout.Descriptor
	for i := range n {
		d, err := store.PutBody(ctx, fmt.Sprintf("f%02d", i), []byte(strings.Repeat(string(rune('a'+i%26)), size)), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{MetadataTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, m.Session); err != nil {
		t.Fatal(err)
	}
	log := &bodyLog{bytes: budget}
	r := &raRig{ra: New(c, log, time.Minute, Options{}), log: log, c: c, id: m.Session, files: ds}
	t.Cleanup(r.ra.Close)
	return r
}

// read is a program reading file i of the session from its start.
func (r *raRig) read(i int) { r.readBy(i, 0) }

// readBy is thread reader of a program reading file i from its start.
func (r *raRig) readBy(i int, reader uint32) {
	d := r.files[i]
	r.ra.Read(&Pos{ID: r.id, Name: d.Name}, &d, reader)
}

// names returns the names of files from..to (inclusive), either way.
func (r *raRig) names(from, to int) []string {
	var out []string
	for i := min(from, to); i <= max(from, to); i++ {
		out = append(out, r.files[i].Name)
	}
	return out
}

// waitFor polls until the recorded prefetches are want, and fails the
// test if they become anything else or never get there.
func (r *raRig) waitFor(t *testing.T, what string, want []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := r.log.got()
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || time.Now().After(deadline) {
			t.Fatalf("%s: prefetched %v, want %v", what, got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReadAheadSession(t *testing.T) {
	tests := []struct {
		name   string
		reads  []int
		budget int64
		want   func(r *raRig) []string
	}{
		{"one read is no pattern", []int{0}, 1 << 20, func(r *raRig) []string { return nil }},
		{"in order: a window of 4 per read in order", []int{0, 1}, 1 << 20, func(r *raRig) []string { return r.names(2, 9) }},
		{"the window grows", []int{0, 1, 2}, 1 << 20, func(r *raRig) []string { return r.names(2, 14) }},
		{"backwards, as bash's glob looks up", []int{39, 38}, 1 << 20, func(r *raRig) []string { return r.names(37, 30) }},
		{"skipping a few is still in order", []int{0, 3}, 1 << 20, func(r *raRig) []string { return r.names(4, 11) }},
		{"a jump starts anew", []int{0, 20}, 1 << 20, func(r *raRig) []string { return nil }},
		{"within the byte budget", []int{0, 1}, 3 * 2000, func(r *raRig) []string { return r.names(2, 4) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 40, 2000, tt.budget)
			for _, i := range tt.reads {
				r.read(i)
			}
			want := tt.want(r)
			slices.Sort(want)
			r.waitFor(t, "after reads "+fmt.Sprint(tt.reads), want)
		})
	}
}

// TestReadAheadReaderCatchesUp: what the reader reached frees the budget
// for the next files; a reader that stops leaves no more fetches.
func TestReadAheadReaderCatchesUp(t *testing.T) {
	r := newRig(t, 40, 2000, 3*2000)
	r.read(0)
	r.read(1)
	r.waitFor(t, "budget of three", r.names(2, 4))
	r.read(2)
	r.read(3)
	r.waitFor(t, "the reader at f03", r.names(2, 6))
	time.Sleep(50 * time.Millisecond) // nothing more may come: the reader stopped
	if got := r.log.got(); !slices.Equal(got, r.names(2, 6)) {
		t.Fatalf("after the reader stopped: prefetched %v", got)
	}
}

// The Sink gets every body fetched ahead, with its position, but one
// position in raGap: the reader's read of that one still reaches
// read-ahead and moves the stream on when the others are served without
// asking.
func TestReadAheadSink(t *testing.T) {
	r := newRig(t, 40, 2000, 1<<20)
	var mu sync.Mutex
	var got []string
	r.ra = New(r.c, r.log, time.Minute, Options{Sink: func(p Pos, d *layout.Descriptor) {
		mu.Lock()
		defer mu.Unlock()
		if p.ID != r.id || p.At != 0 || p.Name != d.Name {
			t.Errorf("sink got %+v for %s", p, d.Name)
		}
		got = append(got, p.Name)
	}})
	t.Cleanup(r.ra.Close)
	r.read(0)
	r.read(1)
	r.waitFor(t, "after reads 0 and 1", r.names(2, 9))
	want := append(r.names(2, 7), r.names(9, 9)...) // 8 is raGap's
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		sorted := slices.Sorted(slices.Values(got))
		mu.Unlock()
		if slices.Equal(sorted, want) {
			return
		}
		if len(sorted) > len(want) || time.Now().After(deadline) {
			t.Fatalf("sink got %v, want %v", sorted, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// permInos numbers file fNN (17*NN) mod n: a shuffle of the name order,
// as a mount's hashed inode numbers are.
type permInos struct{ n int }

func (p permInos) File(_ layout.SessionID, _ uint32, name string, _ *layout.Entry) uint64 {
	var i int
	fmt.Sscanf(name, "f%d", &i)
	return uint64(17 * i % p.n)
}

func (p permInos) Dir(layout.SessionID, uint32, string) uint64 { return 0 }

// TestReadAheadInodeOrder: GNU cp -r reads a directory's files in the
// order of their inode numbers, which is no order of their names; read
// in that order, the files next in it are fetched ahead (none were:
// every read broke the name order), and a reader in name order still
// gets its own.
func TestReadAheadInodeOrder(t *testing.T) {
	const n = 40
	byIno := make([]int, n) // byIno[k]: the file numbered k
	for i := range n {
		byIno[17*i%n] = i
	}
	for _, tt := range []struct {
		name  string
		reads []int
		want  []int
	}{
		{"in inode order", byIno[:2], byIno[2:10]},
		{"in name order", []int{0, 1}, []int{2, 3, 4, 5, 6, 7, 8, 9}},
		{"in neither", []int{0, 20, 5}, nil},
		// f00 and f05 are 5 apart in both orders (17*5 mod 40 = 5): no
		// fetch until the next read says which order the reader keeps.
		{"in both, then in inode order", []int{0, 5, byIno[6]}, byIno[7:19]},
		{"in both, then in name order", []int{0, 5, 6}, []int{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, n, 2000, 1<<20)
			r.ra.Close()
			r.ra = New(r.c, r.log, time.Minute, Options{Inos: permInos{n}})
			t.Cleanup(r.ra.Close)
			for _, i := range tt.reads {
				r.read(i)
			}
			var want []string
			for _, i := range tt.want {
				want = append(want, r.files[i].Name)
			}
			slices.Sort(want)
			r.waitFor(t, "after reads "+fmt.Sprint(tt.reads), want)
		})
	}
}

// TestReadAheadThreads: the threads of a program that reads in parallel
// (rg) each walk their own part of the tree in order; read-ahead
// follows each of them (one stream broke at every read of the other),
// and a run of reads in order is one stream whoever makes them (a shell
// loop's cat processes).
func TestReadAheadThreads(t *testing.T) {
	type read struct {
		i      int
		reader uint32
	}
	for _, tt := range []struct {
		name  string
		reads []read
		want  func(r *raRig) []string
	}{
		{"two threads, each in order", []read{{0, 1}, {20, 2}, {1, 1}, {21, 2}},
			func(r *raRig) []string { return append(r.names(2, 9), r.names(22, 29)...) }},
		{"one order, a process a file", []read{{0, 1}, {1, 2}, {2, 3}},
			func(r *raRig) []string { return r.names(2, 14) }},
		{"one thread that jumps starts anew", []read{{0, 1}, {20, 1}, {30, 1}},
			func(r *raRig) []string { return nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 40, 2000, 1<<20)
			for _, rd := range tt.reads {
				r.readBy(rd.i, rd.reader)
			}
			want := tt.want(r)
			slices.Sort(want)
			r.waitFor(t, "after reads "+fmt.Sprint(tt.reads), want)
		})
	}
}

// TestReadAheadWarm: lookups of one name in sessions that follow each
// other in the sessions/ listing (the first session names the stream,
// the next two set its order) load the next sessions ahead, and hand
// each to Warm with the name, so that what the mount makes of a name
// that is no slot (.pugmark/checkpoint) is ready too.
func TestReadAheadWarm(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	var ids []layout.SessionID
	for range 12 {
		m := store.NewRootManifest()
		if _, _, err := store.CreateSession(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Session)
	}
	slices.SortFunc(ids, func(a, b layout.SessionID) int { return strings.Compare(a.String(), b.String()) })
	c, err := cache.New(store, cache.Options{MetadataTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	warmed := map[layout.SessionID]string{}
	r := New(c, &bodyLog{bytes: 1 << 20}, time.Minute, Options{Warm: func(_ context.Context, st *cache.State, name string) {
		mu.Lock()
		defer mu.Unlock()
		warmed[st.ID] = name
	}})
	t.Cleanup(r.Close)
	r.Listed(ids)
	for _, id := range ids[:3] {
		r.Lookup(id, ".pugmark/checkpoint")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(warmed)
		mu.Unlock()
		if n >= window(2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("warmed %d sessions ahead, want the %d after the three looked up", n, window(2))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids[3 : 3+window(2)] {
		if warmed[id] != ".pugmark/checkpoint" {
			t.Errorf("session %s warmed with %q", id, warmed[id])
		}
	}
}

// TestReadAheadVersions: reading one name in a session's history views
// one version after another, by number (a loop over at/$v) or by name
// (the shell's glob of at/*/f: 1, 10, 11, ..., 19, 2, 20), fetches the
// name's bodies at the next versions; versions where the name holds no
// content are passed over.
func TestReadAheadVersions(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for v := uint32(1); v <= n; v++ {
		name := "f"
		if v%7 == 0 {
			name = "g" // f unchanged at v: the same body as at v-1
		}
		body := fmt.Sprintf("%s at version %d %s", name, v, strings.Repeat(".", 2000))
		d, err := store.PutBody(ctx, name, []byte(body), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := cache.New(store, cache.Options{MetadataTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State(ctx, m.Session)
	if err != nil {
		t.Fatal(err)
	}
	fAt := func(v uint32) string {
		e, ok := st.SlotAt("f", v)
		if !ok {
			t.Fatalf("no f at %d", v)
		}
		return e.Name + "@" + e.Digest.String()
	}
	for _, tt := range []struct {
		name  string
		reads []uint32
		want  []uint32 // versions whose f is fetched
	}{
		{"by number", []uint32{1, 2}, []uint32{3, 4, 5, 6, 7, 8, 9, 10}},
		{"by name", []uint32{1, 10}, []uint32{11, 12, 13, 14, 15, 16, 17, 18}},
		{"neither", []uint32{1, 25}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]bool{}
			log := &recordBodies{bodyLog: bodyLog{bytes: 1 << 20}, seen: func(d *layout.Descriptor) {
				mu.Lock()
				defer mu.Unlock()
				got[d.Name+"@"+d.Digest.String()] = true
			}}
			r := New(c, log, time.Minute, Options{})
			t.Cleanup(r.Close)
			for _, v := range tt.reads {
				e, _ := st.SlotAt("f", v)
				r.Read(&Pos{ID: m.Session, At: v, Name: "f"}, &e.Descriptor, 0)
			}
			want := map[string]bool{}
			for _, v := range tt.want {
				want[fAt(v)] = true // f at 7 is f at 6: one body
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				mu.Lock()
				done := len(got) >= len(want)
				mu.Unlock()
				if done || time.Now().After(deadline) {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !maps.Equal(got, want) {
				t.Fatalf("fetched %v, want %v", got, want)
			}
		})
	}
}

// recordBodies is a bodyLog that also tells seen of each prefetch.
type recordBodies struct {
	bodyLog
	seen func(d *layout.Descriptor)
}

func (b *recordBodies) Prefetch(ctx context.Context, d *layout.Descriptor) (bool, error) {
	b.seen(d)
	return b.bodyLog.Prefetch(ctx, d)
}
