package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
)

// TestProbeRetries: a bucket that answers no LIST fails the probe after
// its retries, says so once while retrying (a refused endpoint must not
// keep a mount silent), and its error reads without gocloud's prefixes.
func TestProbeRetries(t *testing.T) {
	ctx := context.Background()
	b, _, err := openBucket(ctx, "fault+mem://?fault_ops=list&fault_error_rate=1", false, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var logged syncbuf.Buffer
	err = probe(ctx, b, logged.Logger(slog.LevelInfo))
	if err == nil {
		t.Fatal("probe of a bucket whose every LIST fails succeeded")
	}
	if n := logged.Count("bucket not answering; retrying"); n != 1 {
		t.Errorf("logged the retry %d times, want once:\n%s", n, logged.String())
	}
	if text := oneLine(err); strings.Contains(text, "code=") {
		t.Errorf("error text keeps gocloud's prefix: %s", text)
	}
}
