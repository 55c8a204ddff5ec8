package gcsfix_test

import (
	"context"
	"net"
	"testing"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/layout/drivers"
)

// TestRefusedEndpointFails: against a GCS endpoint that refuses
// connections, a read and a conditional write (what every commit and
// blob PUT is) fail, with no deadline on the context. The storage client
// retried both until the context ended, which here is never: the audit
// saw every pugfs command hang for over 850 s. A hang fails the test
// binary's deadline.
func TestRefusedEndpointFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	t.Setenv("STORAGE_EMULATOR_HOST", addr)
	ctx := context.Background()
	b, err := drivers.OpenURL(ctx, "gs://refused")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.ReadAll(ctx, "k"); err == nil {
		t.Error("a read from a refused endpoint succeeded")
	}
	if err := b.WriteAll(ctx, "k", []byte("x"), &blob.WriterOptions{IfNotExist: true}); err == nil {
		t.Error("a conditional write to a refused endpoint succeeded")
	}
}
