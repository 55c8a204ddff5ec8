package e2e

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReliabilityXattrBounded: a user of a mount cannot grow a file's
// metadata without bound through setxattr: values up to 64 KiB are kept,
// the fourth of them on one file is ENOSPC, and a value over 64 KiB is
// E2BIG; what was refused is not committed.
//
// Removing the protection (no bound in changeXattr) lets the fourth value
// land, and every later snapshot of the session carry it.
func TestReliabilityXattrBounded(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk)
	sd := mnt.Dir + "/sessions/" + id.String()
	sh(t, sd, `echo x > f && v=$(head -c 65536 /dev/zero | tr '\0' a) &&
		for k in a b c; do setfattr -n user.pugmark.meta.$k -v "$v" f; done`)
	if e := shErr(t, sd, `setfattr -n user.pugmark.meta.d -v "$(head -c 65536 /dev/zero | tr '\0' a)" f`); !strings.Contains(e, "No space left") {
		t.Errorf("a fourth 64 KiB value: %q, want ENOSPC", e)
	}
	if e := shErr(t, sd, `setfattr -n user.pugmark.meta.e -v "$(head -c 65537 /dev/zero | tr '\0' a)" f`); !strings.Contains(e, "Argument list too long") {
		t.Errorf("a value over 64 KiB: %q, want E2BIG", e)
	}
	meta := relLiveSlots(t, bk, id)["f"].Metadata
	if len(meta["a"]) != 65536 || len(meta["c"]) != 65536 || meta["d"] != "" || meta["e"] != "" {
		t.Errorf("committed metadata: %d keys (d %d bytes, e %d bytes)", len(meta), len(meta["d"]), len(meta["e"]))
	}
}

// TestReliabilityXattrFlags: setxattr(2)'s XATTR_CREATE and
// XATTR_REPLACE, and removexattr(2) of a missing attribute, answer as on
// a local disk (they were ignored: a create replaced a value, audit 17);
// a value that is not UTF-8, which a descriptor's JSON cannot carry, is
// EILSEQ, where it was stored as U+FFFD while this mount showed it set.
func TestReliabilityXattrFlags(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk)
	f := mnt.Dir + "/sessions/" + id.String() + "/f"
	sh(t, mnt.Dir, "echo x > "+f)
	const k = "user.pugmark.meta.k"
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"replace of a missing value", unix.Setxattr(f, k, []byte("v0"), unix.XATTR_REPLACE)},
		{"removal of a missing value", unix.Removexattr(f, k)},
		{"create", unix.Setxattr(f, k, []byte("v1"), unix.XATTR_CREATE)},
		{"create over a value", unix.Setxattr(f, k, []byte("v2"), unix.XATTR_CREATE)},
		{"replace", unix.Setxattr(f, k, []byte("v3"), unix.XATTR_REPLACE)},
		{"value not UTF-8", unix.Setxattr(f, "user.pugmark.meta.bin", []byte{0xff, 0, 1}, 0)},
	} {
		want := map[string]error{"replace of a missing value": unix.ENODATA, "removal of a missing value": unix.ENODATA,
			"create over a value": unix.EEXIST, "value not UTF-8": unix.EILSEQ}[tc.what]
		if !errors.Is(tc.err, want) && !(want == nil && tc.err == nil) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, want)
		}
	}
	// In the bucket when setxattr returned, though the kernel may not
	// have sent the RELEASE of echo's descriptor yet (the file is still
	// open in pugfs then): TestReliabilityMetadataOfHeldFile.
	meta := relLiveSlots(t, bk, id)["f"].Metadata
	if meta["k"] != "v3" {
		t.Errorf("committed metadata %q once setxattr returned, want k=v3", meta)
	}
	if meta["bin"] != "" {
		t.Errorf("committed metadata %q, want k=v3 and no bin", meta)
	}
}

// TestReliabilityMetadataOfHeldFile: chmod, utimes and setxattr of a
// committed file that another descriptor holds open are in the bucket
// when they return. They were committed at that descriptor's close, and
// a `setfattr` or `chmod` right after `echo x > f` returned before its
// change had landed whenever the kernel's RELEASE of echo's descriptor
// came late (it comes after close(2) has returned).
func TestReliabilityMetadataOfHeldFile(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk)
	f := mnt.Dir + "/sessions/" + id.String() + "/f"
	sh(t, mnt.Dir, "echo x > "+f)
	held, err := os.OpenFile(f, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, c := range []struct {
		what   string
		change func() error
		landed func(meta map[string]string) bool
	}{
		{"chmod", func() error { return os.Chmod(f, 0o600) },
			func(meta map[string]string) bool { return meta["posix-mode"] == "0600" }},
		{"utimes", func() error { return os.Chtimes(f, mtime, mtime) },
			func(meta map[string]string) bool {
				return strings.HasPrefix(meta["posix-mtime"], "2001-02-03T04:05:06")
			}},
		{"setxattr", func() error { return unix.Setxattr(f, "user.pugmark.meta.k", []byte("v"), 0) },
			func(meta map[string]string) bool { return meta["k"] == "v" }},
		{"removexattr", func() error { return unix.Removexattr(f, "user.pugmark.meta.k") },
			func(meta map[string]string) bool { _, ok := meta["k"]; return !ok }},
	} {
		if err := c.change(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if e := relLiveSlots(t, bk, id)["f"]; !c.landed(e.Metadata) || string(e.Data) != "x\n" {
			t.Errorf("%s of a file held open: the bucket has %q with metadata %q once it returned", c.what, e.Data, e.Metadata)
		}
	}
}
