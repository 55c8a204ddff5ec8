package blobcache

import (
	"context"

	"github.com/pugmark/pugfs/layout/schedblob"
)

// blobCall is one in-flight computation shared by every caller that asks
// for the same key while it runs (singleflight, but cancellable: it runs
// under the cache's context, and stops when all its waiters gave up).
type blobCall[V any] struct {
	done    chan struct{}      // closed once val and err are set
	val     V                  // set under Cache.mu before done is closed
	err     error              // likewise
	waiters int                // GUARDED_BY(Cache.mu)
	cancel  context.CancelFunc // stops fn; called when waiters drops to 0
	ctx     context.Context    // fn's context: carries the first caller's speculative mark
}

// blobDo runs fn once for key among concurrent callers, in its own
// goroutine, and waits for its result or for ctx. m is one of the cache's
// flight maps, guarded by c.mu. fn must publish what it learned (LRU,
// metadata) before it returns: the flight leaves m only afterwards, so a
// caller that finds no flight finds the published result.
//
// A flight started by a speculative caller (read-ahead) is speculative
// (schedblob.Inherit); a blocking caller that joins it promotes it, so a
// program never waits for its read behind other read-ahead.
func blobDo[K comparable, V any](c *Cache, m map[K]*blobCall[V], key K, ctx context.Context, fn func(context.Context) (V, error)) (V, error) {
	var zero V
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return zero, errBlobClosed
	}
	call, ok := m[key]
	if ok {
		call.waiters++
		if !schedblob.IsSpeculative(ctx) {
			schedblob.Promote(call.ctx)
		}
	} else {
		fctx, cancel := context.WithCancel(c.ctx)
		fctx = schedblob.Inherit(ctx, fctx)
		call = &blobCall[V]{done: make(chan struct{}), waiters: 1, cancel: cancel, ctx: fctx}
		m[key] = call
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			v, err := fn(fctx)
			c.mu.Lock()
			if m[key] == call {
				delete(m, key)
			}
			call.val, call.err = v, err
			c.mu.Unlock()
			cancel()
			close(call.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.val, call.err
	case <-ctx.Done():
		c.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			// Nobody wants the result any more: stop the work, and let the
			// next caller start afresh rather than join a cancelled flight.
			call.cancel()
			if m[key] == call {
				delete(m, key)
			}
		}
		c.mu.Unlock()
		return zero, ctx.Err()
	}
}
