package drivers_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/internal/cloudtest"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/drivers"
	"github.com/pugmark/pugfs/layout/faultblob"
)

func TestMain(m *testing.M) { testbucket.Main(m) }

var bg = context.Background()

// casKinds are the backends with a real compare-and-swap for refs.
var casKinds = []testbucket.Kind{testbucket.Local, testbucket.S3, testbucket.GCS, testbucket.Azure}

func newStore(b *blob.Bucket) *layout.Store {
	return layout.New(b, &layout.Options{RetryBase: time.Millisecond})
}

// TestRenameRefRace races two stores, on two independent handles (two
// processes, as far as the bucket can tell), renaming one ref from the
// same value: on every backend with a compare-and-swap exactly one wins,
// the other gets ErrConflict, and nobody falls back to a weak swap (§9).
func TestRenameRefRace(t *testing.T) {
	for _, kind := range casKinds {
		t.Run(string(kind), func(t *testing.T) {
			b := testbucket.Open(t, kind)
			stores := []*layout.Store{newStore(b), newStore(testbucket.Reopen(t, b))}
			if err := stores[0].Link(bg, "sessions/r", "start"); err != nil {
				t.Fatal(err)
			}
			for round := range 6 {
				prevs := make([]layout.Ref, 2)
				for i, s := range stores {
					var err error
					if prevs[i], err = s.ReadRef(bg, "sessions/r"); err != nil {
						t.Fatal(err)
					}
				}
				if prevs[0].ETag == "" || prevs[0].Target != prevs[1].Target || prevs[0].ETag != prevs[1].ETag {
					t.Fatalf("round %d: the two stores read %+v and %+v", round, prevs[0], prevs[1])
				}
				errs := make([]error, 2)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, s := range stores {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						errs[i] = s.RenameRef(bg, "sessions/r", prevs[i], fmt.Sprintf("round%d-store%d", round, i))
					}()
				}
				close(start)
				wg.Wait()
				winner := -1
				for i, err := range errs {
					switch {
					case err == nil:
						if winner >= 0 {
							t.Fatalf("round %d: both renames won", round)
						}
						winner = i
					case errors.Is(err, layout.ErrWeakCAS):
						t.Fatalf("round %d store %d: fell back to a weak swap on %s: %v", round, i, kind, err)
					case !errors.Is(err, layout.ErrConflict):
						t.Fatalf("round %d store %d: %v, want nil or ErrConflict", round, i, err)
					}
				}
				if winner < 0 {
					t.Fatalf("round %d: both renames lost: %v", round, errs)
				}
				got, err := stores[1-winner].ReadRef(bg, "sessions/r")
				if err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("round%d-store%d", round, winner); got.Target != want {
					t.Fatalf("round %d: ref is %q, want the winner's %q", round, got.Target, want)
				}
			}
		})
	}
}

// TestDeleteRefIfStrong: every backend with a compare-and-swap also
// deletes a ref on a condition: the old name of a renamed ref goes only
// while it holds what the rename copied (audit 28: a value another writer
// put there meanwhile was deleted with it), with no fallback to a re-read.
func TestDeleteRefIfStrong(t *testing.T) {
	for _, kind := range casKinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newStore(testbucket.Open(t, kind))
			if err := s.Link(bg, "r", "one"); err != nil {
				t.Fatal(err)
			}
			read, err := s.ReadRef(bg, "r")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RenameRef(bg, "r", read, "two"); err != nil {
				t.Fatal(err)
			}
			// fake-gcs-server (v1.55.1) deletes whatever the
			// ifGenerationMatch of the request (fakestorage/object.go,
			// deleteObject), where GCS refuses with 412: there only
			// the unchanged case below is checked.
			if err := s.DeleteRefIf(bg, "r", read); kind != testbucket.GCS && !errors.Is(err, layout.ErrRefChanged) {
				t.Fatalf("delete of a ref changed since it was read: %v, want ErrRefChanged", err)
			}
			if kind == testbucket.GCS {
				if err := s.Link(bg, "r", "two"); err != nil {
					t.Fatal(err)
				}
			}
			now, err := s.ReadRef(bg, "r")
			if err != nil || now.Target != "two" {
				t.Fatalf("after the refused delete: %q, %v; want the other writer's two", now.Target, err)
			}
			if err := s.DeleteRefIf(bg, "r", now); err != nil {
				t.Fatalf("delete of an unchanged ref: %v, want a conditional delete", err)
			}
			if _, err := s.ReadRef(bg, "r"); !errors.Is(err, layout.ErrNotFound) {
				t.Fatalf("after the delete: %v, want ErrNotFound", err)
			}
			// Gone already: no error. Azure answers 412, which read as
			// the ref having changed, and mv of a ref another writer
			// removed failed after its target was written (review 30).
			if err := s.DeleteRefIf(bg, "r", now); err != nil {
				t.Errorf("delete of a ref gone already: %v, want nil", err)
			}
		})
	}
}

// TestRenameRefStrong renames a ref twice in a row and from a stale read:
// the first two are strong swaps (no ErrWeakCAS, which is what makes a
// mount log the fallback warning), the stale one is a conflict that
// leaves the ref alone.
func TestRenameRefStrong(t *testing.T) {
	for _, kind := range casKinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newStore(testbucket.Open(t, kind))
			if err := s.Link(bg, "r", "one"); err != nil {
				t.Fatal(err)
			}
			stale, err := s.ReadRef(bg, "r")
			if err != nil {
				t.Fatal(err)
			}
			prev := stale
			for _, target := range []string{"two", "three"} {
				if err := s.RenameRef(bg, "r", prev, target); err != nil {
					t.Fatalf("rename to %s: %v", target, err)
				}
				if prev, err = s.ReadRef(bg, "r"); err != nil || prev.Target != target {
					t.Fatalf("after rename to %s: %+v, %v", target, prev, err)
				}
			}
			if err := s.RenameRef(bg, "r", stale, "four"); !errors.Is(err, layout.ErrConflict) {
				t.Fatalf("rename from a stale read: %v, want ErrConflict", err)
			}
			if got, _ := s.ReadRef(bg, "r"); got.Target != "three" {
				t.Fatalf("ref is %q after the refused rename, want three", got.Target)
			}
			// The If-Match PUT a retry repeats after a lost response
			// meets its own write: a stale prev, and the ref already
			// holding the target, is a success (§13.2).
			if err := s.RenameRef(bg, "r", stale, "three"); err != nil {
				t.Fatalf("rename to the target the ref holds: %v, want success", err)
			}
		})
	}
}

// marker is what the corrupting proxy changes in a request body (one
// byte, so the length stays and only a checksum can notice).
const marker = "PUGFS-CORRUPT-ME"

// corruptingProxy forwards to target and, while on is set, flips one
// byte of marker in every request body: a body changed in transit.
type corruptingProxy struct {
	on      atomic.Bool
	flipped atomic.Int64
	srv     *httptest.Server
}

func newCorruptingProxy(t *testing.T, targetHost string) *corruptingProxy {
	t.Helper()
	p := &corruptingProxy{}
	target := &url.URL{Scheme: "http", Host: targetHost}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host // signatures (Azure's shared key) cover the host as sent
		r := pr.Out
		if !p.on.Load() || r.Body == nil {
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return
		}
		if i := bytes.Index(body, []byte(marker)); i >= 0 {
			body[i+len(marker)-1] ^= 0x20
			p.flipped.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *corruptingProxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// TestBlobBodyChecked sends blobs through a proxy that changes one byte
// of the body on the way: GCS (the declared MD5) and Azure (the MD5 of a
// one-request upload, the CRC64 of every staged block) must refuse them,
// so no blob with the wrong bytes ever lands under its digest's key.
func TestBlobBodyChecked(t *testing.T) {
	for _, tc := range []struct {
		kind testbucket.Kind
		open func(t *testing.T, host string) (*blob.Bucket, string)
	}{
		{testbucket.GCS, func(t *testing.T, host string) (*blob.Bucket, string) {
			srv := cloudtest.SharedGCS(t)
			_, u := srv.NewBucket(t)
			name := strings.TrimPrefix(u, "gs://")
			b, err := cloudtest.OpenGCSBucket(bg, host, name)
			if err != nil {
				t.Fatal(err)
			}
			return b, srv.Host
		}},
		{testbucket.Azure, func(t *testing.T, host string) (*blob.Bucket, string) {
			srv := cloudtest.SharedAzure(t)
			_, u := srv.NewBucket(t)
			pu, _ := url.Parse(u)
			b, err := cloudtest.OpenAzureBucket(bg, host, pu.Host)
			if err != nil {
				t.Fatal(err)
			}
			return b, srv.Host
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			var emulator string
			switch tc.kind {
			case testbucket.GCS:
				emulator = cloudtest.SharedGCS(t).Host
			case testbucket.Azure:
				emulator = cloudtest.SharedAzure(t).Host
			}
			p := newCorruptingProxy(t, emulator)
			b, _ := tc.open(t, p.host())
			defer b.Close()
			s := newStore(b)

			// One request, and (Azure: above the 5 MiB block size) a
			// body staged as several blocks.
			for _, size := range []int{len(marker) + 10, 3 << 20, 12 << 20} {
				body := bytes.Repeat([]byte("x"), size)
				copy(body[(size-len(marker))/2:], marker)
				p.on.Store(true)
				before := p.flipped.Load()
				start := time.Now()
				_, err := s.PutBlobBytes(bg, body, layout.BlobOptions{})
				p.on.Store(false)
				t.Logf("%d bytes corrupted: refused in %v: %v", size, time.Since(start), err)
				if p.flipped.Load() == before {
					t.Fatalf("%d bytes: the proxy saw no body to corrupt", size)
				}
				if err == nil {
					t.Fatalf("%d bytes: a body changed in transit was accepted", size)
				}
				if tc.kind == testbucket.GCS && !strings.Contains(err.Error(), "MD5") {
					t.Fatalf("%d bytes: refused, but not for the declared MD5: %v", size, err)
				}
				d := layout.DigestOf(body)
				if ok, err := b.Exists(bg, layout.BlobKey(d)); err != nil || ok {
					t.Fatalf("%d bytes: blob %s exists (%v) after a refused upload", size, d, err)
				}
				// The same bytes, uncorrupted, go through, and the
				// blob's Content-MD5 is the body's.
				if _, err := s.PutBlobBytes(bg, body, layout.BlobOptions{}); err != nil {
					t.Fatalf("%d bytes, no corruption: %v", size, err)
				}
				a, err := b.Attributes(bg, layout.BlobKey(d))
				if err != nil {
					t.Fatal(err)
				}
				if sum := md5.Sum(body); !bytes.Equal(a.MD5, sum[:]) {
					t.Fatalf("%d bytes: stored Content-MD5 %x, want %x", size, a.MD5, sum)
				}
			}

			// Control: a streamed write without the store's conditions
			// (and without WriteAll's own ContentMD5) of a corrupted
			// body lands corrupted: the refusal above is the hooks'.
			p.on.Store(true)
			w, err := b.NewWriter(bg, "plain", &blob.WriterOptions{ContentType: "text/plain"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("0123456789" + marker + "0123456789")); err != nil {
				t.Fatal(err)
			}
			err = w.Close()
			p.on.Store(false)
			if err != nil {
				// The GCS client sends a CRC32C of its own by default.
				t.Logf("control: a plain corrupted write is refused too: %v", err)
			} else if got, _ := b.ReadAll(bg, "plain"); !bytes.Contains(got, []byte("PUGFS-CORRUPT-Me")) {
				t.Fatalf("control write: stored %q, want the corrupted body", got)
			}
		})
	}
}

// TestOpenURLPrefix: a prefix= in a bucket URL roots the bucket below
// that prefix, on every backend that opens by URL. OpenURL opens s3://,
// gs:// and azblob:// itself, past gocloud's URL mux, which is what
// handles the parameter: S3 refused it ("unknown query parameter").
func TestOpenURLPrefix(t *testing.T) {
	eachURL(t, func(t *testing.T, b *blob.Bucket, u string) {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		ctx := context.Background()
		pb, err := drivers.OpenURL(ctx, u+sep+"prefix=team%2F")
		if err != nil {
			t.Fatalf("open %s with a prefix: %v", u, err)
		}
		defer pb.Close()
		if err := pb.WriteAll(ctx, "refs/x", []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
		if got, err := b.ReadAll(ctx, "team/refs/x"); err != nil || string(got) != "v" {
			t.Fatalf("the bucket's team/refs/x: %q, %v; want what was written below the prefix", got, err)
		}
		if ok, _ := b.Exists(ctx, "refs/x"); ok {
			t.Fatal("refs/x was written outside the prefix")
		}
		// Keys are no paths: .. would be a key named ..__0x2f__x.
		if pb, err := drivers.OpenURL(ctx, u+sep+"prefix=..%2Fx"); err == nil {
			pb.Close()
			t.Fatal("prefix=../x was taken")
		}
	})
}

// TestEncodedBlobReadRaw: a blob stored with a Content-Encoding reads
// back as stored, whole or in part, on every backend opened by URL.
// Go's HTTP transport asks for gzip itself on a GET without a Range and
// then decodes what carries Content-Encoding: gzip, so on Azure a whole
// gzip body came back decoded, failed its digest (EIO under objects/)
// and made fsck report bit rot in a healthy bucket (audit 3).
func TestEncodedBlobReadRaw(t *testing.T) {
	eachURL(t, func(t *testing.T, _ *blob.Bucket, u string) {
		ctx := context.Background()
		ub, err := drivers.OpenURL(ctx, u)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		defer ub.Close()
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(bytes.Repeat([]byte("a compressible line of text\n"), 200))
		zw.Close()
		s := newStore(ub)
		bi, err := s.PutBlobBytes(ctx, gz.Bytes(), layout.BlobOptions{ContentEncoding: layout.EncodingGzip})
		if err != nil {
			t.Fatal(err)
		}
		key := layout.BlobKey(bi.Digest)
		if got, err := ub.ReadAll(ctx, key); err != nil || !bytes.Equal(got, gz.Bytes()) {
			t.Fatalf("whole read of %s: %d bytes, %v; want the %d stored bytes", key, len(got), err, gz.Len())
		}
		r, err := ub.NewRangeReader(ctx, key, 0, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		head, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(head, gz.Bytes()[:10]) {
			t.Fatalf("ranged read: %x, %v; want %x", head, err, gz.Bytes()[:10])
		}
	})
}

// eachURL runs fn on every backend that opens by URL, with the bucket's
// URL and its credentials in the environment.
func eachURL(t *testing.T, fn func(t *testing.T, b *blob.Bucket, u string)) {
	testbucket.EachAll(t, func(t *testing.T, b *blob.Bucket) {
		if testbucket.KindOf(t, b) == testbucket.Mem {
			t.Skip("a mem bucket has no URL")
		}
		u, env := testbucket.URL(t, b)
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		fn(t, b, u)
	})
}

// TestOpenURLFault: a fault+ URL opens its inner bucket as the plain URL
// does, so a lost create-if-absent race is the plain bucket's refusal,
// not a crash: gocloud's azureblob panicked in the writer's Close when a
// fault+azblob:// mount lost one, because the inner container was opened
// without azurefix (audit 4).
func TestOpenURLFault(t *testing.T) {
	eachURL(t, func(t *testing.T, _ *blob.Bucket, u string) {
		ctx := context.Background()
		for _, pre := range []string{"", faultblob.SchemePrefix} {
			b, err := drivers.OpenURL(ctx, pre+u)
			if err != nil {
				t.Fatalf("open %s%s: %v", pre, u, err)
			}
			defer b.Close()
			key := "sessions/race-" + strings.TrimSuffix(pre, "+")
			create := func(body string) error {
				return b.WriteAll(ctx, key, []byte(body), &blob.WriterOptions{IfNotExist: true})
			}
			if err := create("first"); err != nil {
				t.Fatalf("%s%s: first create: %v", pre, u, err)
			}
			if err := create("second"); gcerrors.Code(err) != gcerrors.FailedPrecondition {
				t.Fatalf("%s%s: second create of %s: %v (code %v), want FailedPrecondition", pre, u, key, err, gcerrors.Code(err))
			}
			if got, err := b.ReadAll(ctx, key); err != nil || string(got) != "first" {
				t.Fatalf("%s%s: %s holds %q, %v; want the first create's", pre, u, key, got, err)
			}
		}
	})
}
