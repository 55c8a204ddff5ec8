// Package logblob logs every request of a bucket (pugfs mount --debug), as
// restic's logging backend does: one line per request at debug level with
// the operation, the key (a listing's prefix, a copy's destination), how
// long it took and its error. A reader or writer is one line when it
// ends, with the bytes that went through it and the time to open it.
//
// Nothing but keys, sizes, times and errors is logged: a key is the
// bucket's own naming (content digests, session IDs), never a credential.
// An error of a driver may carry the bucket URL, so the logger is expected
// to scrub credentials from what it prints, as pugfs mount's does
// (internal/redact); the errors are handed to it as error values for that.
package logblob

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/pugmark/pugfs/layout/blobwrap"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
)

// Wrap returns a bucket that forwards every request to inner and logs it
// on log at debug level. Closing it closes inner; As defers to inner.
func Wrap(inner *blob.Bucket, log *slog.Logger) *blob.Bucket {
	return blob.NewBucket(Over(blobwrap.Portable(inner), log))
}

// Over is Wrap as a driver over the driver next, for a stack of
// decorators under one portable bucket (blobwrap.Over).
func Over(next driver.Bucket, log *slog.Logger) driver.Bucket {
	return blobwrap.Over(next, &hooks{log: log})
}

type hooks struct{ log *slog.Logger }

// msg is the message of every line, so that one pattern finds them all.
const msg = "bucket request"

func (h *hooks) line(ctx context.Context, op blobwrap.Op, key string, took time.Duration, err error, more ...any) {
	args := append([]any{"op", string(op), "key", key, "took", took}, more...)
	if err != nil {
		args = append(args, "err", err)
	}
	h.log.Log(ctx, slog.LevelDebug, msg, args...)
}

// Request implements blobwrap.Hooks.
func (h *hooks) Request(ctx context.Context, op blobwrap.Op, key string, call func(context.Context) error) error {
	if !h.log.Enabled(ctx, slog.LevelDebug) {
		return call(ctx)
	}
	start := time.Now()
	err := call(ctx)
	h.line(ctx, op, key, time.Since(start), err)
	return err
}

// Stream implements blobwrap.Hooks.
func (h *hooks) Stream(ctx context.Context, op blobwrap.Op, key string) (context.Context, blobwrap.Stream, error) {
	if !h.log.Enabled(ctx, slog.LevelDebug) {
		return blobwrap.PassThrough{}.Stream(ctx, op, key)
	}
	return ctx, &stream{h: h, ctx: ctx, op: op, key: key, start: time.Now()}, nil
}

// stream gathers what one line says about a reader or writer. A stream's
// steps come from the one goroutine that uses the reader or writer, so
// its fields need no lock.
type stream struct {
	h     *hooks
	ctx   context.Context
	op    blobwrap.Op
	key   string
	start time.Time
	open  time.Duration
	bytes int64
	err   error // the first error, io.EOF excepted
}

var _ blobwrap.Counter = (*stream)(nil)

// Step implements blobwrap.Stream.
func (s *stream) Step(step blobwrap.Step, call func() error) error {
	err := call()
	if step == blobwrap.StepOpen {
		s.open = time.Since(s.start)
	}
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return err
}

// Count implements blobwrap.Counter.
func (s *stream) Count(n int) { s.bytes += int64(n) }

// End implements blobwrap.Stream: the stream's one line.
func (s *stream) End() {
	s.h.line(s.ctx, s.op, s.key, time.Since(s.start), s.err, "open", s.open, "bytes", s.bytes)
}
