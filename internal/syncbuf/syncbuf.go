// Package syncbuf is a bytes.Buffer that many goroutines may write to at
// once: the sink of a logger under test, or of a child process's output.
package syncbuf

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Buffer collects what is written to it; safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many times sub occurs in what was written.
func (b *Buffer) Count(sub string) int { return strings.Count(b.String(), sub) }

// Lines returns what was written, split into lines, without a trailing
// empty one.
func (b *Buffer) Lines() []string {
	s := strings.TrimSuffix(b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Logger returns a text logger of level and above that writes to b.
func (b *Buffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level}))
}
