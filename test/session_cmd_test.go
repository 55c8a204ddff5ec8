package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// pugfsCmd runs the pugfs binary with args against bk and returns its
// trimmed stdout.
func pugfsCmd(t *testing.T, bk *Bucket, args ...string) string {
	t.Helper()
	cmd := exec.Command(pugfsBinary(t), args...)
	cmd.Env = append(os.Environ(), bk.Env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pugfs %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func parseID(t testing.TB, s string) layout.SessionID {
	t.Helper()
	id, err := layout.ParseSessionID(s)
	if err != nil || s != id.String() {
		t.Fatalf("%q is not a lowercase session ID: %v", s, err)
	}
	return id
}

// TestSessionMkdir: mkdir sessions/<32-hex> creates that session
// (idempotent, §5.1: a second mkdir is EEXIST and leaves the manifest as
// it is); an ID in upper case creates that ID; names that are not a
// 32-hex ID are EINVAL.
func TestSessionMkdir(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		m := mount(t, bk)
		id := layout.NewSessionID(time.Now())
		shE(t, m.Dir, `mkdir sessions/`+id.String())
		ctx := context.Background()
		man, err := bk.Store.LoadManifest(ctx, id)
		if err != nil {
			t.Fatalf("no manifest after mkdir: %v", err)
		}
		key, _ := layout.ManifestKey(id)
		before, err := bk.B.ReadAll(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(m.Dir, "sessions", id.String()), 0o755); errnoOf(err) != syscall.EEXIST {
			t.Fatalf("second mkdir = %v, want EEXIST", err)
		}
		if after, _ := bk.B.ReadAll(ctx, key); string(after) != string(before) {
			t.Fatalf("second mkdir changed the manifest:\n%s\n%s", before, after)
		}
		if man.FirstSequenceNumber != 1 || man.Parent != nil {
			t.Fatalf("manifest %+v", man)
		}
		if got := shE(t, m.Dir, `cat sessions/`+id.String()+`/.pugmark/version; ls sessions`); !strings.Contains(got, id.String()) || !strings.HasPrefix(got, "0\n") {
			t.Fatalf("after mkdir: %q", got)
		}
		shE(t, m.Dir, `echo first > sessions/`+id.String()+`/f`)
		wantSlots(t, bk, id, map[string]string{"f": "first\n"})
		// mkdir of a session that exists in the bucket already.
		other := newSession(t, bk)
		if err := os.Mkdir(filepath.Join(m.Dir, "sessions", other.String()), 0o755); errnoOf(err) != syscall.EEXIST {
			t.Fatalf("mkdir of an existing session = %v, want EEXIST", err)
		}
		// An ID in upper case is that ID (§4.1), as a lookup takes it.
		upper := layout.NewSessionID(time.Now())
		if err := os.Mkdir(filepath.Join(m.Dir, "sessions", strings.ToUpper(upper.String())), 0o755); err != nil {
			t.Fatalf("mkdir of an upper-case ID: %v", err)
		}
		if _, err := bk.Store.LoadManifest(ctx, upper); err != nil {
			t.Fatalf("no manifest after mkdir of an upper-case ID: %v", err)
		}
		if got := shE(t, m.Dir, `ls sessions`); !strings.Contains(got, upper.String()+"\n") {
			t.Fatalf("ls sessions after mkdir of %s in upper case: %q", upper, got)
		}
		for _, bad := range []string{
			"0123456789abcdef",
			"not-a-session-id-at-all-xxxxxxxx",
			layout.NewSessionID(time.Now()).String() + "00",
			"00000000000000000000000000000000",
		} {
			if err := os.Mkdir(filepath.Join(m.Dir, "sessions", bad), 0o755); errnoOf(err) != syscall.EINVAL {
				t.Errorf("mkdir sessions/%s = %v, want EINVAL", bad, err)
			}
		}
		checkBucket(t, bk)
	})
}

// TestSessionNewCommand: pugfs session new prints the ID of a new session,
// with --name reuses the named one (§9.2-safe), and the mount shows both,
// the named one under names/ too.
func TestSessionNewCommand(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		plain := parseID(t, pugfsCmd(t, bk, "session", "new", bk.URL))
		named := parseID(t, pugfsCmd(t, bk, "session", "new", "--name", "review", bk.URL))
		if again := parseID(t, pugfsCmd(t, bk, "session", "new", "--name", "review", bk.URL)); again != named {
			t.Fatalf("session new --name twice: %s then %s", named, again)
		}
		if plain == named {
			t.Fatal("two sessions, one ID")
		}
		if id, err := bk.Store.ResolveSessionName(context.Background(), "review"); err != nil || id != named {
			t.Fatalf("refs/sessions/review -> %s, %v", id, err)
		}
		m := mount(t, bk, "--metadata-ttl", "0")
		if got := shE(t, m.Dir, `ls sessions`); !strings.Contains(got, plain.String()) || !strings.Contains(got, named.String()) {
			t.Fatalf("ls sessions = %q", got)
		}
		if got := shE(t, m.Dir, `readlink names/review; cat names/review/.pugmark/version`); got != "../sessions/"+named.String()+"\n0\n" {
			t.Fatalf("names/review: %q", got)
		}
		shE(t, m.Dir, `echo via-name > names/review/note.txt`)
		wantSlots(t, bk, named, map[string]string{"note.txt": "via-name\n"})
	})
}

// TestForkInheritedFilesChange: in a session made by pugfs fork, the
// files inherited from the parent can be appended to, edited in place,
// renamed and chmod'ed through the mount, and the parent keeps its own.
// mv and chmod were ESTALE, and `echo x >> f` hung in its close for 10
// minutes: each commit was refused by the inherited entry it was built
// on (review 6).
func TestForkInheritedFilesChange(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	parent := newSession(t, bk)
	shE(t, sessDir(m, parent), `for f in a b c d; do echo $f > $f.txt; done`)
	child := parseID(t, pugfsCmd(t, bk, "fork", bk.URL, parent.String()))
	cd := sessDir(m, child)
	shE(t, cd, `mv a.txt a2.txt; chmod 600 b.txt; echo more >> c.txt; printf D | dd of=d.txt conv=notrunc status=none`)
	if got := shE(t, cd, `stat -c %a b.txt; cat a2.txt c.txt d.txt`); got != "600\na\nc\nmore\nD\n" {
		t.Fatalf("the fork shows %q", got)
	}
	want := map[string]string{"a2.txt": "a\n", "b.txt": "b\n", "c.txt": "c\nmore\n", "d.txt": "D\n"}
	for name, body := range slots(t, bk, child) {
		if name == ".pugmark-fork.json" {
			continue
		}
		if string(body.Data) != want[name] {
			t.Errorf("the fork's %s = %q, want %q", name, body.Data, want[name])
		}
		delete(want, name)
	}
	if len(want) != 0 {
		t.Errorf("the fork lacks %v", want)
	}
	wantSlots(t, bk, parent, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n", "d.txt": "d\n"})
}

// TestForkCommand: pugfs fork runs both phases (§11): the fork record in
// the parent's next snapshot, the child's manifest and snapshot 1. The
// child shows at sessions/<child>/ with the parent's files, in the
// parent's .pugmark/forks/, and its .pugmark/parent points at the version
// it was forked from; --at forks from an older version.
func TestForkCommand(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		ctx := context.Background()
		m := mount(t, bk, "--metadata-ttl", "0")
		parent := newSession(t, bk)
		pd := sessDir(m, parent)
		shE(t, pd, `echo one > a.txt`)
		shE(t, pd, `echo two > b.txt`)

		child := parseID(t, pugfsCmd(t, bk, "fork", bk.URL, parent.String()))
		cm, err := bk.Store.LoadManifest(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		// Phase 1: the fork record is in the parent's snapshot 3.
		snap, err := bk.Store.ReadSnapshot(ctx, parent, 3)
		if err != nil || len(snap) != 1 || !snap[0].Fork || snap[0].TargetSession != child {
			t.Fatalf("parent snapshot 3 = %+v, %v; want the fork record", snap, err)
		}
		// Phase 2: the child exists, parented at that snapshot.
		if cm.Parent == nil || cm.Parent.Session != parent || cm.Parent.Version != 3 {
			t.Fatalf("child manifest parent %+v, want %s@3", cm.Parent, parent)
		}
		if v := latest(t, bk, child); v != 1 {
			t.Fatalf("child version %d, want 1", v)
		}
		cd := sessDir(m, child)
		wantTree(t, cd, map[string]string{"a.txt": "one\n", "b.txt": "two\n", ".pugmark-fork.json": readFile(t, filepath.Join(cd, ".pugmark-fork.json"))})
		var note struct {
			ForkedFrom string `json:"forked-from"`
		}
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(cd, ".pugmark-fork.json"))), &note); err != nil || note.ForkedFrom != parent.String() {
			t.Fatalf("fork note %+v, %v", note, err)
		}
		if got := shE(t, m.Dir, `readlink sessions/`+child.String()+`/.pugmark/parent`); got != fmt.Sprintf("../../%s/.pugmark/at/3\n", parent) {
			t.Fatalf("child .pugmark/parent -> %q", got)
		}
		if got := shE(t, pd, `ls .pugmark/forks; readlink .pugmark/forks/`+child.String()+`; cat .pugmark/forks/`+child.String()+`/a.txt`); got != child.String()+"\n../../../"+child.String()+"\none\n" {
			t.Fatalf("parent .pugmark/forks: %q", got)
		}
		// The child is writable and independent of the parent.
		shE(t, cd, `echo child > c.txt; rm a.txt`)
		wantSlots(t, bk, parent, map[string]string{"a.txt": "one\n", "b.txt": "two\n"})
		if _, ok := slots(t, bk, child)["a.txt"]; ok {
			t.Fatal("rm a.txt in the child did not tombstone it")
		}

		// --at 1: the child sees the parent as it was at version 1.
		old := parseID(t, pugfsCmd(t, bk, "fork", "--at", "1", bk.URL, parent.String()))
		om, err := bk.Store.LoadManifest(ctx, old)
		if err != nil || om.Parent == nil || om.Parent.Version != 1 {
			t.Fatalf("fork --at 1: manifest %+v, %v", om, err)
		}
		od := sessDir(m, old)
		if got := shE(t, od, `ls`); got != "a.txt\n" {
			t.Fatalf("fork --at 1 shows %q, want a.txt only", got)
		}
		if got := shE(t, pd, `ls .pugmark/forks`); got != strings.Join(sortStrings([]string{child.String(), old.String()}), "\n")+"\n" {
			t.Fatalf("parent forks: %q", got)
		}
		// A pending fork (phase 1 only, §11.1) is listed too.
		body := []byte("pending\n")
		bi, err := bk.Store.PutBlobBytes(ctx, body, layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pending, _, err := bk.Store.RecordFork(ctx, parent, layout.ForkRequest{Type: layout.Provisional,
			Descriptor: layout.Descriptor{Name: "p.txt", Digest: bi.Digest, Size: bi.Size, Data: body, CreatedAt: time.Now().UTC()}})
		if err != nil {
			t.Fatal(err)
		}
		if got := shE(t, pd, `ls .pugmark/forks`); !strings.Contains(got, pending.String()) {
			t.Fatalf("parent forks %q lack the pending fork %s", got, pending)
		}
		checkBucket(t, bk)
	})
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
