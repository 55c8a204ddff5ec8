package schedblob

import (
	"context"
	"sync"
)

// A speculative request carries a mark in its context. The mark can be
// promoted: when a program comes to wait for work that started as
// read-ahead (it joins a fetch already under way), the requests of that
// work still queued stop yielding and queue as blocking ones, so the
// program is never served behind speculation.

type speculativeKey struct{}

// specMark is the speculative mark of one piece of work. promoted is
// closed, once, by Promote.
type specMark struct {
	once     sync.Once
	promoted chan struct{}
}

func (m *specMark) isPromoted() bool {
	select {
	case <-m.promoted:
		return true
	default:
		return false
	}
}

func markOf(ctx context.Context) *specMark {
	m, _ := ctx.Value(speculativeKey{}).(*specMark)
	return m
}

// Speculative returns a context whose requests are speculative: work
// nobody is waiting for yet (read-ahead), which yields to blocking
// requests when the scheduler is full. Each call makes a new mark, which
// Promote turns into a blocking one for every request carrying it.
func Speculative(ctx context.Context) context.Context {
	return context.WithValue(ctx, speculativeKey{}, &specMark{promoted: make(chan struct{})})
}

// IsSpeculative reports whether ctx carries a speculative mark that has
// not been promoted.
func IsSpeculative(ctx context.Context) bool {
	m := markOf(ctx)
	return m != nil && !m.isPromoted()
}

// Promote makes the work of ctx's speculative mark blocking: its requests
// still waiting for a slot move to the blocking queue, and later ones
// queue there. A context without a mark is left alone.
func Promote(ctx context.Context) {
	if m := markOf(ctx); m != nil {
		m.once.Do(func() { close(m.promoted) })
	}
}

// Inherit returns to carrying the speculative mark of from, if it has
// one: work done on behalf of a speculative caller under a context of its
// own (a shared fetch running under a cache's context) stays speculative,
// and a Promote of either context promotes both.
func Inherit(from, to context.Context) context.Context {
	if m := markOf(from); m != nil {
		return context.WithValue(to, speculativeKey{}, m)
	}
	return to
}
