// Package cloudtest runs the cloud emulators pugfs is tested on, for tests:
// fake-gcs-server for Google Cloud Storage and Azurite for Azure Blob
// Storage, and opens gocloud buckets on them.
//
// Tests that need fresh buckets share one emulator of each kind per test
// binary ([SharedGCS], [SharedAzure]); a package's TestMain calls [Main]
// (or testbucket.Main, which calls it) so they are stopped when the tests
// are done:
//
//	func TestMain(m *testing.M) { cloudtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		b, url := cloudtest.SharedGCS(t).NewBucket(t)
//		...
//	}
//
// The binaries are $PUGFS_TOOLS/fake-gcs-server and
// $PUGFS_TOOLS/azurite-blob (.tools/bin in the module root when
// PUGFS_TOOLS is unset); `make deps` installs them, fake-gcs-server from
// the Go module proxy and Azurite from npm. A missing binary or an
// emulator that does not come up fails the test: nothing is skipped, so a
// CI run that lost an emulator is red, not quietly shorter.
//
// # Pointing a process at them
//
// GCS: the URL is gs://BUCKET and the environment carries
// STORAGE_EMULATOR_HOST=127.0.0.1:PORT ([GCSServer.Env]), which gcsblob's
// URL opener honours by dropping credentials.
//
// Azure: the URL is azblob://CONTAINER?localemu=true&domain=127.0.0.1:PORT&protocol=http
// and the environment carries AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY
// of Azurite's development account ([AzureServer.Env]).
//
// # What the emulators enforce (checked by this package's tests)
//
//   - create-if-absent (blob.WriterOptions.IfNotExist) fails the second
//     writer with gcerrors.FailedPrecondition on both;
//   - GCS: a write conditioned on a generation (storage.Conditions
//     GenerationMatch, set through BeforeWrite on the **storage.ObjectHandle)
//     fails with FailedPrecondition once the object has moved on; a
//     declared MD5 (storage.Writer.MD5) that does not match the body
//     fails the upload;
//   - Azure: an If-Match access condition (BeforeWrite on
//     **azblob.UploadStreamOptions) fails with FailedPrecondition on a
//     stale ETag; the per-block CRC64 of TransactionalValidation is
//     checked on every staged block.
package cloudtest

import (
	"os"
	"testing"
)

// Main runs the tests, then stops the shared emulators that were started,
// and exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared emulators, for a TestMain that does more
// than [Main]. SharedGCS and SharedAzure fail after it.
func StopShared() {
	if s := sharedGCS.Take(); s != nil {
		s.Stop()
	}
	if s := sharedAzure.Take(); s != nil {
		s.Stop()
	}
}
