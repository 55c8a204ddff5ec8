package e2e

import (
	"regexp"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

var blobBackendReads = regexp.MustCompile(`blob cache backend: reads (\d+)`)

// TestWriteReadBackFromCache: on a bucket that is not a local directory,
// what a mount just wrote is read back from its cache directory, with no
// fetch: the commit keeps a copy of each body it uploaded from the staged
// file (audit 23: md5sum of a 120 MB cp -a through a GCS mount fetched
// all of it again). A second mount on the same cache directory, whose
// memory holds nothing, reads the bodies with no blob request, and gets
// the bytes the first one wrote.
func TestWriteReadBackFromCache(t *testing.T) {
	bk := openBucket(t, testbucket.S3)
	id := newSession(t, bk)
	cache := t.TempDir()
	m := mount(t, bk, "--cache-dir", cache)
	src := t.TempDir()
	shE(t, src, `head -c 3000000 /dev/urandom > big.bin; seq 1 2000 > small.txt; mkdir d; echo hi > d/tiny`)
	shE(t, sessDir(m, id), "cp -r "+src+"/. .")
	const sums = `sha256sum big.bin small.txt d/tiny`
	want := shE(t, src, sums)
	r := mount(t, bk, "--cache-dir", cache)
	if got := shE(t, sessDir(r, id), sums); got != want {
		t.Fatalf("read back through another mount:\n%s\nwant\n%s", got, want)
	}
	if n := statsNumber(t, r, blobBackendReads); n != 0 {
		t.Errorf("reading back what was just written made %d blob requests, want none (read from the cache directory)", n)
	}
}
