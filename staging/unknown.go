package staging

import (
	"context"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// resolveLaterFor bounds how long a Writer keeps asking the bucket about
// a commit whose outcome was unknown.
const resolveLaterFor = 10 * time.Minute

// resolveLater asks the bucket, in the background and for up to
// resolveLaterFor, what became of a commit whose outcome was unknown:
// its close or fsync returned EIO and its files went to the failed
// directory, yet the snapshot may have landed. The answer goes to the log
// (the failed copies of one that landed are what the session holds), and
// a commit that landed makes the cached state of the session stale: it
// is dropped, so the next look shows the version.
func (w *Writer) resolveLater(u *layout.OutcomeUnknownError, ds []layout.Descriptor) {
	names := make([]string, len(ds))
	for i := range ds {
		names[i] = ds[i].Name
	}
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
				w.log.Warn("a commit whose outcome was unknown landed after all: what its close or fsync kept in the failed directory is in the session", "session", u.Session, "version", u.Version, "names", names)
				return
			case err == nil:
				w.log.Info("a commit whose outcome was unknown did not land: what its close or fsync kept in the failed directory is all there is", "session", u.Session, "version", u.Version, "names", names)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}()
}
