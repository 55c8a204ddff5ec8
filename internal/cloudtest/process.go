package cloudtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testproc"
	"gocloud.dev/blob"
)

// BinaryEnv names the environment variable holding the directory of the
// project's test tools; the Makefile sets it to <module root>/.tools/bin.
// It is the same variable package s3test reads.
const BinaryEnv = testproc.BinaryEnv

// readyTimeout bounds how long a start waits for an emulator to answer.
// Azurite is a node program and takes a second or two on a loaded
// machine; the bound is generous so that a slow start is not a failure.
var readyTimeout = 60 * time.Second

// server is what every emulator of this package has: its address, its
// process and a counter that keeps bucket names unique.
type server struct {
	// Host is "127.0.0.1:PORT".
	Host string

	p   *testproc.Process
	seq atomic.Uint64
}

// start starts the emulator described by ts and fills s.
func (s *server) start(ts testproc.Server) error {
	ts.ReadyTimeout = readyTimeout
	p, host, err := ts.Start()
	if err != nil {
		return err
	}
	s.Host, s.p = host, p
	return nil
}

// Stop kills the emulator. It is safe to call more than once.
func (s *server) Stop() { s.p.Stop() }

// Output returns the tail of what the emulator has printed.
func (s *server) Output() string { return s.p.Output() }

// newBucket creates a fresh, uniquely named, empty bucket or container
// with create and opens it with open.
func (s *server) newBucket(tb testing.TB, create func(context.Context, string) error, open func(testing.TB, string) *blob.Bucket) (*blob.Bucket, string) {
	tb.Helper()
	name := testproc.BucketName(tb.Name(), s.seq.Add(1))
	if err := create(context.Background(), name); err != nil {
		tb.Fatalf("cloudtest: %v", err)
	}
	return open(tb, name), name
}

// startServer starts a server of its own for tb with start and stops it
// when tb ends. It fails tb if the emulator cannot be started.
func startServer[S interface{ Stop() }](tb testing.TB, start func() (S, error)) S {
	tb.Helper()
	s, err := start()
	if err != nil {
		tb.Fatalf("cloudtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}
