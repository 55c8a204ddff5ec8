package deadlineblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"github.com/pugmark/pugfs/layout/blobwrap/blobwraptest"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// testTimeout is the deadline of the wrapped buckets in these tests: short,
// so a stalled request gives up quickly.
const testTimeout = 100 * time.Millisecond

// giveUp is how long a test waits for a call that must return before it
// declares the call hung. It is not a speed requirement.
const giveUp = 20 * time.Second

// within runs fn and fails t if it has not returned within giveUp.
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	c := make(chan error, 1)
	go func() { c <- fn() }()
	select {
	case err := <-c:
		return err
	case <-time.After(giveUp):
		t.Fatalf("%s did not return within %v: a request hangs", what, giveUp)
		return nil
	}
}

// wantTimeout checks that err is the TimeoutError of op on key.
func wantTimeout(t *testing.T, err error, op, key string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s %s: no error, want a timeout", op, key)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s %s: %v does not match context.DeadlineExceeded", op, key, err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("%s %s: %v matches context.Canceled (would read as an interrupted call)", op, key, err)
	}
	if c := gcerrors.Code(err); c != gcerrors.DeadlineExceeded {
		t.Errorf("%s %s: gcerrors code %v, want DeadlineExceeded", op, key, c)
	}
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("%s %s: %v (%T) is not a *TimeoutError", op, key, err, err)
	}
	if te.Op != op || te.Key != key || te.Timeout != testTimeout {
		t.Errorf("TimeoutError{Op: %q, Key: %q, Timeout: %v}, want {%q, %q, %v}", te.Op, te.Key, te.Timeout, op, key, testTimeout)
	}
	if !strings.Contains(err.Error(), key) {
		t.Errorf("message %q does not name the key %q", err.Error(), key)
	}
}

// faulty returns a memblob holding "a/obj" and "a/src", behind a fault
// injector, behind the deadline wrapper.
func faulty(t *testing.T) (*blob.Bucket, *faultblob.Injector) {
	t.Helper()
	mem := memblob.OpenBucket(nil)
	ctx := context.Background()
	for _, k := range []string{"a/obj", "a/src"} {
		if err := mem.WriteAll(ctx, k, []byte("body of "+k), nil); err != nil {
			t.Fatal(err)
		}
	}
	inj := faultblob.NewInjector(faultblob.Options{})
	b := Wrap(faultblob.Wrap(mem, inj), testTimeout)
	t.Cleanup(func() { b.Close() })
	return b, inj
}

// TestStalledRequestsTimeOut stalls each kind of request forever and checks
// that it fails with a TimeoutError naming its key, once: the wrapper does
// not retry.
func TestStalledRequestsTimeOut(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		fault faultblob.Op
		op    string
		key   string
		call  func(b *blob.Bucket) error
	}{
		{"attributes", faultblob.OpHead, OpHead, "a/obj", func(b *blob.Bucket) error {
			_, err := b.Attributes(ctx, "a/obj")
			return err
		}},
		{"open reader", faultblob.OpGet, OpGet, "a/obj", func(b *blob.Bucket) error {
			_, err := b.NewRangeReader(ctx, "a/obj", 0, -1, nil)
			return err
		}},
		{"read all", faultblob.OpGet, OpGet, "a/obj", func(b *blob.Bucket) error {
			_, err := b.ReadAll(ctx, "a/obj")
			return err
		}},
		{"list page", faultblob.OpList, OpList, "a/", func(b *blob.Bucket) error {
			_, _, err := b.ListPage(ctx, blob.FirstPageToken, 10, &blob.ListOptions{Prefix: "a/"})
			return err
		}},
		{"list iterator", faultblob.OpList, OpList, "a/", func(b *blob.Bucket) error {
			_, err := b.List(&blob.ListOptions{Prefix: "a/", Delimiter: "/"}).Next(ctx)
			return err
		}},
		{"put", faultblob.OpPut, OpPut, "a/new", func(b *blob.Bucket) error {
			return b.WriteAll(ctx, "a/new", []byte("x"), nil)
		}},
		{"conditional put", faultblob.OpPut, OpPut, "a/new", func(b *blob.Bucket) error {
			return b.WriteAll(ctx, "a/new", []byte("x"), &blob.WriterOptions{IfNotExist: true})
		}},
		{"streamed put", faultblob.OpPut, OpPut, "a/new", func(b *blob.Bucket) error {
			w, err := b.NewWriter(ctx, "a/new", &blob.WriterOptions{ContentType: "text/plain"})
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, strings.NewReader(strings.Repeat("x", 100000))); err != nil {
				w.Close()
				return err
			}
			return w.Close()
		}},
		{"copy", faultblob.OpCopy, OpCopy, "a/dst", func(b *blob.Bucket) error {
			return b.Copy(ctx, "a/dst", "a/src", nil)
		}},
		{"delete", faultblob.OpDelete, OpDelete, "a/obj", func(b *blob.Bucket) error {
			return b.Delete(ctx, "a/obj")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, inj := faulty(t)
			_, release := inj.Stall(tc.fault, faultblob.Match{})
			defer release()
			err := within(t, tc.name, func() error { return tc.call(b) })
			wantTimeout(t, err, tc.op, tc.key)
			// At most one: the wrapper must not retry. A streamed put can
			// run out of time in a Write, before its Close (the PUT)
			// reaches the bucket, on a loaded machine: zero is fine too.
			if n := inj.Stats().Ops[tc.fault].Requests; n > 1 {
				t.Errorf("%d %v requests reached the bucket, want at most 1 (the wrapper must not retry)", n, tc.fault)
			}
		})
	}
}

// TestAnsweringRequestsPass checks that requests that answer in time,
// and errors that are not timeouts, come through the wrapper unchanged,
// codes included.
func TestAnsweringRequestsPass(t *testing.T) {
	ctx := context.Background()
	b, inj := faulty(t)
	// A little latency, well inside the deadline, must not matter.
	inj.Add(faultblob.Rule{Latency: testTimeout / 10})
	for _, tc := range []struct {
		name string
		call func() error
		code gcerrors.ErrorCode
	}{
		{"read", func() error {
			got, err := b.ReadAll(ctx, "a/obj")
			if err == nil && string(got) != "body of a/obj" {
				err = fmt.Errorf("read %q", got)
			}
			return err
		}, gcerrors.OK},
		{"range read", func() error {
			got, err := b.NewRangeReader(ctx, "a/obj", 8, 1, nil)
			if err != nil {
				return err
			}
			defer got.Close()
			p, err := io.ReadAll(got)
			if err == nil && string(p) != "a" {
				err = fmt.Errorf("range read %q", p)
			}
			return err
		}, gcerrors.OK},
		{"attributes", func() error {
			a, err := b.Attributes(ctx, "a/obj")
			if err == nil && a.Size != int64(len("body of a/obj")) {
				err = fmt.Errorf("size %d", a.Size)
			}
			return err
		}, gcerrors.OK},
		{"missing", func() error { _, err := b.Attributes(ctx, "a/none"); return err }, gcerrors.NotFound},
		{"missing read", func() error { _, err := b.ReadAll(ctx, "a/none"); return err }, gcerrors.NotFound},
		{"create", func() error {
			return b.WriteAll(ctx, "a/once", []byte("1"), &blob.WriterOptions{IfNotExist: true})
		}, gcerrors.OK},
		{"lost race", func() error {
			return b.WriteAll(ctx, "a/once", []byte("2"), &blob.WriterOptions{IfNotExist: true})
		}, gcerrors.FailedPrecondition},
		{"copy", func() error { return b.Copy(ctx, "a/dst", "a/src", nil) }, gcerrors.OK},
		{"delete", func() error { return b.Delete(ctx, "a/dst") }, gcerrors.OK},
		{"delete missing", func() error { return b.Delete(ctx, "a/dst") }, gcerrors.NotFound},
		{"list", func() error {
			objs, _, err := b.ListPage(ctx, blob.FirstPageToken, 10, &blob.ListOptions{Prefix: "a/"})
			if err == nil && len(objs) != 3 {
				err = fmt.Errorf("listed %d objects, want 3", len(objs))
			}
			return err
		}, gcerrors.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := within(t, tc.name, tc.call)
			if c := gcerrors.Code(err); c != tc.code {
				t.Fatalf("code %v (%v), want %v", c, err, tc.code)
			}
			var te *TimeoutError
			if errors.As(err, &te) {
				t.Fatalf("a request that answered was reported as a timeout: %v", err)
			}
		})
	}
	var got *faultblob.Injector
	if !b.As(&got) || got != inj {
		t.Errorf("Bucket.As did not reach the fault injector below the wrapper")
	}
}

// TestCallerCancelIsNotATimeout: a caller that gives up (an interrupted
// FUSE call) gets context.Canceled, not a timeout, and its own deadline is
// reported as the caller's.
func TestCallerCancelIsNotATimeout(t *testing.T) {
	b, inj := faulty(t)
	g, release := inj.Stall(faultblob.OpHead, faultblob.Match{})
	defer release()
	long := Wrap(faultblob.Wrap(memblob.OpenBucket(nil), inj), time.Hour)
	defer long.Close()

	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan error, 1)
	go func() { _, err := long.Attributes(ctx, "a/obj"); c <- err }()
	for end := time.Now().Add(giveUp); g.Waiting() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the head never reached the stall")
		}
	}
	cancel()
	err := within(t, "cancelled head", func() error { return <-c })
	var te *TimeoutError
	if !errors.Is(err, context.Canceled) || errors.As(err, &te) {
		t.Errorf("cancelled head: %v, want context.Canceled and no TimeoutError", err)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), testTimeout/2)
	defer dcancel()
	err = within(t, "head past the caller's deadline", func() error {
		_, err := b.Attributes(dctx, "a/obj")
		return err
	})
	if !errors.As(err, &te) || te.Timeout != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("head past the caller's deadline: %v, want a TimeoutError with Timeout 0", err)
	}
}

// stubBucket is an inner driver whose readers are scripted (body), for
// the body-stall cases faultblob cannot make: its faults apply to the
// opening of a reader, not to its Reads. Only what the tests call is
// implemented; the embedded nil interface panics for the rest.
type stubBucket struct {
	driver.Bucket
	body func(ctx context.Context) driver.Reader
}

func (s *stubBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (s *stubBucket) As(any) bool                            { return false }
func (s *stubBucket) ErrorAs(error, any) bool                { return false }
func (s *stubBucket) Close() error                           { return nil }
func (s *stubBucket) NewRangeReader(ctx context.Context, key string, off, n int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	return s.body(ctx), nil
}

// stubReader yields chunks from next until it returns nil, then EOF.
type stubReader struct {
	next func(ctx context.Context) ([]byte, error)
	ctx  context.Context
}

func (r *stubReader) Read(p []byte) (int, error) {
	b, err := r.next(r.ctx)
	if err != nil {
		return 0, err
	}
	if b == nil {
		return 0, io.EOF
	}
	return copy(p, b), nil
}
func (r *stubReader) Close() error                         { return nil }
func (r *stubReader) Attributes() *driver.ReaderAttributes { return &driver.ReaderAttributes{Size: -1} }
func (r *stubReader) As(any) bool                          { return false }

// steadyLimit is the request timeout of TestBodyReads's slow but steady
// body.
const steadyLimit = time.Second

// TestBodyReads covers the reads of a body: one that stops half-way times
// out (like an HTTP body, the stub blocks until its context is done), one
// that keeps arriving slowly for longer than the timeout in all does not.
func TestBodyReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		// limit is the request timeout of the wrapper.
		limit   time.Duration
		next    func() func(ctx context.Context) ([]byte, error)
		want    string // the body, when it must be read whole
		timeout bool
	}{
		{"stalls after the first chunk", testTimeout, func() func(ctx context.Context) ([]byte, error) {
			sent := false
			return func(ctx context.Context) ([]byte, error) {
				if !sent {
					sent = true
					return []byte("first"), nil
				}
				<-ctx.Done()
				return nil, ctx.Err()
			}
		}, "", true},
		{"slow but steady", steadyLimit, func() func(ctx context.Context) ([]byte, error) {
			// 15 bytes a tenth of the timeout apart: one and a half
			// timeouts in all, no single read near one. The timeout is
			// a second: a race-built test on a busy machine has missed
			// a 100 ms one for a 10 ms wait.
			i := 0
			return func(ctx context.Context) ([]byte, error) {
				if i == 15 {
					return nil, nil
				}
				i++
				select {
				case <-time.After(steadyLimit / 10):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return []byte{'x'}, nil
			}
		}, strings.Repeat("x", 15), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stub := &stubBucket{body: func(ctx context.Context) driver.Reader {
				return &stubReader{next: tc.next(), ctx: ctx}
			}}
			b := Wrap(blob.NewBucket(stub), tc.limit)
			defer b.Close()
			var got bytes.Buffer
			err := within(t, "read", func() error {
				r, err := b.NewReader(context.Background(), "k", nil)
				if err != nil {
					return err
				}
				defer r.Close()
				_, err = io.Copy(&got, r)
				return err
			})
			if tc.timeout {
				wantTimeout(t, err, OpRead, "k")
				if got.String() != "first" {
					t.Errorf("read %q before the stall, want %q", got.String(), "first")
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("read %q, %v; want %q", got.String(), err, tc.want)
			}
		})
	}
}

// TestConformance: with requests that answer, the wrapper must be
// invisible to gocloud's driver suite.
func TestConformance(t *testing.T) {
	blobwraptest.Conformance(t, func(inner *blob.Bucket) driver.Bucket {
		return Over(blobwrap.Portable(inner), time.Minute)
	}, nil)
}
