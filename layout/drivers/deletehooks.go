package drivers

import (
	"fmt"
	"strconv"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/localblob"
)

// The conditional deletes of refs (layout.Store.DeleteRefIf): each
// backend's delete request conditioned on the version token a read gave
// (the ETag, a GCS generation).

func init() {
	layout.RegisterDeleteHook(localDeleteHook)
	layout.RegisterDeleteHook(s3DeleteHook)
	layout.RegisterDeleteHook(gcsDeleteHook)
	layout.RegisterDeleteHook(azureDeleteHook)
}

func localDeleteHook(as func(any) bool, token string) (bool, error) {
	var o *localblob.DeleteOptions
	if !as(&o) || o == nil {
		return false, nil
	}
	o.IfMatch = token
	return true, nil
}

func s3DeleteHook(as func(any) bool, token string) (bool, error) {
	var in *s3.DeleteObjectInput
	if !as(&in) || in == nil {
		return false, nil
	}
	in.IfMatch = &token
	return true, nil
}

func gcsDeleteHook(as func(any) bool, token string) (bool, error) {
	var objp **storage.ObjectHandle
	if !as(&objp) || objp == nil || *objp == nil {
		return false, nil
	}
	gen, err := strconv.ParseInt(token, 10, 64)
	if err != nil || gen <= 0 {
		return false, fmt.Errorf("gcs compare-and-delete: token %q is not a generation (read the object through the layout store)", token)
	}
	*objp = (*objp).If(storage.Conditions{GenerationMatch: gen})
	return true, nil
}

func azureDeleteHook(as func(any) bool, token string) (bool, error) {
	var o *azblobblob.DeleteOptions
	if !as(&o) || o == nil {
		return false, nil
	}
	if o.AccessConditions == nil {
		o.AccessConditions = &azblobblob.AccessConditions{}
	}
	if o.AccessConditions.ModifiedAccessConditions == nil {
		o.AccessConditions.ModifiedAccessConditions = &azblobblob.ModifiedAccessConditions{}
	}
	etag := azcore.ETag(token)
	o.AccessConditions.ModifiedAccessConditions.IfMatch = &etag
	return true, nil
}
