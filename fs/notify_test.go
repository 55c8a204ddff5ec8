package fs

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// TestNoticeQueue: the names commits changed are all kept until the
// notifier takes them, however many arrive meanwhile, each name once per
// session, sessions in the order they first came: a queue of 1,024
// notices dropped the rest, and a rebased file's pages then stayed until
// the TTL (review 9).
func TestNoticeQueue(t *testing.T) {
	a, b := layout.NewSessionID(time.Unix(1e9, 0)), layout.NewSessionID(time.Unix(2e9, 0))
	var q noticeQueue
	for i := range 5000 {
		q.add(a, []string{fmt.Sprintf("f%d", i%3000)})
		if i%2 == 0 {
			q.add(b, []string{"log", fmt.Sprintf("g%d", i)})
		}
	}
	got := q.take()
	if len(got) != 2 || got[0].id != a || got[1].id != b {
		t.Fatalf("took %d notices, want one for a, then one for b", len(got))
	}
	if len(got[0].names) != 3000 || len(got[1].names) != 2501 {
		t.Errorf("a's names %d (want 3,000), b's %d (want 2,501)", len(got[0].names), len(got[1].names))
	}
	if !slices.Contains(got[1].names, "log") {
		t.Errorf("b's names lack log")
	}
	if again := q.take(); len(again) != 0 {
		t.Errorf("a second take: %d notices, want none", len(again))
	}
}
