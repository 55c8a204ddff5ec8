// Package drivers registers the driver-specific write hooks of the
// layout package (If-Match compare-and-swap and server-side SHA-256) for
// the backends that have them, and the URL schemes of every backend pugfs
// supports. Import it for its side effects.
package drivers

import (
	"encoding/base64"

	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/localblob"

	// The URL schemes: s3://, gs://, azblob://, mem://, file:// (the
	// project's own local driver) and fault+<scheme>://.
	_ "github.com/pugmark/pugfs/layout/faultblob"
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
)

// s3SingleMax is the size above which s3blob switches to multipart
// uploads; a whole-object SHA-256 cannot be checked on those.
const s3SingleMax = 16 << 20

func init() {
	layout.RegisterWriteHook(localHook)
	layout.RegisterWriteHook(s3Hook)
}

func localHook(as func(any) bool, c layout.Conditions) (ifMatch, sha bool, err error) {
	var o *localblob.WriteOptions
	if !as(&o) || o == nil {
		return false, false, nil
	}
	if c.IfMatch != "" {
		o.IfMatch = c.IfMatch
		ifMatch = true
	}
	if !c.SHA256.IsZero() {
		o.SHA256 = append([]byte(nil), c.SHA256[:]...)
		sha = true
	}
	return ifMatch, sha, nil
}

func s3Hook(as func(any) bool, c layout.Conditions) (ifMatch, sha bool, err error) {
	var in *transfermanager.UploadObjectInput
	if !as(&in) || in == nil {
		return false, false, nil
	}
	if c.IfMatch != "" {
		v := c.IfMatch
		in.IfMatch = &v
		ifMatch = true
	}
	if !c.SHA256.IsZero() && c.Size >= 0 && c.Size <= s3SingleMax {
		v := base64.StdEncoding.EncodeToString(c.SHA256[:])
		in.ChecksumSHA256 = &v
		// The SDK otherwise announces its default algorithm (CRC32)
		// next to our SHA-256 value and S3 rejects the pair.
		in.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmSha256
		sha = true
	}
	return ifMatch, sha, nil
}
