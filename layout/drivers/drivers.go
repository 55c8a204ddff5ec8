// Package drivers registers the driver-specific write hooks of the
// layout package (compare-and-swap for refs, a backend-side check of blob
// bodies) for the backends that have them, and the URL schemes of every
// backend pugfs supports. Import it for its side effects.
//
// What each backend is given:
//
//	backend  ref compare-and-swap             body check
//	local    If-Match on the ETag             SHA-256, checked by the driver
//	S3       If-Match on the ETag             x-amz-checksum-sha256 (single-part, up to 16 MiB)
//	GCS      ifGenerationMatch                MD5 declared in the upload, checked at finalisation
//	Azure    If-Match on the ETag (commit)    CRC64 of every staged block; MD5 stored as Content-MD5
//
// Azure's UploadStream always stages blocks and commits a block list,
// and the service does not check a whole-blob MD5 on a block-list commit
// (it stores it as the blob's Content-MD5 property); what it does check is
// a transactional checksum per block, and the SDK accepts only a computed
// CRC64 there for streamed uploads.
package drivers

import (
	"encoding/base64"
	"fmt"
	"strconv"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/drivers/gcsfix"
	"github.com/pugmark/pugfs/layout/localblob"
	"gocloud.dev/blob"

	// The URL schemes: s3://, gs://, azblob://, mem://, file:// (the
	// project's own local driver) and fault+<scheme>://.
	_ "github.com/pugmark/pugfs/layout/faultblob"
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
)

// s3PartsFrom is the size from which s3blob's upload manager sends a
// body in parts (its part size: a body of exactly one part goes as one
// part of a multipart upload); a whole-object SHA-256 cannot be checked
// on those. Declared on a body of exactly 16 MiB, S3 refused it
// (BadDigest), and such a file could never be stored.
const s3PartsFrom = 16 << 20

func init() {
	layout.RegisterWriteHook(localHook)
	layout.RegisterWriteHook(s3Hook)
	layout.RegisterWriteHook(gcsHook)
	layout.RegisterWriteHook(azureHook)
	layout.RegisterTokenHook(gcsToken)
}

// Adapt returns a bucket opened by a driver's own opener as pugfs needs
// it, as OpenURL does: a GCS bucket through gcsfix. Any other bucket is
// returned as it is.
func Adapt(b *blob.Bucket) *blob.Bucket { return gcsfix.Wrap(b) }

// gcsToken makes a GCS object's generation its compare-and-swap token:
// the JSON API conditions uploads on generations, not ETags.
func gcsToken(as func(any) bool) (string, bool) {
	var oa storage.ObjectAttrs
	if !as(&oa) {
		return "", false
	}
	return strconv.FormatInt(oa.Generation, 10), true
}

// gcsHook conditions a GCS upload on the generation read (ifGenerationMatch)
// and declares the body's MD5, which GCS checks when it finalises the
// object and refuses on mismatch. The handle has to be replaced before
// the writer is asked for: gcsblob makes the writer from the handle then.
func gcsHook(as func(any) bool, c layout.Conditions) (ifMatch, sha bool, err error) {
	var objp **storage.ObjectHandle
	if !as(&objp) || objp == nil || *objp == nil {
		return false, false, nil
	}
	if c.IfMatch != "" {
		gen, err := strconv.ParseInt(c.IfMatch, 10, 64)
		if err != nil || gen <= 0 {
			return false, false, fmt.Errorf("gcs compare-and-swap: token %q is not a generation (read the object through the layout store)", c.IfMatch)
		}
		*objp = (*objp).If(storage.Conditions{GenerationMatch: gen})
		ifMatch = true
	}
	if c.MD5 != nil {
		sum, err := c.MD5()
		if err != nil {
			return false, false, fmt.Errorf("gcs upload: md5 of the body: %w", err)
		}
		var w *storage.Writer
		if !as(&w) || w == nil {
			return false, false, fmt.Errorf("gcs upload: the driver gave no *storage.Writer to declare the MD5 on")
		}
		w.MD5 = sum
		sha = true
	}
	return ifMatch, sha, nil
}

// azureHook puts an If-Match access condition on the block-list commit of
// an Azure upload, and asks for a CRC64 on every staged block (checked by
// the service) plus the whole body's MD5 as the blob's Content-MD5.
func azureHook(as func(any) bool, c layout.Conditions) (ifMatch, sha bool, err error) {
	var o *azblob.UploadStreamOptions
	if !as(&o) || o == nil {
		return false, false, nil
	}
	if c.IfMatch != "" {
		etag := azcore.ETag(c.IfMatch)
		if o.AccessConditions == nil {
			o.AccessConditions = &azblob.AccessConditions{}
		}
		if o.AccessConditions.ModifiedAccessConditions == nil {
			o.AccessConditions.ModifiedAccessConditions = &azblobblob.ModifiedAccessConditions{}
		}
		o.AccessConditions.ModifiedAccessConditions.IfMatch = &etag
		ifMatch = true
	}
	if c.MD5 != nil {
		sum, err := c.MD5()
		if err != nil {
			return false, false, fmt.Errorf("azure upload: md5 of the body: %w", err)
		}
		if o.HTTPHeaders == nil {
			o.HTTPHeaders = &azblobblob.HTTPHeaders{}
		}
		o.HTTPHeaders.BlobContentMD5 = sum
		o.TransactionalValidation = azblobblob.TransferValidationTypeComputeCRC64()
		sha = true
	}
	return ifMatch, sha, nil
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
	if c.File != nil && c.TookFile != nil {
		// The staged file becomes the object: linked, not copied (the
		// digest is the one the caller hashed it to).
		o.Link = c.File
		c.TookFile()
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
	if !c.SHA256.IsZero() && c.Size >= 0 && c.Size < s3PartsFrom {
		v := base64.StdEncoding.EncodeToString(c.SHA256[:])
		in.ChecksumSHA256 = &v
		// The SDK otherwise announces its default algorithm (CRC32)
		// next to our SHA-256 value and S3 rejects the pair.
		in.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmSha256
		sha = true
	}
	return ifMatch, sha, nil
}
