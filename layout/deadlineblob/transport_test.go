package deadlineblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// httpBucket is an inner driver whose writers upload as S3's do below
// its part size: Write buffers, Close sends the whole body in one PUT to
// url, under the context the writer was opened with. Only writing is
// implemented; the embedded nil interface panics for the rest.
type httpBucket struct {
	driver.Bucket
	client *http.Client
	url    string
}

func (b *httpBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (b *httpBucket) As(any) bool                            { return false }
func (b *httpBucket) ErrorAs(error, any) bool                { return false }
func (b *httpBucket) Close() error                           { return nil }
func (b *httpBucket) NewTypedWriter(ctx context.Context, key, _ string, _ *driver.WriterOptions) (driver.Writer, error) {
	return &httpWriter{ctx: ctx, b: b, key: key}, nil
}

type httpWriter struct {
	ctx context.Context
	b   *httpBucket
	key string
	buf bytes.Buffer
}

func (w *httpWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *httpWriter) Upload(io.Reader) error      { return errors.New("not implemented") }

func (w *httpWriter) Close() error {
	if err := w.ctx.Err(); err != nil {
		return err // an abort
	}
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPut, w.b.url+"/"+w.key, bytes.NewReader(w.buf.Bytes()))
	if err != nil {
		return err
	}
	resp, err := w.b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %s", w.key, resp.Status)
	}
	return nil
}

// uploadLimit is the request timeout of the upload tests: the steady
// uploads take about twice as long in all.
const uploadLimit = time.Second

// upload writes size bytes to "k" through a deadline wrapper over an
// httpBucket whose PUTs the handler h serves on loopback. sndbuf, if not
// zero, is the client's socket send buffer; alive, if not nil, is
// OverLive's.
func upload(t *testing.T, h http.HandlerFunc, size, sndbuf int, alive func()) error {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if sndbuf > 0 {
		d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sndbuf)
			})
			return errors.Join(err, serr)
		}}
		tr.DialContext = d.DialContext
	}
	t.Cleanup(tr.CloseIdleConnections)
	inner := &httpBucket{client: &http.Client{Transport: Transport(tr)}, url: srv.URL}
	b := blob.NewBucket(OverLive(blobwrap.Portable(blob.NewBucket(inner)), uploadLimit, alive))
	t.Cleanup(func() { b.Close() })
	body := bytes.Repeat([]byte{'p'}, size)
	return within(t, "upload", func() error {
		w, err := b.NewWriter(context.Background(), "k", nil)
		if err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
}

// TestSlowUploadCommits sends a body that the server reads slowly but
// steadily, for about twice the request timeout in all: it must land.
// With a small send buffer, the HTTP client's reads of the body are the
// progress; with the kernel's own (which on loopback takes megabytes at
// once), the draining of the connection's send queue is. Either is told
// to OverLive's alive, for the scheduler above, which sees no step of
// the Close that sends the body.
func TestSlowUploadCommits(t *testing.T) {
	const size = 3 << 20
	for _, tc := range []struct {
		name   string
		sndbuf int
	}{
		{"small send buffer", 32 << 10},
		{"default send buffer", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sndbuf == 0 && runtime.GOOS != "linux" {
				t.Skip("the send queue is followed on Linux only")
			}
			got := make(chan int, 1)
			var lived atomic.Int64
			err := upload(t, func(w http.ResponseWriter, r *http.Request) {
				// 16 KiB every 10 ms, 1.6 MB/s at most: about two
				// seconds for the body, no pause near the timeout.
				buf := make([]byte, 16<<10)
				n := 0
				for {
					m, err := io.ReadFull(r.Body, buf)
					n += m
					if err != nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				got <- n
			}, size, tc.sndbuf, func() { lived.Add(1) })
			if err != nil {
				t.Fatalf("slow but steady upload: %v", err)
			}
			if lived.Load() == 0 {
				t.Error("the upload's progress was not told to alive")
			}
			if n := <-got; n != size {
				t.Errorf("server read %d bytes, want %d", n, size)
			}
		})
	}
}

// TestStalledUploadTimesOut sends a body that the server stops reading
// after 64 KiB and never answers: the Close that sends it must fail with
// a TimeoutError, not hang.
func TestStalledUploadTimesOut(t *testing.T) {
	stop := make(chan struct{})
	err := upload(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.CopyN(io.Discard, r.Body, 64<<10)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}, 4<<20, 0, nil)
	// Registered after upload's srv.Close, so run before it: the
	// handler must return for the server to close.
	t.Cleanup(func() { close(stop) })
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("stalled upload: %v (%T), want a *TimeoutError", err, err)
	}
	if te.Op != OpPut || te.Key != "k" || te.Timeout != uploadLimit {
		t.Errorf("TimeoutError{Op: %q, Key: %q, Timeout: %v}, want {%q, %q, %v}", te.Op, te.Key, te.Timeout, OpPut, "k", uploadLimit)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match context.DeadlineExceeded", err)
	}
}

// TestWatchBodyLeavesOtherRequests: a request outside an upload, or
// without a body, goes out as it is.
func TestWatchBodyLeavesOtherRequests(t *testing.T) {
	for _, body := range []io.Reader{nil, bytes.NewReader([]byte("x"))} {
		req, err := http.NewRequest(http.MethodPut, "http://127.0.0.1/k", body)
		if err != nil {
			t.Fatal(err)
		}
		r, done := WatchBody(req)
		done()
		if r != req {
			t.Errorf("body %v: WatchBody changed a request of no upload", body)
		}
	}
	ctx, w := start(context.Background(), time.Minute, nil)
	defer w.end()
	req, err := http.NewRequestWithContext(context.WithValue(ctx, uploadKey{}, w), http.MethodGet, "http://127.0.0.1/k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, done := WatchBody(req); r != req {
		t.Errorf("WatchBody changed a request without a body")
	} else {
		done()
	}
}
