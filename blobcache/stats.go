package blobcache

import (
	"fmt"
	"strings"

	"github.com/pugmark/pugfs/internal/human"
)

// String renders the cache's counters for people, a few lines with hit
// rates and sizes (no trailing newline). Every field's value stays
// available as a struct field; fs/metrics.go exports them.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chunks: hits %d, misses %d (hit rate %s), disk hits %d (%s of misses), inline reads %d\n",
		s.Hits, s.Misses, human.Rate(s.Hits, s.Hits+s.Misses), s.DiskHits, human.Rate(s.DiskHits, s.Misses), s.InlineReads)
	fmt.Fprintf(&b, "backend: reads %d (%s), in flight %d, read-aheads %d; verify passes %d, failures %d\n",
		s.BackendReads, human.Bytes(s.BytesFetched), s.InFlight, s.ReadAheads, s.VerifyPasses, s.VerifyFailures)
	fmt.Fprintf(&b, "memory: %s (peak %s), evictions %d\n", human.Bytes(s.MemBytes), human.Bytes(s.MemPeak), s.Evictions)
	if s.DiskEnabled {
		fmt.Fprintf(&b, "disk: %s, evictions %d", human.Bytes(s.DiskBytes), s.DiskEvictions)
	} else {
		b.WriteString("disk: off")
	}
	return b.String()
}
