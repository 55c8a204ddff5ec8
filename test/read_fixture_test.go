package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/internal/demo"
	"github.com/pugmark/pugfs/layout"
)

// readFixture is a bucket that uses every feature the read side of tree.md
// shows: demo.Write's sessions (history of every snapshot type, tombstones,
// gzip/zstd, a materialised and a pending fork, named sessions, a plain ref,
// nested memories, a delivered cross-session write), plus an "odd" session
// written partly raw for what the layout package refuses to write: a
// legacy fork-session-id record, corrupt inline data, a blob whose bytes do
// not match its digest, hostile names, a lost content-encoding.
type readFixture struct {
	demo demo.Summary
	// odd is the root session with the raw snapshots; oddChild the session
	// materialised from its legacy fork record; grand a fork of demo's
	// fork (a three-level parent chain).
	odd, oddChild, grand layout.SessionID
	// empty has no snapshot; prov only a provisional one: neither has a
	// checkpoint.
	empty, prov layout.SessionID
	// oddV2Txn is the transaction ID of the raw snapshot 2 of odd,
	// oddV2Len its number of descriptors.
	oddV2Txn uint64
	oddV2Len int
	// files are odd's live slot files with their decoded content.
	files map[string][]byte
	// hidden are odd's names that have no path (decisions.md).
	hidden []string
	// gz is the stored (gzip) body of odd's big/gz.txt.
	gz []byte
	gzDigest,
	// bad is the digest whose object's bytes do not match it.
	bad layout.Digest
	// times: created-at of odd's snapshots 1 and 2.
	t1, t2 time.Time
	// logLines is the number of lines odd's log.jsonl must have.
	oddLogLines int
}

// Pinned times: created-at values the tree must show as mtimes.
var (
	fixT1 = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	fixT2 = time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)
	fixTF = time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC)
)

func rdGzip(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func rdZstd(b []byte) []byte {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// fixLines makes n distinct, deterministic lines: compressible, but not to
// nothing, so encoded bodies stay above the inline limit.
func fixLines(prefix string, n int) []byte {
	var b bytes.Buffer
	x := uint32(2166136261)
	for i := 0; i < n; i++ {
		x = x*16777619 ^ uint32(i)
		fmt.Fprintf(&b, "%s %06d %08x the quick brown fox\n", prefix, i, x)
	}
	return b.Bytes()
}

// rdFixtureErr carries a failure of get or get2 to rdCatch.
type rdFixtureErr struct{ err error }

// rdGet returns v, or panics with err for rdCatch to report.
func rdGet[T any](v T, err error) T {
	if err != nil {
		panic(rdFixtureErr{err})
	}
	return v
}

// rdGet2 is rdGet for functions with two results before the error.
func rdGet2[T, U any](v T, _ U, err error) T {
	if err != nil {
		panic(rdFixtureErr{err})
	}
	return v
}

// rdCatch turns a get panic into a test failure; defer it.
func rdCatch(t *testing.T) {
	if r := recover(); r != nil {
		fe, ok := r.(rdFixtureErr)
		if !ok {
			panic(r)
		}
		t.Fatalf("building the bucket: %v", fe.err)
	}
}

// buildReadFixture writes the fixture into bk.
func buildReadFixture(t *testing.T, bk *Bucket) *readFixture {
	t.Helper()
	defer rdCatch(t)
	ctx := context.Background()
	s := bk.Store
	fx := &readFixture{files: map[string][]byte{}, t1: fixT1, t2: fixT2}
	fx.demo = rdGet(demo.Write(ctx, s))

	// A third level: a fork of demo's (materialised) fork.
	gd := rdPutDesc(t, s, "notes/grandchild.md", "text/markdown", "", []byte("three levels down\n"), time.Time{})
	fx.grand = rdGet(s.Fork(ctx, fx.demo.Fork.ID, layout.ForkRequest{Descriptor: gd}))

	// odd, snapshot 1 (checkpoint, through the layout package).
	om := s.NewRootManifest()
	om.Agent = "odd-agent"
	odd := rdGet2(s.CreateNamedSession(ctx, "odd", om))
	fx.odd = odd.Session
	var v1 []layout.Descriptor
	add := func(name, ctype, enc string, stored, decoded []byte) layout.Descriptor {
		d := rdPutDesc(t, s, name, ctype, enc, stored, fixT1)
		v1 = append(v1, d)
		if decoded != nil {
			fx.files[name] = decoded
		}
		return d
	}
	add("plain.txt", "text/plain; charset=utf-8", "", []byte("plain inline text\n"), []byte("plain inline text\n"))
	gzBody := fixLines("gz", 6000)
	fx.gz = rdGzip(gzBody)
	fx.gzDigest = add("big/gz.txt", "text/plain; charset=utf-8", layout.EncodingGzip, fx.gz, gzBody).Digest
	zsBody := []byte("[" + strings.TrimSuffix(strings.ReplaceAll(string(fixLines(`"zs`, 4000)), "\n", "\",\n"), ",\n") + "]\n")
	add("big/zs.json", "application/json", layout.EncodingZstd, rdZstd(zsBody), zsBody)
	lost := []byte(`{"lost": "encoding", "lines": ` + strconv.Quote(string(fixLines("lost", 200))) + "}\n")
	add("enc/lost.json", "application/json", "", rdGzip(lost), lost)
	arch := rdGzip(fixLines("archive", 300))
	add("enc/archive.gz", "application/gzip", "", arch, arch)
	m := add("meta.txt", "text/plain", "", []byte("with metadata\n"), []byte("with metadata\n"))
	v1[len(v1)-1].Metadata = map[string]string{"owner": "bob", "Mixed.Case-key": "v a l"}
	v1[len(v1)-1].SchemaURL = "https://example.com/schema/meta.json"
	_ = m
	add("doomed.txt", "text/plain", "", []byte("to be deleted\n"), nil)
	// Empty bodies, stored and decoded.
	add("empty.txt", "text/plain", "", []byte{}, []byte{})
	add("enc/empty.txt", "text/plain", layout.EncodingGzip, rdGzip(nil), []byte{})
	add("enc/empty.json", "application/json", layout.EncodingZstd, rdZstd(nil), []byte{})
	// Names with a path, some of them awkward.
	for _, n := range []string{"with space.txt", "new\nline.txt", "ünïcødé/日本語.txt", "tab\there", "a", strings.Repeat("n", 255),
		"deep/er/and/deeper/leaf.txt"} {
		add(n, "text/plain", "", []byte("name "+strconv.Quote(n)+"\n"), []byte("name "+strconv.Quote(n)+"\n"))
	}
	// A directory of many small files (readdirplus).
	for i := 0; i < 40; i++ {
		n := fmt.Sprintf("many/file-%02d.txt", i)
		add(n, "text/plain", "", []byte(n+"\n"), []byte(n+"\n"))
	}
	// Names without a path: they stay in the log only.
	fx.hidden = []string{"../escape", "a/../b", "", "nul\x00byte", strings.Repeat("x", 300), "long/" + strings.Repeat("y", 256),
		"./dot", "a//b", "/abs", "trailing/", "a/b", ".", "..",
		// The live root's .pugmark/ is the session's metadata; history
		// shows the slot.
		".pugmark/evil.txt"}
	for _, n := range fx.hidden {
		add(n, "text/plain", "", []byte("hidden "+strconv.Quote(n)+"\n"), nil)
	}
	r1 := rdGet(s.Commit(ctx, fx.odd, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: v1}))

	// odd, snapshot 2 (provisional), written raw.
	seq := r1.LastSeq()
	next := func() int64 { seq++; return seq }
	var raw []json.RawMessage
	addRaw := func(d layout.Descriptor) {
		d.SequenceNumber = next()
		raw = append(raw, rdGet(json.Marshal(d)))
	}
	// Inline data that does not match the digest (same length).
	real := []byte("the real bytes of corrupt-inline.txt\n")
	ci := rdPutDesc(t, s, "corrupt-inline.txt", "text/plain", "", real, fixT2)
	ci.Data = bytes.ToUpper(real)
	addRaw(ci)
	fx.files["corrupt-inline.txt"] = real
	// Objects whose bytes do not match their digest: one sniffable (text),
	// one binary (its size needs no fetch).
	fx.bad = layout.DigestOf([]byte("what the digest promised\n"))
	wrong := []byte("these bytes do not match their digest\n")
	if err := s.Bucket().WriteAll(ctx, layout.BlobKey(fx.bad), wrong, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		t.Fatal(err)
	}
	addRaw(layout.Descriptor{Digest: fx.bad, Size: int64(len(wrong)), CreatedAt: fixT2, ContentType: "application/octet-stream", Name: "bad/mismatch.bin"})
	addRaw(layout.Descriptor{Digest: fx.bad, Size: int64(len(wrong)), CreatedAt: fixT2, ContentType: "text/plain", Name: "bad/mismatch.txt"})
	ok := rdPutDesc(t, s, "bad/fine.txt", "text/plain", "", []byte("my neighbour is corrupt\n"), fixT2)
	addRaw(ok)
	fx.files["bad/fine.txt"] = []byte("my neighbour is corrupt\n")
	// A tombstone.
	addRaw(layout.Descriptor{Name: "doomed.txt", Deleted: true, CreatedAt: fixT2})
	// A legacy fork record (§7.2), raw JSON.
	fx.oddChild = layout.NewSessionID(time.Now())
	fd := rdPutDesc(t, s, "forked.md", "text/markdown", "", []byte("legacy fork body\n"), fixTF)
	js := rdGet(json.Marshal(fd))
	js = append(js[:len(js)-1], []byte(fmt.Sprintf(`,"sequence-number":%d,"fork-session-id":%q}`, next(), strings.ToUpper(fx.oddChild.String())))...)
	raw = append(raw, js)
	// A cross-session write record to demo's inbox, never delivered: it
	// stays in odd's log and occupies no slot.
	cs := rdPutDesc(t, s, "outbox/to-inbox.md", "text/markdown", "", []byte("for the inbox\n"), fixT2)
	cs.TargetSession = fx.demo.Inbox.ID
	addRaw(cs)
	fx.oddV2Txn, fx.oddV2Len = 4242424242, len(raw)
	rdPutRawSnapshot(t, s.Bucket(), fx.odd, 2, "provisional", fx.oddV2Txn, raw)
	// Phase 2 of the legacy fork.
	pf := rdGet(s.PendingForks(ctx, fx.odd, 2))
	if len(pf) != 1 || pf[0].Descriptor.TargetSession != fx.oddChild {
		t.Fatalf("pending forks of odd@2: %+v", pf)
	}
	rdGet(s.MaterializeFork(ctx, pf[0]))

	// odd, snapshot 3: empty (no content append; the session's mtime
	// must not move).
	rdGet(s.Commit(ctx, fx.odd, layout.CommitRequest{Type: layout.Checkpoint}))
	fx.oddLogLines = len(v1) + len(raw)

	// Sessions without a checkpoint.
	fx.empty = rdGet2(s.CreateSession(ctx, s.NewRootManifest())).Session
	fx.prov = rdGet2(s.CreateSession(ctx, s.NewRootManifest())).Session
	pd := rdPutDesc(t, s, "input.txt", "text/plain", "", []byte("provisional input\n"), time.Now().UTC())
	rdGet(s.Commit(ctx, fx.prov, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{pd}}))

	// Memories beyond demo's: a parent namespace of team/notes and a
	// deeper one (longest-prefix rule, §8.5).
	rdMemPut(t, s, "team", "roster.md", "alice, bob\n")
	rdMemPut(t, s, "team/notes/archive", "2025.md", "old notes\n")
	return fx
}

// rdPutDesc stores stored as a blob and returns its descriptor; inline
// data is set when the stored body is at most 1024 bytes.
func rdPutDesc(t *testing.T, s *layout.Store, name, ctype, enc string, stored []byte, at time.Time) layout.Descriptor {
	t.Helper()
	bi := rdGet(s.PutBlobBytes(context.Background(), stored, layout.BlobOptions{ContentType: ctype, ContentEncoding: enc}))
	d := layout.Descriptor{Digest: bi.Digest, Size: bi.Size, CreatedAt: at, ContentType: ctype, ContentEncoding: enc, Name: name}
	if len(stored) <= layout.InlineLimit {
		d.Data = stored
	}
	return d
}

// rdPutRawSnapshot writes a snapshot body of raw descriptor objects with the
// §6.2 metadata, as another implementation might.
func rdPutRawSnapshot(t *testing.T, b *blob.Bucket, id layout.SessionID, v uint32, typ string, txn uint64, ds []json.RawMessage) {
	t.Helper()
	key := rdGet(layout.SnapshotKey(id, v))
	js := rdGet(json.Marshal(ds))
	err := b.WriteAll(context.Background(), key, rdZstd(js), &blob.WriterOptions{
		IfNotExist:      true,
		ContentType:     "application/json",
		ContentEncoding: "zstd",
		CacheControl:    "max-age=31536000, immutable",
		Metadata: map[string]string{
			layout.MetaSnapshotSession: id.String(),
			layout.MetaSnapshotVersion: strconv.FormatUint(uint64(v), 10),
			layout.MetaTransactionID:   strconv.FormatUint(txn, 10),
			layout.MetaSnapshotType:    typ,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func rdMemPut(t *testing.T, s *layout.Store, ns, name, body string) {
	t.Helper()
	d := rdPutDesc(t, s, name, "text/markdown", "", []byte(body), fixT1)
	if _, err := s.WriteMemory(context.Background(), ns, layout.MemoryWrite{Put: []layout.Descriptor{d}}); err != nil {
		t.Fatal(err)
	}
}
