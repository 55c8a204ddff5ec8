package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
)

// memRecords returns the records of the latest version of namespace ns
// (name -> body) and that version.
func memRecords(t testing.TB, bk *Bucket, ns string) (map[string]string, uint32) {
	t.Helper()
	ctx := context.Background()
	v, err := bk.Store.LatestMemoryVersion(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	if v == 0 {
		return out, 0
	}
	recs, err := bk.Store.ReadMemory(ctx, ns, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range recs {
		out[d.Name] = string(body(t, bk, d))
	}
	return out, v
}

func wantMemory(t testing.TB, bk *Bucket, ns string, want map[string]string, version uint32) {
	t.Helper()
	got, v := memRecords(t, bk, ns)
	if v != version {
		t.Errorf("memories/%s: version %d, want %d", ns, v, version)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("memories/%s = %v, want %v", ns, got, want)
	}
}

// TestWriteMemories: writing memories/<ns>/<name> is a memory commit;
// overwrite, append and unlink each write one new version; a rewrite that
// changes nothing writes none; nested namespaces are made with mkdir.
func TestWriteMemories(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		m := mount(t, bk)
		mem := filepath.Join(m.Dir, "memories")
		shE(t, mem, `mkdir ns; echo "a longer first value" > ns/rec`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "a longer first value\n"}, 1)
		shE(t, mem, `echo short > ns/rec`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\n"}, 2)
		shE(t, mem, `echo short > ns/rec`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\n"}, 2)
		shE(t, mem, `echo more >> ns/rec; echo other > ns/other`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\nmore\n", "other": "other\n"}, 4)
		if got := shE(t, mem, `cat ns/rec`); got != "short\nmore\n" {
			t.Fatalf("cat ns/rec = %q", got)
		}
		shE(t, mem, `exec 3>ns/dup; echo d >&3; exec 4>&3; exec 3>&-; exec 4>&-`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\nmore\n", "other": "other\n", "dup": "d\n"}, 5)
		shE(t, mem, `rm ns/other`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\nmore\n", "dup": "d\n"}, 6)
		// mv inside a namespace is one version; sed -i (a temp record
		// renamed over the old one) works.
		shE(t, mem, `mv ns/dup ns/dup2`)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\nmore\n", "dup2": "d\n"}, 7)
		shE(t, mem, `sed -i s/more/MORE/ ns/rec; mv ns/dup2 ns/dup`)
		if got, _ := memRecords(t, bk, "ns"); fmt.Sprint(got) != fmt.Sprint(map[string]string{"rec": "short\nMORE\n", "dup": "d\n"}) {
			t.Fatalf("after sed -i and mv: %v", got)
		}
		_, v := memRecords(t, bk, "ns")
		if e := shErr(t, mem, `rm ns/other`); e == "" {
			t.Fatal("rm of a missing record: no error")
		}
		shE(t, mem, `mkdir -p ns/sub/deeper; echo x > ns/sub/deeper/r; test -d ns/sub`)
		wantMemory(t, bk, "ns/sub/deeper", map[string]string{"r": "x\n"}, 1)
		wantMemory(t, bk, "ns", map[string]string{"rec": "short\nMORE\n", "dup": "d\n"}, v)
		if err := os.Rename(filepath.Join(mem, "ns", "rec"), filepath.Join(mem, "ns", "sub", "rec")); errnoOf(err) != syscall.EXDEV {
			t.Fatalf("rename across namespaces = %v, want EXDEV", err)
		}
		if e := shErr(t, mem, `echo x > toplevel`); e == "" {
			t.Fatal("a record outside any namespace: no error")
		}
		// A namespace is no object: its rename is EXDEV, so mv copies
		// its records (it was EINVAL: "cannot move to a subdirectory of
		// itself").
		for _, mv := range [][2]string{{"ns/sub", "ns/sub2"}, {"ns", "ns2"}} {
			if err := os.Rename(filepath.Join(mem, mv[0]), filepath.Join(mem, mv[1])); errnoOf(err) != syscall.EXDEV {
				t.Fatalf("rename of namespace %s = %v, want EXDEV", mv[0], err)
			}
		}
		shE(t, mem, `mkdir cp && echo c > cp/c && mv cp cp2`)
		wantMemory(t, bk, "cp2", map[string]string{"c": "c\n"}, 1)
		// rm -r of a namespace: its log stays in the bucket (versions
		// never go), so this mount hides it, nested ones too, until
		// something is written in it again. It stayed listed, and
		// rmdir of an emptied child namespace was ENOTEMPTY for its
		// parent.
		// (mv's rmdir of cp, above, hid cp already.)
		shE(t, mem, `mkdir -p gone/sub && echo x > gone/sub/x && echo y > gone/y && rm -r gone`)
		if got := shE(t, mem, `ls`); got != "cp2\nns\n" {
			t.Fatalf("memories/ after mv cp cp2 and rm -r gone: %q", got)
		}
		if e := shErr(t, mem, `rmdir gone`); !strings.Contains(e, "No such file") {
			t.Fatalf("rmdir of a removed namespace: %q", e)
		}
		shE(t, mem, `mkdir gone && echo back > gone/b`)
		if got := shE(t, mem, `ls gone; cat gone/b`); got != "b\nback\n" {
			t.Fatalf("a removed namespace written again: %q", got)
		}
		fresh := mount(t, bk, "--read-only", "--metadata-ttl", "0")
		if got := shE(t, fresh.Dir, `cat memories/ns/rec memories/ns/dup memories/ns/sub/deeper/r; ls memories/ns`); got != "short\nMORE\nd\nx\ndup\nrec\nsub\n" {
			t.Fatalf("fresh mount: %q", got)
		}
		checkBucket(t, bk)
	})
}

// TestWriteMemoriesTwoMounts: writers on two mounts putting different
// names into one namespace at once all survive (§8.3 merge, retry on
// conflict).
func TestWriteMemoriesTwoMounts(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		a, b := mount(t, bk), mount(t, bk)
		shE(t, a.Dir, `mkdir memories/shared && echo seed > memories/shared/seed`)
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		want := map[string]string{"seed": "seed\n"}
		for i, m := range []*Mount{a, b} {
			for j := 0; j < n; j++ {
				name := fmt.Sprintf("m%d-%d", i, j)
				want[name] = name + "\n"
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- writeFile(filepath.Join(m.Dir, "memories", "shared", name), []byte(name+"\n"), createFlags)
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, v := memRecords(t, bk, "shared")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("memories/shared = %v, want %v", got, want)
		}
		if v != 2*n+1 {
			t.Errorf("version %d, want %d (one per write)", v, 2*n+1)
		}
		checkBucket(t, bk)
	})
}

// TestWriteRefs: writing refs/<name> is a Link; overwriting it replaces
// the target (a shorter one too); rm deletes it.
func TestWriteRefs(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		m := mount(t, bk)
		ctx := context.Background()
		target := func(name string) string {
			r, err := bk.Store.ReadRef(ctx, name)
			if errors.Is(err, layout.ErrNotFound) {
				return "<none>"
			}
			if err != nil {
				t.Fatal(err)
			}
			return r.Target
		}
		shE(t, m.Dir, `echo a-long-first-target > refs/r`)
		if got := target("r"); got != "a-long-first-target" {
			t.Fatalf("ref r = %q", got)
		}
		shE(t, m.Dir, `echo second > refs/r`)
		if got := target("r"); got != "second" {
			t.Fatalf("ref r after overwrite = %q", got)
		}
		if got := shE(t, m.Dir, `cat refs/r`); got != "second\n" {
			t.Fatalf("cat refs/r = %q", got)
		}
		shE(t, m.Dir, `exec 3>refs/d; echo dup >&3; exec 4>&3; exec 3>&-; exec 4>&-`)
		if got := target("d"); got != "dup" {
			t.Fatalf("ref d = %q", got)
		}
		if err := writeFile(filepath.Join(m.Dir, "refs", "bad"), []byte("two\nlines\n"), createFlags); errnoOf(err) != syscall.EINVAL {
			t.Fatalf("a two-line ref: close = %v, want EINVAL", err)
		}
		if got := target("bad"); got != "<none>" {
			t.Fatalf("ref bad = %q", got)
		}
		// An empty ref cannot be: emptied and closed unwritten, a ref
		// keeps its value, and the log says so.
		shE(t, m.Dir, `: > refs/d; touch refs/never`)
		if got, never := target("d"), target("never"); got != "dup" || never != "<none>" {
			t.Fatalf("after : > refs/d and touch refs/never: d = %q, never = %q", got, never)
		}
		waitFor(t, "the log to say refs/d and refs/never were not written", func() bool {
			return strings.Count(m.Log(), "ref not written") == 2
		})
		shE(t, m.Dir, `rm refs/r`)
		if got := target("r"); got != "<none>" {
			t.Fatalf("ref r after rm = %q", got)
		}
		if e := shErr(t, m.Dir, `rm refs/r`); e == "" {
			t.Fatal("rm of a missing ref: no error")
		}
		fresh := mount(t, bk, "--read-only", "--metadata-ttl", "0")
		if got := shE(t, fresh.Dir, `ls refs; cat refs/d`); got != "d\ndup\n" {
			t.Fatalf("fresh mount: %q", got)
		}
	})
}

// TestWriteRefsCompareAndSwap: an overwrite is a compare-and-swap against
// the value seen at open: of two mounts that opened the ref, the second
// to close gets ESTALE and the first's target stays (local driver and S3
// both support If-Match).
func TestWriteRefsCompareAndSwap(t *testing.T) {
	parallelBuckets(t, func(t *testing.T, bk *Bucket) {
		if err := bk.Store.Link(context.Background(), "race", "start"); err != nil {
			t.Fatal(err)
		}
		a, b := mount(t, bk, "--metadata-ttl", "0"), mount(t, bk, "--metadata-ttl", "0")
		fa, err := os.OpenFile(filepath.Join(a.Dir, "refs", "race"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := os.OpenFile(filepath.Join(b.Dir, "refs", "race"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		// fb is written only after fa's close: a child another test
		// forks holds a copy of fb until its exec, and that copy's close
		// is a FLUSH that commits what fb holds by then. Writing fb later
		// keeps the order of the commits the test's own; both opens
		// still come before the first commit.
		fa.Write([]byte("from-a\n"))
		if err := fa.Close(); err != nil {
			t.Fatalf("first close: %v", err)
		}
		fb.Write([]byte("from-b\n"))
		if err := fb.Close(); errnoOf(err) != syscall.ESTALE {
			t.Fatalf("second close = %v, want ESTALE", err)
		}
		r, err := bk.Store.ReadRef(context.Background(), "race")
		if err != nil || r.Target != "from-a" {
			t.Fatalf("ref race = %+v, %v; want from-a", r, err)
		}
		// A fresh open sees the new value and may replace it.
		if err := writeFile(filepath.Join(b.Dir, "refs", "race"), []byte("from-b\n"), os.O_WRONLY|os.O_TRUNC); err != nil {
			t.Fatal(err)
		}
		if r, _ := bk.Store.ReadRef(context.Background(), "race"); r.Target != "from-b" {
			t.Fatalf("ref race = %q after a fresh write", r.Target)
		}
		// Two mounts creating one ref, absent when both opened it: the
		// second close is ESTALE too (both succeeded, the first value
		// lost: the cloud audit).
		ca, err := os.OpenFile(filepath.Join(a.Dir, "refs", "fresh"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := os.OpenFile(filepath.Join(b.Dir, "refs", "fresh"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		ca.Write([]byte("from-a\n"))
		if err := ca.Close(); err != nil {
			t.Fatalf("first create's close: %v", err)
		}
		cb.Write([]byte("from-b\n"))
		if err := cb.Close(); errnoOf(err) != syscall.ESTALE {
			t.Fatalf("second create's close = %v, want ESTALE", err)
		}
		if r, err := bk.Store.ReadRef(context.Background(), "fresh"); err != nil || r.Target != "from-a" {
			t.Fatalf("ref fresh = %+v, %v; want from-a", r, err)
		}
	})
}

// TestWriteMemoryNewRecordTwoDescriptors: two descriptors of one mount
// writing a record created here and not committed yet leave it as on a
// local disk, whichever closes first: the first one's line, then the
// second one's, once each. A descriptor opened to write such a record
// commits what the others hold first, then builds on it. Each held its
// own bytes: the creator's commit replaced the second's line (with
// nothing, for a creator that wrote nothing: exec 3>rec), or put its
// own on again after the second had committed both (audit 9 #2, review
// 6 #3, #4, review 7 #6).
func TestWriteMemoryNewRecordTwoDescriptors(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	shE(t, m.Dir, "mkdir memories/two")
	const script = `
import os, sys
path, closes_first, first_mode, second_mode = sys.argv[1:]
modes = {"append": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "write": os.O_WRONLY | os.O_CREAT, "rdwr": os.O_RDWR,
         "trunc": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "silent": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}
first = os.open(path, modes[first_mode], 0o644)
if first_mode != "silent":  # exec 3>rec: made, nothing written
    os.write(first, b"one\n")
second = os.open(path, modes[second_mode], 0o644)
if second_mode == "rdwr":
    assert os.read(second, 100) == (b"" if first_mode == "silent" else b"one\n")
os.lseek(second, 0, os.SEEK_END); os.write(second, b"two\n")
if closes_first == "second":
    os.close(second); os.close(first)
else:
    os.close(first); os.close(second)
`
	for _, closesFirst := range []string{"second", "first"} {
		for _, modes := range [][2]string{{"append", "append"}, {"append", "rdwr"}, {"write", "append"}, {"write", "rdwr"},
			{"trunc", "append"}, {"silent", "append"}, {"silent", "rdwr"}} {
			name := fmt.Sprintf("rec-%s-%s-%s", closesFirst, modes[0], modes[1])
			if out, err := exec.Command("python3", "-c", script, filepath.Join(m.Dir, "memories/two", name), closesFirst, modes[0], modes[1]).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, out)
			}
			want := "one\ntwo\n"
			if modes[0] == "silent" {
				want = "two\n"
			}
			if got, _ := memRecords(t, bk, "two"); got[name] != want {
				t.Errorf("%s = %q, want %q", name, got[name], want)
			}
		}
	}
}

// TestWriteMemoryNoLostUpdate: two descriptors write one memory record
// with their opens overlapping. Appends (O_APPEND) both land, the later
// close putting its line on the record the earlier one left, as on a
// local disk: on two mounts the second close was ESTALE, its line only
// in the failed directory, and on one mount the kernel's offset for the
// second append counted the first one's unsaved bytes, committed as NUL
// bytes (the memories audit). A rewrite in place (no O_APPEND) built on
// the replaced record is still refused: ESTALE, its body kept in the
// failed directory, the record untouched. An append that opens after the
// other mount's write appends to it, though its mount looked the record
// up before (an hour's TTL).
func TestWriteMemoryNoLostUpdate(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	a, b := mount(t, bk, "--metadata-ttl", "1h"), mount(t, bk, "--metadata-ttl", "1h")
	shE(t, a.Dir, `mkdir memories/team && echo base > memories/team/log.md`)
	rec := "memories/team/log.md"
	waitFor(t, "b sees the record", func() bool { return shE(t, b.Dir, "cat "+rec) == "base\n" })
	// argv: the record as the first and the second writer see it, the
	// second writer's open mode ("a" appends, "r+" writes at the end).
	const overlap = `
import errno, sys
a = open(sys.argv[1], "a"); b = open(sys.argv[2], sys.argv[3])
b.seek(0, 2)
a.write(sys.argv[4] + "\n"); b.write(sys.argv[5] + "\n")
a.close()
try:
    b.close()
    print("b closed")
except OSError as e:
    print("b:", errno.errorcode[e.errno])
`
	runOn := func(t *testing.T, rec, first, second, mode, lineA, lineB, want string) {
		t.Helper()
		out, err := exec.Command("python3", "-c", overlap, filepath.Join(first, rec), filepath.Join(second, rec), mode, lineA, lineB).CombinedOutput()
		if err != nil || string(out) != want {
			t.Fatalf("python (second writer %q): %v\n%s, want %s", mode, err, out, want)
		}
	}
	run := func(t *testing.T, first, second, mode, lineA, lineB, want string) {
		t.Helper()
		runOn(t, rec, first, second, mode, lineA, lineB, want)
	}
	run(t, a.Dir, b.Dir, "a", "from a", "from b", "b closed\n")
	if got, v := memRecords(t, bk, "team"); got["log.md"] != "base\nfrom a\nfrom b\n" || v != 3 {
		t.Fatalf("log.md = %q at version %d after two mounts' appends, want both at 3", got["log.md"], v)
	}
	// A record neither mount has yet, created by both with >> at once:
	// the later line went over the earlier (audit 8 #2).
	runOn(t, "memories/team/new.md", a.Dir, b.Dir, "a", "new a", "new b", "b closed\n")
	if got, _ := memRecords(t, bk, "team"); got["new.md"] != "new a\nnew b\n" {
		t.Fatalf("new.md = %q after two mounts created it with >>, want both lines", got["new.md"])
	}
	run(t, a.Dir, a.Dir, "a", "a1", "a2", "b closed\n")
	if got, _ := memRecords(t, bk, "team"); got["log.md"] != "base\nfrom a\nfrom b\na1\na2\n" {
		t.Fatalf("log.md = %q after two appends on one mount", got["log.md"])
	}
	run(t, a.Dir, b.Dir, "r+", "a3", "b3", "b: ESTALE\n")
	const was = "base\nfrom a\nfrom b\na1\na2\n"
	if got, _ := memRecords(t, bk, "team"); got["log.md"] != was+"a3\n" {
		t.Fatalf("log.md = %q after an append and a refused rewrite", got["log.md"])
	}
	if kept := shE(t, b.Dir, "cat .pugmark/failed/memories/team%2Flog.md.*"); kept != was+"b3\n" {
		t.Fatalf("b's refused record in the failed directory: %q", kept)
	}
	shE(t, a.Dir, "echo a4 >> "+rec)
	const appendChecked = `
import sys
with open(sys.argv[1], "a") as f:
    f.write("b2\n")
`
	if out, err := exec.Command("python3", "-c", appendChecked, filepath.Join(b.Dir, rec)).CombinedOutput(); err != nil {
		t.Fatalf("b's append after a's: %v\n%s", err, out)
	}
	if got, _ := memRecords(t, bk, "team"); got["log.md"] != was+"a3\na4\nb2\n" {
		t.Fatalf("log.md = %q after appends in turn", got["log.md"])
	}
}

// TestWriteMemoryEditors: the ways editors and careful programs write a
// file work in memories/<ns>/ and leave exactly the records meant. A file
// created there could not be found by its name until its close committed
// it: stat and unlink of it while open were ENOENT, so vim's swap file
// stayed behind as a record, and a temporary file renamed over the record
// while still open (NamedTemporaryFile + os.replace) was refused and
// stayed as a record of its own.
func TestWriteMemoryEditors(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	ns := filepath.Join(m.Dir, "memories", "notes")
	shE(t, m.Dir, `mkdir memories/notes && echo v1 > memories/notes/rec.txt`)
	const python = `
import os, sys, tempfile
d = sys.argv[1]
# A swap file: created, written, found by name, removed while open.
fd = os.open(d + "/.rec.txt.swp", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, b"swap")
if os.stat(d + "/.rec.txt.swp").st_size != 4:
    sys.exit("stat of the open new file: size %d" % os.stat(d + "/.rec.txt.swp").st_size)
os.unlink(d + "/.rec.txt.swp")
os.write(fd, b"more")
os.close(fd)
# An atomic replace while the temporary file is open.
with tempfile.NamedTemporaryFile("w", dir=d, prefix=".tmp", delete=False) as f:
    f.write("v2\n"); f.flush()
    os.replace(f.name, d + "/rec.txt")
# And once it is closed.
with tempfile.NamedTemporaryFile("w", dir=d, prefix=".tmp", delete=False) as f:
    f.write("other\n")
os.replace(f.name, d + "/other.txt")
print(sorted(os.listdir(d)))
`
	out, err := exec.Command("python3", "-c", python, ns).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "['other.txt', 'rec.txt']" {
		t.Fatalf("python: %v\n%s", err, out)
	}
	// vim with its swap file (on by default), editing the record.
	if vim, err := exec.LookPath("vim"); err == nil {
		cmd := exec.Command(vim, "-u", "NONE", "-i", "NONE", "-es", "-c", "%s/v2/v3/", "-c", "wq", "rec.txt")
		cmd.Dir = ns
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("vim: %v\n%s", err, out)
		}
	}
	want := map[string]string{"rec.txt": "v3\n", "other.txt": "other\n"}
	if _, err := exec.LookPath("vim"); err != nil {
		want["rec.txt"] = "v2\n"
	}
	got, _ := memRecords(t, bk, "notes")
	if !maps.Equal(got, want) {
		t.Fatalf("records %q, want %q", got, want)
	}
}

// TestWriteSedInPlace: sed -i edits a ref and a memory record. sed makes
// a temporary file beside the one it edits, fchown and fchmod it, closes
// it and renames it over the original: for a ref, fchown and fchmod of
// the new file were ENOENT (the bucket had no such ref yet) and a rename
// inside refs/ was EROFS, so sed failed and the ref kept its value.
func TestWriteSedInPlace(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	shE(t, m.Dir, `echo hello > refs/myref && mkdir memories/notes && echo hello > memories/notes/rec.txt`)
	// Read back at once, through the inode the rename moved.
	if got := shE(t, m.Dir, `sed -i s/hello/world/ refs/myref && cat refs/myref`); got != "world\n" {
		t.Fatalf("refs/myref after sed -i: %q", got)
	}
	if got := shE(t, m.Dir, `sed -i s/hello/world/ memories/notes/rec.txt && cat memories/notes/rec.txt`); got != "world\n" {
		t.Fatalf("memories/notes/rec.txt after sed -i: %q", got)
	}
	ctx := context.Background()
	if r, err := bk.Store.ReadRef(ctx, "myref"); err != nil || r.Target != "world" {
		t.Fatalf("ref myref = %+v, %v; want world", r, err)
	}
	if refs, err := bk.Store.ListRefs(ctx, nil); err != nil || !slices.Equal(refs, []string{"myref"}) {
		t.Fatalf("refs %q, %v; want myref alone (sed's temporary ref removed)", refs, err)
	}
	if got, _ := memRecords(t, bk, "notes"); !maps.Equal(got, map[string]string{"rec.txt": "world\n"}) {
		t.Fatalf("records %q", got)
	}
}

// TestWriteRenameFreesOldName: after a record or ref is renamed while the
// kernel keeps its inode (an open descriptor here), a file that comes to
// the old name with the same derived identity (the same bytes for a
// record, the name alone for a ref) is a file of its own: writing it
// leaves the renamed one alone. A lookup of the old name gave the moved
// inode, so "more" went to b and both names read it.
func TestWriteRenameFreesOldName(t *testing.T) {
	for _, tc := range []struct{ name, dir string }{
		{"memory", "memories/notes"},
		{"ref", "refs/heads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bk := openBucket(t, testbucket.Local)
			// TTL 0: every access looks the name up again, as any
			// access does once the TTL has passed.
			m := mount(t, bk, "--metadata-ttl=0")
			got := shE(t, m.Dir, `D=`+tc.dir+`; mkdir -p $D && echo same > $D/a && exec 3<$D/a && mv $D/a $D/b &&
				echo same > $D/c && mv $D/c $D/a && cat $D/a && echo more > $D/a && cat $D/a $D/b`)
			if got != "same\nmore\nsame\n" {
				t.Fatalf("a, a after the write, b: %q, want %q", got, "same\nmore\nsame\n")
			}
			ctx := context.Background()
			if tc.name == "memory" {
				if got, _ := memRecords(t, bk, "notes"); !maps.Equal(got, map[string]string{"a": "more\n", "b": "same\n"}) {
					t.Fatalf("records %q", got)
				}
				return
			}
			for ref, want := range map[string]string{"heads/a": "more", "heads/b": "same"} {
				if r, err := bk.Store.ReadRef(ctx, ref); err != nil || r.Target != want {
					t.Errorf("ref %s = %+v, %v; want %s", ref, r, err, want)
				}
			}
		})
	}
}

// TestWriteRefDirs: a directory made in refs/ stays until rmdir, though
// the bucket has no object for it until a ref is written under it (it
// vanished once the TTL had passed, and a ref written under it then was
// ENOENT); rmdir of one that holds refs is ENOTEMPTY, its rename EXDEV.
func TestWriteRefDirs(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk, "--metadata-ttl=0")
	if got := shE(t, m.Dir, `mkdir refs/k refs/e && echo t > refs/k/a && cat refs/k/a && ls refs`); got != "t\ne\nk\n" {
		t.Fatalf("ref and refs/ listing: %q", got)
	}
	if err := syscall.Rmdir(filepath.Join(m.Dir, "refs/k")); err != syscall.ENOTEMPTY {
		t.Fatalf("rmdir of a directory holding a ref: %v, want ENOTEMPTY", err)
	}
	// A directory is no object: its rename is EXDEV, and mv copies.
	if got := shE(t, m.Dir, `mv refs/k refs/j 2>/dev/null; ls refs/j refs`); got != "refs:\ne\nj\n\nrefs/j:\na\n" {
		t.Fatalf("after mv refs/k refs/j: %q", got)
	}
	if refs, err := bk.Store.ListRefs(context.Background(), nil); err != nil || !slices.Equal(refs, []string{"j/a"}) {
		t.Fatalf("refs %q, %v; want j/a alone", refs, err)
	}
	// Directories of refs/ and memories/ keep no mode or times: chmod
	// and touch succeed and change nothing, as on a session's directory
	// (it was EROFS, then EPERM for a change, which failed cp -a).
	shE(t, m.Dir, `mkdir memories/ns && touch refs refs/j memories memories/ns && chmod 755 refs/j memories/ns`)
	for _, dir := range []string{"refs/j", "memories/ns"} {
		if err := syscall.Chmod(filepath.Join(m.Dir, dir), 0o700); err != nil {
			t.Fatalf("chmod 700 %s: %v", dir, err)
		}
		if got := shE(t, m.Dir, "stat -c %a "+dir); got != "755\n" {
			t.Fatalf("%s after chmod 700: mode %q, want 755 (unchanged)", dir, got)
		}
		if err := syscall.Setxattr(filepath.Join(m.Dir, dir), "user.x", []byte("v"), 0); err != syscall.ENOTSUP {
			t.Fatalf("setxattr %s: %v, want ENOTSUP", dir, err)
		}
	}
	// A ref's name has one "/" at most (storage-layout §9), so no
	// directory goes deeper; and no link of either kind is kept there.
	for _, c := range []struct {
		what string
		err  error
		want syscall.Errno
	}{
		{"mkdir refs/j/deeper", syscall.Mkdir(filepath.Join(m.Dir, "refs/j/deeper"), 0o755), syscall.EINVAL},
		{"mkdir refs/sessions/team", syscall.Mkdir(filepath.Join(m.Dir, "refs/sessions"), 0o755), 0},
		{"mkdir refs/sessions/team", syscall.Mkdir(filepath.Join(m.Dir, "refs/sessions/team"), 0o755), syscall.EINVAL},
		{"ln refs/j/a refs/j/b", syscall.Link(filepath.Join(m.Dir, "refs/j/a"), filepath.Join(m.Dir, "refs/j/b")), syscall.EPERM},
		{"ln -s in refs/", syscall.Symlink("j/a", filepath.Join(m.Dir, "refs/l")), syscall.EPERM},
	} {
		if errnoOf(c.err) != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	shE(t, m.Dir, `mkdir refs/k && echo t > refs/k/a`)
	if got := shE(t, m.Dir, `rm refs/k/a refs/j/a && rmdir refs/k refs/e refs/j refs/sessions && ls refs`); got != "" {
		t.Fatalf("refs/ after rmdir: %q", got)
	}
	if err := syscall.Rmdir(filepath.Join(m.Dir, "refs/e")); err != syscall.ENOENT {
		t.Fatalf("rmdir again: %v, want ENOENT", err)
	}
}

// TestWriteRecordsOpenByName: memory records and refs open for writing
// behave as files do when their names change under them. A ref created
// and renamed over another before its close (Python's NamedTemporaryFile
// + os.replace) writes the other at its close, no temporary ref left
// (the rename was ENOENT); a second descriptor opened by name on a file
// created and still open reads what the first wrote (it read nothing);
// a record or ref written through a descriptor and unlinked before the
// close stays removed (the close brought the record back).
func TestWriteRecordsOpenByName(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	shE(t, m.Dir, `mkdir memories/ns refs/heads && echo one > refs/heads/main && echo a > memories/ns/r`)
	ns, heads := filepath.Join(m.Dir, "memories/ns"), filepath.Join(m.Dir, "refs/heads")
	ctx := context.Background()
	release := holdForks() // a child's exec would close (commit) a copy
	defer release()
	openAt := func(path string, flag int) *os.File {
		t.Helper()
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	excl := os.O_RDWR | os.O_CREATE | os.O_EXCL

	// The temporary ref renamed over main while open.
	tmp := openAt(filepath.Join(heads, ".tmp1"), excl)
	mustDo(writeString(tmp, "two\n"))
	if got, err := os.ReadFile(filepath.Join(heads, ".tmp1")); err != nil || string(got) != "two\n" {
		t.Fatalf("the new ref read by name while open: %q, %v", got, err)
	}
	mustDo(os.Rename(tmp.Name(), filepath.Join(heads, "main")))
	if got, err := os.ReadFile(filepath.Join(heads, "main")); err != nil || string(got) != "two\n" {
		t.Fatalf("main after the rename: %q, %v", got, err)
	}
	mustDo(tmp.Close())
	if refs, err := bk.Store.ListRefs(ctx, nil); err != nil || !slices.Equal(refs, []string{"heads/main"}) {
		t.Fatalf("refs %q, %v; want heads/main alone", refs, err)
	}
	if r, err := bk.Store.ReadRef(ctx, "heads/main"); err != nil || r.Target != "two" {
		t.Fatalf("heads/main = %+v, %v; want two", r, err)
	}

	// The same with a record.
	tmp = openAt(filepath.Join(ns, ".tmp1"), excl)
	mustDo(writeString(tmp, "b\n"))
	mustDo(os.Rename(tmp.Name(), filepath.Join(ns, "r")))
	if got, err := os.ReadFile(filepath.Join(ns, "r")); err != nil || string(got) != "b\n" {
		t.Fatalf("record r after the rename: %q, %v", got, err)
	}
	mustDo(tmp.Close())
	if got, _ := memRecords(t, bk, "ns"); !maps.Equal(got, map[string]string{"r": "b\n"}) {
		t.Fatalf("records %q; want r alone", got)
	}

	// A record created and open, read through a second descriptor.
	rec := openAt(filepath.Join(ns, "new"), excl)
	mustDo(writeString(rec, "pending\n"))
	if got, err := os.ReadFile(filepath.Join(ns, "new")); err != nil || string(got) != "pending\n" {
		t.Fatalf("the new record read by name while open: %q, %v", got, err)
	}
	mustDo(rec.Close())

	// Written, then unlinked before the close: a record and a ref.
	for _, path := range []string{filepath.Join(ns, "r"), filepath.Join(heads, "main")} {
		f := openAt(path, os.O_WRONLY|os.O_TRUNC)
		mustDo(writeString(f, "three\n"))
		mustDo(os.Remove(path))
		if err := f.Close(); err != nil {
			t.Fatalf("close of %s after its unlink: %v", filepath.Base(path), err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after the close: %v, want ENOENT", filepath.Base(path), err)
		}
	}
	if got, _ := memRecords(t, bk, "ns"); !maps.Equal(got, map[string]string{"new": "pending\n"}) {
		t.Fatalf("records %q; want new alone", got)
	}
	if refs, err := bk.Store.ListRefs(ctx, nil); err != nil || len(refs) != 0 {
		t.Fatalf("refs %q, %v; want none", refs, err)
	}

	// fsync of a ref writes it (vim's :w; it was EOPNOTSUPP).
	f := openAt(filepath.Join(heads, "synced"), excl)
	mustDo(writeString(f, "s\n"))
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of a ref: %v", err)
	}
	if r, err := bk.Store.ReadRef(ctx, "heads/synced"); err != nil || r.Target != "s" {
		t.Fatalf("heads/synced after fsync = %+v, %v; want s", r, err)
	}
	mustDo(f.Close())
}

// writeString writes s to f.
func writeString(f *os.File, s string) error {
	_, err := f.WriteString(s)
	return err
}

// TestWriteMemoryKeepsModesAndTimes: cp -a, tar x and install into a
// memory namespace keep modes and modification times, as posix-mode and
// posix-mtime in the records' descriptors (decisions.md), seen by a
// fresh read-only mount. They all failed on the chmod or utimes (EPERM),
// after writing the bytes (the memories audit).
func TestWriteMemoryKeepsModesAndTimes(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk)
	src := t.TempDir()
	sh(t, src, `mkdir tree && echo a > tree/a && echo b > tree/b && chmod 600 tree/a && chmod 750 tree/b && touch -d 2020-01-02T03:04:05Z tree/a tree/b && tar cf t.tar -C tree .`)
	shE(t, m.Dir, `mkdir memories/cp memories/tar memories/inst && cp -a `+src+`/tree/. memories/cp/ && tar xf `+src+`/t.tar -C memories/tar && install -m 600 `+src+`/tree/b memories/inst/b`)
	fresh := mount(t, bk, "--read-only", "--metadata-ttl", "0")
	// 1577934245 is 2020-01-02T03:04:05Z; a read-only mount shows no
	// write permission.
	const list = `cd memories && stat -c '%n %a %Y' cp/a cp/b tar/a tar/b && stat -c '%n %a' inst/b`
	for _, c := range []struct {
		mnt  *Mount
		want string
	}{
		{m, "cp/a 600 1577934245\ncp/b 750 1577934245\ntar/a 600 1577934245\ntar/b 750 1577934245\ninst/b 600\n"},
		{fresh, "cp/a 400 1577934245\ncp/b 550 1577934245\ntar/a 400 1577934245\ntar/b 550 1577934245\ninst/b 400\n"},
	} {
		if got := shE(t, c.mnt.Dir, list); got != c.want {
			t.Errorf("modes and times on %s:\n%s\nwant\n%s", c.mnt.Dir, got, c.want)
		}
	}
	recs, _ := memRecords(t, bk, "cp")
	if recs["a"] != "a\n" || recs["b"] != "b\n" {
		t.Errorf("memories/cp = %v", recs)
	}
}

// TestWriteMemoryAttrsUnderAppends: chmod and touch -d of a record
// another mount keeps appending to are made on the record as it is, again
// when an append lands in between: they failed with ESTALE, keeping a
// copy of the record in the failed directory as if it were lost, where a
// session's file takes such a change (audit 28). Every append stays.
func TestWriteMemoryAttrsUnderAppends(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	a, b := mount(t, bk), mount(t, bk)
	shE(t, a.Dir, `mkdir memories/chapp && echo start > memories/chapp/r`)
	rec := "memories/chapp/r"
	waitFor(t, "b sees the record", func() bool { return shE(t, b.Dir, "cat "+rec) == "start\n" })
	const lines, changes = 40, 20
	appended := make(chan error, 1)
	go func() {
		_, e, err := run(b.Dir, fmt.Sprintf("for i in $(seq 1 %d); do echo line $i >> %s || exit 1; done", lines, rec))
		if err != nil {
			err = fmt.Errorf("%v: %s", err, e)
		}
		appended <- err
	}()
	_, e, err := run(a.Dir, fmt.Sprintf("for i in $(seq 1 %d); do chmod 600 %[2]s && touch -d 2020-01-0$((i %% 9 + 1)) %[2]s && chmod 640 %[2]s || exit 1; done", changes, rec))
	if err != nil {
		t.Errorf("chmod and touch -d under appends: %v: %s", err, e)
	}
	if err := <-appended; err != nil {
		t.Fatalf("appends: %v", err)
	}
	got, _ := memRecords(t, bk, "chapp")
	if n := strings.Count(got["r"], "\n"); n != lines+1 {
		t.Errorf("record holds %d lines, want start and %d appended:\n%s", n, lines, got["r"])
	}
	if kept := shE(t, a.Dir, "(ls .pugmark/failed/memories 2>/dev/null || true) | wc -l"); strings.TrimSpace(kept) != "0" {
		t.Errorf("the failed directory holds %s copies of a record whose attributes changed", kept)
	}
}

// TestWriteMemoryRewriteKeepsOthersChmod: a record written whole (>)
// from a mount whose view is older than another mount's chmod keeps that
// mode, as a local file keeps its mode
// through another process's rewrite: the rewrite put its view's mode
// back (audit 28).
func TestWriteMemoryRewriteKeepsOthersChmod(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	a, b := mount(t, bk), mount(t, bk, "--metadata-ttl", "1h")
	rec := "memories/modes/r"
	shE(t, a.Dir, "mkdir memories/modes && echo one > "+rec)
	waitFor(t, "b sees the record", func() bool { return shE(t, b.Dir, "cat "+rec) == "one\n" })
	shE(t, a.Dir, "chmod 600 "+rec)
	shE(t, b.Dir, "echo two > "+rec) // b's view is still the record before the chmod
	got, _ := memRecords(t, bk, "modes")
	if got["r"] != "two\n" {
		t.Fatalf("record %q, want the rewrite", got["r"])
	}
	if md := memMeta(t, bk, "modes", "r"); md["posix-mode"] != "0600" {
		t.Fatalf("after the rewrite from the other mount: metadata %v, want posix-mode 0600", md)
	}
}

// memMeta returns the metadata of record name of namespace ns's latest
// version, as the bucket holds it.
func memMeta(t *testing.T, bk *Bucket, ns, name string) map[string]string {
	t.Helper()
	ctx := context.Background()
	v, err := bk.Store.LatestMemoryVersion(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := bk.Store.ReadMemory(ctx, ns, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range recs {
		if d.Name == name {
			return d.Metadata
		}
	}
	return nil
}

// TestWriteMemoryModeUnderUmask: a memory record's mode shows under
// --umask, as a session file's does: on a read-write mount the umask was
// applied before the mode was set, so a record chmod'ed 666 (or stored
// 0777 by another writer) was writable by every user of a shared mount
// (audit 29).
func TestWriteMemoryModeUnderUmask(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	m := mount(t, bk, "--umask", "022")
	rec := "memories/um/r"
	out := shE(t, m.Dir, "mkdir memories/um && echo x > "+rec+" && chmod 666 "+rec+" && stat -c %a "+rec+" && chmod 777 "+rec+" && stat -c %a "+rec)
	if out != "644\n755\n" {
		t.Fatalf("modes after chmod 666 and 777 under umask 022: %q, want 644 and 755", out)
	}
	if md := memMeta(t, bk, "um", "r"); md["posix-mode"] != "0777" {
		t.Fatalf("stored metadata %v, want the mode as set (0777): the umask is a view", md)
	}
}

// TestWriteMemoryChmodOfRemovedRecord: chmod of a record another mount
// removed since this mount's lookup (within the metadata TTL) leaves it
// removed and fails with ENOENT: it failed with EINVAL, keeping a copy in
// the failed directory (review 31).
func TestWriteMemoryChmodOfRemovedRecord(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	a, b := mount(t, bk), mount(t, bk, "--metadata-ttl", "1h")
	rec := "memories/gone/r"
	shE(t, a.Dir, "mkdir memories/gone && echo one > "+rec)
	waitFor(t, "b sees the record", func() bool { return shE(t, b.Dir, "cat "+rec) == "one\n" })
	shE(t, a.Dir, "rm "+rec)
	_, errOut, err := run(b.Dir, "chmod 600 "+rec)
	got, _ := memRecords(t, bk, "gone")
	if len(got) != 0 {
		t.Errorf("after chmod of a record removed by another mount, the namespace holds %q: it came back", got)
	}
	if err == nil || !strings.Contains(errOut, "No such file") {
		t.Errorf("chmod of a removed record: err %v, stderr %q; want ENOENT", err, errOut)
	}
}

// TestWriteMemoryRecordNameKeptAfterRemoval: once an open for writing
// found the record removed by another mount, the node took the empty
// entry as its own, name and all: a rewrite of the path through this
// mount failed (EINVAL) for as long as the kernel kept the entry, where
// it creates the record again (review 31).
func TestWriteMemoryRecordNameKeptAfterRemoval(t *testing.T) {
	bk := openBucket(t, testbucket.Local)
	a, b := mount(t, bk), mount(t, bk, "--metadata-ttl", "1h")
	rec := "memories/lost/r"
	shE(t, a.Dir, "mkdir memories/lost && echo one > "+rec)
	waitFor(t, "b sees the record", func() bool { return shE(t, b.Dir, "cat "+rec) == "one\n" })
	shE(t, a.Dir, "rm "+rec)
	run(b.Dir, "touch "+rec) // opens for writing: the refresh finds it gone
	_, errOut, err := run(b.Dir, "echo two > "+rec)
	got, _ := memRecords(t, bk, "lost")
	if err != nil || got["r"] != "two\n" {
		t.Errorf("echo two > r on b after another mount removed r: err %v %q; bucket %q, want r = two", err, errOut, got)
	}
}
