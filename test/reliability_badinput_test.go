package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
)

// Bad bucket content: every kind of broken or hostile object gets EIO (or
// is hidden) where tree.md says, with a log line naming the key, and the
// rest of the tree keeps working.

// relPutRaw stores body at key as a snapshot or manifest would be stored.
func relPutRaw(t *testing.T, bk *Bucket, key string, body []byte, enc string, md map[string]string) {
	t.Helper()
	if err := bk.B.WriteAll(context.Background(), key, body, &blob.WriterOptions{
		ContentType: "application/json", ContentEncoding: enc, Metadata: md,
	}); err != nil {
		t.Fatal(err)
	}
}

// relZstdFrames concatenates zstd frames: head, then reps copies of one
// frame holding body, then tail. Decoders read concatenated frames as one
// stream, and only the first frame's header (head's, small) can declare a
// size, so a reader cannot refuse the bomb from the header. Compressing
// body once keeps the test fast.
func relZstdFrames(head string, body []byte, reps int, tail string) []byte {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	out := enc.EncodeAll([]byte(head), nil)
	frame := enc.EncodeAll(body, nil)
	for i := 0; i < reps; i++ {
		out = append(out, frame...)
	}
	return enc.EncodeAll([]byte(tail), out)
}

// relSnapshotMeta is the metadata of a well-formed snapshot object.
func relSnapshotMeta(id layout.SessionID, v uint32) map[string]string {
	return map[string]string{
		layout.MetaSnapshotSession: id.String(), layout.MetaSnapshotVersion: strconv.Itoa(int(v)),
		layout.MetaTransactionID: "12345", layout.MetaSnapshotType: "checkpoint",
	}
}

// relBrokenSession makes a session whose snapshot 1 has the given body.
func relBrokenSession(t *testing.T, bk *Bucket, body []byte, enc string) (layout.SessionID, string) {
	t.Helper()
	id := relSession(t, bk)
	key, _ := layout.SnapshotKey(id, 1)
	relPutRaw(t, bk, key, body, enc, relSnapshotMeta(id, 1))
	return id, key
}

// relSnapshotJSON stores a zstd snapshot made of raw JSON.
func relSnapshotJSON(t *testing.T, bk *Bucket, js string) (layout.SessionID, string) {
	t.Helper()
	enc, _ := zstd.NewWriter(nil)
	return relBrokenSession(t, bk, enc.EncodeAll([]byte(js), nil), layout.EncodingZstd)
}

// relVmHWM is the peak resident set of a process, in bytes.
func relVmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// relExpectEIO runs script in the mount and checks it fails with EIO and
// that the log names key.
func relExpectEIO(t *testing.T, m *Mount, script, key string) {
	t.Helper()
	_, e, err := run(m.Dir, script)
	if err == nil || !strings.Contains(e, "Input/output error") {
		t.Errorf("%s: %v %q, want EIO", script, err, e)
	}
	if key != "" {
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(m.Log(), key) {
			if time.Now().After(deadline) {
				t.Errorf("%s: the log does not name %s", script, key)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestReliabilityBadBucketContent puts one broken object of each kind in
// its own session (or ref) next to a healthy session, mounts, and checks
// that each gets EIO (corrupt snapshot, manifest, digest, parent chain)
// or is hidden (names that cannot be paths), that the log names the key,
// that the healthy session reads after every case, and that the mount is
// still up.
//
// Removing a protection turns a case into wrong bytes (a digest check),
// a hang or crash (no cycle guard, no decode bound), a path outside the
// session (names not checked), or EIO for the healthy session (errors
// cached tree-wide).
func TestReliabilityBadBucketContent(t *testing.T) {
	bk := relLocalBucket(t)
	ctx := context.Background()
	healthy := relSession(t, bk)
	good := relSeedFiles(t, bk, healthy, 4, 9)

	type tc struct {
		name   string
		script string // run in the mount; must fail with EIO
		key    string // the log must name it
	}
	var cases []tc
	sessCase := func(name string, id layout.SessionID, key string) {
		cases = append(cases, tc{name, "ls sessions/" + id.String(), key})
	}

	// Snapshots that do not decode.
	id, key := relBrokenSession(t, bk, []byte("this is not zstd at all"), layout.EncodingZstd)
	sessCase("garbage snapshot", id, key)
	full, _ := layout.EncodeDescriptors([]layout.Descriptor{{Name: "x", Digest: layout.DigestOf([]byte("x")), Size: 1, Data: []byte("x"), SequenceNumber: 1}})
	id, key = relBrokenSession(t, bk, full[:len(full)/2], layout.EncodingZstd)
	sessCase("truncated snapshot", id, key)
	id, key = relSnapshotJSON(t, bk, `[{"name": "x", "digest": `)
	sessCase("invalid JSON", id, key)
	id, key = relSnapshotJSON(t, bk, `{"name": "an object, not an array"}`)
	sessCase("JSON object, not an array", id, key)
	id, key = relSnapshotJSON(t, bk, `[{"name": "x", "sequence-number": "one"}]`)
	sessCase("malformed log field (sequence-number a string)", id, key)
	// A field the log can do without costs its file alone
	// (layout.Damage): the session lists, the file is EIO.
	fileCase := func(name string, id layout.SessionID, key string) {
		cases = append(cases, tc{name, "ls sessions/" + id.String() + " >/dev/null && cat sessions/" + id.String() + "/x", key})
	}
	id, key = relSnapshotJSON(t, bk, `[{"name": "x", "size": "big", "sequence-number": 1}]`)
	fileCase("malformed field (size a string)", id, key)
	id, key = relSnapshotJSON(t, bk, `[{"name": "x", "digest": "sha256:zz", "sequence-number": 1}]`)
	fileCase("malformed digest", id, key)
	// ... and one that does not concern the body leaves it readable.
	xd := layout.DigestOf([]byte("x"))
	createdAt, _ := relSnapshotJSON(t, bk, `[{"name": "x", "digest": "`+xd.String()+`", "size": 1, "data": "eA==", "created-at": "yesterday", "sequence-number": 1}]`)
	chunk := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{1}).Read(chunk)
	id, key = relBrokenSession(t, bk, bytes.Repeat(chunk, 40), "")
	sessCase("oversized snapshot (40 MiB, stored raw)", id, key)

	// Decompression bombs: a few KiB that decode to hundreds of MiB.
	id, key = relBrokenSession(t, bk, relZstdFrames("[", bytes.Repeat([]byte(" "), 1<<20), 300, "]"), layout.EncodingZstd)
	sessCase("bomb: 300 MiB of whitespace", id, key)
	bombEmpty, bombKey := relBrokenSession(t, bk, relZstdFrames("[{}", bytes.Repeat([]byte(",{}"), 1<<20), 60, "]"), layout.EncodingZstd)
	sessCase("bomb: 60 million empty descriptors", bombEmpty, bombKey)

	// A manifest that names another session than its path.
	mm := relSession(t, bk)
	mkey, _ := layout.ManifestKey(mm)
	other := layout.NewSessionID(time.Now())
	body, _ := layout.EncodeManifest(&layout.Manifest{Session: other, FirstSequenceNumber: 1})
	relPutRaw(t, bk, mkey, body, "", nil)
	sessCase("manifest ID disagrees with its path", mm, mkey)
	// A manifest that is not JSON.
	mj := relSession(t, bk)
	mjkey, _ := layout.ManifestKey(mj)
	relPutRaw(t, bk, mjkey, []byte("{{{"), "", nil)
	sessCase("manifest not JSON", mj, mjkey)

	// Parent chains: a cycle, a missing parent, a version past the
	// parent's last.
	ca, cb := layout.NewSessionID(time.Now()), layout.NewSessionID(time.Now())
	for _, p := range [][2]layout.SessionID{{ca, cb}, {cb, ca}} {
		k, _ := layout.ManifestKey(p[0])
		b, _ := layout.EncodeManifest(&layout.Manifest{Session: p[0], Parent: &layout.ParentRef{Session: p[1], Version: 0}, FirstSequenceNumber: 1})
		relPutRaw(t, bk, k, b, "", nil)
	}
	cases = append(cases, tc{"cyclic parent chain", "ls sessions/" + ca.String(), ca.String()})
	orphan := layout.NewSessionID(time.Now())
	{
		k, _ := layout.ManifestKey(orphan)
		b, _ := layout.EncodeManifest(&layout.Manifest{Session: orphan, Parent: &layout.ParentRef{Session: layout.NewSessionID(time.Now()), Version: 1}, FirstSequenceNumber: 1})
		relPutRaw(t, bk, k, b, "", nil)
	}
	cases = append(cases, tc{"missing parent", "ls sessions/" + orphan.String(), orphan.String()})
	past := layout.NewSessionID(time.Now())
	{
		k, _ := layout.ManifestKey(past)
		b, _ := layout.EncodeManifest(&layout.Manifest{Session: past, Parent: &layout.ParentRef{Session: healthy, Version: 7}, FirstSequenceNumber: 1})
		relPutRaw(t, bk, k, b, "", nil)
	}
	cases = append(cases, tc{"parent version past the parent's last", "ls sessions/" + past.String(), past.String()})

	// Digest mismatches: a blob whose bytes are not its digest's, and
	// inline data that is not (then the blob is fetched instead).
	dm := relSession(t, bk)
	real := bytes.Repeat([]byte("real content "), 200)
	fake := bytes.Repeat([]byte("EVIL content "), 200)
	d := layout.DigestOf(real)
	if err := bk.B.WriteAll(ctx, layout.BlobKey(d), fake, nil); err != nil {
		t.Fatal(err)
	}
	small := []byte("small and true\n")
	if _, err := bk.Store.PutBlobBytes(ctx, small, layout.BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bk.Store.Commit(ctx, dm, layout.CommitRequest{Descriptors: []layout.Descriptor{
		{Name: "tampered.txt", Digest: d, Size: int64(len(real)), CreatedAt: time.Now()},
	}}); err != nil {
		t.Fatal(err)
	}
	// Commit refuses bad inline data, so write that snapshot by hand.
	js := fmt.Sprintf(`[{"name":"inline.txt","digest":%q,"size":%d,"data":"RVZJTCBpbmxpbmUK","sequence-number":2}]`, layout.DigestOf(small).String(), len(small))
	enc, _ := zstd.NewWriter(nil)
	k2, _ := layout.SnapshotKey(dm, 2)
	relPutRaw(t, bk, k2, enc.EncodeAll([]byte(js), nil), layout.EncodingZstd, relSnapshotMeta(dm, 2))
	cases = append(cases, tc{"blob digest mismatch", "cat sessions/" + dm.String() + "/tampered.txt", layout.BlobKey(d)})

	// A gzip blob that decodes to 256 MiB: reading its head must not hold
	// it in memory.
	// (256 gzip members of 1 MiB of zeros each: one gzip stream.)
	var member bytes.Buffer
	gw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	gw.Write(make([]byte, 1<<20))
	gw.Close()
	gzInfo, err := bk.Store.PutBlobBytes(ctx, bytes.Repeat(member.Bytes(), 256), layout.BlobOptions{ContentEncoding: "gzip"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bk.Store.Commit(ctx, dm, layout.CommitRequest{Descriptors: []layout.Descriptor{
		{Name: "bomb.bin", Digest: gzInfo.Digest, Size: gzInfo.Size, ContentEncoding: "gzip", CreatedAt: time.Now()},
	}}); err != nil {
		t.Fatal(err)
	}

	// Hostile names, next to a healthy one, in one session.
	hn := relSession(t, bk)
	hostile := []string{"../../etc/passwd", "a/../../escape", "/abs", "a//b", ".", "..", "x/./y",
		"nul\x00byte", strings.Repeat("L", 300), "ok/" + strings.Repeat("L", 256), ".pugmark", ""}
	var hds []layout.Descriptor
	for _, n := range append(hostile, "fine.txt", "dir/nested.txt") {
		hds = append(hds, layout.Descriptor{Name: n, Digest: layout.DigestOf(small), Size: int64(len(small)), Data: small, CreatedAt: time.Now()})
	}
	if _, err := bk.Store.Commit(ctx, hn, layout.CommitRequest{Descriptors: hds}); err != nil {
		t.Fatal(err)
	}

	// Names another writer stored with bytes that are not UTF-8, beside
	// one with a real U+FFFD where encoding/json would put one for them:
	// three files, none hiding another.
	un := relSession(t, bk)
	notUTF8 := map[string]string{"caf\xe9.txt": "e9\n", "caf\xea.txt": "ea\n", "caf\uFFFD.txt": "fffd\n"}
	var ujs []string
	for n, body := range notUTF8 {
		ujs = append(ujs, fmt.Sprintf(`{"name":"%s","digest":%q,"size":%d,"data":%q,"sequence-number":%d}`,
			n, layout.DigestOf([]byte(body)).String(), len(body), base64.StdEncoding.EncodeToString([]byte(body)), len(ujs)+1))
	}
	ku, _ := layout.SnapshotKey(un, 1)
	relPutRaw(t, bk, ku, enc.EncodeAll([]byte("["+strings.Join(ujs, ",")+"]"), nil), layout.EncodingZstd, relSnapshotMeta(un, 1))

	// Refs pointing anywhere.
	for name, target := range map[string]string{
		"sessions/notakey":   "not a manifest key",
		"sessions/missing":   relManifestKey(layout.NewSessionID(time.Now())),
		"sessions/traversal": "../../etc/passwd",
		"plain":              "../../etc/passwd",
		"sessions/good":      relManifestKey(healthy),
	} {
		if err := bk.B.WriteAll(ctx, "refs/"+name, []byte(target+"\n"), nil); err != nil {
			t.Fatal(err)
		}
	}
	// A legacy fork record (fork-session-id, §7.2) must still read.
	lg := relSession(t, bk)
	child := layout.NewSessionID(time.Now())
	js = fmt.Sprintf(`[{"name":"legacy.txt","digest":%q,"size":%d,"data":"c21hbGwgYW5kIHRydWUK","sequence-number":1,"fork-session-id":%q}]`, layout.DigestOf(small).String(), len(small), child.String())
	k3, _ := layout.SnapshotKey(lg, 1)
	relPutRaw(t, bk, k3, enc.EncodeAll([]byte(js), nil), layout.EncodingZstd, map[string]string{"pugmark-transaction-id": "not-a-number", "pugmark-snapshot-type": "weird"})

	// A non-race binary, so that the peak RSS measured is the real
	// program's, not the race detector's shadow memory.
	bin := filepath.Join(t.TempDir(), "pugfs")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pugmark/pugfs/cmd/pugfs").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	mnt := startMountCmd(t, bk, t.TempDir(), func(argv []string) *exec.Cmd {
		return exec.Command(bin, argv[1:]...)
	})
	t.Cleanup(func() { mnt.Stop(t) })
	healthyReads := func(t *testing.T) {
		t.Helper()
		relCheckReads(t, mnt, healthy, good)
		if !relAlive(mnt) {
			t.Fatalf("the mount died:\n%s", mnt.Log())
		}
	}
	for _, c := range cases {
		t.Run(strings.NewReplacer(" ", "_", "(", "", ")", "").Replace(c.name), func(t *testing.T) {
			relExpectEIO(t, mnt, c.script, c.key)
			healthyReads(t)
		})
	}
	t.Run("unreadable_created-at_reads", func(t *testing.T) {
		if got := sh(t, mnt.Dir, "cat sessions/"+createdAt.String()+"/x"); got != "x" {
			t.Errorf("a file whose created-at cannot be read: %q, want x", got)
		}
	})
	t.Run("inline_data_mismatch_reads_the_blob", func(t *testing.T) {
		if got := sh(t, mnt.Dir, "cat sessions/"+dm.String()+"/inline.txt"); got != string(small) {
			t.Errorf("inline.txt = %q, want the blob's bytes", got)
		}
	})
	t.Run("gzip_blob_bomb_head", func(t *testing.T) {
		if got := sh(t, mnt.Dir, "head -c 1048576 sessions/"+dm.String()+"/bomb.bin | wc -c"); strings.TrimSpace(got) != "1048576" {
			t.Errorf("head of the bomb: %q", got)
		}
		healthyReads(t)
	})
	t.Run("hostile_names_hidden", func(t *testing.T) {
		sd := "sessions/" + hn.String()
		got := sh(t, mnt.Dir, "cd "+sd+" && find . | sort")
		if got != ".\n./dir\n./dir/nested.txt\n./fine.txt\n" {
			t.Errorf("the session shows:\n%s", got)
		}
		logj := sh(t, mnt.Dir, "cat "+sd+"/.pugmark/log.jsonl")
		if !strings.Contains(logj, `"name":"../../etc/passwd"`) || !strings.Contains(logj, `"name":"nul\u0000byte"`) {
			t.Errorf("log.jsonl lacks the hostile names:\n%s", logj)
		}
		if _, err := os.Stat(filepath.Join(mnt.Dir, sd, "..", "..", "etc")); err == nil {
			t.Error("a hostile name made a path outside the session")
		}
		if st, err := os.Stat(filepath.Join(mnt.Dir, sd, ".pugmark")); err != nil || !st.IsDir() {
			t.Errorf("a slot named .pugmark hides the .pugmark directory: %v", err)
		}
		healthyReads(t)
	})
	t.Run("names_not_utf8", func(t *testing.T) {
		sd := filepath.Join(mnt.Dir, "sessions", un.String())
		ents, err := os.ReadDir(sd)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if want := []string{"caf\xe9.txt", "caf\xea.txt", "caf\uFFFD.txt"}; !slices.Equal(names, want) {
			t.Errorf("the session lists %q, want %q", names, want)
		}
		for n, body := range notUTF8 {
			if got, err := os.ReadFile(filepath.Join(sd, n)); err != nil || string(got) != body {
				t.Errorf("%q reads %q, %v; want %q", n, got, err, body)
			}
		}
		// pugfs cannot write such a name back: refused at once, and
		// the file stays as it was.
		bad := filepath.Join(sd, "caf\xe9.txt")
		if _, err := os.OpenFile(bad, os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, syscall.EILSEQ) {
			t.Errorf("open for appending: %v, want EILSEQ", err)
		}
		if err := os.Remove(bad); !errors.Is(err, syscall.EILSEQ) {
			t.Errorf("rm: %v, want EILSEQ", err)
		}
		if err := os.Rename(bad, filepath.Join(sd, "cafe.txt")); !errors.Is(err, syscall.EILSEQ) {
			t.Errorf("mv: %v, want EILSEQ", err)
		}
		if got, err := os.ReadFile(bad); err != nil || string(got) != notUTF8["caf\xe9.txt"] {
			t.Errorf("after the refused writes %q reads %q, %v", bad, got, err)
		}
		healthyReads(t)
	})
	t.Run("refs_pointing_anywhere", func(t *testing.T) {
		relExpectEIO(t, mnt, "stat names/notakey", "notakey")
		relExpectEIO(t, mnt, "stat names/traversal", "traversal")
		if out, _, _ := run(mnt.Dir, "readlink names/traversal names/notakey"); strings.Contains(out, "etc/passwd") {
			t.Errorf("a names/ link points at %q", out)
		}
		if got := sh(t, mnt.Dir, "readlink names/missing"); !strings.HasPrefix(got, "../sessions/") {
			t.Errorf("names/missing -> %q", got)
		}
		if _, _, err := run(mnt.Dir, "ls names/missing/"); err == nil {
			t.Error("names/missing/ lists a session that does not exist")
		}
		if got := sh(t, mnt.Dir, "cat refs/plain"); got != "../../etc/passwd\n" {
			t.Errorf("refs/plain = %q (a ref's target is shown as data)", got)
		}
		sh(t, mnt.Dir, "ls -l refs refs/sessions >/dev/null")
		// ls -l names stats every entry: the bad ones fail, the good one
		// shows.
		if out, _, _ := run(mnt.Dir, "ls -l names"); !strings.Contains(out, "good -> ../sessions/"+healthy.String()) {
			t.Errorf("ls -l names:\n%s", out)
		}
		healthyReads(t)
	})
	t.Run("legacy_and_odd_metadata_read", func(t *testing.T) {
		if got := sh(t, mnt.Dir, "cat sessions/"+lg.String()+"/legacy.txt 2>/dev/null; ls sessions/"+lg.String()+"/.pugmark/forks"); !strings.Contains(got, child.String()) {
			t.Errorf("legacy fork-session-id: forks/ shows %q", got)
		}
		if got := sh(t, mnt.Dir, "cat sessions/"+lg.String()+"/.pugmark/checkpoint"); got != "1\n" {
			t.Errorf("an unknown snapshot type reads as checkpoint: %q", got)
		}
	})
	t.Run("listing_with_all_of_it", func(t *testing.T) {
		// ls -l of sessions/ stats every broken session: each may fail,
		// but the listing and the healthy ones must not.
		out, _, _ := run(mnt.Dir, "ls -l sessions")
		if !strings.Contains(out, healthy.String()) {
			t.Errorf("ls -l sessions lost the healthy session:\n%s", out)
		}
		healthyReads(t)
	})
	hwm := relVmHWM(t, relPID(mnt))
	t.Logf("pugfs peak RSS after all bad input, bombs included: %d MiB", hwm>>20)
	if hwm > 300<<20 {
		t.Errorf("peak RSS %d MiB, want < 300 MiB", hwm>>20)
	}
}

func relManifestKey(id layout.SessionID) string {
	k, err := layout.ManifestKey(id)
	if err != nil {
		panic(err)
	}
	return k
}
