package staging

import (
	"context"
	"fmt"
	"io"
	"math"
	"syscall"

	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sys/unix"
)

// Ingest stores what r yields as a blob (§3.2: hashed as it streams,
// spilled to the staging directory) and commits it as file name of a
// session, as one change (Queue), with o's type and encoding (the
// source's). source names r in errors and logs; size is what r is
// expected to yield (-1 unknown): a source the staging directory has no
// room for is ENOSPC before a byte is read, where the spill filled the
// disk for everyone first (audit 14: a sparse file of 1 TiB costs its
// owner nothing); ingestions under way count against the room with
// their sizes. mode, unless nil, is a local source's permission bits,
// which the file keeps as cp keeps them under the usual umask (022: no
// write bits for others): a source its owner kept 0600 became 0644 for
// every user of a shared mount (audit 14).
func (w *Writer) Ingest(ctx context.Context, id layout.SessionID, name, source string, r io.Reader, size int64, mode *uint32, o layout.BlobOptions) (layout.Descriptor, error) {
	if err := layout.CheckUTF8(name); err != nil {
		return layout.Descriptor{}, err // before the upload, not after
	}
	res, err := w.reserveStaging(size)
	if err != nil {
		return layout.Descriptor{}, fmt.Errorf("ingest %s: %w", source, err)
	}
	defer res.release()
	r = res.counting(r)
	d, err := w.store.IngestReader(ctx, source, r, o, w.cfg.StagingDir)
	if err != nil {
		return d, err
	}
	d.Name = name
	if mode != nil {
		if m := *mode & layout.KeptModeBits &^ 0o022; m != layout.DefaultFileMode {
			d.Metadata = map[string]string{layout.MetaPosixMode: layout.FormatPosixMode(m)}
		}
	}
	return d, w.Queue(ctx, id, []layout.Descriptor{d})
}

// ingestReserve is the room an ingestion leaves on the staging directory's
// file system: others' writes stage there too.
const ingestReserve = 64 << 20

// reserveStaging takes n bytes of the staging directory's room for an
// ingestion: ENOSPC unless they are free beside what the ingestions
// under way still have to stage (two of them each passed the check
// against the same free space: review 12). What the ingestion has read
// is on the disk, in its free space already, and no longer reserved
// (counting): counted twice, a second ingestion that fit was ENOSPC
// (review 13).
func (w *Writer) reserveStaging(n int64) (*stagingRoom, error) {
	if n < 0 {
		return &stagingRoom{w: w}, nil
	}
	w.ingestMu.Lock()
	defer w.ingestMu.Unlock()
	if err := roomFor(w.cfg.StagingDir, n+w.ingesting); err != nil {
		// The cache's copies may hold it (audit 37): asked for all of
		// it, what was free already counted again as a margin.
		if !roomFrom(w.blobs, n+w.ingesting+ingestReserve) {
			return nil, err
		}
		if err := roomFor(w.cfg.StagingDir, n+w.ingesting); err != nil {
			return nil, err
		}
	}
	w.ingesting += n
	return &stagingRoom{w: w, left: n}, nil
}

// stagingRoom is an ingestion's reservation (reserveStaging).
type stagingRoom struct {
	w    *Writer
	left int64 // GUARDED_BY(w.ingestMu): reserved and not yet read
}

// take gives back n bytes read: they are staged now.
func (r *stagingRoom) take(n int64) {
	r.w.ingestMu.Lock()
	n = min(n, r.left)
	r.left -= n
	r.w.ingesting -= n
	r.w.ingestMu.Unlock()
}

// release gives back what is left when the ingestion ends.
func (r *stagingRoom) release() { r.take(math.MaxInt64) }

// counting returns rd, taking what is read of it off the reservation.
func (r *stagingRoom) counting(rd io.Reader) io.Reader {
	return readFunc(func(p []byte) (int, error) {
		n, err := rd.Read(p)
		r.take(int64(n))
		return n, err
	})
}

// readFunc is an io.Reader of a function.
type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// roomFor returns ENOSPC unless dir's file system has n bytes free for an
// unprivileged writer, and ingestReserve beyond (n < 0: not known, not
// checked; a statfs that fails checks nothing either).
func roomFor(dir string, n int64) error {
	if n < 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil
	}
	if free := int64(st.Bavail) * st.Frsize; n+ingestReserve > free {
		return fmt.Errorf("%d bytes to stage, %d free in %s: %w", n, free, dir, syscall.ENOSPC)
	}
	return nil
}
