package fs

import (
	"fmt"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestListAheadWindow: the listing read-ahead keeps listAheadN bodies
// ahead of the reader, fewer when their sizes pass the byte budget, and
// never asks again for what it read ahead already.
func TestListAheadWindow(t *testing.T) {
	items := func(n int, size int64) []aheadItem {
		out := make([]aheadItem, n)
		for i := range out {
			out[i] = aheadItem{name: fmt.Sprintf("f%03d", i), d: layout.Descriptor{Size: size}}
		}
		return out
	}
	tests := []struct {
		name     string
		list     []aheadItem
		next     int
		i        int
		budget   int64
		from, to int
	}{
		{"first read, small bodies", items(100, 10), 0, 0, 1 << 20, 1, 1 + listAheadN},
		{"short listing", items(5, 10), 0, 0, 1 << 20, 1, 5},
		{"budget holds four", items(100, 1<<20), 0, 0, 4 << 20, 1, 5},
		{"budget smaller than one body", items(100, 8<<20), 0, 0, 4 << 20, 1, 1},
		{"next read: only the new end", items(100, 10), 1 + listAheadN, 1, 1 << 20, 1 + listAheadN, 2 + listAheadN},
		{"last item", items(10, 10), 10, 9, 1 << 20, 10, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &listAhead{list: tt.list, next: tt.next}
			a.mu.Lock()
			from, to := a.windowLocked(tt.i, tt.budget)
			a.mu.Unlock()
			if from != tt.from || to != tt.to {
				t.Errorf("window after item %d = [%d, %d), want [%d, %d)", tt.i, from, to, tt.from, tt.to)
			}
		})
	}
}
