package fs

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A read-only mount answers OPEN of a regular file with ENOSYS
// (Config.NoOpen, noOpen). The kernel takes that as "opens need no
// server" for the whole connection (fc->no_open): later opens send no
// OPEN and their closes no RELEASE, pages stay cached across opens
// (FOPEN_KEEP_CACHE is implied), and READ arrives without a handle.
// FLUSH is answered ENOSYS too, which the kernel also remembers: a
// read-only mount has nothing to flush (on a writable one FLUSH commits,
// and must never be ENOSYS). A warm grep -r over 10,000 files then costs
// no request per file instead of two (OPEN, RELEASE; FLUSH was already
// gone with FOPEN_NOFLUSH). OPENDIR is answered as before: go-fuse lists
// nothing for a directory whose OPENDIR failed.
//
// What the kernel gives up with it, and how the tree copes:
//
//   - No per-open flags: no FOPEN_DIRECT_IO, no passthrough. The files
//     whose content changes under one name (.pugmark/stats, a session's
//     version, checkpoint and log.jsonl, refs/) were read with
//     DIRECT_IO, each open a fresh snapshot. Here such a file is a
//     snapContent: each attribute request (lookup, getattr) takes a
//     snapshot, and a snapshot that differs from the last gets a new
//     mtime. The kernel drops an inode's cached pages when a reply
//     changes its size or mtime (AUTO_INVAL_DATA, which go-fuse
//     negotiates), before it reads again, and a read after the
//     attribute timeout (0 for these files) asks for the
//     attributes first. Reads serve the snapshot those attributes
//     described, so a reader never sees pages of one content under the
//     size of another. Inode numbers stay what they are on every mount.
//   - Nothing to hand a backing file to: large blobs are read through
//     FUSE's page cache, not passed through to the disk copy
//     (passthrough.go); README "Limits" gives the cost.
//
// Blob-backed files need nothing: their inode numbers already name their
// digest, so their content never changes under one inode.

// noOpen is the node tree of a mount without OPEN (see above).
type noOpen struct{ fuse.RawFileSystem }

func (noOpen) Open(_ <-chan struct{}, _ *fuse.OpenIn, _ *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (noOpen) Flush(_ <-chan struct{}, _ *fuse.FlushIn) fuse.Status { return fuse.ENOSYS }

// snapContent is generated content that changes over time, shown on a
// mount without OPEN: the last snapshot taken, with the time it was
// first seen as its mtime.
type snapContent struct {
	gen func(ctx context.Context) ([]byte, error)
	// at, if set, gives the content's own time as of the last gen (a
	// ref's: refSource): a snapshot's mtime is that time, not when it
	// was first seen, but for one later than the last snapshot's.
	at func() time.Time

	// mu guards the snapshot fields; a leaf lock, never held across gen.
	mu   sync.Mutex
	body []byte
	sum  [32]byte
	mt   time.Time
	has  bool
}

// newSnapContent returns gen as a snapContent; mt is the mtime of the
// first snapshot (zero: the mount's start).
func (f *FS) newSnapContent(gen func(ctx context.Context) ([]byte, error), mt time.Time) *snapContent {
	if mt.IsZero() {
		mt = f.start
	}
	return &snapContent{gen: gen, mt: mt}
}

// size takes a new snapshot (every attribute reply goes through it).
func (s *snapContent) size(ctx context.Context) (int64, error) {
	body, err := s.gen(ctx)
	if err != nil {
		return 0, err
	}
	sum := sha256.Sum256(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.has || sum != s.sum {
		var own time.Time
		if s.at != nil {
			own = s.at()
		}
		switch {
		case s.has:
			// Strictly later than the last: two changes within one clock
			// tick (or a ref's whole second) must still differ for the
			// kernel.
			if own.IsZero() {
				own = time.Now()
			}
			s.mt = later(own, s.mt)
		case !own.IsZero():
			s.mt = own
		}
		s.body, s.sum, s.has = body, sum, true
	}
	return int64(len(s.body)), nil
}

func (s *snapContent) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	s.mu.Lock()
	body, has := s.body, s.has
	s.mu.Unlock()
	if !has {
		if _, err := s.size(ctx); err != nil {
			return 0, err
		}
		return s.readAt(ctx, p, off)
	}
	if off >= int64(len(body)) {
		return 0, nil
	}
	return copy(p, body[off:]), nil
}

func (s *snapContent) mtime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mt
}

func (s *snapContent) immutable() bool { return false }

// later returns t, or just after prev when t is not after it.
func later(t, prev time.Time) time.Time {
	if t.After(prev) {
		return t
	}
	return prev.Add(time.Nanosecond)
}
