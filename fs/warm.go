package fs

import (
	"context"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sync/errgroup"
)

// Warming a listing's sizes: the kernel looks up every entry of a listing
// it reads with readdirplus, one entry after another in one request, and a
// lookup needs the file's size. Most sizes are the descriptor's and cost
// nothing; a body with a declared gzip/zstd encoding needs one ranged read
// the first time (its decoded size, remembered afterwards), and so does a
// text body with no encoding under --sniff-encoding (§15, its head). Over
// 10,000 small files that would be 10,000 round trips in a row. warmSizes
// asks for the ones not known yet up front with warmPar in flight, so that
// the lookups find them known.
const (
	// warmPar bounds the size requests in flight per listing.
	warmPar = 16
	// warmMaxSize keeps warming to small bodies: a larger one whose
	// size needs a decode pass is left to its own lookup. A large plain
	// one is warmed: its size needs one small read (a check of its
	// stored length).
	warmMaxSize = 1 << 20
)

// warmSizes learns the sizes of the files of dir, warmPar at a time, and
// returns when they are known or ctx is done. Errors are left for the
// lookups to report.
func (f *FS) warmSizes(ctx context.Context, dir *cache.Dir) {
	var ds []layout.Descriptor
	for _, e := range dir.Files() {
		if d := e.Descriptor; (d.Size <= warmMaxSize || d.ContentEncoding == "") && !f.blobs.SizeKnown(&d) {
			ds = append(ds, d)
		}
	}
	if len(ds) < 2 {
		return
	}
	var g errgroup.Group
	g.SetLimit(warmPar)
	for i := range ds {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			_, _ = f.blobs.Size(ctx, &ds[i]) // the entry's getattr reports a failure
			return nil
		})
	}
	_ = g.Wait()
}
