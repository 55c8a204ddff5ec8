package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A property test: random file operations on a session directory of a
// real mount, checked against an in-memory model after every step (the
// listing and the file touched, the whole tree every 25 steps) and after a
// remount (what was committed is what the model says, minus the empty
// directories that mkdir keeps only locally, tree.md "Writing").
//
// PUGFS_PROPERTY_SEED picks the seed (default: the time, logged),
// PUGFS_PROPERTY_OPS the number of operations (default 300).

type relModel struct {
	files map[string][]byte
	dirs  map[string]bool // "" is the session root
}

func (m *relModel) isDir(p string) bool { return m.dirs[p] }

func (m *relModel) hasChildren(p string) bool {
	pre := p + "/"
	for f := range m.files {
		if strings.HasPrefix(f, pre) {
			return true
		}
	}
	for d := range m.dirs {
		if strings.HasPrefix(d, pre) {
			return true
		}
	}
	return false
}

// pruneEmpty drops directories without a file below them: after a remount
// only committed files (and so their directories) remain.
func (m *relModel) pruneEmpty() {
	for d := range m.dirs {
		if d == "" {
			continue
		}
		keep := false
		for f := range m.files {
			if strings.HasPrefix(f, d+"/") {
				keep = true
				break
			}
		}
		if !keep {
			delete(m.dirs, d)
		}
	}
}

// errno is the errno of err, 0 for nil, -1 for a non-errno error.
func relErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return ^syscall.Errno(0)
}

// relScan reads the session directory as the model would hold it.
func relScan(root string, contents bool) (*relModel, error) {
	got := &relModel{files: map[string][]byte{}, dirs: map[string]bool{"": true}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			got.dirs[rel] = true
			return nil
		}
		var b []byte
		if contents {
			if b, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		got.files[rel] = b
		return nil
	})
	return got, err
}

func relCompare(want, got *relModel, contents bool) string {
	var diffs []string
	for p := range want.dirs {
		if !got.dirs[p] {
			diffs = append(diffs, "missing dir "+p)
		}
	}
	for p := range got.dirs {
		if !want.dirs[p] {
			diffs = append(diffs, "extra dir "+p)
		}
	}
	for p, b := range want.files {
		g, ok := got.files[p]
		switch {
		case !ok:
			diffs = append(diffs, "missing file "+p)
		case contents && !bytes.Equal(g, b):
			diffs = append(diffs, fmt.Sprintf("file %s: %d bytes %q..., want %d bytes %q...", p, len(g), relHead(g), len(b), relHead(b)))
		}
	}
	for p := range got.files {
		if _, ok := want.files[p]; !ok {
			diffs = append(diffs, "extra file "+p)
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

func relHead(b []byte) []byte {
	if len(b) > 12 {
		return b[:12]
	}
	return b
}

// TestReliabilityPropertyRandomOps: see the comment above relModel.
//
// What it protects: any divergence of the tree from POSIX-like semantics
// that pugfs promises (writes, appends, truncation, rename of files and
// directories, unlink, mkdir/rmdir and their errors) and of what is
// committed from what was seen. Breaking, for example, rename's tombstone
// (the old name stays after a remount), a staged file's size after
// truncate, or O_APPEND's offset fails it at the first step that shows
// the difference, with the seed and the operation logged.
func TestReliabilityPropertyRandomOps(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PUGFS_PROPERTY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	ops := 300
	if s := os.Getenv("PUGFS_PROPERTY_OPS"); s != "" {
		ops, _ = strconv.Atoi(s)
	}
	t.Logf("seed %d (PUGFS_PROPERTY_SEED=%d to replay), %d operations", seed, seed, ops)
	rng := rand.New(rand.NewPCG(seed, 42))
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	dir := t.TempDir()
	mnt := startMount(t, bk, dir)
	t.Cleanup(func() { mnt.Stop(t) })
	root := filepath.Join(dir, "sessions", id.String())
	m := &relModel{files: map[string][]byte{}, dirs: map[string]bool{"": true}}
	var history []string

	randDir := func() string {
		ds := make([]string, 0, len(m.dirs))
		for d := range m.dirs {
			ds = append(ds, d)
		}
		sort.Strings(ds)
		return ds[rng.IntN(len(ds))]
	}
	randFile := func() (string, bool) {
		fs := make([]string, 0, len(m.files))
		for f := range m.files {
			fs = append(fs, f)
		}
		if len(fs) == 0 {
			return "", false
		}
		sort.Strings(fs)
		return fs[rng.IntN(len(fs))], true
	}
	newPath := func(prefix string) string {
		d := randDir()
		if d != "" && rng.IntN(4) == 0 {
			d = "" // keep the tree shallow
		}
		return path.Join(d, fmt.Sprintf("%s%d", prefix, rng.IntN(6)))
	}
	data := func() []byte {
		n := []int{0, 1, 7, 100, 1500, 5000}[rng.IntN(6)]
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(rng.IntN(26))
		}
		return b
	}
	abs := func(p string) string { return filepath.Join(root, p) }
	parentOK := func(p string) bool { return m.isDir(path.Dir(strings.TrimPrefix(p, "./"))) || path.Dir(p) == "." }

	step := func(i int) (desc string, want, got syscall.Errno, touched string) {
		switch k := rng.IntN(100); {
		case k < 16: // create (O_TRUNC)
			p, b := newPath("f"), data()
			desc = fmt.Sprintf("create %s (%d bytes)", p, len(b))
			switch {
			case m.isDir(p):
				want = syscall.EISDIR
			case !parentOK(p):
				want = syscall.ENOENT
			default:
				m.files[p] = b
			}
			got = relErrno(os.WriteFile(abs(p), b, 0o644))
			touched = p
		case k < 30: // write at an offset, without truncating
			p, ok := randFile()
			if !ok {
				return "skip", 0, 0, ""
			}
			b, off := data(), int64(rng.IntN(len(m.files[p])+3000))
			desc = fmt.Sprintf("write %s at %d (%d bytes)", p, off, len(b))
			if cur := m.files[p]; len(b) > 0 { // a write of nothing extends nothing
				if end := off + int64(len(b)); end > int64(len(cur)) {
					cur = append(cur, make([]byte, end-int64(len(cur)))...)
				}
				copy(cur[off:], b)
				m.files[p] = cur
			}
			f, err := os.OpenFile(abs(p), os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteAt(b, off)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			got, touched = relErrno(err), p
		case k < 40: // append
			p, ok := randFile()
			if !ok {
				return "skip", 0, 0, ""
			}
			b := data()
			desc = fmt.Sprintf("append %s (%d bytes)", p, len(b))
			m.files[p] = append(m.files[p], b...)
			f, err := os.OpenFile(abs(p), os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				_, err = f.Write(b)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			got, touched = relErrno(err), p
		case k < 48: // truncate
			p, ok := randFile()
			if !ok {
				return "skip", 0, 0, ""
			}
			n := rng.IntN(len(m.files[p]) + 2000)
			desc = fmt.Sprintf("truncate %s to %d", p, n)
			cur := m.files[p]
			if n <= len(cur) {
				cur = cur[:n]
			} else {
				cur = append(cur, make([]byte, n-len(cur))...)
			}
			m.files[p] = cur
			got, touched = relErrno(os.Truncate(abs(p), int64(n))), p
		case k < 58: // rename a file
			src, ok := randFile()
			if !ok {
				return "skip", 0, 0, ""
			}
			dst := newPath("f")
			desc = fmt.Sprintf("rename %s %s", src, dst)
			switch {
			case src == dst:
			case m.isDir(dst):
				want = syscall.EISDIR
			case !parentOK(dst):
				want = syscall.ENOENT
			default:
				m.files[dst] = m.files[src]
				delete(m.files, src)
			}
			// rename(2), not os.Rename: Go refuses to rename onto an
			// existing directory itself.
			got, touched = relErrno(syscall.Rename(abs(src), abs(dst))), dst
		case k < 66: // unlink
			p := newPath("f")
			if f, ok := randFile(); ok && rng.IntN(3) > 0 {
				p = f
			}
			desc = "unlink " + p
			switch {
			case m.isDir(p):
				want = syscall.EISDIR
			case m.files[p] == nil && !hasFile(m, p):
				want = syscall.ENOENT
			default:
				delete(m.files, p)
			}
			got = relErrno(syscall.Unlink(abs(p)))
		case k < 76: // mkdir
			p := newPath("d")
			desc = "mkdir " + p
			switch {
			case m.isDir(p) || hasFile(m, p):
				want = syscall.EEXIST
			case !parentOK(p):
				want = syscall.ENOENT
			default:
				m.dirs[p] = true
			}
			got = relErrno(syscall.Mkdir(abs(p), 0o755))
		case k < 84: // rmdir
			p := randDir()
			if p == "" {
				return "skip", 0, 0, ""
			}
			desc = "rmdir " + p
			if m.hasChildren(p) {
				want = syscall.ENOTEMPTY
			} else {
				delete(m.dirs, p)
			}
			got = relErrno(syscall.Rmdir(abs(p)))
		case k < 88: // rename a directory
			src := randDir()
			if src == "" {
				return "skip", 0, 0, ""
			}
			dst := newPath("d")
			desc = fmt.Sprintf("rename dir %s %s", src, dst)
			switch {
			case dst == src:
			case strings.HasPrefix(dst, src+"/"):
				want = syscall.EINVAL
			case hasFile(m, dst):
				want = syscall.ENOTDIR
			case m.isDir(dst) && m.hasChildren(dst):
				want = syscall.ENOTEMPTY
			case !parentOK(dst):
				want = syscall.ENOENT
			default:
				nf := map[string][]byte{}
				for f, b := range m.files {
					if r, ok := strings.CutPrefix(f, src+"/"); ok {
						nf[dst+"/"+r] = b
					} else {
						nf[f] = b
					}
				}
				nd := map[string]bool{}
				for d := range m.dirs {
					if d == src {
						nd[dst] = true
					} else if r, ok := strings.CutPrefix(d, src+"/"); ok {
						nd[dst+"/"+r] = true
					} else {
						nd[d] = true
					}
				}
				m.files, m.dirs = nf, nd
			}
			got = relErrno(syscall.Rename(abs(src), abs(dst)))
		default: // read
			p, ok := randFile()
			if !ok {
				return "skip", 0, 0, ""
			}
			desc = "read " + p
			b, err := os.ReadFile(abs(p))
			got = relErrno(err)
			if err == nil && !bytes.Equal(b, m.files[p]) {
				return desc + fmt.Sprintf(": read %d bytes, model has %d", len(b), len(m.files[p])), 0, syscall.EBADMSG, ""
			}
		}
		return desc, want, got, touched
	}

	check := func(when string, contents bool) {
		t.Helper()
		got, err := relScan(root, contents)
		if err != nil {
			t.Fatalf("%s: scanning the session: %v\nhistory:\n%s", when, err, strings.Join(history, "\n"))
		}
		if d := relCompare(m, got, contents); d != "" {
			t.Fatalf("%s: the tree differs from the model: %s\nhistory:\n%s", when, d, strings.Join(history, "\n"))
		}
	}
	remount := func(when string) {
		mnt.Stop(t)
		mnt = startMount(t, bk, dir)
		m.pruneEmpty()
		check(when, true)
	}
	for i := 0; i < ops; i++ {
		desc, want, got, touched := step(i)
		if desc == "skip" {
			continue
		}
		history = append(history, fmt.Sprintf("%3d %s -> %v", i, desc, got))
		if got != want {
			t.Fatalf("step %d: %s: got %v, want %v (seed %d)\nhistory:\n%s", i, desc, got, want, seed, strings.Join(history, "\n"))
		}
		if touched != "" {
			if b, ok := m.files[touched]; ok {
				g, err := os.ReadFile(abs(touched))
				if err != nil || !bytes.Equal(g, b) {
					t.Fatalf("step %d: %s: reads back %d bytes (%v), model %d (seed %d)\nhistory:\n%s", i, desc, len(g), err, len(b), seed, strings.Join(history, "\n"))
				}
			}
		}
		check(fmt.Sprintf("after step %d (%s)", i, desc), i%25 == 0)
		if i == ops/2 {
			remount(fmt.Sprintf("after a remount at step %d", i))
		}
	}
	remount("after the final remount")
	// And the bucket has exactly the model's files.
	slots := relLiveSlots(t, bk, id)
	for p, b := range m.files {
		e, ok := slots[p]
		if !ok || !bytes.Equal(relSlotBody(t, bk, e), b) {
			t.Fatalf("bucket: %s missing or different", p)
		}
	}
	if len(slots) != len(m.files) {
		t.Fatalf("bucket has %d live names, model %d", len(slots), len(m.files))
	}
	relFsckClean(t, bk)
}

func hasFile(m *relModel, p string) bool {
	_, ok := m.files[p]
	return ok
}

// TestReliabilityAppendAfterCreate: `echo a > f; echo b >> f`, 300 times
// in a row, always leaves f with both lines, in the tree and in the
// bucket. The second open races the release of the first close (which
// runs after close(2) returned) and the commit notification that drops
// the kernel's dentry.
//
// Without stagedChild keeping the staged file it found (fs/wnodes.go), a
// lookup in that window made a node with nothing behind it and answered
// ENOENT; the shell's open(O_CREAT|O_APPEND) then created the file anew,
// and about one f in a hundred held only "b".
func TestReliabilityAppendAfterCreate(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk)
	out := sh(t, filepath.Join(mnt.Dir, "sessions", id.String()), `bad=""
		for i in $(seq 1 300); do
			echo a > f$i; echo b >> f$i
			[ "$(cat f$i)" = "$(printf 'a\nb')" ] || bad="$bad f$i"
		done
		echo "$bad"`)
	if bad := strings.TrimSpace(out); bad != "" {
		t.Fatalf("files that lost their first line:%s", out)
	}
	slots := relLiveSlots(t, bk, id)
	for i := 1; i <= 300; i++ {
		e, ok := slots["f"+strconv.Itoa(i)]
		if !ok || string(e.Data) != "a\nb\n" {
			t.Fatalf("bucket: f%d = %+v", i, e)
		}
	}
}
