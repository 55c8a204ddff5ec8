// Package blobcache serves the bodies of content-addressed blobs
// (objects/sha256:<hex>) to the mounted tree: every byte verified against
// its digest before a caller sees it, decoded per content-encoding (gzip,
// zstd, and the §15 sniffing of lost encodings), cached in memory within a
// byte budget and, optionally, on disk in a directory several processes may
// share. It reads through a Source (a *layout.Store) and knows nothing of
// sessions: the session cache is package cache.
//
// # Files
//
//	cache.go   Cache, Options, Stats: the API, key spaces, the read path
//	verify.go  the verify pass (one SHA-256 over the body, ranged parts in flight,
//	           a writer goroutine for the disk copy), chunks read again
//	chain.go   chunk proofs taken from that one pass, and checking a chunk against them
//	files.go   verified disk copies kept open, read without a copy, pinned (Pin)
//	decode.go  decoding gzip/zstd from verified bytes, spilling large decoded bodies
//	sniff.go   how a descriptor's body is shown; sniffing lost encodings
//	shape.go   remembered facts per digest (sniff result, decoded sizes), persisted on disk
//	memory.go  the memory budget: chunk LRU, reservations, buffer pool
//	stager.go  chunks of a pass held back until the digest matched
//	bad.go     bad-blob tracking: failures answered from memory for a while
//	flight.go  cancellable single flights shared by concurrent callers
//	prefetch.go  Prefetch, Warm: the entry points of read-ahead across files
//	disk.go    the on-disk tier: verified bodies, large decoded bodies, info records
//	kept.go    snapshot and manifest copies for layout.Store (layout.Keeper), written when idle
//	stats.go   Stats for people (.pugmark/stats)
//
// # Locks
//
// LOCK ORDERING: Cache.mu and diskCache.mu are never held together, and
// neither is held across backend or disk I/O. Cache.mu guards the chunk,
// meta, shape, decoded, verified-file and sequence LRUs, the byte
// accounting (memBytes, reserved, spillBytes, closeQ), the pins of the
// verified files, the bad-blob map and the flight maps, including each
// flight's waiters count. diskCache.mu guards the disk
// index and its totals. keptQueue.flushMu is taken before keptQueue.mu
// and before diskCache.mu (a flush writes entries); keptQueue.mu is never
// held across I/O nor with another lock. Counters are atomics and need
// no lock. Files that
// evictions close are queued under Cache.mu and closed by Cache.unlock
// after it is released.
package blobcache
