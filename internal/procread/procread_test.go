package procread

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// waitAbandoned polls until n reads are counted as blocked.
func waitAbandoned(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for abandoned.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads counted as blocked, want %d", abandoned.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// fifo makes a named pipe: opening it for reading blocks until a writer
// comes, as a read of a stuck process's cmdline blocks.
func fifo(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// unblock lets the read blocked on fifo p end.
func unblock(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestReadFile: a read that ends in time gives the bytes; one that
// blocks gives ErrTimeout after the deadline, and is uncounted when it
// ends; past MaxAbandoned blocked reads, ReadFile fails at once.
func TestReadFile(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(plain, time.Minute); err != nil || string(b) != "bytes" {
		t.Fatalf("ReadFile of a plain file = %q, %v", b, err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing"), time.Minute); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file = %v, want ErrNotExist", err)
	}

	var stuck []string
	for i := range MaxAbandoned {
		p := fifo(t, "stuck"+strconv.Itoa(i))
		stuck = append(stuck, p)
		if _, err := ReadFile(p, time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("ReadFile of a blocked fifo = %v, want ErrTimeout", err)
		}
	}
	waitAbandoned(t, MaxAbandoned)
	// Full: even a file that would read at once is refused, and nothing
	// more is left behind.
	if _, err := ReadFile(plain, time.Minute); !errors.Is(err, ErrTimeout) {
		t.Fatalf("ReadFile with %d reads blocked = %v, want ErrTimeout", MaxAbandoned, err)
	}
	for _, p := range stuck {
		unblock(t, p)
	}
	waitAbandoned(t, 0)
	if b, err := ReadFile(plain, time.Minute); err != nil || string(b) != "bytes" {
		t.Fatalf("ReadFile once the blocked reads ended = %q, %v", b, err)
	}
}
