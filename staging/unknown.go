package staging

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// resolveLaterFor bounds how long a Writer keeps asking the bucket about
// a commit whose outcome was unknown.
const resolveLaterFor = 10 * time.Minute

// unknownOutcome is what a Writer knows of a commit whose outcome was
// unknown (Writer.unknown).
type unknownOutcome struct {
	// landed is set once the bucket said the commit landed.
	landed bool
	// copies are the failed directory's copies of its files, kept by
	// their releases (keepUnknownLocked) before the answer came.
	copies []string
}

// resolveLater asks the bucket, in the background and for up to
// resolveLaterFor, what became of a commit whose outcome was unknown:
// its close or fsync returned EIO and its files went to the failed
// directory, yet the snapshot may have landed. The answer goes to the
// log. A commit that landed makes the cached state of the session stale:
// it is dropped, so the next look shows the version. Its copies in the
// failed directory are removed, as those of a commit that landed at once
// are never made: the session holds those bytes, and a copy left there
// says "not committed" to whoever puts it back (a second time).
func (w *Writer) resolveLater(u *layout.OutcomeUnknownError, ds []layout.Descriptor) {
	names := make([]string, len(ds))
	for i := range ds {
		names[i] = ds[i].Name
	}
	o := &unknownOutcome{}
	w.mu.Lock()
	w.unknown[u.TransactionID] = o
	w.mu.Unlock()
	w.later.Add(1)
	go func() {
		defer w.later.Done()
		ctx, cancel := context.WithTimeout(w.laterCtx, resolveLaterFor)
		defer cancel()
		for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
			_, landed, err := w.store.ResolveCommit(ctx, u)
			switch {
			case err == nil && landed:
				w.cache.Invalidate(u.Session)
				w.mu.Lock()
				o.landed = true
				copies := o.copies
				o.copies = nil
				w.mu.Unlock()
				for _, c := range copies {
					if err := os.Remove(c); err != nil && !errors.Is(err, fs.ErrNotExist) {
						w.log.Warn("could not remove the copy of a file its commit holds", "path", c, "err", err)
					}
				}
				w.log.Warn("a commit whose outcome was unknown landed after all: its files are in the session, and their copies in the failed directory were removed", "session", u.Session, "version", u.Version, "names", names, "removed", copies)
				return
			case err == nil:
				w.forgetUnknown(u.TransactionID)
				w.log.Info("a commit whose outcome was unknown did not land: what its close or fsync kept in the failed directory is all there is", "session", u.Session, "version", u.Version, "names", names)
				return
			}
			select {
			case <-ctx.Done():
				w.forgetUnknown(u.TransactionID)
				return
			case <-time.After(delay):
			}
		}
	}()
}

// forgetUnknown drops the record of a commit whose outcome is settled as
// not landed, or will not be: its copies stay.
func (w *Writer) forgetUnknown(txn uint64) {
	w.mu.Lock()
	delete(w.unknown, txn)
	w.mu.Unlock()
}

// keepUnknownLocked keeps the bytes of s, whose commit's outcome was
// unknown (u), in the failed directory, unless the bucket has said the
// commit landed: the session holds them then. A copy kept while the
// answer is awaited is removed if it comes back "landed". Caller holds
// w.mu.
func (w *Writer) keepUnknownLocked(id layout.SessionID, s *File, u *layout.OutcomeUnknownError) {
	o := w.unknown[u.TransactionID]
	if o != nil && o.landed {
		w.log.Info("commit outcome was unknown and the bucket has since said it landed: nothing to keep", "session", id, "name", s.name, "version", u.Version)
		return
	}
	dst := w.salvageLocked(id, s, "commit outcome unknown (the bucket did not answer whether it landed: if it did, a later listing shows the file, and this copy is removed); staged data kept")
	if o != nil && dst != "" {
		o.copies = append(o.copies, dst)
	}
}
