package logblob

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout/blobwrap"
	"github.com/pugmark/pugfs/layout/blobwrap/blobwraptest"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

func logged(level slog.Level) (*blob.Bucket, *syncbuf.Buffer) {
	var buf syncbuf.Buffer
	return Wrap(memblob.OpenBucket(nil), buf.Logger(level)), &buf
}

func TestEveryRequestIsOneLine(t *testing.T) {
	b, buf := logged(slog.LevelDebug)
	defer b.Close()
	ctx := context.Background()
	if err := b.WriteAll(ctx, "objects/x", []byte("hello"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadAll(ctx, "objects/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Attributes(ctx, "objects/missing"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("head of a missing key: %v", err)
	}
	if _, _, err := b.ListPage(ctx, blob.FirstPageToken, 10, &blob.ListOptions{Prefix: "objects/"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "objects/x"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"op=put key=objects/x .* bytes=5",
		"op=get key=objects/x .* bytes=5",
		"op=head key=objects/missing .* err=",
		"op=list key=objects/ ",
		"op=delete key=objects/x ",
	}
	got := buf.Lines()
	if len(got) != len(want) {
		t.Fatalf("%d lines for %d requests:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		parts := strings.SplitN(w, " .* ", 2)
		if !strings.Contains(got[i], "msg=\"bucket request\"") || !strings.Contains(got[i], parts[0]) ||
			(len(parts) == 2 && !strings.Contains(got[i], parts[1])) || !strings.Contains(got[i], "took=") {
			t.Errorf("line %d = %s, want %q", i, got[i], w)
		}
	}
}

func TestQuietBelowDebug(t *testing.T) {
	b, buf := logged(slog.LevelInfo)
	defer b.Close()
	ctx := context.Background()
	if err := b.WriteAll(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadAll(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if l := buf.Lines(); len(l) != 0 {
		t.Errorf("logged without --debug: %q", l)
	}
}

// TestErrorsGoToTheLoggerAsErrors: the mount's handler scrubs
// credentials from error values (cmd/pugfs runMount), so an error must
// reach it as one, not pre-formatted into the message.
func TestErrorsGoToTheLoggerAsErrors(t *testing.T) {
	var seen []error
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if e, ok := a.Value.Any().(error); ok {
				seen = append(seen, e)
			}
			return a
		}}))
	b := Wrap(memblob.OpenBucket(nil), log)
	defer b.Close()
	_, err := b.Attributes(context.Background(), "nope")
	if err == nil || len(seen) != 1 {
		t.Fatalf("errors handed to the logger as values: %v (request error %v)", seen, err)
	}
}

func TestConformance(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	blobwraptest.Conformance(t, func(inner *blob.Bucket) driver.Bucket {
		return Over(blobwrap.Portable(inner), log)
	}, nil)
}
