package layout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"gocloud.dev/blob"
)

// DefaultListParallel bounds the LIST requests a partition walk keeps in
// flight when the caller gives no bound: as wide as a mount's default
// request budget (--max-requests), so 2,000 hours at 20 ms a request take
// about 0.6 s and a re-check of 48 hours and their levels is one wave;
// far below the rate at which S3 throttles a prefix.
const DefaultListParallel = 64

// partitionLevels are the Hive-style levels above a session directory
// (§4.2): year=, month=, day=, hour=.
const partitionLevels = 4

// HourPrefix is the key prefix of one hour partition (§4.2), ending in
// "/": sessions/year=YYYY/month=MM/day=DD/hour=HH/. hour counts hours
// since the Unix epoch, as a session ID's first four bytes do.
func HourPrefix(hour uint32) (string, error) {
	t := time.Unix(int64(hour)*3600, 0).UTC()
	if t.Year() > 9999 {
		return "", fmt.Errorf("%w: hour counter %d is past year 9999", ErrInvalid, hour)
	}
	return fmt.Sprintf("%syear=%04d/month=%02d/day=%02d/hour=%02d/", SessionsPrefix,
		t.Year(), int(t.Month()), t.Day(), t.Hour()), nil
}

// ParseHourPrefix is the inverse of HourPrefix, with the range and
// calendar checks of ParseSessionKey.
func ParseHourPrefix(prefix string) (uint32, error) {
	// A made-up session component lets ParseSessionKey do every check;
	// the hour is all that is kept of the result.
	sk, err := ParseSessionKey(prefix + strings.Repeat("0", 23) + "1/" + manifestName)
	if err != nil {
		return 0, fmt.Errorf("%w: hour partition %q", ErrInvalid, truncate(prefix))
	}
	if p, _ := HourPrefix(sk.ID.Hour()); p != prefix {
		return 0, fmt.Errorf("%w: hour partition %q: not canonical", ErrInvalid, truncate(prefix))
	}
	return sk.ID.Hour(), nil
}

// ListHours returns the hour counters of every hour partition under
// sessions/, oldest first. It walks year=, month=, day= and hour= with
// delimiter listings, each level's prefixes listed concurrently (at most
// par LISTs in flight; DefaultListParallel when par < 1), so the cost is
// four round trips deep however many partitions there are. known are
// hours the caller saw before (may be nil): the levels above them are
// listed at once rather than when their parents' listings name them, so
// a walk that finds nothing new is one round trip deep; what is returned
// is still only what the walk found. Prefixes that are not partition
// names are passed to bad, if set, and skipped. A failed LIST fails the
// whole walk: never a shorter list.
func (s *Store) ListHours(ctx context.Context, par int, known []uint32, bad func(key string, err error)) ([]uint32, error) {
	return s.listHoursWith(ctx, newPartitionWalk(s, par, bad), known)
}

// listHoursWith is ListHours on a walk whose semaphore the caller may
// share with the hour listings it sends.
func (s *Store) listHoursWith(ctx context.Context, w *partitionWalk, known []uint32) ([]uint32, error) {
	err := w.run(ctx, known, func(ctx context.Context, prefix string) error {
		h, err := ParseHourPrefix(prefix)
		if err != nil {
			w.skip(prefix, err)
			return nil
		}
		w.addHour(h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list hour partitions: %w", err)
	}
	slices.Sort(w.hours)
	return w.hours, nil
}

// ListHour returns the sessions of one hour partition, in key order, with
// one delimiter LIST per 1,000 sessions. Keys that do not parse as
// session directories go to bad, if set, and are skipped.
func (s *Store) ListHour(ctx context.Context, hour uint32, bad func(key string, err error)) ([]SessionID, error) {
	prefix, err := HourPrefix(hour)
	if err != nil {
		return nil, err
	}
	ids, err := s.listHourAt(ctx, nil, prefix, bad)
	if err != nil {
		return nil, fmt.Errorf("list sessions of hour partition %s: %w", prefix, err)
	}
	return ids, nil
}

// listHourAt lists the session directories under an hour prefix; sem, if
// set, bounds the LISTs in flight.
func (s *Store) listHourAt(ctx context.Context, sem chan struct{}, prefix string, bad func(key string, err error)) ([]SessionID, error) {
	dirs, err := s.listDirs(ctx, sem, prefix)
	if err != nil {
		return nil, err
	}
	ids := make([]SessionID, 0, len(dirs))
	for _, d := range dirs {
		sk, err := ParseSessionKey(d + manifestName)
		if err != nil {
			if bad != nil {
				bad(d, err)
			}
			continue
		}
		ids = append(ids, sk.ID)
	}
	return ids, nil
}

// ListSessions returns the IDs of every session directory under sessions/,
// in key order (which is ID order). The partition tree is walked
// concurrently and each hour's sessions are listed as soon as its
// partition is found, at most DefaultListParallel LISTs in flight: a
// bucket with 2,000 hours costs about 2,000/32 round trips, not 2,000. No
// snapshot is listed. Keys that do not parse are passed to bad, if set,
// and skipped; a failed LIST of any level or page fails the whole listing
// (with the prefix in the error), never a shorter one.
func (s *Store) ListSessions(ctx context.Context, bad func(key string, err error)) ([]SessionID, error) {
	w := newPartitionWalk(s, DefaultListParallel, bad)
	var mu sync.Mutex // guards ids
	var ids []SessionID
	err := w.run(ctx, nil, func(ctx context.Context, prefix string) error {
		if _, err := ParseHourPrefix(prefix); err != nil {
			w.skip(prefix, err)
			return nil
		}
		got, err := s.listHourAt(ctx, w.sem, prefix, w.skip)
		if err != nil {
			return err
		}
		mu.Lock()
		ids = append(ids, got...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	// The hour is the ID's first bytes, big-endian, and the session
	// component is the rest in upper hex: byte order is key order.
	slices.SortFunc(ids, SessionID.Compare)
	return ids, nil
}

// partitionWalk is one concurrent walk of the partition levels.
type partitionWalk struct {
	s *Store
	// sem holds a token per LIST in flight. Only a request holds one,
	// never a goroutine waiting for its children, so nested levels
	// cannot starve each other.
	sem chan struct{}

	mu    sync.Mutex // guards hours and calls of bad
	bad   func(key string, err error)
	hours []uint32
	// shown is ListHourVersions' report of each page; nil elsewhere.
	shown func([]ListedSession)
}

func newPartitionWalk(s *Store, par int, bad func(key string, err error)) *partitionWalk {
	if par < 1 {
		par = DefaultListParallel
	}
	return &partitionWalk{s: s, sem: make(chan struct{}, par), bad: bad}
}

func (w *partitionWalk) skip(key string, err error) {
	if w.bad == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bad(key, err)
}

func (w *partitionWalk) addHour(h uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hours = append(w.hours, h)
}

// run lists the partition levels under sessions/ and calls leaf for every
// hour= prefix found, each level and leaf in its own goroutine. The
// levels above the known hours are listed from the start, beside the
// root's listing; every prefix is still listed once, and leaf is called
// only for hours a day= listing names. The first error cancels the rest
// and is returned.
func (w *partitionWalk) run(ctx context.Context, known []uint32, leaf func(ctx context.Context, prefix string) error) error {
	g, ctx := errgroup.WithContext(ctx)
	var mu sync.Mutex            // guards started
	started := map[string]bool{} // prefixes listed or being listed
	var descend func(prefix string, depth int) error
	start := func(prefix string, depth int) {
		mu.Lock()
		defer mu.Unlock()
		if !started[prefix] {
			started[prefix] = true
			g.Go(func() error { return descend(prefix, depth) })
		}
	}
	descend = func(prefix string, depth int) error {
		dirs, err := w.s.listDirs(ctx, w.sem, prefix)
		if err != nil {
			return err
		}
		for _, d := range dirs {
			if depth+1 == partitionLevels {
				g.Go(func() error { return leaf(ctx, d) })
			} else {
				start(d, depth+1)
			}
		}
		return nil
	}
	start(SessionsPrefix, 0)
	for _, h := range known {
		hp, err := HourPrefix(h)
		if err != nil {
			continue // not a partition a walk can find
		}
		// sessions/year=Y/, .../month=M/, .../day=D/: each ancestor is
		// the prefix up to one more "/".
		end := len(SessionsPrefix)
		for depth := 1; depth < partitionLevels; depth++ {
			end += strings.IndexByte(hp[end:], '/') + 1
			start(hp[:end], depth)
		}
	}
	return g.Wait()
}

// listDirs returns the common prefixes one level under prefix, every page
// of them; objects directly under prefix are ignored. sem, if set, holds a
// token during each page's request.
func (s *Store) listDirs(ctx context.Context, sem chan struct{}, prefix string) ([]string, error) {
	var dirs []string
	token := blob.FirstPageToken
	for {
		page, next, err := s.listPage(ctx, sem, prefix, "/", token)
		if err != nil {
			return nil, err
		}
		for _, o := range page {
			if o.IsDir {
				dirs = append(dirs, o.Key)
			}
		}
		if len(next) == 0 {
			return dirs, nil
		}
		token = next
	}
}

// listPage lists one page of up to 1,000 keys under prefix, with retries;
// sem, if set, holds a token during the request.
func (s *Store) listPage(ctx context.Context, sem chan struct{}, prefix, delim string, token []byte) ([]*blob.ListObject, []byte, error) {
	release, err := take(ctx, sem)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	defer release()
	var page []*blob.ListObject
	var next []byte
	err = s.retry(ctx, func() error {
		s.st.lists.Add(1)
		var err error
		page, next, err = s.b.ListPage(ctx, token, 1000, &blob.ListOptions{Prefix: prefix, Delimiter: delim})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	return page, next, nil
}

// ListedSession is a session a listing found, with the latest version
// the listing saw: the first snapshot key under it, which reverse-hex
// names make the newest (§6.1).
type ListedSession struct {
	ID SessionID
	// Version is the latest snapshot version; 0 when the listing saw no
	// snapshot of the session.
	Version uint32
	// Manifest is set when the listing saw the manifest.
	Manifest bool
}

// partitionPageSessions is the fewest sessions a page of an hour
// partition's full listing must bring, on average, for the listing to go
// on paging: past it the partition holds sessions with long histories
// (a page of 1,000 keys for 10 versions each), and the sessions left are
// asked for one by one instead (ListSessionVersions).
const partitionPageSessions = 50

// ListSessionVersions returns every session under sessions/ with its
// latest version, in ID order: the freshness pass of a listing. The
// partition tree is walked as ListHours walks it; then each hour
// partition for which full(hour, partitions) says so is listed without a
// delimiter, so one LIST (per 1,000 keys) names every session of the hour
// and, in the same page, each one's manifest and snapshot keys, the
// newest snapshot first. A partition whose pages bring fewer than 50
// sessions each (long histories) is finished with a delimiter listing of
// its sessions and a max-keys=1 LIST per session not yet seen
// (LatestVersion), so no history is ever listed whole. The other
// partitions (all of them when full is nil) are listed with a delimiter:
// the same requests, but only the sessions (Version 0, Manifest false),
// which some servers answer much faster (one that walks a file system
// reads every object's metadata for a full listing).
//
// known are the hours of an earlier pass (may be nil): their partitions
// are listed at once, beside the walk (with partitions = len(known) for
// full), and the walk starts from their levels too (ListHours), so a pass
// that finds no new hour is one round trip deep instead of five. An hour
// the walk finds that is not in known is listed when the walk ends. Keys
// that do not parse go to bad, if set; a failed LIST fails the whole
// listing, never a shorter one.
func (s *Store) ListSessionVersions(ctx context.Context, known []uint32, full func(hour uint32, partitions int) bool, bad func(key string, err error)) ([]ListedSession, error) {
	w := newPartitionWalk(s, DefaultListParallel, bad)
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex // guards out
	var out []ListedSession
	list := func(h uint32, partitions int) {
		g.Go(func() error {
			prefix, err := HourPrefix(h)
			if err != nil {
				return err
			}
			var got []ListedSession
			if full != nil && full(h, partitions) {
				got, err = s.listPartition(gctx, w, prefix, 0)
			} else {
				var ids []SessionID
				ids, err = s.listHourAt(gctx, w.sem, prefix, w.skip)
				for _, id := range ids {
					got = append(got, ListedSession{ID: id})
				}
			}
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, got...)
			mu.Unlock()
			return nil
		})
	}
	listed := make(map[uint32]bool, len(known))
	for _, h := range known {
		if _, err := HourPrefix(h); err == nil && !listed[h] {
			listed[h] = true
			list(h, len(known))
		}
	}
	g.Go(func() error {
		hours, err := s.listHoursWith(gctx, w, known)
		if err != nil {
			return err
		}
		for _, h := range hours {
			if !listed[h] {
				list(h, len(hours))
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	slices.SortFunc(out, func(a, b ListedSession) int { return a.ID.Compare(b.ID) })
	return out, nil
}

// ErrLongPartition is ListHourVersions' answer for an hour partition
// whose full listing takes more pages than the caller allowed.
var ErrLongPartition = errors.New("hour partition longer than the pages allowed")

// ListHourVersions lists one hour partition in full, as a freshness pass
// lists each (ListSessionVersions): every session of the hour with its
// latest version, from one LIST per 1,000 keys, in ID order. It is the
// freshness check of a traversal: one request confirms the latest
// version of every session of the hour, where asking each one
// (LatestVersion) costs a request per session. Past maxPages pages it
// stops with ErrLongPartition (sessions with long histories: asking them
// one by one is then cheaper), and returns with it the sessions the pages
// it listed showed in full. Keys that do not parse go to bad, if set.
//
// shown, if set, is called after each page but the last with the
// sessions the pages so far show in full, in ID order (each call's list
// extends the last): a session whose keys fill the first page is known
// from it, whatever the pages after it hold.
func (s *Store) ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(key string, err error), shown func([]ListedSession)) ([]ListedSession, error) {
	prefix, err := HourPrefix(hour)
	if err != nil {
		return nil, err
	}
	w := newPartitionWalk(s, 1, bad)
	w.shown = shown
	out, err := s.listPartition(ctx, w, prefix, maxPages)
	if err != nil {
		return out, fmt.Errorf("list session versions of hour partition %s: %w", prefix, err)
	}
	return out, nil
}

// listPartition lists one hour partition without a delimiter (see
// ListSessionVersions); past maxPages pages (0: no bound) it stops with
// ErrLongPartition and the sessions it saw in full.
func (s *Store) listPartition(ctx context.Context, w *partitionWalk, prefix string, maxPages int) ([]ListedSession, error) {
	var out []ListedSession
	lastDir, skipDir := "", ""
	token := blob.FirstPageToken
	for pages := 1; ; pages++ {
		if maxPages > 0 && pages > maxPages {
			return shownInFull(out), ErrLongPartition
		}
		page, next, err := s.listPage(ctx, w.sem, prefix, "", token)
		if err != nil {
			return nil, err
		}
		for _, o := range page {
			dir, rest, ok := strings.Cut(strings.TrimPrefix(o.Key, prefix), "/")
			if !ok || dir == skipDir {
				continue // a key directly under the partition, or under a bad name
			}
			if dir != lastDir {
				lastDir = dir
				sk, err := ParseSessionKey(prefix + dir + "/" + manifestName)
				if err != nil {
					skipDir = dir
					w.skip(prefix+dir+"/", err)
					continue
				}
				out = append(out, ListedSession{ID: sk.ID})
			}
			cur := &out[len(out)-1]
			switch {
			case rest == manifestName:
				cur.Manifest = true
				s.noteStamp(cur.ID, 0, o)
			case (cur.Version == 0 || s.opts.Keeper != nil) && strings.HasPrefix(rest, snapshotsDir):
				if v, err := ParseVersionFileName(strings.TrimPrefix(rest, snapshotsDir)); err == nil {
					if cur.Version == 0 {
						cur.Version = v
					}
					s.noteStamp(cur.ID, v, o)
				}
			}
		}
		if len(next) == 0 {
			return out, nil
		}
		if w.shown != nil {
			w.shown(slices.Clone(shownInFull(out)))
		}
		if maxPages == 0 && pages >= 2 && len(out) < partitionPageSessions*pages {
			return s.finishPartition(ctx, w, prefix, out)
		}
		token = next
	}
}

// shownInFull is out, from a partition listing with pages still to come,
// without its last session unless that one's newest snapshot was seen: a
// session's keys list its manifest first, then its snapshots newest
// first, so a session with a snapshot seen lacks nothing, and one without
// may have its snapshots on the next page.
func shownInFull(out []ListedSession) []ListedSession {
	if n := len(out); n > 0 && out[n-1].Version == 0 {
		return out[:n-1]
	}
	return out
}

// finishPartition completes a partition listing cut short: the sessions
// seen so far keep what was seen (the last one only if its newest
// snapshot was among it), the rest are found by a delimiter listing and
// asked for their latest version one by one, in parallel.
func (s *Store) finishPartition(ctx context.Context, w *partitionWalk, prefix string, seen []ListedSession) ([]ListedSession, error) {
	seen = shownInFull(seen)
	ids, err := s.listHourAt(ctx, w.sem, prefix, nil) // bad names were reported already
	if err != nil {
		return nil, err
	}
	known := make(map[SessionID]bool, len(seen))
	for _, l := range seen {
		known[l.ID] = true
	}
	g, ctx := errgroup.WithContext(ctx)
	var mu sync.Mutex // guards seen
	for _, id := range ids {
		if known[id] {
			continue
		}
		g.Go(func() error {
			release, err := take(ctx, w.sem)
			if err != nil {
				return err
			}
			v, err := s.LatestVersion(ctx, id)
			release()
			l := ListedSession{ID: id, Version: v, Manifest: true}
			switch {
			case errors.Is(err, ErrSessionNotFound):
				l.Manifest = false
			case err != nil:
				return err
			}
			mu.Lock()
			seen = append(seen, l)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return seen, nil
}

// take waits for a token of sem (none when sem is nil) and returns what
// gives it back.
func take(ctx context.Context, sem chan struct{}) (release func(), err error) {
	if sem == nil {
		return func() {}, nil
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
