package testbucket

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

func TestMain(m *testing.M) { Main(m) }

func TestEachRunsEveryKind(t *testing.T) {
	t.Setenv(BackendsEnv, "")
	var mu sync.Mutex
	var ran []string
	Each(t, func(t *testing.T, b *blob.Bucket) {
		kind := KindOf(t, b)
		if !strings.HasSuffix(t.Name(), "/"+string(kind)) {
			t.Errorf("subtest %s got a %s bucket", t.Name(), kind)
		}
		mu.Lock()
		ran = append(ran, string(kind))
		mu.Unlock()
	})
	if got, want := strings.Join(ran, ","), "mem,local,s3"; got != want {
		t.Fatalf("Each ran %s, want %s", got, want)
	}
	ran = nil
	EachAll(t, func(t *testing.T, b *blob.Bucket) {
		mu.Lock()
		ran = append(ran, string(KindOf(t, b)))
		mu.Unlock()
	})
	if got, want := strings.Join(ran, ","), "mem,local,s3,gcs,azure"; got != want {
		t.Fatalf("EachAll ran %s, want %s", got, want)
	}
}

// TestEachFreshBucket checks that every subtest starts empty, however much
// earlier ones left behind.
func TestEachFreshBucket(t *testing.T) {
	ctx := context.Background()
	for round := range 2 {
		EachAll(t, func(t *testing.T, b *blob.Bucket) {
			page, _, err := b.ListPage(ctx, blob.FirstPageToken, 10, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) != 0 {
				t.Fatalf("round %d: new bucket holds %q", round, page[0].Key)
			}
			if err := b.WriteAll(ctx, "left-behind", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBasics checks the properties the project relies on from every
// backend.
func TestBasics(t *testing.T) {
	ctx := context.Background()
	EachAll(t, func(t *testing.T, b *blob.Bucket) {
		if _, err := b.ReadAll(ctx, "missing"); gcerrors.Code(err) != gcerrors.NotFound {
			t.Errorf("read missing key: %v, want NotFound", err)
		}
		opts := &blob.WriterOptions{
			IfNotExist:      true,
			ContentEncoding: "zstd",
			CacheControl:    "no-cache",
			Metadata:        map[string]string{"pugmark": "v1"},
		}
		if err := b.WriteAll(ctx, "b", []byte("one"), opts); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteAll(ctx, "b", []byte("two"), opts); gcerrors.Code(err) != gcerrors.FailedPrecondition {
			t.Errorf("second create: %v, want FailedPrecondition", err)
		}
		attrs, err := b.Attributes(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if attrs.ContentEncoding != "zstd" || attrs.CacheControl != "no-cache" || attrs.Metadata["pugmark"] != "v1" {
			t.Errorf("attributes: encoding %q cache %q metadata %v", attrs.ContentEncoding, attrs.CacheControl, attrs.Metadata)
		}
		if err := b.WriteAll(ctx, "a/x", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		page, _, err := b.ListPage(ctx, blob.FirstPageToken, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 1 || page[0].Key != "a/x" {
			t.Errorf("first page of 1: %d objects, want [a/x]", len(page))
		}
	})
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	EachAll(t, func(t *testing.T, b *blob.Bucket) {
		b2 := Reopen(t, b)
		if b2 == b {
			t.Fatal("Reopen returned the same handle")
		}
		if KindOf(t, b2) != KindOf(t, b) {
			t.Fatalf("Reopen: kind %s, want %s", KindOf(t, b2), KindOf(t, b))
		}
		if err := b.WriteAll(ctx, "k", []byte("from b"), nil); err != nil {
			t.Fatal(err)
		}
		if got, err := b2.ReadAll(ctx, "k"); err != nil || string(got) != "from b" {
			t.Fatalf("b2 reads %q, %v", got, err)
		}
		if err := b2.WriteAll(ctx, "k", []byte("from b2"), &blob.WriterOptions{IfNotExist: true}); gcerrors.Code(err) != gcerrors.FailedPrecondition {
			t.Fatalf("b2 create over b's key: %v, want FailedPrecondition", err)
		}

		// A handle on a handle, then closing one leaves the others.
		b3 := Reopen(t, b2)
		if err := b2.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b3.WriteAll(ctx, "k3", []byte("from b3"), nil); err != nil {
			t.Fatal(err)
		}
		if got, err := b.ReadAll(ctx, "k3"); err != nil || string(got) != "from b3" {
			t.Fatalf("b reads %q, %v after b2 closed", got, err)
		}
	})
}

func TestURL(t *testing.T) {
	ctx := context.Background()
	EachAll(t, func(t *testing.T, b *blob.Bucket) {
		if KindOf(t, b) == Mem {
			if msg := fatalOf(t, func(tb testing.TB) { URL(tb, b) }); !strings.Contains(msg, "cannot be opened by URL") {
				t.Errorf("URL of a mem bucket: %q", msg)
			}
			return
		}
		u, env := URL(t, b)
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		other, err := blob.OpenBucket(ctx, u)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		defer other.Close()
		if err := other.WriteAll(ctx, "via-url", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.Exists(ctx, "via-url"); !ok || err != nil {
			t.Fatalf("write through %s not seen: %v, %v", u, ok, err)
		}
	})
}

func TestUnknownHandle(t *testing.T) {
	b, err := blob.OpenBucket(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if msg := fatalOf(t, func(tb testing.TB) { Reopen(tb, b) }); !strings.Contains(msg, "not an open handle") {
		t.Errorf("Reopen of a foreign handle: %q", msg)
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want []Kind
		err  string
	}{
		{"", CoreKinds(), ""},
		{"s3,mem", []Kind{Mem, S3}, ""},
		{"azure,gcs", []Kind{GCS, Azure}, ""},
		{" local , ", []Kind{Local}, ""},
		{"mem,bogus", nil, `unknown backend "bogus"`},
		{",", nil, "selects no backend"},
	} {
		t.Run(fmt.Sprintf("%q", tc.env), func(t *testing.T) {
			t.Setenv(BackendsEnv, tc.env)
			got, err := selected(CoreKinds())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("selected() = %v, %v; want error %q", got, err, tc.err)
				}
				defer func() {
					if recover() == nil {
						t.Error("Kinds did not panic")
					}
				}()
				Kinds()
				return
			}
			if err != nil || !slices.Equal(got, tc.want) || !slices.Equal(Kinds(), tc.want) {
				t.Fatalf("selected() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestUnselectedSkipped(t *testing.T) {
	t.Setenv(BackendsEnv, "mem")
	var ran []Kind
	var skipped []string
	var subs []*testing.T
	Each(t, func(t *testing.T, b *blob.Bucket) {
		ran = append(ran, KindOf(t, b))
	})
	for _, kind := range []Kind{Local, S3, GCS, Azure} {
		t.Run("open-"+string(kind), func(t *testing.T) {
			subs = append(subs, t)
			Open(t, kind)
			t.Error("Open of an unselected kind returned")
		})
	}
	for _, sub := range subs {
		if sub.Skipped() {
			skipped = append(skipped, sub.Name())
		}
	}
	if !slices.Equal(ran, []Kind{Mem}) || len(skipped) != 4 {
		t.Fatalf("with %s=mem: ran %v, skipped %v", BackendsEnv, ran, skipped)
	}
}

func TestBadSelectionFails(t *testing.T) {
	t.Setenv(BackendsEnv, "sqlite")
	if msg := fatalOf(t, func(tb testing.TB) { Open(tb, Mem) }); !strings.Contains(msg, `unknown backend "sqlite"`) {
		t.Errorf("Open with a bad selection: %q", msg)
	}
	t.Setenv(BackendsEnv, "")
	if msg := fatalOf(t, func(tb testing.TB) { Open(tb, Kind("sqlite")) }); !strings.Contains(msg, "unknown backend") {
		t.Errorf("Open of an unknown kind: %q", msg)
	}
}

// fatalOf runs fn with a testing.TB whose Fatal methods stop fn and record
// the message instead of failing t; it returns the message ("" if none).
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	tb := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.msg
}

type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Fatal(args ...any) { r.msg = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.msg = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Helper() {}
