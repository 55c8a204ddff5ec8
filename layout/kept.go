package layout

import (
	"context"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
)

// Kept objects. Snapshots, manifests and memory versions are written
// once, with If-None-Match (§13.1), and never change, so a body read once could
// serve every later mount of the bucket. What keeps that safe is the
// listing: a kept body is used only when a listing of this Store showed
// the object with the stamp (size and modification time) it was kept
// with. The freshness pass of a mount lists every hour partition anyway,
// and one such LIST names each session's manifest and snapshots with
// their stamps, so a fresh mount with the cache directory of an earlier
// one loads the sessions it lists without a GET; a bucket emptied and
// written again (the same session IDs, other content) shows other stamps,
// and its objects are read again.

// keptListMin is the longest range of snapshots ReadSnapshotRange reads
// without listing their stamps first (a session of up to 64 versions is
// loaded in one round trip of GETs; the LIST would add one).
const keptListMin = 64

// Stamp identifies one stored state of an object as both a listing and a
// read report it: its size and its modification time in whole seconds (S3
// gives a read's time to the second and a listing's to the millisecond).
type Stamp struct {
	Size int64
	Mod  int64 // Unix seconds
}

// stampOf returns the stamp of an object of size bytes modified at mod.
func stampOf(size int64, mod time.Time) Stamp { return Stamp{Size: size, Mod: mod.Unix()} }

// Keeper keeps the bodies of write-once objects (Options.Keeper). Both
// methods are best effort: a body not kept is read from the bucket.
type Keeper interface {
	// Kept returns the body kept for key under stamp st.
	Kept(key string, st Stamp) ([]byte, bool)
	// Keep offers a body just read from key, stored with stamp st.
	Keep(key string, st Stamp, body []byte)
	// Has reports whether a copy of key is kept, whatever its stamp: a
	// hint that listing the stamps of a session's snapshots pays.
	Has(key string) bool
}

// maxStamps bounds the stamps a Store remembers from its listings (some
// 50 bytes each: 12 MiB at the bound, two per session of a bucket of
// 100,000 one-snapshot sessions). Past it they are forgotten, and the
// objects they vouched for are read from the bucket again until the next
// listing.
const maxStamps = 1 << 18

// stampKey names a write-once object of a session: snapshot v, or the
// manifest (v 0; versions start at 1).
type stampKey struct {
	id SessionID
	v  uint32
}

// stamps is what this Store's listings showed of write-once objects.
type stamps struct {
	mu sync.Mutex
	m  map[stampKey]Stamp // GUARDED_BY(mu)
	// mem holds the memory namespace versions, by key (GUARDED_BY(mu)):
	// only the latest of each namespace is noted, so there are few.
	mem map[string]Stamp
}

// noteStamp records the stamp a listing showed for object o of session
// id (version v; 0 for the manifest): what vouches for a Keeper's copy,
// and for what a cache learnt from that object before (ListedStamp).
func (s *Store) noteStamp(id SessionID, v uint32, o *blob.ListObject) {
	noteIn(&s.stamps.mu, &s.stamps.m, stampKey{id, v}, o)
}

// ListedStamp returns the stamp the last listing of this Store that
// showed snapshot v of session id (0: its manifest) gave it. A fact
// learnt from an object, kept with its stamp, holds while the listings
// show the same stamp: a bucket emptied and written again with the same
// session IDs shows others. ok is false when no listing showed it (or
// its stamp was dropped with the bound, maxStamps).
func (s *Store) ListedStamp(id SessionID, v uint32) (Stamp, bool) {
	return s.listedStamp(id, v)
}

// noteMemoryStamp records the stamp a listing showed for the memory
// version file o. A no-op without a Keeper.
func (s *Store) noteMemoryStamp(o *blob.ListObject) {
	if s.opts.Keeper != nil {
		noteIn(&s.stamps.mu, &s.stamps.mem, o.Key, o)
	}
}

// noteIn sets (*m)[k] to o's stamp under mu, starting the map afresh
// when it is missing or holds maxStamps.
func noteIn[K comparable](mu *sync.Mutex, m *map[K]Stamp, k K, o *blob.ListObject) {
	mu.Lock()
	defer mu.Unlock()
	if *m == nil || len(*m) >= maxStamps {
		*m = make(map[K]Stamp)
	}
	(*m)[k] = stampOf(o.Size, o.ModTime)
}

// listedMemoryStamp returns the stamp a listing showed for the memory
// version file key.
func (s *Store) listedMemoryStamp(key string) (Stamp, bool) {
	s.stamps.mu.Lock()
	defer s.stamps.mu.Unlock()
	st, ok := s.stamps.mem[key]
	return st, ok
}

// listedStamp returns the stamp a listing showed for the object.
func (s *Store) listedStamp(id SessionID, v uint32) (Stamp, bool) {
	s.stamps.mu.Lock()
	defer s.stamps.mu.Unlock()
	st, ok := s.stamps.m[stampKey{id, v}]
	return st, ok
}

// readOnce returns the body of the write-once object key: the Keeper's
// copy when a listing vouched for it (listed returns the stamp the
// listing showed), else a GET. keep, called once the body decoded, offers
// a body read from the bucket to the Keeper (a body that does not decode
// is not kept: it may be read again after a repair).
func (s *Store) readOnce(ctx context.Context, key string, listed func() (Stamp, bool), max int64) (body []byte, keep func(), err error) {
	k := s.opts.Keeper
	if k == nil {
		body, err = s.getAll(ctx, key, max)
		return body, func() {}, err
	}
	if st, ok := listed(); ok {
		if body, ok := k.Kept(key, st); ok {
			s.st.kept.Add(1)
			return body, func() {}, nil
		}
	}
	body, st, err := s.getStamped(ctx, key, max)
	if err != nil {
		return nil, nil, err
	}
	return body, func() { k.Keep(key, st, body) }, nil
}

// KeptSession reports whether the Keeper holds a copy of id's manifest:
// an earlier mount read the session, so that the listing that vouches
// for the copies is worth waiting for before reading anything of it.
func (s *Store) KeptSession(id SessionID) bool {
	key, err := ManifestKey(id)
	return err == nil && s.opts.Keeper != nil && s.opts.Keeper.Has(key)
}

// stampListing is the progress of listSnapshotStamps for one range of
// reads: the listing goes from the newest version down.
type stampListing struct {
	mu      sync.Mutex
	low     uint64        // GUARDED_BY(mu): versions >= low are listed
	done    bool          // GUARDED_BY(mu): the listing ended (done, failed, cancelled)
	last    time.Time     // GUARDED_BY(mu): when it started or last moved
	changed chan struct{} // GUARDED_BY(mu): closed (and replaced) when low or done moves
}

// keptListPatience is how long a read waits for a listing that does not
// move before it reads from the bucket without it: a LIST that hangs or
// retries must not hold up reads that need no LIST. A var for tests.
var keptListPatience = 2 * time.Second

// keptListing starts listing the stamps of id's snapshots from..to when
// the range is long and the Keeper holds copies of its ends (an earlier
// mount read the session), and returns its progress; nil otherwise, when
// the LIST would only add requests to the reads.
func (s *Store) keptListing(ctx context.Context, id SessionID, from, to uint32) *stampListing {
	k := s.opts.Keeper
	if k == nil || uint64(to)-uint64(from)+1 <= keptListMin {
		return nil
	}
	kf, err1 := SnapshotKey(id, from)
	kt, err2 := SnapshotKey(id, to)
	if err1 != nil || err2 != nil || (!k.Has(kf) && !k.Has(kt)) {
		return nil
	}
	lst := &stampListing{low: uint64(to) + 1, last: time.Now(), changed: make(chan struct{})}
	go s.listSnapshotStamps(ctx, id, from, lst)
	return lst
}

// advance records that versions >= low are listed, or that the listing
// ended.
func (l *stampListing) advance(low uint64, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if low < l.low {
		l.low = low
	}
	l.done = l.done || done
	l.last = time.Now()
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns once version v is listed, the listing ended, or it has
// not moved for keptListPatience; a nil listing never waits.
func (l *stampListing) wait(ctx context.Context, v uint32) error {
	if l == nil {
		return nil
	}
	for {
		l.mu.Lock()
		ok, ch, idle := l.done || l.low <= uint64(v), l.changed, time.Since(l.last)
		l.mu.Unlock()
		if ok || idle >= keptListPatience {
			return nil
		}
		t := time.NewTimer(keptListPatience - idle)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// sessionObject returns the listed stamp of session id's snapshot v (the
// manifest for v 0), for readOnce.
func (s *Store) sessionObject(id SessionID, v uint32) func() (Stamp, bool) {
	return func() (Stamp, bool) { return s.listedStamp(id, v) }
}

// listSnapshotStamps lists the snapshots of id, newest first, noting
// their stamps, down to version from (or until ctx ends), and reports its
// progress to lst. A failed page ends it: the reads it would have
// vouched for go to the bucket.
func (s *Store) listSnapshotStamps(ctx context.Context, id SessionID, from uint32, lst *stampListing) {
	defer lst.advance(0, true)
	prefix, err := SnapshotsPrefix(id)
	if err != nil {
		return
	}
	token := blob.FirstPageToken
	for len(token) > 0 && ctx.Err() == nil {
		page, next, err := s.listPage(ctx, nil, prefix, "", token)
		if err != nil {
			return
		}
		low := uint64(0)
		for _, o := range page {
			v, err := ParseVersionFileName(strings.TrimPrefix(o.Key, prefix))
			if err != nil {
				continue
			}
			if v < from {
				return
			}
			s.noteStamp(id, v, o)
			low = uint64(v)
		}
		if len(next) > 0 && low > 0 {
			// The next page starts below the last version of this
			// one: everything from there up is listed.
			lst.advance(low, false)
		}
		token = next
	}
}
