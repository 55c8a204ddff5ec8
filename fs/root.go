package fs

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rootMetaDir is the hidden <mnt>/.pugmark/: stats, the bucket URL, the
// flags of this mount and the data of failed commits (failed.go).
type rootMetaDir struct{ f *FS }

func (r *rootMetaDir) entries() []child {
	f := r.f
	stats := f.genFile("stats", inoOf("stats"), time.Time{}, false, func(ctx context.Context) ([]byte, error) {
		return []byte(f.statsText()), nil
	})
	return []child{
		stats,
		f.genFile("bucket", inoOf("bucket"), f.start, true, func(ctx context.Context) ([]byte, error) {
			return []byte(f.cfg.BucketURL + "\n"), nil
		}),
		f.genFile("flags", inoOf("flags"), f.start, true, func(ctx context.Context) ([]byte, error) {
			return []byte(f.cfg.Flags + "\n"), nil
		}),
		{name: "failed", mode: syscall.S_IFDIR, ino: inoOf("failed"), ttl: f.ttl, node: func() gofsNode {
			return &failedDirNode{dirNode: dirNode{f: f, ls: &failedDir{f: f}}}
		}},
	}
}

func (r *rootMetaDir) list(ctx context.Context) ([]child, error) { return r.entries(), nil }

func (r *rootMetaDir) find(ctx context.Context, name string) (child, error) {
	return findIn(r.entries(), name)
}

func (r *rootMetaDir) dirAttr(ctx context.Context, out *fuse.Attr) error { return nil }

func findIn(cs []child, name string) (child, error) {
	for _, c := range cs {
		if c.name == name {
			return c, nil
		}
	}
	return child{}, syscall.ENOENT
}

// statsText renders .pugmark/stats for people.
func (f *FS) statsText() string {
	var b strings.Builder
	ls := f.store.Stats()
	fmt.Fprintf(&b, "backend requests: get %d, head %d, put %d, list %d, delete %d\n",
		ls.Gets, ls.Heads, ls.Puts, ls.Lists, ls.Deletes)
	fmt.Fprintf(&b, "backend bytes: read %d, written %d; blobs stored by linking the staged file (no copy) %d\n", ls.BytesRead, ls.BytesWritten, ls.BlobsLinked)
	fmt.Fprintf(&b, "backend retries %d, errors %d\n", ls.Retries, ls.Errors)
	fmt.Fprintf(&b, "descriptors read with unreadable fields %d\n", ls.Damaged)
	// Counted where the store asks, before the mount's scheduler lets a
	// request go: what waited for it counts too (its own line says what
	// it let through at once).
	fmt.Fprintf(&b, "backend requests in flight or waiting for the scheduler: peak %d\n", ls.PeakInFlight)
	fmt.Fprintf(&b, "%s\n", f.cache.Stats())
	fmt.Fprintf(&b, "%s\n", f.blobs.Stats()) // "blob cache <part>: ..." lines
	fmt.Fprintf(&b, "%s\n", f.ra.Stats())
	fmt.Fprintf(&b, "bodies read ahead into the kernel's page cache %d, refused %d\n", f.pages.stored.Load(), f.pages.failed.Load())
	fmt.Fprintf(&b, "%s\n", f.KernelStats())
	ws := f.w.Stats()
	fmt.Fprintf(&b, "commits %d (snapshots %d, descriptors %d), commit errors %d, conflicts %d\n",
		ws.Commits, ws.Snapshots, ws.Descriptors, ws.Errors, ws.Conflicts)
	kept, keptBytes := f.failedStats()
	fmt.Fprintf(&b, "failed commits kept %d (bytes %d) in .pugmark/failed/\n", kept, keptBytes)
	if f.cfg.ExtraStats != nil {
		b.WriteString(f.cfg.ExtraStats())
	}
	return b.String()
}
