package layout

import (
	"crypto/md5"
	"fmt"
	"io"
	"os"
	"sync"

	"gocloud.dev/blob"
)

// Conditions are the write preconditions that gocloud.dev/blob has no
// portable option for: If-Match compare-and-swap (refs, §9) and a
// backend-side check of the body (blobs, §2.2, §3).
type Conditions struct {
	// IfMatch is the version token the object must still have ("" for
	// none): what ReadRef put in Ref.ETag, so the object's ETag, or the
	// token a driver's TokenHook derived (a GCS generation).
	IfMatch string
	// SHA256 is the digest the backend should verify; zero for none.
	SHA256 Digest
	// MD5 returns the MD5 of the body, for backends that check that
	// instead of SHA-256 (GCS, Azure); nil when the writer has none to
	// offer. It is computed on first call (a pass over a staged file),
	// so only the hooks that need it pay for it.
	MD5 func() ([]byte, error)
	// Size of the body, when known (-1 otherwise); drivers whose
	// checksum only works for single-part uploads look at it.
	Size int64
	// File, if set, is a local file holding the whole body, hashed by the
	// caller (SHA256 is its digest). A hook whose driver can publish the
	// file itself instead of the bytes written to it (the local driver
	// links it) sets that up and calls TookFile; the caller then writes
	// nothing and closes the writer.
	File     *os.File
	TookFile func()
}

// A WriteHook applies Conditions to one driver's write request through the
// BeforeWrite As function. It reports which of the conditions it applied:
// ifMatch for the compare-and-swap, sha for a backend-side check of the
// body (SHA-256 or MD5, whichever the backend takes). A hook that does not
// recognise the driver returns false for both.
type WriteHook func(as func(any) bool, c Conditions) (ifMatch, sha bool, err error)

// A TokenHook returns the version token that a driver's WriteHook takes as
// Conditions.IfMatch, from the As function of an object's attributes; ok
// is false when it does not recognise the driver, and the ETag is used.
// GCS needs one: its uploads are conditioned on the object's generation,
// not on its ETag.
type TokenHook func(as func(any) bool) (token string, ok bool)

// A DeleteHook conditions one driver's delete request on a version token
// (as Conditions.IfMatch) through the BeforeDelete As function, and
// reports whether it did; one that does not recognise the driver returns
// false.
type DeleteHook func(as func(any) bool, ifMatch string) (bool, error)

var (
	hooksMu     sync.RWMutex
	hooks       []WriteHook
	tokenHooks  []TokenHook
	deleteHooks []DeleteHook
)

// RegisterDeleteHook adds a driver's delete hook. Driver adapters
// (layout/drivers) call it from init.
func RegisterDeleteHook(h DeleteHook) {
	hooksMu.Lock()
	defer hooksMu.Unlock()
	deleteHooks = append(deleteHooks, h)
}

// conditionalDelete returns delete options whose BeforeDelete conditions
// the delete on token through the registered hooks, failing it with
// errNoCAS when none could, so that a conditional delete never silently
// becomes a plain one.
func conditionalDelete(token string) *blob.DeleteOptions {
	return &blob.DeleteOptions{BeforeDelete: func(as func(any) bool) error {
		hooksMu.RLock()
		hs := deleteHooks
		hooksMu.RUnlock()
		for _, h := range hs {
			ok, err := h(as, token)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
		return fmt.Errorf("%w: backend cannot delete on a condition", errNoCAS)
	}}
}

// RegisterTokenHook adds a driver's token hook. Driver adapters
// (layout/drivers) call it from init.
func RegisterTokenHook(h TokenHook) {
	hooksMu.Lock()
	defer hooksMu.Unlock()
	tokenHooks = append(tokenHooks, h)
}

// casToken is the compare-and-swap token of an object with attributes a.
func casToken(a *blob.Attributes) string {
	hooksMu.RLock()
	hs := tokenHooks
	hooksMu.RUnlock()
	for _, h := range hs {
		if t, ok := h(a.As); ok {
			return t
		}
	}
	return a.ETag
}

// lazyMD5 returns a Conditions.MD5 that hashes what open returns, once:
// retried writes ask again and get the first answer.
func lazyMD5(open func() io.Reader) func() ([]byte, error) {
	var (
		once sync.Once
		sum  []byte
		err  error
	)
	return func() ([]byte, error) {
		once.Do(func() {
			h := md5.New()
			if _, err = io.Copy(h, open()); err == nil {
				sum = h.Sum(nil)
			}
		})
		return sum, err
	}
}

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
