package localblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout/deadlineblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sys/unix"
)

func newBucket(t *testing.T, opts *Options) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := OpenBucket(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

func write(t *testing.T, b *blob.Bucket, key, body string, opts *blob.WriterOptions) {
	t.Helper()
	if opts == nil {
		opts = &blob.WriterOptions{ContentType: "text/plain"}
	}
	if err := b.WriteAll(context.Background(), key, []byte(body), opts); err != nil {
		t.Fatalf("write %q: %v", key, err)
	}
}

func listAll(t *testing.T, b *blob.Bucket, prefix, delim string, pageSize int) []string {
	t.Helper()
	ctx := context.Background()
	var got []string
	tok := blob.FirstPageToken
	for {
		objs, next, err := b.ListPage(ctx, tok, pageSize, &blob.ListOptions{Prefix: prefix, Delimiter: delim})
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) > pageSize {
			t.Fatalf("page of %d > %d", len(objs), pageSize)
		}
		for _, o := range objs {
			k := o.Key
			if o.IsDir {
				k += " (dir)"
			}
			got = append(got, k)
		}
		if next == nil {
			return got
		}
		tok = next
	}
}

func tmpEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, tmpDirName))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestKeyMapping(t *testing.T) {
	for key, want := range map[string]string{
		"objects/sha256:0123abcdef":              "objects/sha256:0123abcdef",
		"sessions/ab/cd/snapshots/FFFFFFFF.json": "sessions/ab/cd/snapshots/FFFFFFFF.json",
		"refs/x=y_z-1.2":                         "refs/x=y_z-1.2",
		"a/../b":                                 "a/%2E%2E/b",
		"./a":                                    "%2E/a",
		"/abs":                                   "%/abs",
		"a//b/":                                  "a/%/b/%",
		"nul\x00tab\tpct%":                       "nul%00tab%09pct%25",
		".pugfs-tmp/x":                           "%2Epugfs-tmp/x",
		"x/.pugfs-tmp":                           "x/.pugfs-tmp",
		"☺ \\\"'":                                "☺ \\\"'",
		"..\\foo\\..\\bar":                       "..\\foo\\..\\bar",
		"__0x2f__":                               "__0x2f__",
		"trailing.":                              "trailing.",
		strings.Repeat("k", 255) + "/" + "v":     strings.Repeat("k", 255) + "/v",
		"sessions/0123456789abcdef0123456789abcdef/m": "sessions/0123456789abcdef0123456789abcdef/m",
	} {
		got, err := KeyPath(key)
		if err != nil || got != want {
			t.Errorf("KeyPath(%q) = %q, %v; want %q", key, got, err, want)
		}
		// Every component decodes back.
		comps := strings.Split(got, "/")
		var dec []string
		for i, c := range comps {
			d, ok := unescapeComp(c, i == 0)
			if !ok {
				t.Errorf("%q: component %q does not decode", key, c)
			}
			dec = append(dec, d)
		}
		if strings.Join(dec, "/") != key {
			t.Errorf("round trip of %q gave %q", key, strings.Join(dec, "/"))
		}
	}
	for _, bad := range []string{"", strings.Repeat("k", 256), strings.Repeat("%", 100)} {
		if _, err := KeyPath(bad); errorCode(err) != gcerrors.InvalidArgument {
			t.Errorf("KeyPath(%q): got %v, want InvalidArgument", bad, err)
		}
	}
	// Names that are not canonical encodings are not objects.
	for _, name := range []string{"100%", "%41", "%2e", "%2Efoo", "%2E.", "%zz", "%0"} {
		if _, ok := unescapeComp(name, false); ok {
			t.Errorf("unescapeComp(%q) accepted a non-canonical name", name)
		}
	}
	if _, ok := unescapeComp(".pugfs-x", false); !ok {
		t.Error(".pugfs-x below the root is an ordinary name")
	}
	if _, ok := unescapeComp(".pugfs-x", true); ok {
		t.Error(".pugfs-x at the root is reserved")
	}
}

// Listing must agree with memblob (a straightforward sort-and-filter
// implementation) for any mix of keys, prefixes, delimiters and page sizes,
// including the orderings where a directory's keys interleave with its
// siblings ("a-b" < "a/..." < "a0").
func TestListMatchesMemblob(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "-", "/", "/", "0", "%", ".", "\x01", " ", "☺"}
	var keys []string
	for len(keys) < 120 {
		n := 1 + rng.IntN(6)
		var sb strings.Builder
		for range n {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		k := sb.String()
		ok := !slices.Contains(keys, k)
		for _, o := range keys {
			// A file cannot also be a directory.
			if strings.HasPrefix(o, k+"/") || strings.HasPrefix(k, o+"/") {
				ok = false
			}
		}
		if ok {
			keys = append(keys, k)
		}
	}
	lb, _ := newBucket(t, nil)
	mb := memblob.OpenBucket(nil)
	defer mb.Close()
	for _, k := range keys {
		write(t, lb, k, "x", nil)
		write(t, mb, k, "x", nil)
	}
	prefixes := []string{"", "a", "a/", "a-", "/", "//", "a/b", "%", "\x01", "b/a/"}
	for range 20 {
		k := keys[rng.IntN(len(keys))]
		prefixes = append(prefixes, k[:rng.IntN(len(k)+1)])
	}
	for _, prefix := range prefixes {
		for _, delim := range []string{"", "/", "-", "a/", "/a"} {
			want := listAll(t, mb, prefix, delim, 1000)
			for _, ps := range []int{1, 2, 7, 1000} {
				got := listAll(t, lb, prefix, delim, ps)
				if !slices.Equal(got, want) {
					t.Fatalf("prefix %q delim %q page %d:\n got %q\nwant %q", prefix, delim, ps, got, want)
				}
			}
		}
	}
	// Deleting everything leaves no directories behind, hence no prefixes.
	for _, k := range keys {
		if err := lb.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := listAll(t, lb, "", "/", 10); len(got) != 0 {
		t.Fatalf("after deleting all: %q", got)
	}
}

// §6.3: LIST(snapshots/, max-keys=1) must not walk the tree.
func TestListReadsOnlyNeededDirs(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, nil)
	snap := "sessions/ab/cd/snapshots/"
	for _, k := range []string{"FFFFFFFD.json", "FFFFFFFE.json", "FFFFFFFF.json"} {
		write(t, b, snap+k, "{}", nil)
	}
	for i := range 20 {
		write(t, b, fmt.Sprintf("sessions/ab/cd/other%d/x", i), "{}", nil)
		write(t, b, fmt.Sprintf("sessions/ab/c%d/snapshots/FFFFFFFF.json", i), "{}", nil)
	}
	before := dirReads.Load()
	objs, next, err := b.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: snap})
	if err != nil {
		t.Fatal(err)
	}
	if n := dirReads.Load() - before; n != 1 {
		t.Errorf("listing %s with page size 1 read %d directories, want 1", snap, n)
	}
	if len(objs) != 1 || objs[0].Key != snap+"FFFFFFFD.json" || next == nil {
		t.Fatalf("got %v, next %q", objs, next)
	}
	// With a delimiter, the common prefixes below a directory cost one read
	// each (to confirm each holds an object), not a walk of their trees.
	before = dirReads.Load()
	got := listAll(t, b, "sessions/ab/cd/", "/", 1000)
	if n := dirReads.Load() - before; n != 22 {
		t.Errorf("delimited listing read %d directories, want 22 (1 + 21 subdirectories)", n)
	}
	if len(got) != 21 {
		t.Errorf("got %d entries, want 21: %q", len(got), got)
	}
}

func TestEmptyDirsAreNotPrefixes(t *testing.T) {
	b, dir := newBucket(t, nil)
	write(t, b, "p/keep/x", "1", nil)
	// Empty directories made behind the driver's back, e.g. by a writer
	// that has created its path but not yet published.
	for _, d := range []string{"p/empty", "p/nested/deeper/still", "p/only-dirs/a"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if got := listAll(t, b, "p/", "/", 1); !slices.Equal(got, []string{"p/keep/ (dir)"}) {
		t.Fatalf("got %q", got)
	}
}

func TestIfMatch(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, nil)
	casWrite := func(key, body, ifMatch string) error {
		return b.WriteAll(ctx, key, []byte(body), &blob.WriterOptions{
			ContentType: "text/plain",
			BeforeWrite: func(as func(any) bool) error {
				if !as(&WriteOptions{IfMatch: ifMatch}) {
					return errors.New("As(*WriteOptions) failed")
				}
				return nil
			},
		})
	}
	if err := casWrite("refs/r", "v1", `"nope"`); gcerrors.Code(err) != gcerrors.FailedPrecondition || !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("If-Match on a missing key: %v", err)
	}
	if got := listAll(t, b, "", "", 10); len(got) != 0 {
		t.Fatalf("failed CAS left %q", got)
	}
	write(t, b, "refs/r", "v1", nil)
	a1, err := b.Attributes(ctx, "refs/r")
	if err != nil {
		t.Fatal(err)
	}
	if err := casWrite("refs/r", "v2", a1.ETag); err != nil {
		t.Fatalf("CAS with current ETag: %v", err)
	}
	if err := casWrite("refs/r", "v3", a1.ETag); gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("CAS with stale ETag: %v", err)
	}
	if got, _ := b.ReadAll(ctx, "refs/r"); string(got) != "v2" {
		t.Fatalf("body %q, want v2", got)
	}
	// The ETag from a reader matches the body it reads.
	r, err := b.NewReader(ctx, "refs/r", nil)
	if err != nil {
		t.Fatal(err)
	}
	var info ObjectInfo
	if !r.As(&info) {
		t.Fatal("Reader.As(*ObjectInfo) failed")
	}
	r.Close()
	// An unquoted ETag works too.
	if err := casWrite("refs/r", "v3", strings.Trim(info.ETag, `"`)); err != nil {
		t.Fatalf("CAS with reader's ETag: %v", err)
	}
	// IfMatch with IfNotExist is contradictory.
	err = b.WriteAll(ctx, "refs/r", []byte("x"), &blob.WriterOptions{
		ContentType: "text/plain", IfNotExist: true,
		BeforeWrite: func(as func(any) bool) error { as(&WriteOptions{IfMatch: info.ETag}); return nil },
	})
	if gcerrors.Code(err) != gcerrors.InvalidArgument {
		t.Fatalf("IfMatch+IfNotExist: %v", err)
	}
}

func TestDeleteIfMatch(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, nil)
	write(t, b, "refs/d", "v1", nil)
	a, _ := b.Attributes(ctx, "refs/d")
	del := func(etag string) error {
		return b.DeleteWithOptions(ctx, "refs/d", &blob.DeleteOptions{BeforeDelete: func(as func(any) bool) error {
			var d *DeleteOptions
			if !as(&d) {
				return errors.New("As(**DeleteOptions) failed")
			}
			d.IfMatch = etag
			return nil
		}})
	}
	if err := del(`"stale"`); gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("delete with wrong ETag: %v", err)
	}
	if err := del(a.ETag); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.Exists(ctx, "refs/d"); ok {
		t.Fatal("still exists")
	}
}

func TestETagChangesOnEveryWrite(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, nil)
	seen := map[string]bool{}
	for range 20 {
		write(t, b, "k", "same bytes", nil)
		a, err := b.Attributes(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if seen[a.ETag] {
			t.Fatalf("ETag %s repeated", a.ETag)
		}
		seen[a.ETag] = true
	}
	// Copies get their own ETag.
	if err := b.Copy(ctx, "k2", "k", nil); err != nil {
		t.Fatal(err)
	}
	a, _ := b.Attributes(ctx, "k2")
	if seen[a.ETag] {
		t.Fatal("copy reused the source ETag")
	}
}

func TestSHA256(t *testing.T) {
	ctx := context.Background()
	b, dir := newBucket(t, nil)
	put := func(body string, sum []byte) error {
		return b.WriteAll(ctx, "objects/sha256:x", []byte(body), &blob.WriterOptions{
			ContentType: "application/octet-stream",
			BeforeWrite: func(as func(any) bool) error {
				var wo *WriteOptions
				if !as(&wo) {
					return errors.New("As(**WriteOptions) failed")
				}
				wo.SHA256 = sum
				return nil
			},
		})
	}
	if err := put("body", sha256Of("body")); err != nil {
		t.Fatal(err)
	}
	err := put("flipped", sha256Of("body"))
	if !errors.Is(err, ErrChecksumMismatch) || gcerrors.Code(err) != gcerrors.InvalidArgument {
		t.Fatalf("mismatch: got %v", err)
	}
	if got, _ := b.ReadAll(ctx, "objects/sha256:x"); string(got) != "body" {
		t.Fatalf("mismatched write replaced the object: %q", got)
	}
	if err := put("x", []byte{1, 2, 3}); gcerrors.Code(err) != gcerrors.InvalidArgument {
		t.Fatalf("short digest: %v", err)
	}
	if n := tmpEntries(t, dir); len(n) != 0 {
		t.Fatalf("temp files left: %q", n)
	}
	// The colon is kept in the file name.
	if _, err := os.Stat(filepath.Join(dir, "objects", "sha256:x")); err != nil {
		t.Fatal(err)
	}
}

func TestAbortedWritesLeaveNothing(t *testing.T) {
	b, dir := newBucket(t, nil)
	// Close after cancel.
	ctx, cancel := context.WithCancel(context.Background())
	w, err := b.NewWriter(ctx, "a/b/c", &blob.WriterOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	if len(tmpEntries(t, dir)) != 1 {
		t.Fatal("expected one temp file while writing")
	}
	cancel()
	if err := w.Close(); err == nil {
		t.Fatal("Close after cancel succeeded")
	}
	// A lost IfNotExist race.
	write(t, b, "x", "first", nil)
	err = b.WriteAll(context.Background(), "x", []byte("second"), &blob.WriterOptions{ContentType: "text/plain", IfNotExist: true})
	if gcerrors.Code(err) != gcerrors.FailedPrecondition || !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("IfNotExist on existing key: %v", err)
	}
	if n := tmpEntries(t, dir); len(n) != 0 {
		t.Fatalf("temp files left: %q", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("aborted write created directories: %v", err)
	}
	if got := listAll(t, b, "", "", 10); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("listing %q", got)
	}
}

func TestDeletePrunesEmptyDirs(t *testing.T) {
	ctx := context.Background()
	b, dir := newBucket(t, nil)
	write(t, b, "a/b/c/d", "1", nil)
	write(t, b, "a/keep", "1", nil)
	if err := b.Delete(ctx, "a/b/c/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "b")); !os.IsNotExist(err) {
		t.Fatalf("a/b not pruned: %v", err)
	}
	if err := b.Delete(ctx, "a/keep"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), reservedPrefix) {
			t.Errorf("left %s in the root", e.Name())
		}
	}
	if err := b.Delete(ctx, "a/keep"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	if err := b.Delete(ctx, "no/such/dir/key"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("delete under missing dirs: %v", err)
	}
}

// A bucket copied with cp -r (no xattrs) is readable and listable; its
// objects simply have no metadata.
func TestPlainFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "refs"), 0o777))
	must(os.MkdirAll(filepath.Join(dir, "objects"), 0o777))
	must(os.WriteFile(filepath.Join(dir, "refs", "main.json"), []byte(`{"a":1}`), 0o666))
	must(os.WriteFile(filepath.Join(dir, "objects", "sha256:ab"), []byte("blob"), 0o666))
	must(os.WriteFile(filepath.Join(dir, "objects", "100%"), []byte("not an object name"), 0o666))
	must(os.Symlink("sha256:ab", filepath.Join(dir, "objects", "link")))
	must(unix.Mkfifo(filepath.Join(dir, "objects", "fifo"), 0o666))
	must(os.Symlink("/etc", filepath.Join(dir, "escape")))
	b, err := OpenBucket(dir, nil)
	must(err)
	defer b.Close()
	if got := listAll(t, b, "", "", 100); !slices.Equal(got, []string{"objects/sha256:ab", "refs/main.json"}) {
		t.Fatalf("listing %q", got)
	}
	a, err := b.Attributes(ctx, "refs/main.json")
	must(err)
	var info ObjectInfo
	if !a.As(&info) || info.HasMetadata || a.ContentType != "application/json" || a.ETag == "" || a.Metadata != nil {
		t.Fatalf("attrs %+v info %+v", a, info)
	}
	if got, err := b.ReadAll(ctx, "objects/sha256:ab"); err != nil || string(got) != "blob" {
		t.Fatalf("read: %q %v", got, err)
	}
	for _, k := range []string{"objects/link", "objects/fifo", "escape/passwd", "objects/100%"} {
		if _, err := b.NewReader(ctx, k, nil); gcerrors.Code(err) != gcerrors.NotFound {
			t.Errorf("read %s: %v, want NotFound", k, err)
		}
	}
	if err := b.WriteAll(ctx, "escape/x", []byte("x"), nil); err == nil {
		t.Error("wrote through a symlink")
	}
	// An in-place edit by another program changes the ETag.
	a1, _ := b.Attributes(ctx, "refs/main.json")
	must(os.WriteFile(filepath.Join(dir, "refs", "main.json"), []byte(`{"a":22}`), 0o666))
	a2, _ := b.Attributes(ctx, "refs/main.json")
	if a1.ETag == a2.ETag {
		t.Error("ETag unchanged after an in-place edit")
	}
}

func TestKeyConflict(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, nil)
	write(t, b, "a", "file", nil)
	for _, ifNotExist := range []bool{false, true} {
		err := b.WriteAll(ctx, "a/b", []byte("x"), &blob.WriterOptions{ContentType: "text/plain", IfNotExist: ifNotExist})
		if !errors.Is(err, ErrKeyConflict) || gcerrors.Code(err) != gcerrors.InvalidArgument {
			t.Fatalf("file where a directory is needed (IfNotExist=%v): %v", ifNotExist, err)
		}
	}
	write(t, b, "d/x", "file", nil)
	for _, ifNotExist := range []bool{false, true} {
		err := b.WriteAll(ctx, "d", []byte("x"), &blob.WriterOptions{ContentType: "text/plain", IfNotExist: ifNotExist})
		if !errors.Is(err, ErrKeyConflict) || gcerrors.Code(err) != gcerrors.InvalidArgument {
			t.Fatalf("directory where a file is needed (IfNotExist=%v): %v", ifNotExist, err)
		}
	}
	if _, err := b.Attributes(ctx, "d"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("a directory is not an object: %v", err)
	}
}

func TestReservedNamesAreKeys(t *testing.T) {
	ctx := context.Background()
	b, dir := newBucket(t, nil)
	write(t, b, ".pugfs-tmp/x", "mine", nil)
	write(t, b, ".pugfs-meta", "mine too", nil)
	if got := listAll(t, b, "", "", 10); !slices.Equal(got, []string{".pugfs-meta", ".pugfs-tmp/x"}) {
		t.Fatalf("listing %q", got)
	}
	if got, _ := b.ReadAll(ctx, ".pugfs-tmp/x"); string(got) != "mine" {
		t.Fatalf("read %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "%2Epugfs-tmp", "x")); err != nil {
		t.Fatal(err)
	}
}

// TestSidecarOfAFreedInode: in sidecar mode, a delete or an overwrite
// removes the sidecar of the object it unlinks while its inode is still
// held, so that no new object gets the number and loses its metadata. The
// sidecar was removed after the unlink and the directory fsync, by which
// time the file system (ext4) had given the freed number to another
// writer's new file, whose sidecar went: objects published with no
// metadata (review 5).
func TestSidecarOfAFreedInode(t *testing.T) {
	ctx := context.Background()
	b, _ := newBucket(t, &Options{forceSidecar: true})
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for g := range 2 { // free inodes: write, delete, overwrite
		churn.Add(1)
		go func() {
			defer churn.Done()
			key := fmt.Sprintf("churn/%d", g)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = b.WriteAll(ctx, key, []byte("x"), &blob.WriterOptions{ContentType: "text/plain"})
				if i%2 == 0 {
					_ = b.Delete(ctx, key)
				}
			}
		}()
	}
	defer func() { close(stop); churn.Wait() }()
	errs := make(chan error, 2)
	for w := range 2 {
		go func() {
			for i := range 1000 {
				key := fmt.Sprintf("obj/%d-%d", w, i)
				md := map[string]string{"pugmark-transaction-id": strconv.Itoa(i + 1)}
				if err := b.WriteAll(ctx, key, []byte("body"), &blob.WriterOptions{ContentType: "application/json", Metadata: md}); err != nil {
					errs <- err
					return
				}
				a, err := b.Attributes(ctx, key)
				if err == nil && a.Metadata["pugmark-transaction-id"] != md["pugmark-transaction-id"] {
					err = fmt.Errorf("%s published without its metadata: %v, content type %q", key, a.Metadata, a.ContentType)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestSidecarLifecycle(t *testing.T) {
	ctx := context.Background()
	b, dir := newBucket(t, &Options{forceSidecar: true})
	md := map[string]string{"pugmark-transaction-id": "7"}
	write(t, b, "s/k", "v1", &blob.WriterOptions{ContentType: "application/json", Metadata: md, CacheControl: "no-cache"})
	sidecars := func() int {
		ents, _ := os.ReadDir(filepath.Join(dir, metaDirName))
		return len(ents)
	}
	if n := sidecars(); n != 1 {
		t.Fatalf("%d sidecars", n)
	}
	a, err := b.Attributes(ctx, "s/k")
	if err != nil || a.Metadata["pugmark-transaction-id"] != "7" || a.CacheControl != "no-cache" {
		t.Fatalf("attrs %+v %v", a, err)
	}
	// Overwrite replaces the sidecar; delete removes it.
	write(t, b, "s/k", "v2", &blob.WriterOptions{ContentType: "application/json", Metadata: map[string]string{"pugmark-transaction-id": "8"}})
	if n := sidecars(); n != 1 {
		t.Fatalf("%d sidecars after overwrite", n)
	}
	a, _ = b.Attributes(ctx, "s/k")
	if a.Metadata["pugmark-transaction-id"] != "8" {
		t.Fatalf("metadata %v", a.Metadata)
	}
	if err := b.Delete(ctx, "s/k"); err != nil {
		t.Fatal(err)
	}
	if n := sidecars(); n != 0 {
		t.Fatalf("%d sidecars after delete", n)
	}
	// Oversized metadata on an xattr bucket falls back to a sidecar.
	bx, dirx := newBucket(t, nil)
	big := map[string]string{"big": strings.Repeat("v", 8000)}
	write(t, bx, "big", "x", &blob.WriterOptions{ContentType: "text/plain", Metadata: big})
	a, err = bx.Attributes(ctx, "big")
	if err != nil || a.Metadata["big"] != big["big"] {
		t.Fatalf("big metadata lost: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dirx, metaDirName)); err != nil {
		t.Fatalf("no sidecar dir: %v", err)
	}
}

// TestReaderMetadataLazy: a reader reads the object's metadata from its
// own descriptor when asked, not at the open, so a body read never reads
// them; what it reports still belongs to the body it reads, or nothing.
func TestReaderMetadataLazy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opts     *Options
		wantInfo bool // the replaced object's metadata are still known
	}{
		{"xattr", nil, true},
		{"sidecar", &Options{forceSidecar: true}, false}, // its sidecar went with it
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newBucket(t, tc.opts)
			write(t, b, "s/k", "v1", &blob.WriterOptions{ContentType: "application/json", Metadata: map[string]string{"n": "1"}})
			a, err := b.Attributes(ctx, "s/k")
			if err != nil {
				t.Fatal(err)
			}
			r, err := b.NewReader(ctx, "s/k", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			write(t, b, "s/k", "v2", &blob.WriterOptions{ContentType: "text/plain", Metadata: map[string]string{"n": "2"}})
			if body, err := io.ReadAll(r); err != nil || string(body) != "v1" {
				t.Fatalf("body %q, %v; want the opened v1", body, err)
			}
			var info ObjectInfo
			got := r.As(&info)
			if got != tc.wantInfo {
				t.Fatalf("As(*ObjectInfo) = %v, want %v", got, tc.wantInfo)
			}
			if got && (info.Metadata["n"] != "1" || info.ETag != a.ETag || info.ContentType != "application/json") {
				t.Fatalf("info %+v, want v1's (ETag %s)", info, a.ETag)
			}
			if want := map[bool]string{true: "application/json", false: "application/octet-stream"}[got]; r.ContentType() != want {
				t.Fatalf("content type %q, want %q", r.ContentType(), want)
			}
			if r.Size() != 2 {
				t.Fatalf("size %d", r.Size())
			}
		})
	}
	t.Run("corrupt xattr", func(t *testing.T) {
		b, dir := newBucket(t, nil)
		write(t, b, "k", "body", nil)
		if err := unix.Setxattr(filepath.Join(dir, "k"), xattrName, []byte("{"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Attributes(ctx, "k"); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("Attributes of a corrupt xattr = %v, want the corruption", err)
		}
		r, err := b.NewReader(ctx, "k", nil)
		if err != nil {
			t.Fatalf("a body read reads the xattr: %v", err)
		}
		defer r.Close()
		if body, err := io.ReadAll(r); err != nil || string(body) != "body" {
			t.Fatalf("body %q, %v", body, err)
		}
		var info ObjectInfo
		if r.As(&info) {
			t.Fatalf("As(*ObjectInfo) of a corrupt xattr = %+v, want false", info)
		}
	})
}

func TestOpenBucketURL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		url     string
		wantErr bool
	}{
		{"file://" + dir, false},
		{"file://" + dir + "/new/sub?create_dir=true", false},
		{"file://" + dir + "/missing", true},
		{"file://" + dir + "?create_dir=maybe", true},
		{"file://" + dir + "/bare?create_dir", false},
		{"file://" + dir + "/no?create_dir=false", true},
		{"file://" + dir + "?bogus=1", true},
		{"file://otherhost" + dir, true},
	} {
		b, err := blob.OpenBucket(ctx, tc.url)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, want error %v", tc.url, err, tc.wantErr)
		}
		if b != nil {
			write(t, b, "k", "v", nil)
			b.Close()
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new", "sub", "k")); err != nil {
		t.Fatal(err)
	}
}

func TestBucketCloseWithOpenWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.NewWriter(ctx, "k", &blob.WriterOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "v")
	b.Close()
	// The writer still owns a reference to the bucket's directory fds.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "k"))
	if err != nil || !bytes.Equal(got, []byte("v")) {
		t.Fatalf("%q %v", got, err)
	}
}

// A writer whose temp file is swept as stale (it stalled past
// StaleTempAge) fails on Close and publishes nothing.
func TestSweptWriterFailsCleanly(t *testing.T) {
	ctx := context.Background()
	b, dir := newBucket(t, nil)
	w, err := b.NewWriter(ctx, "k", &blob.WriterOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "v")
	other, err := OpenBucket(dir, &Options{StaleTempAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("Close of a swept writer: %v", err)
	}
	if ok, _ := b.Exists(ctx, "k"); ok {
		t.Fatal("swept write was published")
	}
}

// TestDurableWriteOutlastsADeadline: a write whose body is durable lands,
// though a deadline on silence ran out during its fsync (an fsync says
// nothing of its progress). The write was thrown away after the fsync,
// and every retry of it the same way: a body of GiBs on a slow disk under
// the mount's --request-timeout never landed (review 5).
func TestDurableWriteOutlastsADeadline(t *testing.T) {
	ctx := context.Background()
	// The fsync takes four times the deadline, as a large body's does on
	// a slow disk (a sleep stands for the disk: the test waits for no
	// other goroutine). Timed by the disk itself (20 ms against the fsync
	// of 128 MiB), a Write on a loaded machine overran the deadline.
	const deadline = 200 * time.Millisecond
	raw, _ := newBucket(t, &Options{beforeSync: func() { time.Sleep(4 * deadline) }})
	b := deadlineblob.Wrap(raw, deadline)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<12) // 64 KiB
	w, err := b.NewWriter(ctx, "objects/big", &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatal(err)
	}
	for range 16 {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close of a write whose fsync outlasted the deadline: %v", err)
	}
	if a, err := raw.Attributes(ctx, "objects/big"); err != nil || a.Size != 1<<20 {
		t.Fatalf("the object after the close: %+v %v", a, err)
	}
}
