package cache

import (
	"fmt"
	"strings"
)

// String renders the session cache's counters on one line, with the share
// of State calls answered without asking the bucket.
func (s Stats) String() string {
	return fmt.Sprintf("sessions cached %d: loads %d, refreshes %d, hits %d, freshness checks %d (hit rate %s), evictions %d, snapshots read %d",
		s.Sessions, s.Loads, s.Refreshes, s.Hits, s.Checks, rate(s.Hits, s.Hits+s.Checks), s.Evictions, s.Snaps)
}

// String renders the blob cache's counters for people, a few lines with
// hit rates and sizes (no trailing newline). Every field's value stays
// available as a struct field; fs/metrics.go exports them.
func (s BlobStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chunks: hits %d, misses %d (hit rate %s), disk hits %d (%s of misses), inline reads %d\n",
		s.Hits, s.Misses, rate(s.Hits, s.Hits+s.Misses), s.DiskHits, rate(s.DiskHits, s.Misses), s.InlineReads)
	fmt.Fprintf(&b, "backend: reads %d (%s), in flight %d, read-aheads %d; verify passes %d, failures %d\n",
		s.BackendReads, size(s.BytesFetched), s.InFlight, s.ReadAheads, s.VerifyPasses, s.VerifyFailures)
	fmt.Fprintf(&b, "memory: %s (peak %s), evictions %d\n", size(s.MemBytes), size(s.MemPeak), s.Evictions)
	if s.DiskEnabled {
		fmt.Fprintf(&b, "disk: %s, evictions %d", size(s.DiskBytes), s.DiskEvictions)
	} else {
		b.WriteString("disk: off")
	}
	return b.String()
}

// rate is n/of as a percentage, "n/a" when of is 0.
func rate(n, of int64) string {
	if of <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// size renders a byte count with a binary unit.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
