package cache

import (
	"fmt"

	"github.com/pugmark/pugfs/internal/human"
)

// String renders the session cache's counters on one line, with the share
// of State calls answered without asking the bucket.
func (s Stats) String() string {
	return fmt.Sprintf("sessions cached %d: loads %d, refreshes %d, hits %d, freshness checks %d (hit rate %s), hour checks %d, evictions %d, snapshots read %d, read early %d (not used %d)",
		s.Sessions, s.Loads, s.Refreshes, s.Hits, s.Checks, human.Rate(s.Hits, s.Hits+s.Checks), s.HourChecks, s.Evictions, s.Snaps, s.EarlyReads, s.EarlyMisses)
}
