package blobcache

import (
	"runtime"
	"strings"
)

// goroutinesWaiting counts the goroutines whose wait reason starts with
// state (as in a goroutine dump: "[select", "[sync.Mutex.Lock") and
// whose stack has a function whose name contains fn.
func goroutinesWaiting(state, fn string) int {
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
