package layout

import (
	"context"
	"errors"
	"fmt"

	"gocloud.dev/blob"
)

// ListBlobs calls fn for every blob under objects/ in key order with its
// stored size; keys that are not blob keys go to bad, if set.
func (s *Store) ListBlobs(ctx context.Context, fn func(d Digest, size int64) bool, bad func(key string, err error)) error {
	return s.walk(ctx, ObjectsPrefix, "", func(o *blob.ListObject) (bool, error) {
		d, err := ParseBlobKey(o.Key)
		if err != nil {
			if bad != nil {
				bad(o.Key, err)
			}
			return true, nil
		}
		return fn(d, o.Size), nil
	})
}

// BlobSize returns a stored blob's size (one HEAD); ErrNotFound if absent.
func (s *Store) BlobSize(ctx context.Context, d Digest) (int64, error) {
	a, err := s.head(ctx, BlobKey(d))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return 0, fmt.Errorf("blob %s: %w", d, ErrNotFound)
		}
		return 0, err
	}
	return a.Size, nil
}
