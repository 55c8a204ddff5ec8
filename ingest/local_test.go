package ingest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// The owner/group/other rule, as the kernel applies it without ACLs: the
// first class that matches decides, even when a later one would grant
// more (an owner with 0077 reads nothing).
func TestMay(t *testing.T) {
	alice := Caller{UID: 1000, GID: 1000, Groups: []uint32{1000, 50}}
	for _, tc := range []struct {
		name       string
		c          Caller
		mode       uint32
		uid, gid   uint32
		want       uint32
		wantAccess bool
	}{
		{"root reads 0000", Caller{}, 0o000, 5, 5, permRead, true},
		{"owner reads 0400", alice, 0o400, 1000, 7, permRead, true},
		{"owner 0077 reads nothing", alice, 0o077, 1000, 1000, permRead, false},
		{"group via gid", alice, 0o040, 7, 1000, permRead, true},
		{"group via supplementary", alice, 0o040, 7, 50, permRead, true},
		{"group 0407 does not fall to other", alice, 0o407, 7, 50, permRead, false},
		{"other reads 0644", alice, 0o644, 0, 0, permRead, true},
		{"other 0640", alice, 0o640, 0, 0, permRead, false},
		{"root-owned 0600", alice, 0o600, 0, 0, permRead, false},
		{"search 0711 as other", alice, 0o711, 0, 0, permSearch, true},
		{"search 0750 as other", alice, 0o750, 0, 0, permSearch, false},
		{"search 0644 dir as other", alice, 0o644, 0, 0, permSearch, false},
	} {
		if got := may(tc.c, tc.mode, tc.uid, tc.gid, tc.want); got != tc.wantAccess {
			t.Errorf("%s: may = %v, want %v", tc.name, got, tc.wantAccess)
		}
	}
}

// Supplementary groups come from the Groups: line of /proc/<pid>/status;
// a process that cannot be looked up has none (which only refuses more).
func TestCallerGroups(t *testing.T) {
	proc := t.TempDir()
	os.MkdirAll(filepath.Join(proc, "42"), 0o755)
	os.WriteFile(filepath.Join(proc, "42", "status"), []byte("Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \nNSpid:\t42\n"), 0o644)
	for _, tc := range []struct {
		c    Caller
		want []uint32
	}{
		{Caller{PID: 42}, []uint32{4, 24, 1000}},
		{Caller{PID: 43}, []uint32{}},
		{Caller{PID: 42, Groups: []uint32{9}}, []uint32{9}},
		{Caller{}, nil},
	} {
		got := tc.c.withGroups(proc).Groups
		if len(got) != len(tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%+v: groups %v, want %v", tc.c, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%+v: groups %v, want %v", tc.c, got, tc.want)
			}
		}
	}
}

// A file:// source is opened below its allowed directory only, and only
// when the caller could read it there: the cases are each way out (a
// "..", a symbolic link to outside, one that stays inside, a link as a
// middle component) and each way the caller's rights fall short.
func TestOpenLocal(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make files of other owners")
	}
	top := t.TempDir()
	os.Chmod(top, 0o755)
	shared := filepath.Join(top, "shared")
	secret := filepath.Join(top, "secret")
	for _, d := range []string{shared, secret, filepath.Join(shared, "sub"), filepath.Join(shared, "closed"), filepath.Join(shared, "grp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string, mode os.FileMode, uid, gid int) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chown(p, uid, gid)
	}
	write(filepath.Join(shared, "pub.txt"), "public\n", 0o644, 0, 0)
	write(filepath.Join(shared, "sub", "deep.txt"), "deep\n", 0o644, 0, 0)
	write(filepath.Join(shared, "root-only"), "root\n", 0o600, 0, 0)
	write(filepath.Join(shared, "alices"), "alice\n", 0o600, 1000, 1000)
	write(filepath.Join(shared, "grp", "g.txt"), "group\n", 0o640, 0, 50)
	write(filepath.Join(shared, "closed", "in.txt"), "closed\n", 0o644, 0, 0)
	write(filepath.Join(secret, "s.txt"), "secret\n", 0o644, 0, 0)
	os.Chmod(filepath.Join(shared, "closed"), 0o700)
	os.Symlink(filepath.Join(secret, "s.txt"), filepath.Join(shared, "out-link"))
	os.Symlink("pub.txt", filepath.Join(shared, "in-link"))
	os.Symlink(secret, filepath.Join(shared, "dir-link"))
	os.Symlink("sub", filepath.Join(shared, "sub-link"))
	syscall.Mkfifo(filepath.Join(shared, "fifo"), 0o644)

	ps, err := ParsePrefixes([]string{"file://" + shared + "/"})
	if err != nil {
		t.Fatal(err)
	}
	p := &Policy{Prefixes: ps}
	alice := Caller{UID: 1000, GID: 1000, Groups: []uint32{1000}}
	bob := Caller{UID: 1001, GID: 1001, Groups: []uint32{1001, 50}}
	root := Caller{Groups: []uint32{}}
	for _, tc := range []struct {
		rel  string
		c    Caller
		want string // the body, or "" for refused
		err  error  // when not refused: the error wanted
	}{
		{"pub.txt", alice, "public\n", nil},
		{"sub/deep.txt", alice, "deep\n", nil},
		{"alices", alice, "alice\n", nil},
		{"root-only", alice, "", nil},
		{"root-only", root, "root\n", nil},
		{"alices", bob, "", nil},
		{"grp/g.txt", bob, "group\n", nil},
		{"grp/g.txt", alice, "", nil},
		{"closed/in.txt", alice, "", nil},
		{"closed/in.txt", root, "closed\n", nil},
		{"out-link", alice, "", nil},
		{"out-link", root, "", nil},
		{"in-link", alice, "", nil},
		{"dir-link/s.txt", root, "", nil},
		{"sub-link/deep.txt", alice, "", nil},
		{"../secret/s.txt", root, "", nil},
		{"missing", alice, "", syscall.ENOENT},
		{"closed/missing", alice, "", nil}, // no existence probe through a closed directory
		{"sub", alice, "", nil},            // not a regular file: refused, and logged
		{"fifo", root, "", nil},
	} {
		src, err := p.Open(context.Background(), "file://"+shared+"/"+tc.rel, tc.c)
		switch {
		case tc.want != "":
			if err != nil {
				t.Errorf("%s as uid %d: %v", tc.rel, tc.c.UID, err)
				continue
			}
			b, _ := io.ReadAll(src)
			src.Close()
			if string(b) != tc.want {
				t.Errorf("%s as uid %d: read %q", tc.rel, tc.c.UID, b)
			}
		case tc.err != nil:
			if !errors.Is(err, tc.err) || errors.Is(err, ErrRefused) {
				t.Errorf("%s as uid %d: %v, want %v", tc.rel, tc.c.UID, err, tc.err)
			}
		default:
			if !errors.Is(err, ErrRefused) {
				t.Errorf("%s as uid %d: %v, want refused", tc.rel, tc.c.UID, err)
			}
		}
		if err != nil && src != nil {
			t.Errorf("%s: a source with an error", tc.rel)
		}
	}
}

// A bucket source is opened with the prefix's URL, and read through.
func TestOpenBucket(t *testing.T) {
	mem := memblob.OpenBucket(nil)
	defer mem.Close()
	if err := mem.WriteAll(context.Background(), "in/x.txt", []byte("x\n"), &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	var opened []string
	ps, _ := ParsePrefixes([]string{"s3://src/in/?region=r"})
	p := &Policy{Prefixes: ps, OpenBucket: func(_ context.Context, u string) (*blob.Bucket, error) {
		opened = append(opened, u)
		return blob.PrefixedBucket(mem, ""), nil
	}}
	src, err := p.Open(context.Background(), "s3://src/in/x.txt", Caller{UID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(src)
	src.Close()
	if !bytes.Equal(b, []byte("x\n")) || src.ContentType != "text/plain" {
		t.Errorf("read %q as %q", b, src.ContentType)
	}
	if len(opened) != 1 || opened[0] != "s3://src?region=r" {
		t.Errorf("opened %v", opened)
	}
	if _, err := p.Open(context.Background(), "s3://other/in/x.txt", Caller{UID: 1000}); !errors.Is(err, ErrRefused) {
		t.Errorf("another bucket: %v", err)
	}
	if _, err := (*Policy)(nil).Open(context.Background(), "s3://src/in/x.txt", Caller{}); !errors.Is(err, ErrRefused) {
		t.Errorf("nil policy: %v", err)
	}
	if len(opened) != 1 {
		t.Errorf("a refused URL opened a bucket: %v", opened)
	}
}

// TestBounded: a source that yields more than the size it was checked at
// (a file that grew after its open) fails with ErrRefused; one of that
// size exactly reads whole.
func TestBounded(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{{"", true}, {"abcd", true}, {"abcde", false}, {strings.Repeat("x", 1<<16), false}} {
		got, err := io.ReadAll(bounded(io.NopCloser(strings.NewReader(tc.body)), "file:///x", 4))
		switch {
		case tc.ok && (err != nil || string(got) != tc.body):
			t.Errorf("%d bytes: %q, %v", len(tc.body), got, err)
		case !tc.ok && !errors.Is(err, ErrRefused):
			t.Errorf("%d bytes past a bound of 4: %v, want ErrRefused", len(tc.body), err)
		}
	}
}

// TestOpenSourceGrows: a local source made larger after its open (a
// sparse truncate costs its owner no disk) is not read past the size it
// was opened with, which the staging directory's room was checked
// against (review 12: it was read whole).
func TestOpenSourceGrows(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "grow")
	if err := os.WriteFile(p, []byte("tiny"), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := ParsePrefixes([]string{"file://" + dir + "/"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := (&Policy{Prefixes: ps}).Open(context.Background(), "file://"+p, Caller{Groups: []uint32{}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := os.Truncate(p, 64<<20); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, src)
	if !errors.Is(err, ErrRefused) || n > src.Size {
		t.Errorf("a source opened at %d bytes yielded %d, %v; want at most that and ErrRefused", src.Size, n, err)
	}
}
