package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pugmark/pugfs/internal/s3test"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// startS3 starts versitygw (the same starter the tests use) with its posix
// backend serving root, each subdirectory a bucket. root is kept across
// runs, so the S3 copies of the data sets are generated once.
func startS3(bin, root string) (*s3test.Server, error) {
	s, err := s3test.StartWith(bin, root)
	if err != nil {
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	return s, nil
}

// recreateS3Bucket removes what a half-finished generation left and
// creates the bucket afresh.
func recreateS3Bucket(ctx context.Context, s *s3test.Server, name string) error {
	if err := os.RemoveAll(filepath.Join(s.Root, name)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.CreateBucket(ctx, name); err != nil {
		return fmt.Errorf("create S3 bucket %s: %w", name, err)
	}
	return nil
}

// openS3Bucket opens bucket name on s with its static credentials.
func openS3Bucket(ctx context.Context, s *s3test.Server, name string) (*blob.Bucket, error) {
	return s3blob.OpenBucket(ctx, s.Client(), name, nil)
}
