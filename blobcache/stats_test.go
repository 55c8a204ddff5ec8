package blobcache

import "testing"

func TestStatsString(t *testing.T) {
	b := Stats{Hits: 4, Misses: 0, InlineReads: 2, BackendReads: 3, BytesFetched: 3 << 20,
		VerifyPasses: 1, MemBytes: 1536 << 10, MemPeak: 2 << 20, DiskEnabled: true, DiskBytes: 100}
	want := "chunks: hits 4, misses 0 (hit rate 100.0%), disk hits 0 (n/a of misses), inline reads 2\n" +
		"backend: reads 3 (3.0 MiB), in flight 0, read-aheads 0; verify passes 1, failures 0\n" +
		"memory: 1.5 MiB (peak 2.0 MiB), evictions 0\n" +
		"disk: 100 B, evictions 0"
	if got := b.String(); got != want {
		t.Errorf("Stats:\n got %s\nwant %s", got, want)
	}
	if got := (Stats{}).String(); got != "chunks: hits 0, misses 0 (hit rate n/a), disk hits 0 (n/a of misses), inline reads 0\n"+
		"backend: reads 0 (0 B), in flight 0, read-aheads 0; verify passes 0, failures 0\nmemory: 0 B (peak 0 B), evictions 0\ndisk: off" {
		t.Errorf("zero Stats:\n%s", got)
	}
}
