// Package layout is the pugmark storage layout (storage-layout.txt, with
// decisions.md for its missing tables) as a Go library over a
// gocloud.dev/blob Bucket. It knows nothing of FUSE or caching.
//
// # The model in one page
//
// A bucket holds four prefixes. objects/sha256:<hex> are blobs: immutable,
// content-addressed, written without preconditions because any two writes
// of one key are identical. sessions/year=…/hour=…/<id>/ holds a session:
// manifest.json (created once with If-None-Match) and snapshots/<rev>.json,
// one file per version, each a zstd JSON array of descriptors — the delta
// committed at that version. Versions are stored reverse-hex
// (FFFFFFFF.json is version 1) so that LIST with max-keys=1 names the
// latest. memories/<namespace>/<rev>.json are shared logs of named records,
// each file the whole namespace at that version. refs/<name> are mutable
// one-line pointers, the only keys ever overwritten.
//
// Every transactional step is one conditional PUT: a commit at version V+1
// is PUT If-None-Match, and losing that race is resolved by the table in
// decisions.md §13.3 (Store.Commit). A lost response is recognised by the
// random transaction ID stored in the snapshot's metadata (§13.2).
//
// The state of a session at version v is the parent chain (each ancestor
// up to the version its child was forked from, fork records dropped) followed
// by snapshots 1..v; the last descriptor for a name wins and a tombstone
// removes it (FullLog, Slots, Lookup). Forks are recorded in the parent
// and materialised into the child in a second, idempotent phase
// (RecordFork, MaterializeFork). Cross-session writes are delivered to the
// target as provisional snapshots keyed by (source-session, source-version)
// (DeliverCrossSession).
//
// # Reading less
//
// Store holds no cache, but a Keeper (Options.Keeper, kept.go) may keep
// the bodies of the write-once objects it reads, snapshots and
// manifests, for later Stores: a kept body is used only when a listing of
// this Store has shown the object with the size and modification time it
// was kept with, and a long range of snapshots lists their stamps beside
// its reads when the copies are there. Options.PutBlindBelow spares small
// blob writes the HEAD that asks whether the blob is already stored.
//
// # Errors
//
// Errors wrap ErrInvalid, ErrNotFound (and ErrSessionNotFound), ErrCorrupt,
// ErrTooLarge, ErrConflict, ErrRetriesExhausted, ErrRefMoved, or a backend
// error, with the key or session in the message. Transient backend errors
// are retried with exponential backoff (Options.Retries).
//
// # Backends
//
// Driver-specific preconditions (If-Match, server-side SHA-256) are applied
// through WriteHooks registered by layout/drivers. The local-directory
// driver is layout/localblob; layout/faultblob injects faults.
package layout
