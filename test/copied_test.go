package e2e

import (
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// TestCopiedBucket: a local bucket copied with `cp -r` keeps its files but
// not their extended attributes, so every object loses its metadata:
// snapshots have no type (read as checkpoint, §6.2) and no
// content-encoding (sniffed as zstd, §15), blobs no content-type. The copy
// mounts and shows what the original shows.
func TestCopiedBucket(t *testing.T) {
	t.Parallel()
	orig := openBucket(t, testbucket.Local)
	fx := buildReadFixture(t, orig)
	u, err := url.Parse(orig.URL)
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-r", u.Path, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp -r: %v\n%s", err, out)
	}
	// The copy really has no metadata: no extended attributes, and no
	// sidecars (which the driver uses only where xattrs are missing).
	if err := os.RemoveAll(filepath.Join(copyDir, ".pugfs-meta")); err != nil {
		t.Fatal(err)
	}
	snap, _ := layout.SnapshotKey(fx.odd, 2)
	if out, err := exec.Command("getfattr", "-d", "-m", "-", filepath.Join(copyDir, snap)).CombinedOutput(); err != nil || strings.Contains(string(out), "user.") {
		t.Fatalf("the copied snapshot still has extended attributes (%v):\n%s", err, out)
	}
	copied := &Bucket{Kind: testbucket.Local, URL: (&url.URL{Scheme: "file", Path: copyDir}).String()}

	// Both sniff: the fixture's enc/lost.json is a lost encoding in both.
	a, b := mount(t, orig, "--sniff-encoding"), mount(t, copied, "--sniff-encoding")
	ra := &rdCtx{t: t, bk: orig, fx: fx, m: a, dir: a.Dir}
	rb := &rdCtx{t: t, bk: orig, fx: fx, m: b, dir: b.Dir}

	// Everything readable shows the same bytes, names and sizes; the
	// corrupt blob stays EIO.
	same := func(what, script string) {
		t.Helper()
		if x, y := ra.sh(script), rb.sh(script); x != y {
			t.Errorf("%s: the copy shows\n%s\nthe original\n%s", what, trunc([]byte(y)), trunc([]byte(x)))
		}
	}
	files := `find sessions memories refs -path '*/bad' -prune -o -type f -print0 | sort -z | xargs -0 sha256sum`
	same("content of every file", files)
	same("sizes", `find sessions memories refs objects -path '*/bad' -prune -o -printf '%p %s %y\n' | sort`)
	same("links", `find sessions names -type l -printf '%p -> %l\n' | sort`)
	same("log.jsonl", `cat sessions/*/.pugmark/log.jsonl`)
	same("versions", `cat sessions/*/.pugmark/version`)
	same("history", `cd `+meta(fx.odd)+`/at/2 && find . -path ./bad -prune -o -type f -print0 | sort -z | xargs -0 sha256sum`)
	same("objects", `cd objects && ls | grep -v `+fx.bad.Hex()+` | xargs sha256sum`)
	same("xattrs", `getfattr -d `+sess(fx.odd)+`/big/gz.txt `+sess(fx.odd)+`/meta.txt`)
	rb.fails("cat "+sess(fx.odd)+"/bad/mismatch.bin", "Input/output error")
	rb.eq("lost encoding", rb.sh("head -c 9 "+sess(fx.odd)+"/enc/lost.json"), `{"lost": `)

	// What the lost metadata changes: no snapshot type, so every snapshot
	// is a checkpoint, and the latest checkpoint is the latest version.
	for _, id := range []layout.SessionID{fx.demo.Main.ID, fx.demo.Inbox.ID, fx.odd, fx.prov} {
		rb.eq("checkpoint of "+id.String(), rb.sh("cat "+meta(id)+"/checkpoint"), rb.sh("cat "+meta(id)+"/version"))
	}
	var s2 struct {
		Type        string `json:"type"`
		TypeMissing bool   `json:"type-missing"`
		Txn         string `json:"transaction-id"`
		Descriptors []json.RawMessage
	}
	if err := json.Unmarshal([]byte(rb.sh("cat "+meta(fx.odd)+"/snapshots/2.json")), &s2); err != nil {
		t.Fatal(err)
	}
	if s2.Type != "checkpoint" || !s2.TypeMissing || s2.Txn != "0" || len(s2.Descriptors) != fx.oddV2Len {
		t.Errorf("copied snapshots/2.json: type %q, type-missing %v, transaction-id %q, %d descriptors; want checkpoint, true, 0, %d",
			s2.Type, s2.TypeMissing, s2.Txn, len(s2.Descriptors), fx.oddV2Len)
	}
	ra.eq("original type", ra.sh("grep -c '\"type\": \"provisional\"' "+meta(fx.odd)+"/snapshots/2.json"), "1\n")

	rb.eq("bucket", strings.TrimPrefix(rb.sh("cat .pugmark/bucket"), "file://"), copyDir+"\n")
}
