package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// TestLinkWrittenNamesPartInodes: after ln c f the two names share an
// inode number while both show the linked bytes; once either is written,
// the written name keeps the number it had while open (its writer's
// inode) and the other shows another number at its next stat, in either
// commit mode, before the fsync and after it. With --metadata-ttl=1h the
// kernel never looks a name up again by itself: the mount has to drop the
// other name's entry. Before (audit 41, F3), with --commit=fsync a write
// to c left f on c's number with other bytes until the fsync (the staged
// c counted as the bytes it was staged from), a write to f left both
// names on one number and then gave f, the name being written, a new one
// at its next lookup, and in either mode stat showed one number for the
// metadata TTL: cp f c said "'f' and 'c' are the same file" and refused,
// and rsync -H and tar took the two files for one. "held" opens c before
// the ln: its write is no open of the name (with TTL 0, every stat is a
// lookup that sees it).
func TestLinkWrittenNamesPartInodes(t *testing.T) {
	t.Parallel()
	type variant struct {
		written, ttl string
		held         bool
	}
	variants := []variant{{"c", "0", false}, {"c", "1h", false}, {"f", "0", false}, {"f", "1h", false}, {"c", "0", true}}
	for _, mode := range []string{"close", "fsync"} {
		for _, v := range variants {
			written, ttl := v.written, v.ttl
			name := mode + "/" + written + "/ttl=" + ttl
			if v.held {
				name += "/held"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				bk := openBucket(t, testbucket.Local)
				id := newSession(t, bk)
				m := mount(t, bk, "--commit="+mode, "--metadata-ttl="+ttl)
				dir := sessDir(m, id)
				other := map[string]string{"c": "f", "f": "c"}[written]
				stat := func(name string) os.FileInfo {
					t.Helper()
					fi, err := os.Stat(filepath.Join(dir, name))
					if err != nil {
						t.Fatal(err)
					}
					return fi
				}
				ino := func(name string) uint64 { return stat(name).Sys().(*syscall.Stat_t).Ino }

				sh(t, dir, `echo hello > c && sync c`)
				var w *os.File
				open := func() {
					var err error
					if w, err = os.OpenFile(filepath.Join(dir, written), os.O_WRONLY|os.O_APPEND, 0); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { w.Close() })
				}
				if v.held {
					open()
				}
				sh(t, dir, `ln c f`)
				shared := ino("c")
				if got := ino("f"); got != shared {
					t.Fatalf("after ln, not written: c %d, f %d; want one number", shared, got)
				}
				if got := sh(t, dir, `cat c f`); got != "hello\nhello\n" {
					t.Fatalf("after ln: c, f = %q", got)
				}

				if !v.held {
					open()
				}
				fstat := func(step string) {
					t.Helper()
					fi, err := w.Stat()
					if err != nil {
						t.Fatal(err)
					}
					if got := fi.Sys().(*syscall.Stat_t).Ino; got != shared {
						t.Errorf("%s: the writer's descriptor of %s has number %d, want %d", step, written, got, shared)
					}
				}
				fstat("opened")
				if _, err := w.WriteString("more\n"); err != nil {
					t.Fatal(err)
				}
				fstat("written")
				check := func(step string) {
					t.Helper()
					if got := ino(written); got != shared {
						t.Errorf("%s: %s, the name written, has number %d, want the %d it had while open", step, written, got, shared)
					}
					if os.SameFile(stat("c"), stat("f")) {
						t.Errorf("%s: c and f still one file (number %d) with other bytes", step, ino(other))
					}
				}
				// The other name's kernel entry is dropped from a
				// background queue: the first look waits for it.
				waitFor(t, other+" off the number of "+written, func() bool { return ino(other) != shared })
				check("written, open")
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				check("closed")
				if mode == "fsync" {
					sh(t, dir, `sync `+written)
					check("fsynced")
				}
				want := map[string]string{"c": "hello\n", "f": "hello\n"}
				want[written] += "more\n"
				if got := sh(t, dir, `cat c f`); got != want["c"]+want["f"] {
					t.Errorf("c, f = %q, want %q", got, want["c"]+want["f"])
				}
				if out, errOut, err := run(dir, `cp f c && cat c`); err != nil || out != want["f"] {
					t.Errorf("cp f c: %v, c = %q, want %q; %s", err, out, want["f"], errOut)
				}
			})
		}
	}
}
