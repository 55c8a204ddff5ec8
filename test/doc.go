// Package e2e holds the end-to-end tests of pugfs: the real binary mounted
// with FUSE over a local bucket and over a real S3 server (versitygw), used
// through the shell tools people use. The package has no non-test code
// beyond this comment.
package e2e
