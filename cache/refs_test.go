package cache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// gatedRefs answers ReadRef with the value of the read's turn, each read
// held until its gate opens, and counts the reads and how many ran at
// once.
type gatedRefs struct {
	MetaStore
	mu      sync.Mutex
	reads   int
	running int
	peak    int
	gates   []chan string // the i-th read waits for gates[i]
}

func (g *gatedRefs) ReadRef(ctx context.Context, name string) (layout.Ref, error) {
	g.mu.Lock()
	i := g.reads
	g.reads++
	g.running++
	g.peak = max(g.peak, g.running)
	var gate chan string
	if i < len(g.gates) {
		gate = g.gates[i]
	}
	g.mu.Unlock()
	target := "v"
	if gate != nil {
		target = <-gate
	}
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	return layout.Ref{Name: name, Target: target}, nil
}

func (g *gatedRefs) count() (reads, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads, g.peak
}

// waitReads polls until n reads have started.
func (g *gatedRefs) waitReads(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if r, _ := g.count(); r >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads never started", n)
		}
	}
}

// Callers that want one ref at once share one read of it; a read begun
// before this mount changed the ref (InvalidateRefs) answers nobody who
// asks after that and is not kept, so the mount reads its own write.
func TestViewsRefReads(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	c := newCache(t, w.store, Options{MetadataTTL: time.Hour})

	t.Run("one read for callers at once", func(t *testing.T) {
		g := &gatedRefs{MetaStore: w.store, gates: []chan string{make(chan string)}}
		v := c.NewViews(g)
		var got [3]string
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				r, err := v.Ref(bg, "x")
				if err != nil {
					t.Error(err)
				}
				got[i] = r.Target
			})
		}
		g.waitReads(t, 1)
		g.gates[0] <- "one"
		wg.Wait()
		if reads, _ := g.count(); reads != 1 || got != [3]string{"one", "one", "one"} {
			t.Fatalf("%d reads, answers %q; want one read answering all three", reads, got)
		}
	})

	t.Run("a read begun before a change is not the answer after it", func(t *testing.T) {
		g := &gatedRefs{MetaStore: w.store, gates: []chan string{make(chan string), make(chan string)}}
		v := c.NewViews(g)
		old := make(chan string)
		go func() { r, _ := v.Ref(bg, "x"); old <- r.Target }()
		g.waitReads(t, 1)
		v.InvalidateRefs() // this mount wrote x
		fresh := make(chan string)
		go func() { r, _ := v.Ref(bg, "x"); fresh <- r.Target }()
		g.waitReads(t, 2)
		g.gates[1] <- "new"
		if got := <-fresh; got != "new" {
			t.Fatalf("read after the change: %q, want new", got)
		}
		g.gates[0] <- "old"
		<-old
		if r, _ := v.Ref(bg, "x"); r.Target != "new" {
			t.Fatalf("after both reads: %q, want new (the older read kept?)", r.Target)
		}
	})

	t.Run("a listing's refs read wide, once", func(t *testing.T) {
		g := &gatedRefs{MetaStore: w.store}
		for range 8 {
			g.gates = append(g.gates, make(chan string))
		}
		v := c.NewViews(g)
		names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		var done atomic.Bool
		go func() { v.PrefetchRefs(bg, names); done.Store(true) }()
		g.waitReads(t, len(names)) // all at once: none waits for another
		for _, gate := range g.gates {
			gate <- "t"
		}
		waitFor(t, "PrefetchRefs to end", done.Load)
		for _, n := range names {
			if r, err := v.Ref(bg, n); err != nil || r.Target != "t" {
				t.Fatalf("ref %s: %+v, %v", n, r, err)
			}
		}
		if reads, peak := g.count(); reads != len(names) || peak != len(names) {
			t.Fatalf("%d reads, %d at once; want %d, all at once", reads, peak, len(names))
		}
	})
}

// memReads counts ReadMemory calls, and how many ran at once, holding
// each for hold.
type memReads struct {
	MetaStore
	hold    time.Duration
	mu      sync.Mutex
	read    map[string]int
	running int
	peak    int
}

func (m *memReads) ReadMemory(ctx context.Context, ns string, v uint32) ([]layout.Descriptor, error) {
	m.mu.Lock()
	m.read[ns]++
	m.running++
	m.peak = max(m.peak, m.running)
	m.mu.Unlock()
	time.Sleep(m.hold) // a remote bucket's round trip
	m.mu.Lock()
	m.running--
	m.mu.Unlock()
	return m.MetaStore.ReadMemory(ctx, ns, v)
}

func (m *memReads) counts() (reads map[string]int, peak int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, n := range m.read {
		out[k] = n
	}
	return out, m.peak
}

// The namespaces of a listing read one after another (the shell's glob
// of memories/*/*) are read ahead, wide in parallel, from the second one
// on, each once; a program that reads one namespace reads only it.
func TestViewsNamespacesReadAhead(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	const n = 40
	var names []string
	for i := range n {
		ns := fmt.Sprintf("ns%02d", i)
		if _, err := w.store.WriteMemory(bg, ns, layout.MemoryWrite{Put: []layout.Descriptor{textDesc("r", "record of "+ns, epoch)}}); err != nil {
			t.Fatal(err)
		}
		names = append(names, ns)
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Hour})
	for _, tc := range []struct {
		name string
		read []string
		want int // namespaces read in the end
	}{
		{"one namespace", names[:1], 1},
		{"one after another", names[:2], n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &memReads{MetaStore: w.store, hold: 5 * time.Millisecond, read: map[string]int{}}
			v := c.NewViews(m)
			nss, err := v.Namespaces(bg)
			if err != nil || len(nss) != n {
				t.Fatalf("namespaces: %v, %v", nss, err)
			}
			for _, ns := range tc.read {
				recs, err := v.Memory(bg, ns, 1)
				if err != nil || len(recs) != 1 {
					t.Fatalf("namespace %s: %v, %v", ns, recs, err)
				}
			}
			var reads map[string]int
			var peak int
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if reads, peak = m.counts(); len(reads) >= tc.want || time.Now().After(deadline) {
					break
				}
			}
			if len(reads) != tc.want {
				t.Fatalf("%d namespaces read, want %d: %v", len(reads), tc.want, reads)
			}
			for ns, k := range reads {
				if k != 1 {
					t.Errorf("namespace %s read %d times", ns, k)
				}
			}
			if tc.want > 2 && peak < 4 {
				t.Errorf("at most %d namespaces read at once; want them read wide", peak)
			}
		})
	}
}

// TestViewsMemoryBounded: the records the views keep are bounded in
// bytes, not only in versions: each version of a namespace holds all of
// its records, and 1,024 versions kept by count grew a mount writing 800
// records one after another to 795 MB (audit 31). The newest version
// read stays, and the accounting matches what is kept.
func TestViewsMemoryBounded(t *testing.T) {
	w := newWorld(t, testbucket.Open(t, testbucket.Mem))
	big := strings.Repeat("m", 16<<10)
	const versions = 80
	for i := range versions {
		d := textDesc(fmt.Sprintf("r%03d", i), "x", epoch)
		d.Metadata = map[string]string{"big": big}
		if _, err := w.store.WriteMemory(bg, "grow", layout.MemoryWrite{Put: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	c := newCache(t, w.store, Options{MetadataTTL: time.Hour})
	v := c.NewViews(w.store)
	total := int64(0)
	for ver := uint32(1); ver <= versions; ver++ {
		recs, err := v.Memory(bg, "grow", ver)
		if err != nil || len(recs) != int(ver) {
			t.Fatalf("version %d: %d records, %v", ver, len(recs), err)
		}
		total += recordsBytes(recs)
	}
	if total <= memViewBytes {
		t.Fatalf("the versions read hold %d bytes, not more than the bound %d: the test tests nothing", total, memViewBytes)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	kept := int64(0)
	for _, k := range v.mems.Keys() {
		recs, _ := v.mems.Peek(k)
		kept += recordsBytes(recs)
	}
	if kept != v.memBytes {
		t.Errorf("accounted %d bytes, the views hold %d", v.memBytes, kept)
	}
	if kept > memViewBytes {
		t.Errorf("the views hold %d bytes of records, over the bound %d", kept, memViewBytes)
	}
	if _, ok := v.mems.Peek(memKey{"grow", versions}); !ok {
		t.Error("the newest version read was evicted")
	}
}
