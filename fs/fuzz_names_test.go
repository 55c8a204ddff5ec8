package fs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// Fuzz targets for what the tree makes of names and fields from the
// bucket: the name-to-path mapping (layout.NamePath, cache.BuildTree and
// the tree's own checks), the .pugmark name parsers, log.jsonl and the
// extended attributes. Descriptor names and metadata are data from the
// bucket, not trusted paths (decisions.md "Names as paths").

// FuzzNamesToTree builds the tree of four slot names and checks that
// nothing escapes: every visible file sits at a path of valid components
// that joins back to its own name, every name without a path is counted
// as hidden, a name shadowed by a file that is its prefix is the only
// other way to be absent, and every visible component is one the tree
// would let a user create (so what is shown can be written back).
func FuzzNamesToTree(f *testing.F) {
	f.Add("a", "a/b", "../../etc/passwd", "x\x00y")
	f.Add("dir/f", "dir/./g", "dir//h", "/abs")
	f.Add(".pugmark", "..", ".", "")
	f.Add(strings.Repeat("L", 256), "ok/"+strings.Repeat("L", 255), "a/b/c", "a/b")
	f.Add("é/ü", "\xff\xfe", "sp ace/\ttab", "new\nline")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		names := []string{a, b, c, d}
		slots := map[string]layout.Entry{}
		for i, n := range names {
			slots[n] = layout.Entry{Descriptor: layout.Descriptor{Name: n, SequenceNumber: int64(i + 1)}}
		}
		tree := cache.BuildTree(slots)
		hidden := 0
		for n := range slots {
			parts, ok := layout.NamePath(n)
			if !ok {
				hidden++
				continue
			}
			if cache.JoinName(parts) != n {
				t.Fatalf("NamePath(%q) = %q does not join back", n, parts)
			}
			dir, shadowed := tree, false
			for _, p := range parts[:len(parts)-1] {
				if _, isFile := dir.File(p); isFile {
					shadowed = true // "a" and "a/b": the file shows
					break
				}
				next, ok := dir.Sub(p)
				if !ok {
					t.Fatalf("%q: directory %q missing from the tree", n, p)
				}
				dir = next
			}
			if shadowed {
				continue
			}
			e, ok := dir.File(parts[len(parts)-1])
			if !ok || e.Name != n {
				t.Fatalf("%q: not at its path (found %+v)", n, e)
			}
		}
		if tree.Hidden != hidden {
			t.Fatalf("Hidden = %d, want %d", tree.Hidden, hidden)
		}
		var walk func(d *cache.Dir, prefix []string)
		walk = func(d *cache.Dir, prefix []string) {
			for name, e := range d.Files() {
				if e := validLeaf(name); e != 0 && e != syscall.EILSEQ { // bucket names are UTF-8 by JSON; the fuzzer's need not be
					t.Fatalf("visible component %q is not a valid leaf", name)
				}
				full := cache.JoinName(appendPart(prefix, name))
				if full != e.Name {
					t.Fatalf("file at %q holds the slot %q", full, e.Name)
				}
				if _, ok := slots[full]; !ok {
					t.Fatalf("file %q was never a slot", full)
				}
			}
			for name, sub := range d.Subs() {
				if e := validLeaf(name); e != 0 && e != syscall.EILSEQ { // bucket names are UTF-8 by JSON; the fuzzer's need not be
					t.Fatalf("visible directory %q is not a valid leaf", name)
				}
				walk(sub, appendPart(prefix, name))
			}
		}
		walk(tree, nil)
		// What the tree lets a user create, it shows.
		for _, n := range names {
			if validLeaf(n) == 0 {
				if _, ok := layout.NamePath(n); !ok {
					t.Fatalf("validLeaf accepts %q but NamePath hides it: a file created through the mount would vanish", n)
				}
			}
		}
		// Inode numbers stay in go-fuse's range whatever the name.
		for _, n := range names {
			for _, ino := range []uint64{inoOf("slot", n), inoOf("staged", "s", n), inoOf("sdir", "s", "live", n)} {
				if ino < 2 || ino >= 1<<63 {
					t.Fatalf("inode %d for %q is outside [2, 2^63)", ino, n)
				}
			}
		}
	})
}

// FuzzMetaNames: the names under .pugmark (at/<N>, snapshots/<N>.json)
// are accepted only in their canonical decimal form and within the
// session's versions, so one version has one path and no name reaches a
// version that does not exist.
func FuzzMetaNames(f *testing.F) {
	for _, s := range []string{"0", "1", "01", "+1", "-1", " 1", "1 ", "4294967295", "4294967296", "1e3", "0x10", "1_000", "", "١"} {
		f.Add(s, uint32(7), uint32(1))
	}
	f.Fuzz(func(t *testing.T, name string, latest, min uint32) {
		v, ok := parseVersion(name, min)
		if !ok {
			return
		}
		if strconv.FormatUint(uint64(v), 10) != name {
			t.Fatalf("parseVersion(%q) = %d: not the canonical name", name, v)
		}
		if v < min {
			t.Fatalf("parseVersion(%q) = %d below %d", name, v, min)
		}
		// A damaged session's listed versions: 1, 3 and latest.
		all := []versions{{latest: latest}}
		if latest > 3 {
			all = append(all, versions{latest: latest, listed: []uint32{1, 3, latest}})
		}
		for _, vs := range all {
			in := v >= 1 && v <= latest && (vs.listed == nil || v == 1 || v == 3 || v == latest)
			if vs.has(v) != in {
				t.Fatalf("versions %+v has(%d) = %v", vs, v, !in)
			}
		}
		if base, ok := cutSuffix(name+".json", ".json"); !ok || base != name {
			t.Fatalf("cutSuffix(%q.json) = %q, %v", name, base, ok)
		}
	})
}

// FuzzLogJSONL: log.jsonl has one valid JSON object per descriptor, with
// where it lives first and no data, whatever the names and metadata hold
// (newlines, quotes, NUL, invalid UTF-8).
func FuzzLogJSONL(f *testing.F) {
	f.Add("a.txt", "text/plain", "k", "v", true)
	f.Add("line\nbreak", "\"quoted\"", "\x00", "\xff", false)
	f.Add("", "", "", "", false)
	f.Fuzz(func(t *testing.T, name, ctype, mk, mv string, deleted bool) {
		id := layout.NewSessionID(time.Unix(1700000000, 0))
		d := layout.Descriptor{Name: name, ContentType: ctype, Deleted: deleted, SequenceNumber: 3,
			Data: []byte("secret inline body"), Metadata: map[string]string{mk: mv}}
		out, err := logJSONL([]layout.Entry{{Descriptor: d, Session: id, Version: 9}, {Descriptor: d, Session: id, Version: 10}})
		if err != nil {
			return // a descriptor that cannot be encoded is reported, not shown half
		}
		lines := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
		if len(lines) != 2 {
			t.Fatalf("%d lines for 2 descriptors:\n%s", len(lines), out)
		}
		for i, l := range lines {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("line %d is not JSON: %v\n%s", i, err, l)
			}
			if m["session"] != id.String() || m["version"] != float64(9+i) {
				t.Fatalf("line %d: session/version %v %v", i, m["session"], m["version"])
			}
			if _, ok := m["data"]; ok {
				t.Fatalf("line %d carries data", i)
			}
			if utf8.ValidString(name) && name != "" && m["name"] != name {
				t.Fatalf("line %d: name %q, want %q", i, m["name"], name)
			}
		}
	})
}

// FuzzXattrs: the extended attributes of a slot file, made from a
// descriptor's metadata, are what the kernel can carry: every name that
// listxattr gives is non-empty, at most 255 bytes, free of NUL (the
// list's separator), found by getxattr, with a value of at most 64 KiB;
// the list itself fits in 64 KiB; small buffers get ERANGE, not a short
// copy. Every metadata key the kernel can name is found by name, listed
// or not: its value, or E2BIG for one over 64 KiB.
func FuzzXattrs(f *testing.F) {
	f.Add("k", "v", "k2", "v2", 4)
	f.Add("a\x00b", "v", "", "x", 0)
	f.Add(strings.Repeat("k", 300), "v", "ok", strings.Repeat("v", 70000), 10)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, small int) {
		e := layout.Entry{Descriptor: layout.Descriptor{Name: "f", SequenceNumber: 1,
			Metadata: map[string]string{k1: v1, k2: v2}}}
		x := descXattrs(&e)
		for k, v := range e.Metadata {
			name := "user.pugmark.meta." + k
			if len(name) > 255 || strings.IndexByte(name, 0) >= 0 {
				continue
			}
			size, errno := getxattr(x, name, nil)
			if want := syscall.E2BIG; len(v) > 64<<10 && errno != want {
				t.Fatalf("%q, a value of %d bytes: %v, want %v", name, len(v), errno, want)
			}
			if len(v) <= 64<<10 && (errno != 0 || int(size) != len(v)) {
				t.Fatalf("%q by name: %d, %v; want %d bytes", name, size, errno, len(v))
			}
		}
		n, errno := listxattr(x, nil)
		if errno != 0 {
			t.Fatalf("listxattr size: %v", errno)
		}
		if n > 64<<10 {
			t.Fatalf("xattr list of %d bytes: the kernel refuses more than 64 KiB", n)
		}
		buf := make([]byte, n)
		if m, errno := listxattr(x, buf); errno != 0 || m != n {
			t.Fatalf("listxattr: %d, %v (want %d)", m, errno, n)
		}
		if n > 0 && buf[n-1] != 0 {
			t.Fatalf("list not NUL-terminated: %q", buf)
		}
		for _, name := range strings.Split(strings.TrimSuffix(string(buf), "\x00"), "\x00") {
			if n == 0 {
				break
			}
			if name == "" || len(name) > 255 {
				t.Fatalf("listed xattr name %q (%d bytes)", name, len(name))
			}
			size, errno := getxattr(x, name, nil)
			if errno != 0 {
				t.Fatalf("listed %q but getxattr says %v", name, errno)
			}
			if size > 64<<10 {
				t.Fatalf("%q: value of %d bytes, over the kernel's 64 KiB", name, size)
			}
			if size > 0 {
				if s := small % int(size); s > 0 {
					if _, errno := getxattr(x, name, make([]byte, s)); errno != syscall.ERANGE {
						t.Fatalf("%q with a %d-byte buffer for %d bytes: %v, want ERANGE", name, s, size, errno)
					}
				}
			}
		}
	})
}

// TestXattrsManyKeys: a descriptor from the bucket with 10,000 metadata
// keys lists what fits in the kernel's 64 KiB, pugfs's own attributes
// first, and every key reads by name, listed or not (the last one did
// not: the attributes past the list's bound were dropped altogether).
func TestXattrsManyKeys(t *testing.T) {
	meta := map[string]string{}
	for i := range 10000 {
		meta[fmt.Sprintf("key%05d", i)] = fmt.Sprint(i)
	}
	x := descXattrs(&layout.Entry{Descriptor: layout.Descriptor{Name: "f", SequenceNumber: 1, ContentType: "text/plain", Metadata: meta}})
	n, errno := listxattr(x, nil)
	if errno != 0 || n > 64<<10 || n < 60<<10 {
		t.Fatalf("listxattr: %d bytes, %v; want a list filled up to 64 KiB", n, errno)
	}
	buf := make([]byte, n)
	listxattr(x, buf)
	if !strings.Contains(string(buf), "user.pugmark.content-type\x00") {
		t.Errorf("the list lacks pugfs's own attributes")
	}
	for _, k := range []string{"key00000", "key09999"} {
		v := make([]byte, 16)
		got, errno := getxattr(x, "user.pugmark.meta."+k, v)
		if errno != 0 || string(v[:got]) != meta[k] {
			t.Errorf("%s by name: %q, %v; want %q", k, v[:got], errno, meta[k])
		}
	}
}
