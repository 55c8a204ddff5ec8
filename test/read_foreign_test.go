package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/blob"
)

// Buckets written as another producer following storage-layout.txt would
// write them: keys, JSON and encodings built here from the spec, not by
// the layout package's writers, so that none of its habits are shared.

// rvID is a fresh session ID (§4.1): the hour counter, then 12 random
// bytes, as 32 lowercase hex.
func rvID(t *testing.T) string {
	t.Helper()
	var id [16]byte
	binary.BigEndian.PutUint32(id[:4], uint32(time.Now().Unix()/3600))
	if _, err := rand.Read(id[4:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(id[:])
}

// rvSessionDir is the session's storage directory (§4.2).
func rvSessionDir(id string) string {
	hour, _ := strconv.ParseUint(id[:8], 16, 32)
	at := time.Unix(int64(hour)*3600, 0).UTC()
	return fmt.Sprintf("sessions/year=%04d/month=%02d/day=%02d/hour=%02d/%s",
		at.Year(), at.Month(), at.Day(), at.Hour(), strings.ToUpper(id[8:]))
}

// rvVersionFile is the reverse-hex file name of version v (§6.1).
func rvVersionFile(v uint32) string { return fmt.Sprintf("%08X.json", ^(v - 1)) }

// rvPut stores body at key with the §2.3 metadata.
func rvPut(t *testing.T, bk *Bucket, key string, body []byte, ctype, enc string, md map[string]string) {
	t.Helper()
	if err := bk.B.WriteAll(context.Background(), key, body, &blob.WriterOptions{
		ContentType: ctype, ContentEncoding: enc, CacheControl: "max-age=31536000, immutable", Metadata: md,
	}); err != nil {
		t.Fatal(err)
	}
}

// rvZstd compresses b as one zstd frame.
func rvZstd(b []byte) []byte {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// rvBlob stores body at its content address (§3) and returns the digest.
func rvBlob(t *testing.T, bk *Bucket, body []byte, enc string) string {
	t.Helper()
	sum := sha256.Sum256(body)
	dg := "sha256:" + hex.EncodeToString(sum[:])
	rvPut(t, bk, "objects/"+dg, body, "application/octet-stream", enc, nil)
	return dg
}

// rvManifest writes a manifest body (§5) for id.
func rvManifest(t *testing.T, bk *Bucket, id, js string) {
	t.Helper()
	rvPut(t, bk, rvSessionDir(id)+"/manifest.json", []byte(js), "application/json", "", nil)
}

// rvSnapshot writes snapshot v of id: a JSON array, zstd at rest (§6.2).
func rvSnapshot(t *testing.T, bk *Bucket, id string, v uint32, js string) {
	t.Helper()
	rvPut(t, bk, rvSessionDir(id)+"/snapshots/"+rvVersionFile(v), rvZstd([]byte(js)), "application/json", "zstd", map[string]string{
		"pugmark-snapshot-session": id, "pugmark-snapshot-version": strconv.FormatUint(uint64(v), 10),
		"pugmark-transaction-id": "77", "pugmark-snapshot-type": "checkpoint",
	})
}

// rvSmallDesc is the JSON of a descriptor of a small blob, inline data
// included (§7.1), with extra members (already JSON) appended.
func rvSmallDesc(t *testing.T, bk *Bucket, name string, body []byte, extra string) string {
	t.Helper()
	dg := rvBlob(t, bk, body, "")
	js := fmt.Sprintf(`{"name":%q,"digest":%q,"size":%d,"created-at":"2025-06-01T10:00:00Z","data":%q`,
		name, dg, len(body), base64.StdEncoding.EncodeToString(body))
	if extra != "" {
		js += "," + extra
	}
	return js + "}"
}

// TestReadLargeSnapshots: §6.2 and §8.2 set no bound on how many
// descriptors a snapshot or memory file holds, and each memory version
// holds every record of its namespace (§8.3), so a namespace only grows.
// A snapshot of 70,000 descriptors, one of 20,000 descriptors with 2 KB
// of metadata each (44 MB of JSON), and a memory namespace of 70,000
// records read; the mount made the whole session (namespace) EIO, "more
// than 65536 descriptors (limit 33554432 bytes decoded)", which pugfs's
// own commit of 70,000 files (one fsync, one pugfs exec run) wrote too.
// Each descriptor names a blob of its own (the one read is stored), as a
// real producer's do: a bomb of identical descriptors is refused
// (layout.TestDecodeBound).
func TestReadLargeSnapshots(t *testing.T) {
	bk := relLocalBucket(t)
	const n = 70000
	body := []byte("shared body\n")
	last := rvBlob(t, bk, body, "")
	digest := func(i int) string {
		if i == n-1 {
			return last
		}
		return fmt.Sprintf("sha256:%x", sha256.Sum256(fmt.Appendf(nil, "file %d", i)))
	}
	var sb, mb strings.Builder
	sb.WriteByte('[')
	mb.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
			mb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"many/f%06d.txt","digest":%q,"size":%d,"created-at":"2025-06-01T10:00:00Z","sequence-number":%d}`,
			i, digest(i), len(body), i+1)
		fmt.Fprintf(&mb, `{"name":"r%06d.md","digest":%q,"size":%d,"commit":{"session":"%s","version":1,"transaction":7}}`,
			i, digest(i), len(body), strings.Repeat("ab", 16))
	}
	sb.WriteByte(']')
	mb.WriteByte(']')
	many := rvID(t)
	rvManifest(t, bk, many, fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, many))
	rvSnapshot(t, bk, many, 1, sb.String())
	rvPut(t, bk, "memories/big/"+rvVersionFile(1), rvZstd([]byte(mb.String())), "application/json", "zstd",
		map[string]string{"pugmark-transaction-id": "7"})
	fat := rvID(t)
	rvManifest(t, bk, fat, fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, fat))
	var fb strings.Builder
	fb.WriteByte('[')
	note := make([]byte, 1000)
	for i := 0; i < 20000; i++ {
		if i > 0 {
			fb.WriteByte(',')
		}
		rand.Read(note)
		fmt.Fprintf(&fb, `{"name":"m%05d.txt","digest":%q,"size":%d,"metadata":{"note":%q},"sequence-number":%d}`,
			i, digest(i), len(body), hex.EncodeToString(note), i+1)
	}
	fb.WriteByte(']')
	rvSnapshot(t, bk, fat, 1, fb.String())

	m := mount(t, bk, "--read-only")
	for _, c := range []struct{ script, want string }{
		{"ls sessions/" + many + "/many | wc -l", "70000"},
		{"cat sessions/" + many + "/many/f069999.txt", string(body)},
		{"ls memories/big | wc -l", "70000"},
		{"ls sessions/" + fat + " | wc -l", "20000"},
	} {
		out, e, err := run(m.Dir, c.script)
		if err != nil || strings.TrimSpace(out) != strings.TrimSpace(c.want) {
			t.Errorf("%s: %q %v %s, want %q", c.script, out, err, e, c.want)
		}
	}
}

// TestReadDecompressionBombRefused: a declared zstd body of 210 KB that
// decodes to 4 GiB (§15 lets any producer write it) is refused as a
// bomb (EIO, the log naming its key) once it decodes past 1,024 times
// what it stores, and its session's other files stay readable. Its size
// is learnt by decoding it, for the stat of a plain `ls` too (READDIRPLUS):
// that held the listing for 35 s here (16 GiB: 72 s), and the caller could
// not stop it.
func TestReadDecompressionBombRefused(t *testing.T) {
	bk := relLocalBucket(t)
	frame := rvZstd(make([]byte, 1<<20))
	bomb := []byte(strings.Repeat(string(frame), 4<<10))
	dg := rvBlob(t, bk, bomb, "zstd")
	id := rvID(t)
	rvManifest(t, bk, id, fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, id))
	rvSnapshot(t, bk, id, 1, fmt.Sprintf(`[{"name":"bomb.bin","digest":%q,"size":%d,"content-encoding":"zstd","sequence-number":1},%s]`,
		dg, len(bomb), strings.TrimSuffix(rvSmallDesc(t, bk, "ok.txt", []byte("ok\n"), ""), "}")+`,"sequence-number":2}`))
	m := mount(t, bk, "--read-only")
	out, e, err := runFor(5*time.Minute, m.Dir, "ls sessions/"+id)
	if err != nil || out != "bomb.bin\nok.txt\n" {
		t.Errorf("ls of the session: %q %v %s, want both names", out, err, e)
	}
	relExpectEIO(t, m, "stat sessions/"+id+"/bomb.bin", "objects/"+dg)
	if !strings.Contains(m.Log(), "decodes past") {
		t.Errorf("the log does not say the body decodes past its bound:\n%s", logTail(m.Log(), 10))
	}
	if got, err := os.ReadFile(filepath.Join(m.Dir, "sessions", id, "ok.txt")); err != nil || string(got) != "ok\n" {
		t.Errorf("ok.txt beside the bomb: %q, %v", got, err)
	}
}

// TestReadWholeNumbersWrittenAsFloats: §5 and §7 integers written as another
// producer's JSON writes them when its numbers are floats (8.0, 1e0,
// 0.8e1: JSON has no integer type, RFC 8259 §6) are the same integers.
// The mount made the file EIO for "size": 8.0, and the whole session EIO
// for "sequence-number": 1.0 or a manifest's "first-sequence-number": 1.0
// or "parent": {"version": 1.0}, and a whole memory namespace EIO for a
// record whose envelope says "version": 1.0.
func TestReadWholeNumbersWrittenAsFloats(t *testing.T) {
	bk := relLocalBucket(t)
	body := []byte("numbers\n")
	dg := rvBlob(t, bk, body, "")
	desc := func(size, seq string) string {
		return fmt.Sprintf(`[{"name":"n.txt","digest":%q,"size":%s,"created-at":"2025-06-01T10:00:00Z","data":%q,"sequence-number":%s}]`,
			dg, size, base64.StdEncoding.EncodeToString(body), seq)
	}
	session := func(manifest func(id string) string, snapshot string) string {
		id := rvID(t)
		rvManifest(t, bk, id, manifest(id))
		rvSnapshot(t, bk, id, 1, snapshot)
		return id
	}
	plain := func(id string) string { return fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, id) }
	root := session(plain, desc("8", "1"))
	cases := map[string]string{
		"size 8.0":                  session(plain, desc("8.0", "1")),
		"size 0.8e1":                session(plain, desc("0.8e1", "1")),
		"sequence-number 1.0":       session(plain, desc("8", "1.0")),
		"sequence-number 1e0":       session(plain, desc("8", "1e0")),
		"first-sequence-number 1.0": session(func(id string) string { return fmt.Sprintf(`{"session":%q,"first-sequence-number":1.0}`, id) }, desc("8", "1")),
		"parent version 1.0": session(func(id string) string {
			return fmt.Sprintf(`{"session":%q,"parent":{"session":%q,"version":1.0},"first-sequence-number":2}`, id, root)
		}, "[]"),
	}
	// A memory record rewritten by a merge whose numbers are doubles.
	rvPut(t, bk, "memories/floats/"+rvVersionFile(1), rvZstd([]byte(fmt.Sprintf(
		`[{"name":"n.md","digest":%q,"size":8.0,"data":%q,"commit":{"session":%q,"version":1.0,"transaction":1.2345678901234567e+19}}]`,
		dg, base64.StdEncoding.EncodeToString(body), root))), "application/json", "zstd", map[string]string{"pugmark-transaction-id": "7"})
	m := mount(t, bk, "--read-only")
	if got, err := os.ReadFile(filepath.Join(m.Dir, "memories", "floats", "n.md")); err != nil || string(got) != string(body) {
		t.Errorf("memory record with a float envelope: %q, %v", got, err)
	}
	for name, id := range cases {
		if got, err := os.ReadFile(filepath.Join(m.Dir, "sessions", id, "n.txt")); err != nil || string(got) != string(body) {
			t.Errorf("%s: n.txt reads %q, %v; want %q", name, got, err, body)
		}
	}
	if got, err := os.ReadFile(filepath.Join(m.Dir, "sessions", cases["sequence-number 1.0"], ".pugmark", "seq", "1")); err != nil || string(got) != string(body) {
		t.Errorf("seq/1 of the session numbered 1.0: %q, %v", got, err)
	}
	if got, err := os.Readlink(filepath.Join(m.Dir, "sessions", cases["parent version 1.0"], ".pugmark", "parent")); err != nil || !strings.HasSuffix(got, root+"/.pugmark/at/1") {
		t.Errorf("parent of the fork at version 1.0: %q, %v", got, err)
	}
}

// TestReadSnapshotTornInAName: a snapshot whose zstd is sound but
// whose JSON ends inside a name (`[{"name":"`, as a writer killed mid-
// stream, or a torn copy, leaves it) is a corrupt snapshot: EIO for its
// session, a log line naming the key, every other session readable. The
// name decoder unquoted the empty value the tokenizer returned with its
// error and panicked (slice bounds out of range), which took the whole
// mount down: every path then failed with ENOTCONN.
func TestReadSnapshotTornInAName(t *testing.T) {
	bk := relLocalBucket(t)
	healthy := rvID(t)
	rvManifest(t, bk, healthy, fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, healthy))
	rvSnapshot(t, bk, healthy, 1, "["+strings.TrimSuffix(rvSmallDesc(t, bk, "fine.txt", []byte("fine\n"), ""), "}")+`,"sequence-number":1}]`)
	var broken []string
	for _, js := range []string{`[{"name":"`, `[{"name":"abc`, `[{"name":"a\u00`, `[{"name":`} {
		id := rvID(t)
		rvManifest(t, bk, id, fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, id))
		rvSnapshot(t, bk, id, 1, js)
		broken = append(broken, id)
	}
	m := mount(t, bk, "--read-only")
	for _, id := range broken {
		relExpectEIO(t, m, "ls sessions/"+id, rvSessionDir(id)+"/snapshots/"+rvVersionFile(1))
		if got, err := os.ReadFile(filepath.Join(m.Dir, "sessions", healthy, "fine.txt")); err != nil || string(got) != "fine\n" {
			t.Fatalf("after ls of %s, the healthy session reads %q, %v", id, got, err)
		}
	}
	if !relAlive(m) {
		t.Fatalf("the mount died:\n%s", logTail(m.Log(), 20))
	}
}
