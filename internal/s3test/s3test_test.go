package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/smithy-go"
	"github.com/pugmark/pugfs/internal/testproc"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

func TestMain(m *testing.M) {
	if url := os.Getenv("S3TEST_CHILD_URL"); url != "" {
		os.Exit(childOpenURL(url))
	}
	Main(m)
}

// ifMatch returns WriterOptions that make a write replace the object only if
// its ETag is still etag.
func ifMatch(etag string) *blob.WriterOptions {
	return &blob.WriterOptions{
		BeforeWrite: func(as func(any) bool) error {
			var in *transfermanager.UploadObjectInput
			if !as(&in) {
				return errors.New("BeforeWrite: not an s3blob upload")
			}
			in.IfMatch = aws.String(etag)
			return nil
		},
	}
}

func TestCreateIfAbsent(t *testing.T) {
	ctx := context.Background()
	b, _ := Shared(t).NewBucket(t)
	opts := &blob.WriterOptions{IfNotExist: true}
	if err := b.WriteAll(ctx, "k", []byte("one"), opts); err != nil {
		t.Fatalf("first create: %v", err)
	}
	err := b.WriteAll(ctx, "k", []byte("two"), opts)
	if code := gcerrors.Code(err); code != gcerrors.FailedPrecondition {
		t.Fatalf("second create: got %v (code %v), want FailedPrecondition", err, code)
	}
	got, err := b.ReadAll(ctx, "k")
	if err != nil || string(got) != "one" {
		t.Fatalf("after refused create: read %q, %v; want \"one\"", got, err)
	}
}

// TestCreateIfAbsentConcurrent checks that exactly one of many racing
// creators wins.
func TestCreateIfAbsentConcurrent(t *testing.T) {
	ctx := context.Background()
	b, _ := Shared(t).NewBucket(t)
	const writers = 16
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			errs[i] = b.WriteAll(ctx, "k", fmt.Appendf(nil, "writer %d", i), &blob.WriterOptions{IfNotExist: true})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch gcerrors.Code(err) {
		case gcerrors.OK:
			won++
		case gcerrors.FailedPrecondition:
		default:
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers created the key, want 1", won)
	}
}

func TestAttributesRoundTrip(t *testing.T) {
	ctx := context.Background()
	b, _ := Shared(t).NewBucket(t)
	opts := &blob.WriterOptions{
		ContentType:     "application/x-pugmark",
		ContentEncoding: "zstd",
		CacheControl:    "public, max-age=31536000, immutable",
		Metadata:        map[string]string{"pugmark-version": "1", "mixed-case": "Value With Spaces/ü"},
	}
	if err := b.WriteAll(ctx, "dir/obj", []byte("payload"), opts); err != nil {
		t.Fatal(err)
	}
	attrs, err := b.Attributes(ctx, "dir/obj")
	if err != nil {
		t.Fatal(err)
	}
	if attrs.ContentType != opts.ContentType || attrs.ContentEncoding != opts.ContentEncoding || attrs.CacheControl != opts.CacheControl {
		t.Errorf("got type %q encoding %q cache %q, want %q %q %q",
			attrs.ContentType, attrs.ContentEncoding, attrs.CacheControl,
			opts.ContentType, opts.ContentEncoding, opts.CacheControl)
	}
	for k, v := range opts.Metadata {
		if attrs.Metadata[k] != v {
			t.Errorf("metadata %q = %q, want %q (all: %v)", k, attrs.Metadata[k], v, attrs.Metadata)
		}
	}
	if attrs.Size != int64(len("payload")) || attrs.ETag == "" {
		t.Errorf("size %d etag %q", attrs.Size, attrs.ETag)
	}
	// A reader sees the same content encoding: s3blob must not decode it.
	got, err := b.ReadAll(ctx, "dir/obj")
	if err != nil || string(got) != "payload" {
		t.Errorf("read %q, %v", got, err)
	}
}

func TestListPageOrder(t *testing.T) {
	ctx := context.Background()
	b, _ := Shared(t).NewBucket(t)
	// Written out of order; "a/z" sorts before "aa" and "b" byte-wise.
	for _, k := range []string{"b", "aa", "a/z", "c/d/e", "a0"} {
		if err := b.WriteAll(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	page, _, err := b.ListPage(ctx, blob.FirstPageToken, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 1 || page[0].Key != "a/z" {
		t.Fatalf("first page of 1: %v, want [a/z]", keys(page))
	}
	var all []string
	for token := blob.FirstPageToken; ; {
		page, next, err := b.ListPage(ctx, token, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys(page)...)
		if next == nil {
			break
		}
		token = next
	}
	if want := "a/z a0 aa b c/d/e"; strings.Join(all, " ") != want {
		t.Fatalf("listing in pages of 2: %q, want %q", all, want)
	}
}

func keys(objs []*blob.ListObject) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.Key)
	}
	return ks
}

func TestCompareAndSwap(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		opts func(*blob.WriterOptions)
	}{
		{"single-part", 1 << 10, func(*blob.WriterOptions) {}},
		// The transfer manager uploads a body of 16 MiB or more in
		// parts (BufferSize is the part size) through
		// CreateMultipartUpload, UploadPart and CompleteMultipartUpload;
		// only the last carries the If-Match. A refused multipart
		// upload also logs "failed to complete multipart upload" with
		// the standard logger.
		{"multipart", 17 << 20, func(o *blob.WriterOptions) { o.BufferSize = 5 << 20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b, _ := Shared(t).NewBucket(t)
			v1 := bytes.Repeat([]byte("1"), tc.size)
			v2 := bytes.Repeat([]byte("2"), tc.size)
			v3 := bytes.Repeat([]byte("3"), tc.size)
			if err := b.WriteAll(ctx, "k", v1, nil); err != nil {
				t.Fatal(err)
			}
			a1, err := b.Attributes(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}

			opts := ifMatch(a1.ETag)
			tc.opts(opts)
			if err := b.WriteAll(ctx, "k", v2, opts); err != nil {
				t.Fatalf("write with current ETag %s: %v", a1.ETag, err)
			}
			a2, err := b.Attributes(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if a2.ETag == a1.ETag {
				t.Fatalf("ETag unchanged (%s) after replacing the content", a1.ETag)
			}
			if multipart := strings.Contains(a2.ETag, "-"); multipart != (tc.size >= 16<<20) {
				t.Fatalf("ETag %s after a %d-byte upload: multipart = %v", a2.ETag, tc.size, multipart)
			}

			// a1.ETag is stale now.
			opts = ifMatch(a1.ETag)
			tc.opts(opts)
			err = b.WriteAll(ctx, "k", v3, opts)
			if code := gcerrors.Code(err); code != gcerrors.FailedPrecondition {
				t.Fatalf("write with stale ETag: got %v (code %v), want FailedPrecondition", err, code)
			}
			var apiErr smithy.APIError
			if !b.ErrorAs(err, &apiErr) || apiErr.ErrorCode() != "PreconditionFailed" {
				t.Errorf("stale ETag: ErrorAs smithy.APIError: %v, want code PreconditionFailed", apiErr)
			}
			got, err := b.ReadAll(ctx, "k")
			if err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("after refused swap: read %d bytes (%v), want the second version", len(got), err)
			}

			// If-Match on a missing key.
			opts = ifMatch(a2.ETag)
			tc.opts(opts)
			err = b.WriteAll(ctx, "missing", v3, opts)
			if code := gcerrors.Code(err); code != gcerrors.NotFound {
				t.Errorf("If-Match on a missing key: got %v (code %v), want NotFound", err, code)
			}
		})
	}
}

// TestCompareAndSwapConcurrent checks that of many writers holding the same
// ETag, exactly one replaces the object.
func TestCompareAndSwapConcurrent(t *testing.T) {
	ctx := context.Background()
	b, _ := Shared(t).NewBucket(t)
	if err := b.WriteAll(ctx, "k", []byte("base"), nil); err != nil {
		t.Fatal(err)
	}
	attrs, err := b.Attributes(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	const writers = 16
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			errs[i] = b.WriteAll(ctx, "k", fmt.Appendf(nil, "writer %d", i), ifMatch(attrs.ETag))
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch gcerrors.Code(err) {
		case gcerrors.OK:
			won++
		case gcerrors.FailedPrecondition:
		default:
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers replaced the object, want 1", won)
	}
}

// TestBucketIsDirectory records how the posix backend maps buckets: a
// bucket is a directory under Root and an object a file below it. A bare
// directory made without CreateBucket works too, for the root user (whose
// requests skip the ACL that CreateBucket stores in an extended attribute);
// NewBucket calls CreateBucket anyway, so nothing depends on that.
func TestBucketIsDirectory(t *testing.T) {
	ctx := context.Background()
	s := Shared(t)
	b, _ := s.NewBucket(t)
	if err := b.WriteAll(ctx, "a/b", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(s.Root, "*", "a", "b"))
	if len(files) != 1 {
		t.Errorf("object a/b not found as a file under %s: %v", s.Root, files)
	}

	name := testproc.BucketName(t.Name()+"-bare", s.seq.Add(1))
	if err := os.Mkdir(filepath.Join(s.Root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(s.Root, name)) })
	bare := s.OpenBucket(t, name)
	err := bare.WriteAll(ctx, "k", []byte("x"), &blob.WriterOptions{IfNotExist: true})
	if err == nil {
		_, _, err = bare.ListPage(ctx, blob.FirstPageToken, 10, nil)
	}
	t.Logf("bucket made by mkdir alone: write and list: %v", err)
}

func TestStartStop(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	if s == Shared(t) {
		t.Fatal("Start returned the shared server")
	}
	b, _ := s.NewBucket(t)
	if err := b.WriteAll(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(s.Endpoint, "http://")
	s.Stop()
	s.Stop() // idempotent
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
}

// TestURLInSubprocess opens a bucket from another process with only the URL
// and Env, as a mounted pugfs binary would.
func TestURLInSubprocess(t *testing.T) {
	ctx := context.Background()
	s := Shared(t)
	b, url := s.NewBucket(t)
	if err := b.WriteAll(ctx, "from-parent", []byte("hello"), nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Credentials that would be wrong, to check Env overrides them.
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=wrong", "AWS_SECRET_ACCESS_KEY=wrong", "AWS_PROFILE=nonexistent")
	cmd.Env = append(cmd.Env, s.Env()...)
	cmd.Env = append(cmd.Env, "S3TEST_CHILD_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got, err := b.ReadAll(ctx, "from-child")
	if err != nil || string(got) != "hello" {
		t.Fatalf("from-child: %q, %v\nchild output:\n%s", got, err, out)
	}
}

// childOpenURL is the subprocess side of TestURLInSubprocess: it copies
// from-parent to from-child through a bucket opened by URL.
func childOpenURL(url string) int {
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	data, err := b.ReadAll(ctx, "from-parent")
	if err == nil {
		err = b.WriteAll(ctx, "from-child", data, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestMissingBinary(t *testing.T) {
	t.Setenv(BinaryEnv, t.TempDir())
	_, err := Binary()
	if err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Binary with an empty tools dir: %v, want an error that says to run make deps", err)
	}
	if _, err := start(t.TempDir(), false); err == nil {
		t.Fatal("start without a binary succeeded")
	}
}

// TestPortTaken checks that a server whose port another process took is
// reported as such, which is what makes start retry on another port.
func TestPortTaken(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	ts := versitygw(bin, t.TempDir())
	p, err := testproc.Launch(ts.Name, ts.Argv(0, addr), ts.Env)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	err = p.WaitReady(addr, readyTimeout, func() error { return ts.Probe(addr) })
	if !errors.Is(err, testproc.ErrPortTaken) {
		t.Fatalf("versitygw on a taken port: %v, want ErrPortTaken", err)
	}
}

func TestBinaryFromModuleRoot(t *testing.T) {
	t.Setenv(BinaryEnv, "")
	path, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, ".tools", "bin", "versitygw"); path != want {
		t.Fatalf("Binary() = %s, want %s", path, want)
	}
}
