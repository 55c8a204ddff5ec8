package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// MaxDecoded bounds decoded snapshot/memory/manifest sizes; default
	// DefaultMaxDecoded.
	MaxDecoded int64
	// Retries is how many times a transient backend error is retried
	// (default 4; negative means none).
	Retries int
	// RetryBase is the first backoff delay (default 50ms), doubled per try.
	RetryBase time.Duration
	// CommitRetries caps commit attempts (§13.3; default 100).
	CommitRetries int
	// Now returns the current time (default time.Now); tests pin it.
	Now func() time.Time
	// PutBlindBelow: a blob of fewer bytes than this is uploaded without
	// first asking (HEAD) whether the bucket holds it. Writing a blob
	// again is harmless (§3: the key names the content), and on a
	// remote bucket the HEAD is a round trip that costs about what
	// sending a small body does, so asking pays only for bodies large
	// enough that not sending them saves more. 0 (the default) always
	// asks: on a local disk asking is a stat, far cheaper than the
	// write and fsyncs it can save.
	PutBlindBelow int64
	// Keeper, if set, keeps the bodies of snapshots and manifests read
	// from the bucket and gives them back when a listing shows the same
	// object unchanged (kept.go).
	Keeper Keeper
}

// Store is the pugmark layout over one bucket. It is safe for concurrent
// use and holds no cache: every call goes to the bucket (cache/ sits on
// top).
type Store struct {
	b      *blob.Bucket
	opts   Options
	st     counters
	stamps stamps
}

// New returns a Store over b.
func New(b *blob.Bucket, opts *Options) *Store {
	s := &Store{b: b}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.MaxDecoded <= 0 {
		s.opts.MaxDecoded = DefaultMaxDecoded
	}
	if s.opts.Retries == 0 {
		s.opts.Retries = 4
	}
	if s.opts.RetryBase <= 0 {
		s.opts.RetryBase = 50 * time.Millisecond
	}
	if s.opts.CommitRetries <= 0 {
		s.opts.CommitRetries = 100
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	return s
}

// Bucket returns the underlying bucket.
func (s *Store) Bucket() *blob.Bucket { return s.b }

// Stats counts backend requests by kind, bytes, retries and errors.
type Stats struct {
	Gets, Heads, Puts, Lists, Deletes int64
	BytesRead, BytesWritten           int64
	Retries, Errors                   int64
	// PeakInFlight is the most requests this store has had in flight at
	// once since it was made: how a test sees that a walk overlaps its
	// requests without timing it.
	PeakInFlight int64
	// BlobsLinked counts blobs stored by publishing the caller's file
	// itself (PutBlobFile, BlobInfo.Linked): uploads that copied nothing.
	BlobsLinked int64
	// Damaged counts the descriptors read with fields that could not be
	// read (Descriptor.Damage), each time their file was read.
	Damaged int64
	// Kept counts the snapshots and manifests read from Options.Keeper
	// instead of the bucket.
	Kept int64
}

type counters struct {
	gets, heads, puts, lists, deletes atomic.Int64
	bytesRead, bytesWritten           atomic.Int64
	retries, errors                   atomic.Int64
	inFlight, peakInFlight            atomic.Int64
	blobsLinked                       atomic.Int64
	damaged                           atomic.Int64
	kept                              atomic.Int64
}

// enter counts a request in flight and returns its leave.
func (c *counters) enter() func() {
	n := c.inFlight.Add(1)
	for {
		p := c.peakInFlight.Load()
		if n <= p || c.peakInFlight.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { c.inFlight.Add(-1) }
}

// Stats returns a snapshot of the request counters.
func (s *Store) Stats() Stats {
	return Stats{
		Gets: s.st.gets.Load(), Heads: s.st.heads.Load(), Puts: s.st.puts.Load(),
		Lists: s.st.lists.Load(), Deletes: s.st.deletes.Load(),
		BytesRead: s.st.bytesRead.Load(), BytesWritten: s.st.bytesWritten.Load(), BlobsLinked: s.st.blobsLinked.Load(),
		Retries: s.st.retries.Load(), Errors: s.st.errors.Load(),
		PeakInFlight: s.st.peakInFlight.Load(), Damaged: s.st.damaged.Load(),
		Kept: s.st.kept.Load(),
	}
}

// retry runs fn until it succeeds, fails permanently, or the retry budget
// or ctx runs out. Backoff is exponential with full jitter.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; ; attempt++ {
		leave := s.st.enter()
		err = fn()
		leave()
		if err == nil {
			return nil
		}
		if isPermanent(err) || attempt >= s.opts.Retries || ctx.Err() != nil {
			if !isNotFound(err) && !isPrecondition(err) && !errors.Is(err, errNoCAS) {
				s.st.errors.Add(1)
			}
			return err
		}
		s.st.retries.Add(1)
		d := s.opts.RetryBase << attempt
		d = time.Duration(rand.Int64N(int64(d)) + 1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// getAll reads a whole object, at most max bytes.
func (s *Store) getAll(ctx context.Context, key string, max int64) ([]byte, error) {
	body, _, err := s.getStamped(ctx, key, max)
	return body, err
}

// getStamped is getAll that also returns the stamp of what it read.
func (s *Store) getStamped(ctx context.Context, key string, max int64) ([]byte, Stamp, error) {
	var body []byte
	var st Stamp
	err := s.retry(ctx, func() error {
		s.st.gets.Add(1)
		r, err := s.b.NewReader(ctx, key, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		size := r.Size()
		if size > max {
			return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, key, size, max)
		}
		var buf bytes.Buffer
		// A server that streams the body without a Content-Length
		// reports no size (-1): that made Grow panic and took the mount
		// down at its first manifest read. The limit is the LimitReader's.
		if size > 0 {
			buf.Grow(int(size))
		}
		n, err := io.Copy(&buf, io.LimitReader(r, max+1))
		s.st.bytesRead.Add(n)
		if err != nil {
			return err
		}
		if n > max {
			return fmt.Errorf("%w: %s grew past %d bytes", ErrTooLarge, key, max)
		}
		if size < 0 {
			size = n
		}
		body = buf.Bytes()
		st = stampOf(size, r.ModTime())
		return nil
	})
	if err != nil {
		if isNotFound(err) {
			return nil, st, fmt.Errorf("get %s: %w", key, ErrNotFound)
		}
		return nil, st, fmt.Errorf("get %s: %w", key, err)
	}
	return body, st, nil
}

// head returns an object's attributes.
func (s *Store) head(ctx context.Context, key string) (*blob.Attributes, error) {
	var a *blob.Attributes
	err := s.retry(ctx, func() error {
		s.st.heads.Add(1)
		var err error
		a, err = s.b.Attributes(ctx, key)
		return err
	})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("head %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("head %s: %w", key, err)
	}
	return a, nil
}

// exists reports whether key exists.
func (s *Store) exists(ctx context.Context, key string) (bool, error) {
	_, err := s.head(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// put writes body at key. Transient failures are retried; with
// IfNotExist, a retry after a lost response may report precondition-failed
// for our own write, which callers resolve (transaction IDs, digests).
func (s *Store) put(ctx context.Context, key string, body []byte, wo *blob.WriterOptions) error {
	_, err := s.putCounted(ctx, key, body, wo)
	return err
}

// putCounted is put, also returning how many attempts it made: a
// precondition refusal of the first attempt means no PUT of this call
// landed; after a retry, the refusal may be this call's own earlier PUT
// whose reply was lost.
func (s *Store) putCounted(ctx context.Context, key string, body []byte, wo *blob.WriterOptions) (attempts int, err error) {
	attempts, _, err = s.putTracked(ctx, key, body, wo)
	return attempts, err
}

// putTracked is putCounted, also reporting whether one of its attempts
// failed in a way that does not say nothing landed (mayHaveLanded): a
// PUT cut by its deadline, a connection broken before the reply. Only
// the last attempt's error is returned, and after a retry it is often
// the one that says least (a refusal meeting the earlier attempt's own
// write, §13.2).
func (s *Store) putTracked(ctx context.Context, key string, body []byte, wo *blob.WriterOptions) (attempts int, unsure bool, err error) {
	err = s.retry(ctx, func() error {
		attempts++
		s.st.puts.Add(1)
		opts := *wo
		smallBuffer(&opts, int64(len(body)))
		err := s.b.WriteAll(ctx, key, body, &opts)
		if err == nil {
			s.st.bytesWritten.Add(int64(len(body)))
		} else if mayHaveLanded(err) {
			unsure = true
		}
		return err
	})
	if err != nil {
		return attempts, unsure, fmt.Errorf("put %s: %w", key, err)
	}
	return attempts, unsure, nil
}

// Probe sends one LIST of one key under sessions/, counted in Stats as
// every request of the store is, and returns the backend's error as it
// is (no retries: the caller, a mount checking its bucket, decides).
func (s *Store) Probe(ctx context.Context) error {
	s.st.lists.Add(1)
	_, _, err := s.b.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: SessionsPrefix, Delimiter: "/"})
	return err
}

// walk calls fn for every object and (with delim) prefix under prefix, in
// key order, a page at a time; fn returning false stops.
func (s *Store) walk(ctx context.Context, prefix, delim string, fn func(*blob.ListObject) (bool, error)) error {
	token := blob.FirstPageToken
	for {
		page, next, err := s.listPage(ctx, nil, prefix, delim, token)
		if err != nil {
			return err
		}
		for _, o := range page {
			more, err := fn(o)
			if err != nil || !more {
				return err
			}
		}
		if len(next) == 0 {
			return nil
		}
		token = next
	}
}

func (s *Store) delete(ctx context.Context, key string) error {
	err := s.retry(ctx, func() error {
		s.st.deletes.Add(1)
		return s.b.Delete(ctx, key)
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}
