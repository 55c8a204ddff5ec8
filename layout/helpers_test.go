package layout

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// The tests cite the section of storage-layout.txt (§n) or decisions.md
// they check in their names: TestSection6_1_... checks §6.1.

func TestMain(m *testing.M) { testbucket.Main(m) }

var bg = context.Background()

// testNow pins the clock so that session IDs fall in a known partition.
var testNow = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// eachBackend runs fn on every backend of the shared suite (mem, the
// local driver, a real S3 server).
func eachBackend(t *testing.T, fn func(t *testing.T, b *blob.Bucket)) {
	t.Helper()
	testbucket.Each(t, fn)
}

// newStore returns a Store with fast retries over b.
func newStore(t *testing.T, b *blob.Bucket, opts *Options) *Store {
	t.Helper()
	o := Options{RetryBase: time.Millisecond, Now: func() time.Time { return testNow }}
	if opts != nil {
		if opts.MaxDecoded != 0 {
			o.MaxDecoded = opts.MaxDecoded
		}
		if opts.Retries != 0 {
			o.Retries = opts.Retries
		}
		if opts.CommitRetries != 0 {
			o.CommitRetries = opts.CommitRetries
		}
		if opts.Now != nil {
			o.Now = opts.Now
		}
		o.PutBlindBelow = opts.PutBlindBelow
		o.Keeper = opts.Keeper
	}
	return New(b, &o)
}

// newSession creates a fresh root session.
func newSession(t *testing.T, s *Store) SessionID {
	t.Helper()
	m := s.NewRootManifest()
	if _, created, err := s.CreateSession(bg, m); err != nil || !created {
		t.Fatalf("create session: created=%v err=%v", created, err)
	}
	return m.Session
}

// desc returns a named descriptor for body (inline when small).
func desc(name, body string) Descriptor {
	d := Descriptor{Digest: DigestOf([]byte(body)), Size: int64(len(body)), Name: name,
		ContentType: "text/plain", CreatedAt: testNow}
	if len(body) <= InlineLimit {
		d.Data = []byte(body)
	}
	return d
}

func descs(names ...string) []Descriptor {
	out := make([]Descriptor, len(names))
	for i, n := range names {
		out[i] = desc(n, "body of "+n)
	}
	return out
}

// commit commits ds and fails the test on error.
func commit(t *testing.T, s *Store, id SessionID, typ SnapshotType, ds ...Descriptor) CommitResult {
	t.Helper()
	r, err := s.Commit(bg, id, CommitRequest{Type: typ, Descriptors: ds})
	if err != nil {
		t.Fatalf("commit %s: %v", typ, err)
	}
	return r
}

// putRaw writes an object directly, bypassing the Store.
func putRaw(t *testing.T, b *blob.Bucket, key string, body []byte, wo *blob.WriterOptions) {
	t.Helper()
	if wo == nil {
		wo = &blob.WriterOptions{}
	}
	if wo.ContentType == "" {
		wo.ContentType = "application/octet-stream"
	}
	if err := b.WriteAll(bg, key, body, wo); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// putSnapshot writes a snapshot file directly with the given metadata.
func putSnapshot(t *testing.T, b *blob.Bucket, id SessionID, v uint32, md map[string]string, ds ...Descriptor) {
	t.Helper()
	key, err := SnapshotKey(id, v)
	if err != nil {
		t.Fatal(err)
	}
	body, err := EncodeDescriptors(ds)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, b, key, body, &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd", Metadata: md})
}

// names returns the descriptor names of a log.
func names(log []Entry) string {
	var parts []string
	for _, e := range log {
		parts = append(parts, e.Name)
	}
	return strings.Join(parts, ",")
}

// seqs checks that the entries of one session carry first, first+1, ...
func checkSeqs(t *testing.T, ds []Descriptor, first int64) {
	t.Helper()
	for i, d := range ds {
		if d.SequenceNumber != first+int64(i) {
			t.Fatalf("descriptor %d (%q): sequence %d, want %d", i, d.Name, d.SequenceNumber, first+int64(i))
		}
	}
}

// allDescs reads snapshots 1..latest of id, concatenated.
func allDescs(t *testing.T, s *Store, id SessionID) []Descriptor {
	t.Helper()
	v, err := s.LatestVersion(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []Descriptor
	for w := uint32(1); w <= v; w++ {
		ds, err := s.ReadSnapshot(bg, id, w)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}

var _ = bytes.Equal

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("got error %v, want %v", err, target)
	}
}

func memBucket() *blob.Bucket { return memblob.OpenBucket(nil) }

func contextWithCancel() (context.Context, context.CancelFunc) { return context.WithCancel(bg) }
