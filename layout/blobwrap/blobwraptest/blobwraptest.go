// Package blobwraptest runs gocloud's driver conformance suite against a
// bucket decorator over memblob, so that every decorator of pugfs proves
// in the same way that it is invisible to requests that answer.
package blobwraptest

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/drivertest"
	"gocloud.dev/blob/memblob"
)

// Conformance runs drivertest.RunConformanceTests over wrap(memblob),
// unprefixed and below a key prefix. asTests, if not nil, makes the checks
// of the decorator's own As types, fresh for each run (they may count);
// memblob exposes no types of its own, so nil is usual.
func Conformance(t *testing.T, wrap func(inner *blob.Bucket) driver.Bucket, asTests func() []drivertest.AsTest) {
	for _, prefix := range []string{"", "some/prefix/dir/"} {
		t.Run(fmt.Sprintf("prefix=%q", prefix), func(t *testing.T) {
			newHarness := func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
				return &harness{prefix: prefix, wrap: wrap}, nil
			}
			var as []drivertest.AsTest
			if asTests != nil {
				as = asTests()
			}
			drivertest.RunConformanceTests(t, newHarness, as)
		})
	}
}

type harness struct {
	prefix string
	wrap   func(*blob.Bucket) driver.Bucket
}

func (h *harness) HTTPClient() *http.Client { return nil }

func (h *harness) MakeDriver(ctx context.Context) (driver.Bucket, error) {
	drv := h.wrap(memblob.OpenBucket(nil))
	if h.prefix != "" {
		drv = driver.NewPrefixedBucket(drv, h.prefix)
	}
	return drv, nil
}

// MakeDriverForNonexistentBucket: memblob has no such thing.
func (h *harness) MakeDriverForNonexistentBucket(ctx context.Context) (driver.Bucket, error) {
	return nil, nil
}

func (*harness) SupportsCopy() bool               { return true }
func (*harness) SupportsNonSlashDelimiters() bool { return true }
func (*harness) Close()                           {}
