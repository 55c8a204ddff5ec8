package cache

import "testing"

func TestStatsString(t *testing.T) {
	s := Stats{Sessions: 3, Loads: 1, Refreshes: 2, Hits: 9, Checks: 3, Evictions: 1, Snaps: 40, EarlyReads: 4, EarlyMisses: 2}
	if got, want := s.String(), "sessions cached 3: loads 1, refreshes 2, hits 9, freshness checks 3 (hit rate 75.0%), hour checks 0, evictions 1, snapshots read 40, read early 4 (not used 2)"; got != want {
		t.Errorf("Stats:\n got %s\nwant %s", got, want)
	}
}
