// Package testbucket gives tests fresh, empty buckets on each of the
// backends pugfs runs on: gocloud's in-memory memblob ("mem"), the project's
// own local-directory driver behind the file:// scheme ("local"), a real
// S3 server, versitygw, through gocloud's s3blob ("s3"), and the GCS and
// Azure emulators, fake-gcs-server through gcsblob ("gcs") and Azurite
// through azureblob ("azure").
//
// A suite that must hold on every backend runs under [EachAll]; the broad
// suites that run on the core backends (mem, local, s3) run under [Each]:
//
//	func TestMain(m *testing.M) { testbucket.Main(m) }
//
//	func TestRoundTrip(t *testing.T) {
//		testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
//			...
//		})
//	}
//
// [Open] gives a bucket on one named backend, and [Reopen] a second,
// independent handle on the bucket behind a handle from this package, for
// tests of what two store instances see of one bucket.
//
// The environment variable PUGFS_TEST_BACKENDS, a comma-separated list of
// kinds, chooses the backends: unset, Each and [Kinds] give the core kinds
// and EachAll and Open every kind; set, all of them give exactly the kinds
// it names, and the others are skipped, with the reason. The s3, gcs and
// azure backends need the emulators that `make deps` installs (packages
// s3test and cloudtest); without them those tests fail, never skip.
package testbucket

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/internal/cloudtest"
	"github.com/pugmark/pugfs/internal/s3test"

	// The project's driver registers the file:// scheme. Only the scheme
	// is used here, so this package does not depend on its Go API.
	_ "github.com/pugmark/pugfs/layout/localblob"
)

// Kind names a backend.
type Kind string

// The backends.
const (
	// Mem is gocloud's memblob: one process, no persistence.
	Mem Kind = "mem"
	// Local is the project's local-directory driver, opened through its
	// file:// URL scheme on a fresh temporary directory.
	Local Kind = "local"
	// S3 is gocloud's s3blob against versitygw, the test binary's shared
	// server from s3test.Shared.
	S3 Kind = "s3"
	// GCS is gocloud's gcsblob against fake-gcs-server, the test binary's
	// shared emulator from cloudtest.SharedGCS.
	GCS Kind = "gcs"
	// Azure is gocloud's azureblob against Azurite, the test binary's
	// shared emulator from cloudtest.SharedAzure.
	Azure Kind = "azure"
)

// BackendsEnv is the environment variable that selects backends: a
// comma-separated list of kinds, such as "mem,local". Unset or empty means
// the core kinds for Each and Kinds, every kind for EachAll and Open.
const BackendsEnv = "PUGFS_TEST_BACKENDS"

// AllKinds returns every kind, in the order EachAll runs them.
func AllKinds() []Kind { return []Kind{Mem, Local, S3, GCS, Azure} }

// CoreKinds returns the kinds Each runs when PUGFS_TEST_BACKENDS is
// unset: the ones every broad suite covers. The cloud emulators run the
// suites that are about backends (EachAll) and the end-to-end cloud tests.
func CoreKinds() []Kind { return []Kind{Mem, Local, S3} }

// Kinds returns the kinds selected by PUGFS_TEST_BACKENDS (unset: the core
// kinds), in the order of AllKinds. It panics if the variable names an
// unknown kind, so that a typo does not quietly test less than asked.
func Kinds() []Kind {
	kinds, err := selected(CoreKinds())
	if err != nil {
		panic(err)
	}
	return kinds
}

// selected parses PUGFS_TEST_BACKENDS; def is the answer when it is
// unset.
func selected(def []Kind) ([]Kind, error) {
	env := strings.TrimSpace(os.Getenv(BackendsEnv))
	if env == "" {
		return def, nil
	}
	want := map[Kind]bool{}
	for _, name := range strings.Split(env, ",") {
		k := Kind(strings.TrimSpace(name))
		if k == "" {
			continue
		}
		if !slices.Contains(AllKinds(), k) {
			return nil, fmt.Errorf("testbucket: %s=%q: unknown backend %q (known: %v)", BackendsEnv, env, k, AllKinds())
		}
		want[k] = true
	}
	var kinds []Kind
	for _, k := range AllKinds() {
		if want[k] {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("testbucket: %s=%q selects no backend (known: %v)", BackendsEnv, env, AllKinds())
	}
	return kinds, nil
}

// checkSelected fails tb for a bad PUGFS_TEST_BACKENDS and skips it if kind
// is not selected.
func checkSelected(tb testing.TB, kind Kind) {
	tb.Helper()
	kinds, err := selected(AllKinds())
	if err != nil {
		tb.Fatal(err)
	}
	if !slices.Contains(AllKinds(), kind) {
		tb.Fatalf("testbucket: unknown backend %q (known: %v)", kind, AllKinds())
	}
	if !slices.Contains(kinds, kind) {
		tb.Skipf("backend %s not selected by %s=%s", kind, BackendsEnv, os.Getenv(BackendsEnv))
	}
}

// Main runs the tests, then stops the shared S3 server and cloud
// emulators if they started any, and exits. Call it from TestMain in every
// package that uses the s3, gcs or azure backends; see s3test.Main.
func Main(m *testing.M) {
	code := m.Run()
	s3test.StopShared()
	cloudtest.StopShared()
	os.Exit(code)
}

// Each runs fn once per core backend (or per backend PUGFS_TEST_BACKENDS
// selects), as subtests named after the kinds ("mem", "local", "s3"), each
// with a fresh, empty bucket that is closed when the subtest ends.
func Each(t *testing.T, fn func(t *testing.T, b *blob.Bucket)) {
	t.Helper()
	each(t, CoreKinds(), fn)
}

// EachAll is Each over every backend, the cloud emulators included ("gcs",
// "azure"), unless PUGFS_TEST_BACKENDS narrows them: for suites about what
// the backends guarantee (conditional creates, compare-and-swap, races).
func EachAll(t *testing.T, fn func(t *testing.T, b *blob.Bucket)) {
	t.Helper()
	each(t, AllKinds(), fn)
}

func each(t *testing.T, def []Kind, fn func(t *testing.T, b *blob.Bucket)) {
	t.Helper()
	kinds, err := selected(def)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range AllKinds() {
		if !slices.Contains(kinds, kind) {
			if slices.Contains(def, kind) {
				t.Run(string(kind), func(t *testing.T) { checkSelected(t, kind) })
			}
			continue
		}
		t.Run(string(kind), func(t *testing.T) {
			fn(t, Open(t, kind))
		})
	}
}

// Open returns a fresh, empty bucket on the kind backend, closed when tb
// ends. It skips tb if PUGFS_TEST_BACKENDS does not select kind.
func Open(tb testing.TB, kind Kind) *blob.Bucket {
	tb.Helper()
	checkSelected(tb, kind)
	var src *source
	switch kind {
	case Mem:
		// Every handle is a PrefixedBucket with no prefix on one
		// memblob, so handles share the blobs but not the *blob.Bucket.
		base := memblob.OpenBucket(nil)
		src = &source{
			kind: kind,
			open: func(testing.TB) (*blob.Bucket, error) { return blob.PrefixedBucket(base, ""), nil },
		}
	case Local:
		// Test names become directory names and may hold '#' or '?'.
		u := (&url.URL{Scheme: "file", Path: tb.TempDir()}).String()
		src = &source{
			kind: kind,
			url:  u,
			open: func(testing.TB) (*blob.Bucket, error) { return blob.OpenBucket(context.Background(), u) },
		}
	case S3:
		srv := s3test.Shared(tb)
		b, u := srv.NewBucket(tb)
		parsed, err := url.Parse(u)
		if err != nil {
			tb.Fatalf("testbucket: s3test gave a bad URL %q: %v", u, err)
		}
		name := parsed.Host
		src = &source{
			kind: kind,
			url:  u,
			env:  srv.Env(),
			open: func(tb testing.TB) (*blob.Bucket, error) { return srv.OpenBucket(tb, name), nil },
		}
		src.register(tb, b)
		return b
	case GCS:
		srv := cloudtest.SharedGCS(tb)
		b, u := srv.NewBucket(tb)
		name := strings.TrimPrefix(u, "gs://")
		src = &source{
			kind: kind,
			url:  u,
			env:  srv.Env(),
			open: func(tb testing.TB) (*blob.Bucket, error) { return srv.OpenBucket(tb, name), nil },
		}
		src.register(tb, b)
		return b
	case Azure:
		srv := cloudtest.SharedAzure(tb)
		b, u := srv.NewBucket(tb)
		parsed, err := url.Parse(u)
		if err != nil {
			tb.Fatalf("testbucket: cloudtest gave a bad URL %q: %v", u, err)
		}
		name := parsed.Host
		src = &source{
			kind: kind,
			url:  u,
			env:  srv.Env(),
			open: func(tb testing.TB) (*blob.Bucket, error) { return srv.OpenBucket(tb, name), nil },
		}
		src.register(tb, b)
		return b
	}
	return src.handle(tb)
}

// Reopen returns a new handle, closed when tb ends, on the bucket behind b,
// which must be a handle from this package that is still open. The handles
// share the bucket's contents and nothing else: for local and the servers they are
// opened separately, as two processes would, and each has its own
// *blob.Bucket state (a closed handle does not close the other).
func Reopen(tb testing.TB, b *blob.Bucket) *blob.Bucket {
	tb.Helper()
	return lookup(tb, b).handle(tb)
}

// KindOf returns the backend of b, a handle from this package.
func KindOf(tb testing.TB, b *blob.Bucket) Kind {
	tb.Helper()
	return lookup(tb, b).kind
}

// URL returns a gocloud URL of the bucket behind b, a handle from this
// package, and the environment variables, beyond the process's own, that
// another process needs to open it (the server's credentials or emulator
// host for s3, gcs and azure). A mem
// bucket has no URL: it lives in this process only, and URL fails tb.
func URL(tb testing.TB, b *blob.Bucket) (string, []string) {
	tb.Helper()
	src := lookup(tb, b)
	if src.url == "" {
		tb.Fatalf("testbucket: a %s bucket cannot be opened by URL from another process", src.kind)
	}
	return src.url, slices.Clone(src.env)
}

// source is one bucket and how to open handles on it.
type source struct {
	kind Kind
	url  string   // "" for mem
	env  []string // extra environment for opening url elsewhere
	open func(tb testing.TB) (*blob.Bucket, error)
}

// handles maps every open handle from this package to its source.
var handles sync.Map // *blob.Bucket -> *source

// handle opens and registers a new handle on src, closed when tb ends.
func (src *source) handle(tb testing.TB) *blob.Bucket {
	tb.Helper()
	b, err := src.open(tb)
	if err != nil {
		tb.Fatalf("testbucket: open %s bucket %s: %v", src.kind, src.url, err)
	}
	src.register(tb, b)
	// Closing twice (if the test closed b itself) only returns an error.
	tb.Cleanup(func() { b.Close() })
	return b
}

// register records b as a handle on src until tb ends.
func (src *source) register(tb testing.TB, b *blob.Bucket) {
	handles.Store(b, src)
	tb.Cleanup(func() { handles.Delete(b) })
}

func lookup(tb testing.TB, b *blob.Bucket) *source {
	tb.Helper()
	v, ok := handles.Load(b)
	if !ok {
		tb.Fatalf("testbucket: %p is not an open handle from testbucket", b)
	}
	return v.(*source)
}
