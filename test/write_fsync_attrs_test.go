package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// TestTwoMountsFsyncAttributesOverOthersRewrite: with --commit=fsync, a
// mount changes the attributes of three files (chmod then >>, a
// setfattr, GNU touch -d, which sets the time through a descriptor), and
// another mount rewrites all three before the fsync. The fsync lands each
// change on the other mount's bytes: before, the appended file lost its
// mode, the touched one its time (audit 41, F2), and the fsync was ESTALE
// for the setfattr, its file kept in failed/ (F7).
func TestTwoMountsFsyncAttributesOverOthersRewrite(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	id := newSession(t, bk)
	seed(t, bk, id, map[string]string{"f": "body\n", "g": "body\n", "h": "body\n"})
	a := mount(t, bk, "--commit", "fsync", "--metadata-ttl", "0")
	b := mount(t, bk, "--metadata-ttl", "0")
	mt := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	run := func(dir, script string, args ...string) {
		t.Helper()
		cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	run(sessDir(a, id), `chmod 600 f && echo more >> f && setfattr -n user.pugmark.meta.k -v v g && touch -d "$1" h`, mt.Format(time.RFC3339))
	run(sessDir(b, id), `for n in f g h; do echo theirs > $n; done`)
	run(sessDir(a, id), `python3 -c 'import os; os.fsync(os.open(".", os.O_RDONLY))'`)

	got := slots(t, bk, id)
	for _, c := range []struct {
		name, body string
		check      func(meta map[string]string) bool
		want       string
	}{
		{"f", "theirs\nmore\n", func(m map[string]string) bool { return layout.PosixMode(m, 0) == 0o600 }, "mode 0600"},
		{"g", "theirs\n", func(m map[string]string) bool { return m["k"] == "v" }, "k=v"},
		{"h", "theirs\n", func(m map[string]string) bool { return m[layout.MetaPosixMtime] == layout.FormatPosixMtime(mt) }, "posix-mtime " + layout.FormatPosixMtime(mt)},
	} {
		e, ok := got[c.name]
		if !ok {
			t.Errorf("%s is gone", c.name)
			continue
		}
		if b := string(body(t, bk, e.Descriptor)); b != c.body {
			t.Errorf("%s holds %q, want %q", c.name, b, c.body)
		}
		if !c.check(e.Metadata) {
			t.Errorf("%s's metadata %v, want %s", c.name, e.Metadata, c.want)
		}
	}
	if failed, _ := filepath.Glob(filepath.Join(a.Dir, ".pugmark", "failed", "*", "*")); len(failed) != 0 {
		t.Errorf("failed copies: %v", failed)
	}
}
