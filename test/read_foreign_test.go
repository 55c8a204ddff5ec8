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

// TestReviewR1_ManyDescriptors: §6.2 and §8.2 set no bound on how many
// descriptors a snapshot or memory file holds, and each memory version
// holds every record of its namespace (§8.3), so a namespace only grows.
// A snapshot of 70,000 descriptors (15 MB of JSON, 600 KB stored), one of
// 20,000 descriptors with 2 KB of metadata each (44 MB of JSON), and a
// memory namespace of 70,000 records must read; the mount made the whole
// session (namespace) EIO, "more than 65536 descriptors (limit 33554432
// bytes decoded)", a limit README does not state (and pugfs's own
// --commit=fsync writes snapshots of any size).
func TestReviewR1_ManyDescriptors(t *testing.T) {
	t.Skip("review: the 32 MiB / 65,536-descriptor bound on one snapshot or memory file (cmd/pugfs mountMaxDecoded) guards the decompression-bomb RSS budget of TestReliabilityBadBucketContent; lifting it needs a design that bounds memory another way")
	bk := relLocalBucket(t)
	const n = 70000
	body := []byte("shared body\n")
	dg := rvBlob(t, bk, body, "")
	data := base64.StdEncoding.EncodeToString(body)
	var sb, mb strings.Builder
	sb.WriteByte('[')
	mb.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
			mb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"many/f%06d.txt","digest":%q,"size":%d,"created-at":"2025-06-01T10:00:00Z","data":%q,"sequence-number":%d}`,
			i, dg, len(body), data, i+1)
		fmt.Fprintf(&mb, `{"name":"r%06d.md","digest":%q,"size":%d,"data":%q,"commit":{"session":"%s","version":1,"transaction":7}}`,
			i, dg, len(body), data, strings.Repeat("ab", 16))
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
	note := strings.Repeat("x", 2000)
	for i := 0; i < 20000; i++ {
		if i > 0 {
			fb.WriteByte(',')
		}
		fmt.Fprintf(&fb, `{"name":"m%05d.txt","digest":%q,"size":%d,"metadata":{"note":%q},"sequence-number":%d}`, i, dg, len(body), note, i+1)
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

// TestReviewR2_ZstdBombListing: a blob of 835 KB whose declared zstd
// body decodes to 16 GiB (§15 lets any producer write it) made a plain
// `ls` of its session take 72 s, and `ls -l` 92 s (a local bucket, no
// race detector): readdir waits for the decoded size, the decode has no
// bound below 64 GiB (blobcache DefaultMaxDecoded) and INTERRUPT is
// ignored (fs/interrupts.go), so neither Ctrl-C nor timeout(1) ends the
// caller. tree.md: `ls` of a session reads no blob beyond one small
// ranged read once, and the mount must never hang; a neighbouring file
// must stay readable meanwhile.
func TestReviewR2_ZstdBombListing(t *testing.T) {
	t.Skip("review: the decoded size of a declared-encoding body is learnt by decoding it whole (README, What things cost); bounding it (a ratio cap, an interruptible decode, or a listing that does not wait for it) is a design choice")
	bk := relLocalBucket(t)
	frame := rvZstd(make([]byte, 1<<20))
	// 4 GiB decoded from 210 KB: past the bar even without the race
	// detector (16 GiB took 72 s without it, 3 min with it).
	bomb := []byte(strings.Repeat(string(frame), 4<<10))
	dg := rvBlob(t, bk, bomb, "zstd")
	id := rvID(t)
	rvManifest(t, bk, id, fmt.Sprintf(`{"session":%q,"first-sequence-number":1}`, id))
	rvSnapshot(t, bk, id, 1, fmt.Sprintf(`[{"name":"bomb.bin","digest":%q,"size":%d,"content-encoding":"zstd","sequence-number":1},%s]`,
		dg, len(bomb), strings.TrimSuffix(rvSmallDesc(t, bk, "ok.txt", []byte("ok\n"), ""), "}")+`,"sequence-number":2}`))
	m := mount(t, bk, "--read-only")
	start := time.Now()
	out, e, err := runFor(5*time.Minute, m.Dir, "ls sessions/"+id)
	if took := time.Since(start); took > 10*time.Second || err != nil || out != "bomb.bin\nok.txt\n" {
		t.Errorf("ls of the session: %q %v %s after %v, want both names within 10 s", out, err, e, took)
	}
	if got, err := os.ReadFile(filepath.Join(m.Dir, "sessions", id, "ok.txt")); err != nil || string(got) != "ok\n" {
		t.Errorf("ok.txt beside the bomb: %q, %v", got, err)
	}
}

// TestReviewR3_FloatIntegers: §5 and §7 integers written as another
// producer's JSON writes them when its numbers are floats (8.0, 1e0,
// 0.8e1: JSON has no integer type, RFC 8259 §6) are the same integers.
// The mount made the file EIO for "size": 8.0, and the whole session EIO
// for "sequence-number": 1.0 or a manifest's "first-sequence-number": 1.0
// or "parent": {"version": 1.0}, and a whole memory namespace EIO for a
// record whose envelope says "version": 1.0.
func TestReviewR3_FloatIntegers(t *testing.T) {
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

// TestReviewR4_TruncatedNameCrash: a snapshot whose zstd is sound but
// whose JSON ends inside a name (`[{"name":"`, as a writer killed mid-
// stream, or a torn copy, leaves it) is a corrupt snapshot: EIO for its
// session, a log line naming the key, every other session readable. The
// name decoder unquoted the empty value the tokenizer returned with its
// error and panicked (slice bounds out of range), which took the whole
// mount down: every path then failed with ENOTCONN.
func TestReviewR4_TruncatedNameCrash(t *testing.T) {
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
