package main

import (
	"context"
	"errors"
)

// runMount mounts cfg.BucketURL on cfg.Mountpoint and serves it until ctx
// is cancelled. Temporary: the FUSE wiring replaces this file.
func runMount(ctx context.Context, cfg mountConfig) error {
	return errors.New("mount: not implemented yet")
}
