package localblob

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/drivertest"
)

type harness struct {
	dir    string
	prefix string
	opts   Options
}

func (h *harness) MakeDriver(context.Context) (driver.Bucket, error) {
	drv, err := openBucket(h.dir, &h.opts)
	if err != nil {
		return nil, err
	}
	if h.prefix == "" {
		return drv, nil
	}
	return driver.NewPrefixedBucket(drv, h.prefix), nil
}

// A directory bucket has no "nonexistent bucket" state that can still be
// opened: OpenBucket fails instead.
func (h *harness) MakeDriverForNonexistentBucket(context.Context) (driver.Bucket, error) {
	return nil, nil
}

func (h *harness) HTTPClient() *http.Client         { return nil }
func (h *harness) SupportsCopy() bool               { return true }
func (h *harness) SupportsNonSlashDelimiters() bool { return true }
func (h *harness) Close()                           {}

func harnessMaker(prefix string, opts Options) drivertest.HarnessMaker {
	return func(_ context.Context, t *testing.T) (drivertest.Harness, error) {
		return &harness{dir: t.TempDir(), prefix: prefix, opts: opts}, nil
	}
}

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, harnessMaker("", Options{}), asTests)
}

func TestConformanceWithPrefix(t *testing.T) {
	drivertest.RunConformanceTests(t, harnessMaker("some/prefix/dir/", Options{}), nil)
}

// The sidecar path (filesystems without user xattrs) must meet the same
// contract.
func TestConformanceSidecar(t *testing.T) {
	drivertest.RunConformanceTests(t, harnessMaker("", Options{forceSidecar: true}), nil)
}

var asTests = []drivertest.AsTest{objectInfoAs{}}

// objectInfoAs checks the driver-specific As types: WriteOptions in
// BeforeWrite, ObjectInfo from Attributes and Reader.
type objectInfoAs struct{}

func (objectInfoAs) Name() string                         { return "localblob ObjectInfo and WriteOptions" }
func (objectInfoAs) BucketCheck(*blob.Bucket) error       { return nil }
func (objectInfoAs) ErrorCheck(*blob.Bucket, error) error { return nil }
func (objectInfoAs) BeforeRead(func(any) bool) error      { return nil }
func (objectInfoAs) BeforeCopy(func(any) bool) error      { return nil }
func (objectInfoAs) BeforeList(func(any) bool) error      { return nil }
func (objectInfoAs) BeforeSign(func(any) bool) error      { return nil }
func (objectInfoAs) ListObjectCheck(*blob.ListObject) error {
	return nil
}

func (objectInfoAs) BeforeDelete(as func(any) bool) error {
	var d *DeleteOptions
	if !as(&d) || d == nil {
		return fmt.Errorf("BeforeDelete: As(**DeleteOptions) failed")
	}
	return nil
}

func (objectInfoAs) BeforeWrite(as func(any) bool) error {
	var wo *WriteOptions
	if !as(&wo) || wo == nil {
		return fmt.Errorf("BeforeWrite: As(**WriteOptions) failed")
	}
	// "hello world", the body the As test writes.
	wo.SHA256 = sha256Of("hello world")
	return nil
}

func (objectInfoAs) AttributesCheck(attrs *blob.Attributes) error {
	var info ObjectInfo
	if !attrs.As(&info) {
		return fmt.Errorf("Attributes.As(*ObjectInfo) failed")
	}
	if info.ETag == "" || info.ETag != attrs.ETag || !info.HasMetadata {
		return fmt.Errorf("Attributes.As: got %+v, ETag %s", info, attrs.ETag)
	}
	return nil
}

func (objectInfoAs) ReaderCheck(r *blob.Reader) error {
	var info ObjectInfo
	if !r.As(&info) {
		return fmt.Errorf("Reader.As(*ObjectInfo) failed")
	}
	if info.ETag == "" || info.Size != r.Size() {
		return fmt.Errorf("Reader.As: got %+v", info)
	}
	return nil
}
