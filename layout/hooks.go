package layout

import (
	"fmt"
	"sync"

	"gocloud.dev/blob"
)

// Conditions are the write preconditions that gocloud.dev/blob has no
// portable option for: If-Match compare-and-swap (refs, §9) and a
// server-side SHA-256 check (blobs, §3).
type Conditions struct {
	// IfMatch is the ETag the object must still have; "" for none.
	IfMatch string
	// SHA256 is the digest the backend should verify; zero for none.
	SHA256 Digest
	// Size of the body, when known (-1 otherwise); drivers whose
	// checksum only works for single-part uploads look at it.
	Size int64
}

// A WriteHook applies Conditions to one driver's write request through the
// BeforeWrite As function. It reports which of the conditions it applied;
// a hook that does not recognise the driver returns false for both.
type WriteHook func(as func(any) bool, c Conditions) (ifMatch, sha bool, err error)

var (
	hooksMu sync.RWMutex
	hooks   []WriteHook
)

// RegisterWriteHook adds a driver's hook. Driver adapters (layout/drivers)
// call it from init.
func RegisterWriteHook(h WriteHook) {
	hooksMu.Lock()
	defer hooksMu.Unlock()
	hooks = append(hooks, h)
}

// applied records which conditions a write's BeforeWrite managed to set.
type applied struct{ ifMatch, sha bool }

// conditionalOptions returns wo with a BeforeWrite that applies c through
// the registered hooks. After the write, ap says what was honoured. It
// fails the write when If-Match was asked for and no hook could set it,
// so that a compare-and-swap never silently becomes a plain PUT.
func conditionalOptions(wo blob.WriterOptions, c Conditions, ap *applied) *blob.WriterOptions {
	prev := wo.BeforeWrite
	wo.BeforeWrite = func(as func(any) bool) error {
		if prev != nil {
			if err := prev(as); err != nil {
				return err
			}
		}
		hooksMu.RLock()
		hs := hooks
		hooksMu.RUnlock()
		for _, h := range hs {
			im, sha, err := h(as, c)
			if err != nil {
				return err
			}
			ap.ifMatch = ap.ifMatch || im
			ap.sha = ap.sha || sha
		}
		if c.IfMatch != "" && !ap.ifMatch {
			return fmt.Errorf("%w: backend cannot do If-Match", errNoCAS)
		}
		return nil
	}
	return &wo
}

var errNoCAS = fmt.Errorf("compare-and-swap unsupported")
