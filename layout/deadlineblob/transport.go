package deadlineblob

import (
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"syscall"
)

// uploadKey is the context key under which a stream of OpPut carries its
// watch, for the HTTP transport below the driver to report progress to.
type uploadKey struct{}

// WatchBody returns req made to report its progress to the deadline of
// the upload it belongs to, when its context is the one a driver was
// given to write with (or one derived from it); otherwise, or when req has
// no body, req itself. Call done once the response has arrived or the
// request has failed.
//
// Progress is of two kinds. The HTTP client reads the body as the
// connection accepts it, and every read starts the step's countdown
// again. Once the body is read, the kernel's send buffer (up to megabytes,
// sized by TCP) may still hold a good part of it: on Linux, the
// countdown also starts again while the connection's queue of bytes not
// yet acknowledged by the peer shrinks. The wait for the response is then
// bounded by the timeout.
//
// The returned request is a shallow copy, as a RoundTripper must not
// change the request it was given; GetBody is wrapped too, so a body
// rewound for a retry of the transport still reports.
func WatchBody(req *http.Request) (r *http.Request, done func()) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, func() {}
	}
	w, ok := req.Context().Value(uploadKey{}).(*watch)
	if !ok {
		return req, func() {}
	}
	q := &sendQueue{}
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { w.follow(q, rawConn(info.Conn)) },
	})
	r = req.WithContext(ctx)
	r.Body = &progressBody{ReadCloser: req.Body, w: w, q: q}
	if get := req.GetBody; get != nil {
		r.GetBody = func() (io.ReadCloser, error) {
			b, err := get()
			if err != nil || b == nil || b == http.NoBody {
				return b, err
			}
			return &progressBody{ReadCloser: b, w: w, q: q}, nil
		}
	}
	return r, func() { w.unfollow(q) }
}

// Transport returns a RoundTripper that sends every request through next
// with its progress watched (WatchBody). Give it to the HTTP client of a
// driver whose bucket is wrapped by Wrap or Over, so that a slow but live
// upload is not cut off.
func Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper{next: next}
}

type roundTripper struct {
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r, done := WatchBody(req)
	defer done()
	return t.next.RoundTrip(r)
}

// progressBody is a request body that reports every read of bytes to the
// upload's watch.
type progressBody struct {
	io.ReadCloser
	w *watch
	q *sendQueue // of the same request
}

// Read implements io.Reader.
func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.progress(b.q)
	}
	return n, err
}

// sendQueue follows the kernel's queue of bytes sent on a request's
// connection and not yet acknowledged by the peer. It is looked at, under
// the watch's lock, at every read of the body (so that when the reads
// stop, it knows how much was left) and when the countdown runs out. On
// an HTTP/2 connection the queue is that of every request it carries:
// the connection moving at all is taken as this request moving.
type sendQueue struct {
	conn syscall.RawConn // nil when the connection has no descriptor
	left int             // the queue's length when last asked
}

// moved reports whether the queue has shrunk since it was last asked: the
// peer acknowledged bytes of the request.
func (q *sendQueue) moved() bool {
	if q.conn == nil {
		return false
	}
	n, ok := unacked(q.conn)
	if !ok {
		return false
	}
	moved := n < q.left
	q.left = n
	return moved
}

// rawConn returns the descriptor of the TCP connection under c (a TLS
// connection is unwrapped), or nil.
func rawConn(c net.Conn) syscall.RawConn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
