package blobcache

import (
	"os"
	"path/filepath"
	"testing"
)

// The disk cache holds every blob the mount read, and a shared mount
// reads blobs that some of its users may not: its directories are 0700,
// and a cache left 0755 by an older pugfs is tightened.
func TestDiskCachePrivate(t *testing.T) {
	for _, tc := range []struct {
		name string
		pre  os.FileMode // 0: the directory does not exist yet
	}{
		{"new", 0},
		{"left open by an older pugfs", 0o755},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			top := filepath.Join(dir, diskSubdir)
			if tc.pre != 0 {
				if err := os.Mkdir(top, tc.pre); err != nil {
					t.Fatal(err)
				}
				os.Chmod(top, tc.pre)
			}
			f := newDiskFixture(t)
			c := newTestBlobCache(t, f.src, diskOpts(dir))
			f.check(t, c)
			c.Close()
			for _, d := range []string{top, filepath.Join(top, diskData), filepath.Join(top, diskInfo), filepath.Join(top, diskTmp)} {
				fi, err := os.Stat(d)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s: mode %v, want no access for group and others", d, fi.Mode().Perm())
				}
			}
		})
	}
}
