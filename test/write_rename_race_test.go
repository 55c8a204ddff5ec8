package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestWriteDirRenameWhileWriting: one goroutine renames a directory
// again and again (D0 -> D1 -> ...) while another creates, writes and
// closes files in it (optionally with an fsync half-way), as a program
// writing its output while another moves the directory would. Each file
// is opened under the directory's name of the moment, so every one of
// them belongs in the directory's last name. A close whose commit was
// in flight when a rename of its directory started landed under the
// old name after the rename's snapshot: the old directory came back
// holding it (and took later writes), and with the fsync a stale first
// half stayed beside the whole file (audit 17: 24-30 of 100 files left
// behind). Real processes race here: the outcome must hold whatever the
// interleaving.
func TestWriteDirRenameWhileWriting(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(map[bool]string{false: "close", true: "fsync-then-close"}[fsync], func(t *testing.T) {
			bk := openBucket(t, testbucket.Local)
			id := newSession(t, bk)
			m := mount(t, bk)
			dir := filepath.Join(sessDir(m, id), "w")
			if err := os.MkdirAll(filepath.Join(dir, "D0"), 0o755); err != nil {
				t.Fatal(err)
			}
			const files = 60
			var mu sync.Mutex // held while a name is chosen: the rename and the open do not interleave
			cur := "D0"
			done := make(chan struct{})
			renamed := make(chan error, 1)
			go func() {
				for k := 1; ; k++ {
					select {
					case <-done:
						renamed <- nil
						return
					default:
					}
					mu.Lock()
					next := fmt.Sprintf("D%d", k)
					err := os.Rename(filepath.Join(dir, cur), filepath.Join(dir, next))
					if err == nil {
						cur = next
					}
					mu.Unlock()
					if err != nil {
						renamed <- err
						return
					}
				}
			}()
			for i := range files {
				mu.Lock()
				f, err := os.Create(filepath.Join(dir, cur, fmt.Sprintf("f%d", i)))
				mu.Unlock()
				if err != nil {
					close(done)
					t.Fatal(err)
				}
				fmt.Fprintf(f, "file %d\n", i)
				if fsync {
					if err := f.Sync(); err != nil {
						t.Errorf("fsync of f%d: %v", i, err)
					}
					f.WriteString("second line\n")
				}
				if err := f.Close(); err != nil {
					t.Errorf("close of f%d: %v", i, err)
				}
			}
			close(done)
			if err := <-renamed; err != nil {
				t.Fatalf("rename: %v", err)
			}
			mu.Lock()
			last := cur
			mu.Unlock()
			want := map[string]string{}
			for i := range files {
				body := fmt.Sprintf("file %d\n", i)
				if fsync {
					body += "second line\n"
				}
				want[fmt.Sprintf("w/%s/f%d", last, i)] = body
			}
			m.Stop(t)
			got := map[string]string{}
			for name, e := range relLiveSlots(t, bk, id) {
				got[name] = string(relSlotBody(t, bk, e))
			}
			for name, body := range got {
				if want[name] != body {
					t.Errorf("the bucket holds %s = %q, want nothing there (every file belongs in w/%s)", name, body, last)
				}
			}
			for name := range want {
				if _, ok := got[name]; !ok {
					t.Errorf("%s is missing", name)
				}
			}
		})
	}
}
