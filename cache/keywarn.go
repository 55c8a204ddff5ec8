package cache

import (
	"log/slog"
	"sync"
)

// maxWarnedKeys bounds the keys keyWarnings remembers; past it, each
// warning is logged every time again.
const maxWarnedKeys = 4096

// keyWarnings logs a warning about a bucket key once per mount. Listings
// repeat every metadata TTL, and each repeated its lines for the keys it
// skipped: one ls -lR logged a malformed memory key six times (audit 7).
type keyWarnings struct {
	log *slog.Logger

	mu   sync.Mutex      // guards seen
	seen map[string]bool // msg + "\x00" + key
}

// warn logs msg about key, with err, unless it was logged before.
func (w *keyWarnings) warn(msg, key string, err error) {
	k := msg + "\x00" + key
	w.mu.Lock()
	seen := w.seen[k]
	if !seen && len(w.seen) < maxWarnedKeys {
		if w.seen == nil {
			w.seen = make(map[string]bool)
		}
		w.seen[k] = true
	}
	w.mu.Unlock()
	if !seen {
		w.log.Warn(msg, "key", key, "err", err)
	}
}
