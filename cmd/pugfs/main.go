// Command pugfs mounts a pugmark bucket as a directory tree.
package main

import (
	_ "github.com/hanwen/go-fuse/v2/fs"
	_ "github.com/hashicorp/golang-lru/v2"
	_ "github.com/klauspost/compress/zstd"
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/drivertest"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
	_ "github.com/hanwen/go-fuse/v2/posixtest"
)

func main() {}
