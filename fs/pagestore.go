package fs

import (
	"context"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/readahead"
)

// Bodies fetched ahead of a traversal go to the kernel's page cache
// (FUSE_NOTIFY_STORE), so that the program's read of them is a page-cache
// hit instead of a READ round trip to pugfs: grep -r over 10,000 small
// files otherwise waits for 10,000 READs, one after another. Only
// immutable content is stored (a file node of a blob, whose inode number
// names its descriptor), only into an inode the kernel already knows (it
// listed or looked the file up), and only a body it can take in one
// piece (no content encoding to decode first, at most pageStoreMax
// bytes). Every byte was verified by the blob cache before it gets here.
// The read-ahead keeps one position in a few for the reader's own READ,
// which tells it where the reader is (readahead.Sink).
//
// A body that comes before the kernel knows its file (read-ahead runs
// into directories the program has not listed yet) waits, a few
// directories' worth, for that directory's listing: once the kernel asks
// for more entries past the end of it, it holds an inode for every entry
// the listing gave, and the waiting bodies go. A store that fails (the
// kernel forgot the inode, an old kernel) is counted and dropped: the
// program's read then asks pugfs as before.

// pageStoreMax is the largest body handed to the kernel whole.
const pageStoreMax = 128 << 10

// pageStores are the stores' counters for .pugmark/stats (atomics) and
// the bodies waiting for their directory's listing.
type pageStores struct {
	stored, failed atomic.Int64

	// mu is a leaf: nothing is locked, and no I/O done, under it.
	mu sync.Mutex
	// waiting holds, per directory of a session view, the bodies fetched
	// before the kernel knew their files; the least recently added
	// directories go first past pageStoreDirs. Guarded by mu.
	waiting *simplelru.LRU[storeDir, []waitingStore]
}

// pageStoreDirs bounds the directories whose bodies wait for a listing.
const pageStoreDirs = 64

// storeDir is a directory of a session view: the live tree (at 0) or
// .pugmark/at/<at>.
type storeDir struct {
	id  layout.SessionID
	at  uint32
	dir string // slash-separated, "" for the session's top
}

// waitingStore is a body fetched ahead whose file the kernel did not know.
type waitingStore struct {
	pos readahead.Pos
	d   *layout.Descriptor
}

// wait keeps pos's body for its directory's listing.
func (p *pageStores) wait(pos readahead.Pos, d *layout.Descriptor) {
	dir, _ := path.Split(pos.Name)
	k := storeDir{pos.ID, pos.At, strings.TrimSuffix(dir, "/")}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == nil {
		p.waiting, _ = simplelru.NewLRU[storeDir, []waitingStore](pageStoreDirs, nil)
	}
	ws, _ := p.waiting.Peek(k)
	if len(ws) < pageStoreMaxWaiting {
		p.waiting.Add(k, append(ws, waitingStore{pos, d}))
	}
}

// pageStoreMaxWaiting bounds the bodies waiting in one directory (a
// read-ahead window at most).
const pageStoreMaxWaiting = 256

// listed hands over the bodies waiting for directory k, now that the
// kernel holds its entries' inodes. It runs in its own goroutine:
// notifications are never sent from inside a request (engineering.md).
func (f *FS) listed(k storeDir) {
	f.pages.mu.Lock()
	var ws []waitingStore
	if f.pages.waiting != nil {
		ws, _ = f.pages.waiting.Peek(k)
		f.pages.waiting.Remove(k)
	}
	f.pages.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	go func() {
		for _, w := range ws {
			f.storeBody(w.pos, w.d, false)
		}
	}()
}

// storePages is the read-ahead's Sink: it hands the body of d, fetched
// ahead at pos, to the kernel's cache of the file's inode, or keeps it
// for the listing of the file's directory.
func (f *FS) storePages(pos readahead.Pos, d *layout.Descriptor) { f.storeBody(pos, d, true) }

// storeBody hands d's body to the kernel; wait says to keep it for its
// directory's listing if the kernel does not know the file yet.
func (f *FS) storeBody(pos readahead.Pos, d *layout.Descriptor, wait bool) {
	if d.ContentEncoding != "" || d.Size <= 0 || d.Size > pageStoreMax {
		return
	}
	in := f.kernelInode(pos)
	if in == nil {
		if wait {
			f.pages.wait(pos, d)
		}
		return
	}
	n, ok := in.Operations().(*fileNode)
	if !ok {
		return
	}
	b, ok := n.c.(*blobContent)
	if !ok || b.d.Digest != d.Digest || b.d.ContentEncoding != "" {
		return
	}
	// A body shown decoded (--sniff-encoding) has another size: not
	// one piece.
	if sz, err := f.blobs.Size(context.Background(), b.d); err != nil || sz != d.Size {
		return
	}
	buf := make([]byte, d.Size)
	// The blob cache directly, not b.readAt: this is not the program's
	// read, and must not move the read-ahead.
	k, err := f.blobs.ReadAt(context.Background(), b.d, buf, 0)
	if err != nil || int64(k) != d.Size {
		return
	}
	if errno := in.WriteCache(0, buf); errno != 0 {
		f.pages.failed.Add(1)
		return
	}
	f.pages.stored.Add(1)
}

// kernelInode returns the inode of the file at pos if the kernel knows
// it (go-fuse keeps the inodes the kernel holds), else nil.
func (f *FS) kernelInode(pos readahead.Pos) *gofs.Inode {
	parts, ok := layout.NamePath(pos.Name)
	if !ok || f.root == nil {
		return nil
	}
	path := []string{"sessions", pos.ID.String()}
	if pos.At > 0 {
		path = append(path, ".pugmark", "at", strconv.FormatUint(uint64(pos.At), 10))
	}
	in := f.root
	for _, p := range append(path, parts...) {
		if in = in.GetChild(p); in == nil {
			return nil
		}
	}
	return in
}
