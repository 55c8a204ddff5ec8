package blobcache

import (
	"fmt"
	"strings"

	"github.com/pugmark/pugfs/internal/human"
)

// String renders the counters for people, as .pugmark/stats shows them: a
// few lines, each labelled "blob cache <part>:" and made of "name count"
// pairs, with hit rates and byte counts in binary units beside the exact
// numbers (no trailing newline). fs/metrics.go exports the same fields.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "blob cache chunks: hits %d, misses %d (hit rate %s), disk hits %d (%s of misses), inline reads %d\n",
		s.Hits, s.Misses, human.Rate(s.Hits, s.Hits+s.Misses), s.DiskHits, human.Rate(s.DiskHits, s.Misses), s.InlineReads)
	fmt.Fprintf(&b, "blob cache backend: reads %d, bytes %s, in flight %d, read-aheads %d\n",
		s.BackendReads, human.Count(s.BytesFetched), s.InFlight, s.ReadAheads)
	fmt.Fprintf(&b, "blob cache verify: passes %d, failures %d, bytes hashed %s, verified file reads %d\n",
		s.VerifyPasses, s.VerifyFailures, human.Count(s.BytesHashed), s.FileReads)
	fmt.Fprintf(&b, "blob cache memory: bytes %s, peak %s, evictions %d\n", human.Count(s.MemBytes), human.Count(s.MemPeak), s.Evictions)
	if s.DiskEnabled {
		fmt.Fprintf(&b, "blob cache disk: bytes %s, evictions %d, snapshots and manifests kept %d, read back %d, written bodies kept %d",
			human.Count(s.DiskBytes), s.DiskEvictions, s.KeptWrites, s.KeptHits, s.Adopted)
	} else {
		b.WriteString("blob cache disk: off")
	}
	return b.String()
}
