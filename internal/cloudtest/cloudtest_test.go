package cloudtest

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

func TestMain(m *testing.M) { Main(m) }

var bg = context.Background()

// TestGCSEmulator checks what the package comment promises of
// fake-gcs-server: atomic create, generation preconditions, declared MD5.
func TestGCSEmulator(t *testing.T) {
	b, _ := SharedGCS(t).NewBucket(t)
	checkCreateIfAbsent(t, b)

	if err := b.WriteAll(bg, "ref", []byte("one"), nil); err != nil {
		t.Fatal(err)
	}
	gen := func() int64 {
		a, err := b.Attributes(bg, "ref")
		if err != nil {
			t.Fatal(err)
		}
		var oa storage.ObjectAttrs
		if !a.As(&oa) {
			t.Fatal("attributes are not *storage.ObjectAttrs")
		}
		return oa.Generation
	}
	g := gen()
	ifGen := func(g int64) *blob.WriterOptions {
		return &blob.WriterOptions{BeforeWrite: func(as func(any) bool) error {
			var objp **storage.ObjectHandle
			if !as(&objp) {
				return errors.New("no object handle")
			}
			*objp = (*objp).If(storage.Conditions{GenerationMatch: g})
			return nil
		}}
	}
	if err := b.WriteAll(bg, "ref", []byte("two"), ifGen(g)); err != nil {
		t.Fatalf("write at the current generation: %v", err)
	}
	if err := b.WriteAll(bg, "ref", []byte("three"), ifGen(g)); gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("write at a stale generation: %v, want FailedPrecondition", err)
	}
	if got, _ := b.ReadAll(bg, "ref"); string(got) != "two" {
		t.Fatalf("ref holds %q, want two", got)
	}

	wrong := md5.Sum([]byte("not the body"))
	err := b.WriteAll(bg, "md5", []byte("body"), &blob.WriterOptions{BeforeWrite: func(as func(any) bool) error {
		var w *storage.Writer
		if !as(&w) {
			return errors.New("no writer")
		}
		w.MD5 = wrong[:]
		return nil
	}})
	if err == nil {
		t.Fatal("a wrong declared MD5 was accepted")
	}
	if ok, _ := b.Exists(bg, "md5"); ok {
		t.Fatal("the object with a wrong MD5 exists")
	}
}

// TestAzureEmulator checks what the package comment promises of Azurite:
// atomic create and If-Match on the ETag.
func TestAzureEmulator(t *testing.T) {
	b, _ := SharedAzure(t).NewBucket(t)
	checkCreateIfAbsent(t, b)

	if err := b.WriteAll(bg, "ref", []byte("one"), nil); err != nil {
		t.Fatal(err)
	}
	a, err := b.Attributes(bg, "ref")
	if err != nil {
		t.Fatal(err)
	}
	ifMatch := func(etag string) *blob.WriterOptions {
		return &blob.WriterOptions{BeforeWrite: func(as func(any) bool) error {
			var o *azblob.UploadStreamOptions
			if !as(&o) {
				return errors.New("no upload options")
			}
			e := azcore.ETag(etag)
			o.AccessConditions = &azblob.AccessConditions{ModifiedAccessConditions: &azblobblob.ModifiedAccessConditions{IfMatch: &e}}
			o.TransactionalValidation = azblobblob.TransferValidationTypeComputeCRC64()
			return nil
		}}
	}
	if err := b.WriteAll(bg, "ref", []byte("two"), ifMatch(a.ETag)); err != nil {
		t.Fatalf("write at the current ETag %s: %v", a.ETag, err)
	}
	if err := b.WriteAll(bg, "ref", []byte("three"), ifMatch(a.ETag)); gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("write at a stale ETag: %v, want FailedPrecondition", err)
	}
	if got, _ := b.ReadAll(bg, "ref"); string(got) != "two" {
		t.Fatalf("ref holds %q, want two", got)
	}
}

func checkCreateIfAbsent(t *testing.T, b *blob.Bucket) {
	t.Helper()
	const writers = 8
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			errs <- b.WriteAll(bg, "once", []byte(strconv.Itoa(i)), &blob.WriterOptions{IfNotExist: true})
		}()
	}
	wins := 0
	for range writers {
		switch err := <-errs; {
		case err == nil:
			wins++
		case gcerrors.Code(err) != gcerrors.FailedPrecondition:
			t.Fatalf("losing create: %v, want FailedPrecondition", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d of %d racing creates won, want 1", wins, writers)
	}
}

// TestMissingEmulatorFails checks that a missing binary fails a test
// instead of skipping it.
func TestMissingEmulatorFails(t *testing.T) {
	t.Setenv(BinaryEnv, t.TempDir())
	for name, start := range map[string]func(testing.TB){
		"gcs":   func(tb testing.TB) { StartGCS(tb) },
		"azure": func(tb testing.TB) { StartAzure(tb) },
	} {
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			start(r)
		}()
		<-done
		if !r.failed || r.skipped || !strings.Contains(r.msg, "make deps") {
			t.Errorf("%s without its binary: failed %v skipped %v, message %q", name, r.failed, r.skipped, r.msg)
		}
	}
}

type recorder struct {
	testing.TB
	msg             string
	failed, skipped bool
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.msg, r.failed = fmt.Sprint(args...), true
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg, r.failed = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) { r.skipped = true; runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = true
	runtime.Goexit()
}
func (r *recorder) SkipNow() { r.skipped = true; runtime.Goexit() }
