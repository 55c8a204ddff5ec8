// Package goroutines tells a test what the goroutines of its own process
// are doing, from a dump of all their stacks: how it knows that calls
// have reached a lock or a channel and are parked there, which nothing
// else tells it.
package goroutines

import (
	"runtime"
	"strings"
)

// Waiting counts the goroutines whose wait reason starts with state (as
// in a goroutine dump: "[select", "[sync.Mutex.Lock") and whose stack has
// a function whose name contains fn.
func Waiting(state, fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(head, state) && strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
