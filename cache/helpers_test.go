package cache

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/blobcache"
	"github.com/pugmark/pugfs/internal/goroutines"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
)

var bg = context.Background()

// world is one store on a test bucket, behind a fault injector.
type world struct {
	t     *testing.T
	raw   *blob.Bucket // the testbucket handle
	inj   *faultblob.Injector
	store *layout.Store
}

func newWorld(t *testing.T, b *blob.Bucket) *world {
	t.Helper()
	inj := faultblob.NewInjector(faultblob.Options{})
	// The wrapper is not closed: closing it would close b, which
	// testbucket closes itself.
	s := layout.New(faultblob.Wrap(b, inj), &layout.Options{RetryBase: time.Millisecond})
	return &world{t: t, raw: b, inj: inj, store: s}
}

// reopen returns a second, independent store on the same bucket, as
// another mount or process would have.
func (w *world) reopen() *world {
	w.t.Helper()
	return newWorld(w.t, testbucket.Reopen(w.t, w.raw))
}

func (w *world) session() layout.SessionID {
	w.t.Helper()
	m := w.store.NewRootManifest()
	if _, created, err := w.store.CreateSession(bg, m); err != nil || !created {
		w.t.Fatalf("create session: created=%v, %v", created, err)
	}
	return m.Session
}

func (w *world) commit(id layout.SessionID, ds ...layout.Descriptor) layout.CommitResult {
	w.t.Helper()
	res, err := w.store.Commit(bg, id, layout.CommitRequest{Type: layout.Provisional, Descriptors: ds})
	if err != nil {
		w.t.Fatalf("commit to %s: %v", id, err)
	}
	return res
}

// sessionPrefix is the key prefix of everything of a session.
func sessionPrefix(t *testing.T, id layout.SessionID) string {
	t.Helper()
	p, err := layout.SessionDir(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func snapshotKey(t *testing.T, id layout.SessionID, v uint32) string {
	t.Helper()
	k, err := layout.SnapshotKey(id, v)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// textDesc is a named descriptor with its body inline.
func textDesc(name, body string, at time.Time) layout.Descriptor {
	b := []byte(body)
	return layout.Descriptor{Digest: layout.DigestOf(b), Size: int64(len(b)), Name: name,
		ContentType: "text/plain", CreatedAt: at, Data: b}
}

// epoch is the created-at base of the tests' descriptors.
var epoch = time.Date(2025, 3, 4, 5, 0, 0, 0, time.UTC)

func newCache(t testing.TB, s Store, opts Options) *Cache {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustState(t testing.TB, c *Cache, id layout.SessionID) *State {
	t.Helper()
	st, err := c.State(bg, id)
	if err != nil {
		t.Fatalf("state of %s: %v", id, err)
	}
	return st
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(epoch.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// countingStore counts the requests the cache makes of the store, per
// session, and can hold snapshot reads at a gate.
type countingStore struct {
	Store
	mu        sync.Mutex
	latest    map[layout.SessionID]int
	ranges    map[layout.SessionID]int
	manifests map[layout.SessionID]int
	// beforeRange, if set, runs before every ReadSnapshotRange;
	// beforeManifest before every LoadManifest.
	beforeRange, beforeManifest func(ctx context.Context, id layout.SessionID)
	// spans are the version ranges read, "from-to", in call order.
	spans []string
}

func newCountingStore(inner Store) *countingStore {
	return &countingStore{Store: inner, latest: map[layout.SessionID]int{},
		ranges: map[layout.SessionID]int{}, manifests: map[layout.SessionID]int{}}
}

func (s *countingStore) count(m map[layout.SessionID]int, id layout.SessionID) {
	s.mu.Lock()
	m[id]++
	s.mu.Unlock()
}

// counts returns the LatestVersion, ReadSnapshotRange and LoadManifest
// calls made for id.
func (s *countingStore) counts(id layout.SessionID) (latest, ranges, manifests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest[id], s.ranges[id], s.manifests[id]
}

func (s *countingStore) LatestVersion(ctx context.Context, id layout.SessionID) (uint32, error) {
	s.count(s.latest, id)
	return s.Store.LatestVersion(ctx, id)
}

// ListHourVersions counts an hour check as a LatestVersion of every
// session it finds: it confirms each of them.
func (s *countingStore) ListHourVersions(ctx context.Context, hour uint32, maxPages int, bad func(key string, err error), shown func([]layout.ListedSession)) ([]layout.ListedSession, error) {
	found, err := s.Store.ListHourVersions(ctx, hour, maxPages, bad, shown)
	for _, l := range found {
		s.count(s.latest, l.ID)
	}
	return found, err
}

func (s *countingStore) LoadManifest(ctx context.Context, id layout.SessionID) (*layout.Manifest, error) {
	s.count(s.manifests, id)
	s.mu.Lock()
	hook := s.beforeManifest
	s.mu.Unlock()
	if hook != nil {
		hook(ctx, id)
	}
	return s.Store.LoadManifest(ctx, id)
}

func (s *countingStore) ReadSnapshotRange(ctx context.Context, id layout.SessionID, from, to uint32, par int) ([][]layout.Descriptor, error) {
	s.count(s.ranges, id)
	s.mu.Lock()
	s.spans = append(s.spans, fmt.Sprintf("%d-%d", from, to))
	hook := s.beforeRange
	s.mu.Unlock()
	if hook != nil {
		hook(ctx, id)
	}
	return s.Store.ReadSnapshotRange(ctx, id, from, to, par)
}

// runBounded runs ops concurrently and waits at most d for them. It
// returns the names of the ops still running then (a call blocked on a
// lock it should not wait for never returns, so a context deadline alone
// would not catch it) and the errors of those that finished. Stuck ops
// are left running: the caller releases what they wait for.
func runBounded(d time.Duration, ops map[string]func(ctx context.Context) error) (stuck []string, errs []error) {
	ctx, cancel := context.WithTimeout(bg, d)
	defer cancel()
	var mu sync.Mutex
	pending := map[string]bool{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for name := range ops {
		pending[name] = true
	}
	for name, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := op(ctx)
			mu.Lock()
			defer mu.Unlock()
			delete(pending, name)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d + time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	for name := range pending {
		stuck = append(stuck, name)
	}
	sort.Strings(stuck)
	return stuck, append([]error(nil), errs...)
}

// blockedOnMutex counts the goroutines waiting for a sync.Mutex inside a
// function whose name contains fn: how a test knows that calls have
// reached a lock and are parked there, which nothing else tells it.
func blockedOnMutex(fn string) int { return goroutines.Waiting("[sync.Mutex.Lock", fn) }

// waitBlockedOnMutex polls until a goroutine waits for a mutex in fn (see
// blockedOnMutex), or until done is closed; it reports which came first.
func waitBlockedOnMutex(t *testing.T, fn string, done <-chan struct{}) (blocked bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			return false
		default:
		}
		if blockedOnMutex(fn) > 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a goroutine blocked on a mutex in %s", fn)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func rowOf(t testing.TB, rows []Row, id layout.SessionID) Row {
	t.Helper()
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no row for %s in %d rows", id, len(rows))
	return Row{}
}

func ids(rows []Row) string {
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s@%s", r.ID.String()[:8], r.UpdatedAt.Format(time.TimeOnly))
	}
	return b.String()
}

// waitFor polls cond until it holds (a state the test cannot be told of
// otherwise, such as a number of flight waiters), failing after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// randomBody returns n deterministic pseudo-random bytes.
func randomBody(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newBlobCache is a blob cache over src that logs nothing, closed at
// cleanup (the lock tests read blobs next to sessions).
func newBlobCache(t testing.TB, src blobcache.Source, opts blobcache.Options) *blobcache.Cache {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	c, err := blobcache.New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readBlob reads d through c.ReadAt in pieces of step bytes.
func readBlob(ctx context.Context, c *blobcache.Cache, d *layout.Descriptor, step int) ([]byte, error) {
	var out []byte
	buf := make([]byte, step)
	for off := int64(0); ; {
		n, err := c.ReadAt(ctx, d, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}
