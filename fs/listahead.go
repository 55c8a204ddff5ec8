package fs

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/pugmark/pugfs/layout"
)

// listAhead reads the bodies of a directory's files ahead of a program
// that reads them in the order the directory lists them (cat DIR/*,
// cp -r, tar c, sha256sum: a glob's order is the listing's), for the
// directories whose files are bodies outside a session's own tree,
// where the traversal read-ahead (readahead package) does not look:
// objects/ and a session's .pugmark/seq/. 200 blobs of objects/ 20 ms
// away took 6.4 s one GET after another, where the same bodies read
// through a session are fetched ahead (audit 3). A read of a file from
// its start extends the window to the next listAheadN files of the last
// listing; one read alone costs listAheadN speculative GETs at most.
type listAhead struct {
	mu sync.Mutex
	// list is the last listing, in name order; next is the index up to
	// which its bodies were read ahead. GUARDED_BY(mu).
	list []aheadItem
	next int
}

// aheadItem is one file of a listing: its name and its body.
type aheadItem struct {
	name string
	d    layout.Descriptor
}

// listAheadN is how many bodies listAhead keeps read ahead.
const listAheadN = 32

// listed records a listing of the directory.
func (a *listAhead) listed(items []aheadItem) {
	items = slices.Clone(items)
	slices.SortFunc(items, func(x, y aheadItem) int { return strings.Compare(x.name, y.name) })
	a.mu.Lock()
	a.list, a.next = items, 0
	a.mu.Unlock()
}

// read notes a read of file name from its start, and reads the bodies of
// the files after it in the listing ahead.
func (a *listAhead) read(f *FS, name string) {
	budget, _ := f.blobs.PrefetchLimits()
	a.mu.Lock()
	i, found := slices.BinarySearchFunc(a.list, name, func(e aheadItem, name string) int {
		return strings.Compare(e.name, name)
	})
	if !found {
		a.mu.Unlock()
		return
	}
	from, to := a.windowLocked(i, budget)
	if from >= to {
		a.mu.Unlock()
		return
	}
	todo := slices.Clone(a.list[from:to])
	a.next = to
	a.mu.Unlock()
	for _, it := range todo {
		if f.blobs.Prefetchable(&it.d) {
			go f.blobs.Prefetch(context.Background(), &it.d) // speculative; its reader reports errors
		}
	}
}

// windowLocked is the part of the listing still to read ahead after its
// item i was read, [from, to): the next listAheadN items, as far as their
// bodies fit in budget bytes (the blob cache's bound on read-ahead nobody
// has read yet, a quarter of its memory; a tiny --cache-size must not have
// its last read pushed out by the next 32 bodies), less those read ahead
// already. REQUIRES(a.mu).
func (a *listAhead) windowLocked(i int, budget int64) (from, to int) {
	to = i + 1
	for held := int64(0); to < len(a.list) && to < i+1+listAheadN; to++ {
		held += a.list[to].d.Size
		if held > budget {
			break
		}
	}
	return max(i+1, a.next), to
}
