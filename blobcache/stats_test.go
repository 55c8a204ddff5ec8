package blobcache

import "testing"

func TestStatsString(t *testing.T) {
	s := Stats{Hits: 4, Misses: 0, InlineReads: 2, BackendReads: 3, BytesFetched: 3 << 20,
		VerifyPasses: 1, BytesHashed: 3 << 20, FileReads: 5, MemBytes: 1536 << 10, MemPeak: 2 << 20, DiskEnabled: true, DiskBytes: 100, KeptWrites: 7, KeptHits: 3, Adopted: 2}
	want := "blob cache chunks: hits 4, misses 0 (hit rate 100.0%), disk hits 0 (n/a of misses), inline reads 2\n" +
		"blob cache backend: reads 3, bytes 3145728 (3.0 MiB), in flight 0, read-aheads 0\n" +
		"blob cache verify: passes 1, failures 0, bytes hashed 3145728 (3.0 MiB), verified file reads 5\n" +
		"blob cache memory: bytes 1572864 (1.5 MiB), peak 2097152 (2.0 MiB), evictions 0\n" +
		"blob cache disk: bytes 100, evictions 0, snapshots and manifests kept 7, read back 3, written bodies kept 2"
	if got := s.String(); got != want {
		t.Errorf("Stats:\n got %s\nwant %s", got, want)
	}
	if got, want := (Stats{}).String(), "blob cache chunks: hits 0, misses 0 (hit rate n/a), disk hits 0 (n/a of misses), inline reads 0\n"+
		"blob cache backend: reads 0, bytes 0, in flight 0, read-aheads 0\n"+
		"blob cache verify: passes 0, failures 0, bytes hashed 0, verified file reads 0\n"+
		"blob cache memory: bytes 0, peak 0, evictions 0\n"+
		"blob cache disk: off"; got != want {
		t.Errorf("zero Stats:\n got %s\nwant %s", got, want)
	}
}
