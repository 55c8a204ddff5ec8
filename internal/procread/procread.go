// Package procread reads files of /proc that can block: a process's
// cmdline, environ and maps take that process's memory-map lock, and a
// process stuck in a page fault on a FUSE mount whose server is gone (or
// hung) holds it for as long as the request waits. A scan of every
// process that read them in line hung with it: `ps` did, and so did
// pugfs's own scans and the tests' (CI timed out at an hour). ReadFile
// gives up after a deadline instead; the read it abandons ends when the
// process does, or never, and costs one goroutine and one descriptor.
package procread

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// ErrTimeout is returned by ReadFile for a read that did not end within
// its deadline.
var ErrTimeout = errors.New("the read of a /proc file did not end in time")

// MaxAbandoned bounds the reads left blocked at once: past it, ReadFile
// fails at once rather than leave more goroutines behind (a host with
// thousands of stuck processes).
const MaxAbandoned = 64

// abandoned counts the reads that timed out and have not ended since.
var abandoned atomic.Int64

// ReadFile is os.ReadFile of name that returns ErrTimeout when the read
// takes longer than within.
func ReadFile(name string, within time.Duration) ([]byte, error) {
	if abandoned.Load() >= MaxAbandoned {
		return nil, fmt.Errorf("read %s: %w (%d earlier reads are still blocked)", name, ErrTimeout, MaxAbandoned)
	}
	type result struct {
		b   []byte
		err error
	}
	// state is running until the read ends (done) or its caller gives it
	// up (abandoned), whichever comes first: an abandoned read uncounts
	// itself when it ends.
	const (
		running int32 = iota
		done
		gaveUp
	)
	var state atomic.Int32
	out := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(name)
		if !state.CompareAndSwap(running, done) {
			abandoned.Add(-1)
		}
		out <- result{b, err}
	}()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case r := <-out:
		return r.b, r.err
	case <-timer.C:
	}
	if !state.CompareAndSwap(running, gaveUp) {
		r := <-out // it ended just now
		return r.b, r.err
	}
	abandoned.Add(1)
	return nil, fmt.Errorf("read %s: %w after %v", name, ErrTimeout, within)
}
