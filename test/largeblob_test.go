package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/layout"
)

// largeBody is a body above the passthrough threshold (fs/pinned.go: 1
// MiB) that is not a whole number of chunks.
func largeBody(seed byte) []byte {
	b := make([]byte, 3<<20+12345)
	for i := range b {
		b[i] = byte(i*31+i/4096) ^ seed
	}
	return b
}

// largeSession commits body as big.bin in a new session and returns the
// session and the blob's digest.
func largeSession(t *testing.T, bk *Bucket, body []byte) (layout.SessionID, layout.Digest) {
	t.Helper()
	id := newSession(t, bk)
	var d layout.Descriptor
	func() {
		defer rdCatch(t)
		d = rdPutDesc(t, bk.Store, "big.bin", "application/octet-stream", "", body, fixT1)
	}()
	if _, err := bk.Store.Commit(context.Background(), id, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
	return id, d.Digest
}

// mmapSum is a script printing the SHA-256 of a file read through mmap.
const mmapSum = `python3 -c 'import mmap,sys,hashlib
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); print(hashlib.sha256(m).hexdigest())' `

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// isEIO reports whether a command failed the way an I/O error shows:
// EIO from a system call, or SIGBUS for a mapped page that could not be
// read.
func isEIO(err error, stderr string) bool {
	return err != nil && (strings.Contains(stderr, "Input/output error") || strings.Contains(stderr, "Errno 5") ||
		strings.Contains(err.Error(), "bus error"))
}

// TestPassthroughReads: on a --fast-path=passthrough mount, a large
// file is read by the kernel from its verified copy (FUSE passthrough):
// cat, mmap, history and objects/ send pugfs no READ at all, where
// --fast-path=off sends one per chunk the kernel asks for. A file being
// read that way refuses to be opened for writing (ETXTBSY, not the
// kernel's EIO) until the readers are gone; then the write lands.
func TestPassthroughReads(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		body := largeBody(1)
		id, dg := largeSession(t, bk, body)
		live := "sessions/" + id.String() + "/big.bin"
		paths := []string{live, "sessions/" + id.String() + "/.pugmark/at/1/big.bin", "objects/" + dg.String()}
		want := hexSum(body)
		m := mount(t, bk, "--cache-dir", t.TempDir(), "--fast-path=passthrough")
		for _, p := range paths {
			_, cost := kernelCost(t, m.Dir, "sha256sum < "+p+"; "+mmapSum+p+"; cat "+p+" > /dev/null", "read", "open")
			if got := sh(t, m.Dir, "sha256sum < "+p+" | cut -d' ' -f1; "+mmapSum+p); got != want+"\n"+want+"\n" {
				t.Fatalf("%s: sums %q, want %s twice", p, got, want)
			}
			if cost["read"] != 0 || cost["open"] < 3 {
				t.Errorf("%s read three ways on a passthrough mount: %v, want no read and an open each", p, cost)
			}
		}
		// The default on a read-write mount is off: every read reaches
		// pugfs, and a file being read can be written.
		off := mount(t, bk, "--cache-dir", t.TempDir())
		if _, cost := kernelCost(t, off.Dir, "cat "+live+" > /dev/null", "read"); cost["read"] == 0 {
			t.Errorf("cat on a default read-write mount sent no READ: the check above proves nothing")
		}
		shE(t, off.Dir, fmt.Sprintf("exec 3< %s; head -c 10 <&3 > /dev/null; echo more >> %s", live, live))
		// The passthrough mount shows that commit within its metadata
		// TTL (consistency.md §4), not at once. Its own append below
		// must build on it: an append to the version before would
		// replace it (the last commit of a file wins across mounts).
		waitFor(t, "the other mount's append on the passthrough mount", func() bool {
			fi, err := os.Stat(filepath.Join(m.Dir, live))
			return err == nil && fi.Size() == int64(len(body))+int64(len("more\n"))
		})

		// Busy while being read through passthrough.
		script := fmt.Sprintf("exec 3< %s; head -c 10 <&3 > /dev/null; echo more >> %s", live, live)
		if e := shErr(t, m.Dir, script); !strings.Contains(e, "Text file busy") {
			t.Errorf("appending while the file is read: %q, want Text file busy", e)
		}
		sh(t, m.Dir, "echo more >> "+live)
		if got := sh(t, m.Dir, "tail -c 10 "+live); got != "more\nmore\n" {
			t.Errorf("after the readers left, the append shows %q", got)
		}
		// The kernel forgets a reader at its close, pugfs at the RELEASE
		// that follows it in the background: an open for writing right
		// after the last reader's close waits for that RELEASE instead
		// of refusing (CI saw the append above refused once).
		const rounds = 10
		sh(t, m.Dir, fmt.Sprintf("for i in $(seq %d); do exec 3< %s; head -c 1 <&3 > /dev/null; exec 3<&-; echo again >> %s; done", rounds, live, live))
		if got := sh(t, m.Dir, fmt.Sprintf("tail -c %d %s", rounds*len("again\n"), live)); got != strings.Repeat("again\n", rounds) {
			t.Errorf("appends each right after a reader's close: tail %q", got)
		}
	})
}

// TestLargeReadsSpliced: READs of a large file that a verified disk copy
// answers are spliced from the copy, read-write and read-only mounts
// alike: the kernel's READs are capped (max_read) so that a reply and the
// page more a pipe needs fit the default pipe-max-size. With 1 MiB
// READs every splice failed, go-fuse copied the reply instead and logged
// a line for every MiB read.
func TestLargeReadsSpliced(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		body := largeBody(2)
		id, _ := largeSession(t, bk, body)
		live := "sessions/" + id.String() + "/big.bin"
		for _, args := range [][]string{nil, {"--read-only"}} {
			m := mount(t, bk, append([]string{"--cache-dir", t.TempDir()}, args...)...)
			// The verify pass of the first READ fills the verified
			// copy, which answers the READs.
			if _, cost := kernelCost(t, m.Dir, "cat "+live+" > /dev/null", "read"); cost["read"] < 3 {
				t.Fatalf("%v: cat sent %d READs: the check below proves nothing", args, cost["read"])
			}
			if got := sh(t, m.Dir, "sha256sum < "+live+" | cut -d' ' -f1"); got != hexSum(body)+"\n" {
				t.Errorf("%v: sum %q", args, got)
			}
			if log := m.Log(); strings.Contains(log, "trySplice") {
				t.Errorf("%v: a READ from the verified copy was not spliced:\n%s", args, log)
			}
			m.Stop(t)
		}
	})
}

// TestCorruptBlobEveryPath: one byte changed in a blob, in the bucket or
// in the disk cache's verified copy, before a mount opens it. Nothing
// shows a wrong byte on any path, read-only (no OPEN), read-write and
// passthrough mounts alike: cat, mmap, head, objects/ and history at/
// all fail with EIO when the bucket's copy is bad (SIGBUS for a mapped
// page, which is how mmap reports EIO). A bad copy in the disk
// cache is found out (the copy is hashed whole before it is trusted) and
// the right bytes come from the bucket; when both are bad, EIO.
func TestCorruptBlobEveryPath(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		ctx := context.Background()
		body := largeBody(2)
		id, dg := largeSession(t, bk, body)
		paths := []string{"sessions/" + id.String() + "/big.bin", "sessions/" + id.String() + "/.pugmark/at/1/big.bin", "objects/" + dg.String()}
		corrupt := func() {
			t.Helper()
			bad := bytes.Clone(body)
			bad[len(bad)/2] ^= 0x01
			if err := bk.Store.Bucket().WriteAll(ctx, layout.BlobKey(dg), bad, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
				t.Fatal(err)
			}
		}
		restore := func() {
			t.Helper()
			if err := bk.Store.Bucket().WriteAll(ctx, layout.BlobKey(dg), body, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
				t.Fatal(err)
			}
		}
		want := hexSum(body)
		// every reads each path every way, and checks each attempt either
		// failed with EIO or (wantOK) gave the right bytes.
		every := func(m *Mount, wantOK bool) {
			t.Helper()
			for _, p := range paths {
				for _, how := range []string{"sha256sum < " + p + " | cut -d' ' -f1", mmapSum + p, "head -c 100 " + p + " | sha256sum | cut -d' ' -f1"} {
					out, errOut, err := run(m.Dir, "set -o pipefail; "+how)
					wantOut := want
					if strings.HasPrefix(how, "head") {
						wantOut = hexSum(body[:100])
					}
					switch {
					case wantOK && (err != nil || out != wantOut+"\n"):
						t.Errorf("%s on %s: %q, %v, %s; want the right bytes", how, m.Dir, out, err, errOut)
					case !wantOK && (err == nil || strings.Contains(out, want[:16]) || !isEIO(err, errOut)):
						t.Errorf("%s on %s: %q, %v, %s; want EIO", how, m.Dir, out, err, errOut)
					}
				}
			}
		}

		// The bucket's copy is bad.
		corrupt()
		ro := mount(t, bk, "--read-only", "--cache-dir", t.TempDir())
		rw := mount(t, bk, "--cache-dir", t.TempDir())
		pt := mount(t, bk, "--cache-dir", t.TempDir(), "--fast-path=passthrough")
		every(ro, false)
		every(rw, false)
		every(pt, false)
		for _, m := range []*Mount{ro, rw, pt} {
			if !strings.Contains(m.Log(), layout.BlobKey(dg)) {
				t.Errorf("the log of %s does not name the corrupt blob:\n%s", m.Dir, m.Log())
			}
		}
		restore()

		// The disk cache's copy is bad: filled by one mount, damaged,
		// then read by the next.
		cacheDir := t.TempDir()
		first := mount(t, bk, "--cache-dir", cacheDir)
		every(first, true)
		first.Stop(t)
		copyPath := filepath.Join(cacheDir, "blobs", "blobs", "sha256", dg.Hex()[:2], dg.Hex())
		b, err := os.ReadFile(copyPath)
		if err != nil {
			t.Fatalf("the disk cache holds no copy: %v", err)
		}
		b[len(b)/3] ^= 0x80
		if err := os.Chmod(copyPath, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(copyPath, b, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"--read-only"}, nil, {"--fast-path=passthrough"}} {
			m := mount(t, bk, append(args, "--cache-dir", cacheDir)...)
			every(m, true)
			if !strings.Contains(m.Log(), "disk cache copy failed verification") {
				t.Errorf("no warning about the damaged copy:\n%s", m.Log())
			}
			m.Stop(t)
			if err := os.WriteFile(copyPath, b, 0o600); err != nil { // damaged again for the next mount
				t.Fatal(err)
			}
		}
		// Both bad.
		corrupt()
		both := mount(t, bk, "--cache-dir", cacheDir)
		every(both, false)
	})
}

// TestWriteLinksStagedFile: on a local bucket whose file system holds the
// cache directory too, a file written through the mount is stored by
// linking its staged copy into the bucket, not by copying it (the stats
// count it); S3 copies. Writing the file again afterwards goes to a copy
// of its own: the blob in the bucket keeps exactly the bytes its digest
// names, and both versions read back whole.
func TestWriteLinksStagedFile(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		ctx := context.Background()
		id := newSession(t, bk)
		m := mount(t, bk, "--cache-dir", t.TempDir())
		src := filepath.Join(t.TempDir(), "src.bin")
		first := largeBody(3)
		if err := os.WriteFile(src, first, 0o644); err != nil {
			t.Fatal(err)
		}
		p := "sessions/" + id.String() + "/w.bin"
		// One open descriptor for both writes: the second reuses the
		// staged file the first commit linked into the bucket.
		sh(t, m.Dir, fmt.Sprintf("exec 3> %s; cat %s >&3; sync %s; echo appended >&3; exec 3>&-", p, src, p))
		linked := regexp.MustCompile(`no copy\) (\d+)`).FindStringSubmatch(sh(t, m.Dir, "cat .pugmark/stats"))
		if linked == nil {
			t.Fatal("no linked count in .pugmark/stats")
		}
		want := "2"
		if bk.Kind != "local" {
			want = "0"
		}
		if linked[1] != want {
			t.Errorf("blobs stored by linking: %s, want %s (%s)", linked[1], want, bk.Kind)
		}
		second := append(bytes.Clone(first), []byte("appended\n")...)
		for _, b := range [][]byte{first, second} {
			d := layout.DigestOf(b)
			got, err := bk.Store.Bucket().ReadAll(ctx, layout.BlobKey(d))
			if err != nil || !bytes.Equal(got, b) {
				t.Errorf("blob %s in the bucket: %d bytes, %v; want its %d bytes", d, len(got), err, len(b))
			}
		}
		if got := sh(t, m.Dir, "sha256sum < "+p+" | cut -d' ' -f1"); got != hexSum(second)+"\n" {
			t.Errorf("the file reads %s, want %s", got, hexSum(second))
		}
		if v := latest(t, bk, id); v != 2 {
			t.Errorf("%d versions, want 2 (one commit per sync and close)", v)
		}
	})
}
