package staging

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// uploadBudget bounds the memory the blob uploads in flight across a
// Writer hold, whatever Config.Uploads allows: a backend's writer buffers
// what it sends. The S3 SDK reads a body under 16 MiB whole to PUT it,
// and a larger one in parts of 8 MiB, six buffers for five parts in
// flight after a first read of 16 MiB, about 64 MiB; GCS's writer buffers
// a chunk of 16 MiB and Azure's blocks of 8 MiB (layout gives a small
// body a buffer of its size). 16 uploads of large files at once held 555
// MB (six of 40 MiB to Azurite; 264-292 MB with two at a time). Small
// bodies count their bytes against one bound, and large ones take one of
// a few slots of their own, so that a small file's fsync never waits
// behind another session's large upload (review 23). Two large slots,
// not one: GCS's writer sends a body one chunk after another, one
// stream.
type uploadBudget struct {
	small *semaphore.Weighted // bytes of bodies under largeFrom
	large *semaphore.Weighted // uploads of bodies of largeFrom bytes and more
	// smallBytes and largeFrom are the bounds small was made with and
	// where large bodies start.
	smallBytes, largeFrom int64
}

// Defaults of uploadBudget: 64 MiB of small bodies, two large ones.
const (
	uploadSmallBytes = 64 << 20
	uploadLargeFrom  = 16 << 20
	uploadLargeSlots = 2
)

func newUploadBudget(smallBytes, largeFrom, largeSlots int64) *uploadBudget {
	return &uploadBudget{small: semaphore.NewWeighted(smallBytes), large: semaphore.NewWeighted(largeSlots),
		smallBytes: smallBytes, largeFrom: largeFrom}
}

// acquire waits until an upload of a body of size bytes may start, and
// returns what ends it. A small body counts at least 256 KiB, the
// smallest buffer GCS's writer takes.
func (b *uploadBudget) acquire(ctx context.Context, size int64) (release func(), err error) {
	if size >= b.largeFrom {
		if err := b.large.Acquire(ctx, 1); err != nil {
			return nil, err
		}
		return func() { b.large.Release(1) }, nil
	}
	weight := min(max(size, 256<<10), b.smallBytes)
	if err := b.small.Acquire(ctx, weight); err != nil {
		return nil, err
	}
	return func() { b.small.Release(weight) }, nil
}
