package cache

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// readThrough returns lru's entry for k, or loads it with mu not held and
// keeps it. For what never changes (manifests, snapshot metadata, memory
// files, trees at old versions): two misses at once both load, and the
// second Add replaces an equal value. mu guards lru; load does I/O, so
// it must not run under mu.
func readThrough[K comparable, V any](mu *sync.Mutex, lru *simplelru.LRU[K, V], k K, load func() (V, error)) (V, error) {
	mu.Lock()
	v, ok := lru.Get(k)
	mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	mu.Lock()
	lru.Add(k, v)
	mu.Unlock()
	return v, nil
}

// memo is a value read from the bucket at a time, for the metadata TTL.
type memo[T any] struct {
	v  T
	at time.Time
	ok bool
}

// readFresh returns the memo get returns while it is younger than the
// TTL, else loads the value and hands set the new memo, timed from before
// the load (a change made while it ran is not taken for seen). get and
// set run under v.mu; load without it. A failed load keeps nothing.
func readFresh[T any](v *Views, get func() memo[T], set func(memo[T]), load func() (T, error)) (T, error) {
	v.mu.Lock()
	if m := get(); m.ok && v.fresh(m.at) {
		v.mu.Unlock()
		return m.v, nil
	}
	v.mu.Unlock()
	at := v.now()
	r, err := load()
	if err != nil {
		return r, err
	}
	v.mu.Lock()
	set(memo[T]{r, at, true})
	v.mu.Unlock()
	return r, nil
}

// flights runs one load per key at a time: a caller asking for a key
// whose load is in flight waits for that load instead of starting its
// own. The load runs without its starter's cancellation (others may be
// waiting on it; each request has its own deadline), and each caller
// stops waiting when its own context ends. The zero value is ready.
type flights[K comparable, V any] struct {
	mu sync.Mutex // guards m
	m  map[K]*flight[V]
}

type flight[V any] struct {
	done chan struct{} // closed when v and err are set
	v    V
	err  error
}

// do returns the result of the load of k in flight, starting load if
// there is none.
func (f *flights[K, V]) do(ctx context.Context, k K, load func(context.Context) (V, error)) (V, error) {
	f.mu.Lock()
	fl, ok := f.m[k]
	if !ok {
		if f.m == nil {
			f.m = map[K]*flight[V]{}
		}
		fl = &flight[V]{done: make(chan struct{})}
		f.m[k] = fl
		go func() {
			fl.v, fl.err = load(context.WithoutCancel(ctx))
			f.mu.Lock()
			delete(f.m, k)
			f.mu.Unlock()
			close(fl.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-fl.done:
		return fl.v, fl.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}
