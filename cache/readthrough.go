package cache

import (
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
