package faultblob

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pugmark/pugfs/layout/blobwrap/blobwraptest"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/drivertest"
)

// TestConformance runs gocloud's driver conformance suite against the
// wrapper around memblob with an empty Injector: the wrapper must be
// invisible.
func TestConformance(t *testing.T) {
	// memblob exposes no driver-specific types, so a per-driver As test
	// has nothing to check (memblob's own suite passes nil). asTest
	// checks what the wrapper adds instead: Bucket.As yields the
	// Injector, the write/read/copy/delete hooks reach the inner bucket
	// once each, and As on errors, attributes, readers and list objects
	// is forwarded (false for types memblob lacks).
	// TestHooksReachInnerDriver covers driver-specific hook targets with
	// a driver that has them.
	blobwraptest.Conformance(t, func(inner *blob.Bucket) driver.Bucket {
		return newDriver(inner, NewInjector(Options{}))
	}, func() []drivertest.AsTest { return []drivertest.AsTest{&asTest{}} })
}

// asTest is a drivertest.AsTest for the wrapper (see TestConformance).
type asTest struct {
	beforeWrite, beforeRead, beforeCopy, beforeDelete atomic.Int32
}

func (*asTest) Name() string { return "wrapper exposes Injector and forwards hooks" }

func (*asTest) BucketCheck(b *blob.Bucket) error {
	var inj *Injector
	if !b.As(&inj) || inj == nil {
		return errors.New("Bucket.As(**Injector) did not yield the Injector")
	}
	var s string
	if b.As(&s) {
		return errors.New("Bucket.As(*string) = true, want false (memblob has no such type)")
	}
	return nil
}

func (a *asTest) ErrorCheck(b *blob.Bucket, err error) error {
	// ErrorCheck runs after the write, the read and both listings, so
	// their hooks must have run by now, exactly once per request.
	if n := a.beforeWrite.Load(); n != 1 {
		return fmt.Errorf("BeforeWrite ran %d times, want 1", n)
	}
	if n := a.beforeRead.Load(); n != 1 {
		return fmt.Errorf("BeforeRead ran %d times, want 1", n)
	}
	// memblob never calls BeforeList; TestHooksReachInnerDriver covers it.
	var fe *Error
	if b.ErrorAs(err, &fe) {
		return fmt.Errorf("ErrorAs(**Error) = true for a genuine NotFound: %v", err)
	}
	var s string
	if b.ErrorAs(err, &s) {
		return errors.New("ErrorAs(*string) = true, want false")
	}
	return nil
}

func (a *asTest) BeforeRead(as func(any) bool) error  { a.beforeRead.Add(1); return nil }
func (a *asTest) BeforeWrite(as func(any) bool) error { a.beforeWrite.Add(1); return nil }
func (a *asTest) BeforeList(as func(any) bool) error  { return nil }
func (a *asTest) BeforeSign(as func(any) bool) error  { return nil }

func (a *asTest) BeforeCopy(as func(any) bool) error {
	a.beforeCopy.Add(1)
	return nil
}

func (a *asTest) BeforeDelete(as func(any) bool) error {
	// The copy is deleted right after it is made.
	if a.beforeCopy.Load() != 1 {
		return errors.New("BeforeCopy did not run before the copy")
	}
	a.beforeDelete.Add(1)
	return nil
}

func (*asTest) AttributesCheck(attrs *blob.Attributes) error {
	var s string
	if attrs.As(&s) {
		return errors.New("Attributes.As(*string) = true, want false")
	}
	return nil
}

func (*asTest) ReaderCheck(r *blob.Reader) error {
	var s string
	if r.As(&s) {
		return errors.New("Reader.As(*string) = true, want false")
	}
	return nil
}

func (*asTest) ListObjectCheck(o *blob.ListObject) error {
	var s string
	if o.As(&s) {
		return errors.New("ListObject.As(*string) = true, want false")
	}
	return nil
}
