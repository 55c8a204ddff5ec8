package syncbuf

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
)

// TestBuffer: writers at once lose nothing (run with -race), and Lines,
// Count and Logger read back what was written.
func TestBuffer(t *testing.T) {
	var b Buffer
	if got := b.Lines(); got != nil {
		t.Fatalf("Lines of nothing = %q", got)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	if n := len(b.Lines()); n != 8 || b.Count("line ") != 8 {
		t.Fatalf("%d lines, %d counted, want 8: %q", n, b.Count("line "), b.String())
	}
	var l Buffer
	l.Logger(slog.LevelWarn).Info("quiet")
	l.Logger(slog.LevelWarn).Warn("loud", "k", "v")
	if got := l.Lines(); len(got) != 1 || !slices.ContainsFunc(got, func(s string) bool { return s[len(s)-len("msg=loud k=v"):] == "msg=loud k=v" }) {
		t.Fatalf("logged %q, want the warning alone", got)
	}
}
