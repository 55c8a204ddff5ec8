package fsck_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/internal/demo"
	"github.com/pugmark/pugfs/internal/fsck"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"github.com/pugmark/pugfs/layout/localblob"
)

// fixture is a small valid bucket written through layout: a named root
// session with three versions (a provisional one, a tombstone), a
// materialised fork, a memory namespace with two versions and a plain ref.
// Each test plants exactly one corruption in a fresh fixture.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	b     *blob.Bucket
	s     *layout.Store
	root  layout.SessionID
	child layout.SessionID
	small layout.Descriptor // a.txt at v1, inline
	big   layout.Descriptor // big.bin at v1, 2000 bytes, not inline
	bigB  []byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, memblob.OpenBucket(nil))
}

func newFixtureOn(t *testing.T, b *blob.Bucket) *fixture {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() { b.Close() })
	f := &fixture{t: t, ctx: ctx, b: b, s: layout.New(b, nil)}
	m, _, err := f.s.CreateNamedSession(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.root = m.Session
	f.small = f.desc("a.txt", []byte("hello\n"))
	f.bigB = bytes.Repeat([]byte("0123456789"), 200)
	f.big = f.desc("big.bin", f.bigB)
	f.commit(layout.Checkpoint, f.small, f.big, f.desc("dir/b.txt", []byte("b\n")))
	f.commit(layout.Provisional, f.desc("a.txt", []byte("hello again\n")))
	f.commit(layout.Checkpoint, layout.Descriptor{Name: "dir/b.txt", Deleted: true})
	f.child, err = f.s.Fork(ctx, f.root, layout.ForkRequest{Descriptor: f.desc("fork.md", []byte("forked\n"))})
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{"one\n", "two\n"} {
		d := f.desc(fmt.Sprintf("note%d.md", i), []byte(body))
		if _, err := f.s.WriteMemory(ctx, "team/notes", layout.MemoryWrite{Put: []layout.Descriptor{d}, Commit: layout.MemoryCommit{Session: f.root, Version: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.s.Link(ctx, "plain", "hello"); err != nil {
		t.Fatal(err)
	}
	return f
}

// desc stores body and returns its descriptor, inline when small, as
// pugfs writers do.
func (f *fixture) desc(name string, body []byte) layout.Descriptor {
	f.t.Helper()
	bi, err := f.s.PutBlobBytes(f.ctx, body, layout.BlobOptions{ContentType: "text/plain"})
	if err != nil {
		f.t.Fatal(err)
	}
	d := layout.Descriptor{Digest: bi.Digest, Size: bi.Size, Name: name}
	if len(body) <= layout.InlineLimit {
		d.Data = body
	}
	return d
}

func (f *fixture) commit(t layout.SnapshotType, ds ...layout.Descriptor) layout.CommitResult {
	f.t.Helper()
	res, err := f.s.Commit(f.ctx, f.root, layout.CommitRequest{Type: t, Descriptors: ds})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) put(key string, body []byte, wo *blob.WriterOptions) {
	f.t.Helper()
	if err := f.b.WriteAll(f.ctx, key, body, wo); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) del(key string) {
	f.t.Helper()
	if err := f.b.Delete(f.ctx, key); err != nil {
		f.t.Fatal(err)
	}
}

func snapKey(id layout.SessionID, v uint32) string {
	k, _ := layout.SnapshotKey(id, v)
	return k
}

func manifestKey(id layout.SessionID) string {
	k, _ := layout.ManifestKey(id)
	return k
}

// snapMeta is the metadata a correct writer puts on snapshot v of id.
func snapMeta(id layout.SessionID, v uint32, typ string) map[string]string {
	return map[string]string{
		layout.MetaSnapshotSession: id.String(),
		layout.MetaSnapshotVersion: strconv.Itoa(int(v)),
		layout.MetaTransactionID:   "12345",
		layout.MetaSnapshotType:    typ,
	}
}

// plantSnapshot overwrites (or creates) snapshot v with body and
// metadata md, headers otherwise correct.
func (f *fixture) plantSnapshot(id layout.SessionID, v uint32, body []byte, md map[string]string) {
	f.t.Helper()
	f.put(snapKey(id, v), body, &blob.WriterOptions{
		ContentType: "application/json", ContentEncoding: "zstd",
		CacheControl: layout.CacheImmutable, Metadata: md,
	})
}

// rewrite replaces snapshot v of id with the descriptors mutate returns.
func (f *fixture) rewrite(id layout.SessionID, v uint32, mutate func([]layout.Descriptor) []layout.Descriptor) {
	f.t.Helper()
	ds, err := f.s.ReadSnapshot(f.ctx, id, v)
	if err != nil {
		f.t.Fatal(err)
	}
	body, err := layout.EncodeDescriptors(mutate(ds))
	if err != nil {
		f.t.Fatal(err)
	}
	f.plantSnapshot(id, v, body, snapMeta(id, v, "checkpoint"))
}

func (f *fixture) putManifest(m *layout.Manifest, at layout.SessionID) {
	f.t.Helper()
	body, err := json.Marshal(m)
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(manifestKey(at), body, &blob.WriterOptions{ContentType: "application/json", CacheControl: layout.CacheImmutable})
}

func (f *fixture) putMemory(ns string, v uint32, ds []layout.Descriptor) {
	f.t.Helper()
	body, err := layout.EncodeDescriptors(ds)
	if err != nil {
		f.t.Fatal(err)
	}
	key, _ := layout.MemoryKey(ns, v)
	f.put(key, body, &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd",
		CacheControl: layout.CacheImmutable, Metadata: map[string]string{layout.MetaTransactionID: "7"}})
}

func (f *fixture) putRef(name, body string) {
	f.t.Helper()
	f.put(layout.RefsPrefix+name, []byte(body), &blob.WriterOptions{ContentType: "text/plain; charset=utf-8", CacheControl: layout.CacheNoCache})
}

func (f *fixture) check(opts fsck.Options) *fsck.Report {
	f.t.Helper()
	rep, err := fsck.Check(f.ctx, f.s, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return rep
}

// want asserts the report has a finding of rule at severity sev whose key
// and message contain the given substrings, and returns it.
func want(t *testing.T, rep *fsck.Report, sev fsck.Severity, rule, key, msg string) fsck.Finding {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Severity == sev && f.Rule == rule && strings.Contains(f.Key, key) && strings.Contains(f.Message, msg) {
			return f
		}
	}
	var lines []string
	for _, f := range rep.Findings {
		lines = append(lines, f.String())
	}
	t.Fatalf("no %s %s finding on %q with %q; findings:\n%s", sev, rule, key, msg, strings.Join(lines, "\n"))
	return fsck.Finding{}
}

func zstdOf(b []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

func TestCleanBucketHasNoFindings(t *testing.T) {
	f := newFixture(t)
	rep := f.check(fsck.Options{})
	for _, fd := range rep.Findings {
		t.Errorf("unexpected finding: %s", fd)
	}
	if rep.Stats.Sessions != 2 || rep.Stats.Snapshots != 5 || rep.Stats.MemoryFiles != 2 || rep.Stats.Refs != 2 || rep.Stats.BlobsRead == 0 {
		t.Errorf("stats %+v", rep.Stats)
	}
}

func TestKeyShapes(t *testing.T) {
	tail := "0123456789ABCDEF01234567"
	cases := []struct {
		name, key, rule string
	}{
		{"month out of range", "sessions/year=2026/month=13/day=01/hour=00/" + tail + "/manifest.json", "§4.2"},
		{"hour out of range", "sessions/year=2026/month=01/day=01/hour=24/" + tail + "/manifest.json", "§4.2"},
		{"no such date", "sessions/year=2026/month=02/day=30/hour=00/" + tail + "/manifest.json", "§4.2"},
		{"lowercase tail", "sessions/year=2026/month=01/day=01/hour=00/" + strings.ToLower(tail) + "/manifest.json", "§4.2"},
		{"short tail", "sessions/year=2026/month=01/day=01/hour=00/ABC/manifest.json", "§4.2"},
		{"unpadded year", "sessions/year=26/month=01/day=01/hour=00/" + tail + "/manifest.json", "§4.2"},
		{"lowercase reverse hex", "sessions/year=2026/month=01/day=01/hour=00/" + tail + "/snapshots/fffffffe.json", "§6.1"},
		{"version 2^32", "sessions/year=2026/month=01/day=01/hour=00/" + tail + "/snapshots/00000000.json", "§6.1"},
		{"short reverse hex", "sessions/year=2026/month=01/day=01/hour=00/" + tail + "/snapshots/FFFF.json", "§6.1"},
		{"stray file in session", "sessions/year=2026/month=01/day=01/hour=00/" + tail + "/notes.txt", "§4.3"},
		{"nested under snapshots", "sessions/year=2026/month=01/day=01/hour=00/" + tail + "/snapshots/x/FFFFFFFF.json", "§4.3"},
		{"uppercase blob digest", "objects/sha256:" + strings.Repeat("AB", 32), "§3"},
		{"other algorithm", "objects/md5:" + strings.Repeat("ab", 16), "§3"},
		{"zero digest blob", "objects/sha256:" + strings.Repeat("0", 64), "§3"},
		{"memory without version file", "memories/team/notes/latest.json", "§8.1"},
		{"memory namespace with ..", "memories/team/../FFFFFFFF.json", "§8.1"},
		{"memory at top level", "memories/FFFFFFFF.json", "§8.1"},
		{"ref too deep", "refs/a/b/c", "§9"},
		{"ref with empty part", "refs/sessions//x", "§9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.put(tc.key, []byte("x"), nil)
			rep := f.check(fsck.Options{})
			want(t, rep, fsck.Error, tc.rule, tc.key, "")
		})
	}
}

func TestSnapshotVersionGap(t *testing.T) {
	f := newFixture(t)
	f.del(snapKey(f.root, 2))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§6.1", "snapshots/", "version 2 is missing")
}

func TestSnapshotsWithoutManifest(t *testing.T) {
	f := newFixture(t)
	f.del(manifestKey(f.child))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§5", manifestKey(f.child), "no manifest")
}

func TestSnapshotNotZstd(t *testing.T) {
	f := newFixture(t)
	f.plantSnapshot(f.root, 3, []byte(`[{"name":"dir/b.txt","deleted":true,"sequence-number":5}]`), snapMeta(f.root, 3, "checkpoint"))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§6.2", snapKey(f.root, 3), "not zstd")
}

func TestSnapshotNotJSONArray(t *testing.T) {
	for name, body := range map[string]string{"text": "hello", "object": `{"a":1}`, "null": "null"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.plantSnapshot(f.root, 3, zstdOf([]byte(body)), snapMeta(f.root, 3, "checkpoint"))
			rep := f.check(fsck.Options{})
			want(t, rep, fsck.Error, "§6.2", snapKey(f.root, 3), "")
		})
	}
}

func TestSnapshotBadZstd(t *testing.T) {
	f := newFixture(t)
	body := zstdOf([]byte(`[]`))
	f.plantSnapshot(f.root, 3, body[:len(body)-2], snapMeta(f.root, 3, "checkpoint"))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§6.2", snapKey(f.root, 3), "does not decode")
}

func TestSnapshotMetadata(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(md map[string]string)
		sev    fsck.Severity
		rule   string
		substr string
	}{
		{"missing type", func(md map[string]string) { delete(md, layout.MetaSnapshotType) }, fsck.Warning, "§6.2", "legacy"},
		{"bad type", func(md map[string]string) { md[layout.MetaSnapshotType] = "draft" }, fsck.Error, "§6.2", "draft"},
		{"txn zero", func(md map[string]string) { md[layout.MetaTransactionID] = "0" }, fsck.Error, "§13.2", "non-zero"},
		{"txn not a number", func(md map[string]string) { md[layout.MetaTransactionID] = "abc" }, fsck.Error, "§13.2", "non-zero"},
		{"txn missing", func(md map[string]string) { delete(md, layout.MetaTransactionID) }, fsck.Warning, "§13.2", "legacy"},
		{"session mismatch", func(md map[string]string) { md[layout.MetaSnapshotSession] = strings.Repeat("ab", 16) }, fsck.Error, "§6.2", "session"},
		{"version mismatch", func(md map[string]string) { md[layout.MetaSnapshotVersion] = "9" }, fsck.Error, "§6.2", "version 3"},
		{"version missing", func(md map[string]string) { delete(md, layout.MetaSnapshotVersion) }, fsck.Warning, "§6.2", layout.MetaSnapshotVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ds, _ := f.s.ReadSnapshot(f.ctx, f.root, 3)
			body, _ := layout.EncodeDescriptors(ds)
			md := snapMeta(f.root, 3, "checkpoint")
			tc.edit(md)
			f.plantSnapshot(f.root, 3, body, md)
			rep := f.check(fsck.Options{})
			want(t, rep, tc.sev, tc.rule, snapKey(f.root, 3), tc.substr)
			if tc.sev == fsck.Warning && !rep.OK() {
				t.Errorf("legacy metadata shape reported as an error: %v", rep.Findings)
			}
		})
	}
}

func TestSnapshotHeaders(t *testing.T) {
	f := newFixture(t)
	ds, _ := f.s.ReadSnapshot(f.ctx, f.root, 3)
	body, _ := layout.EncodeDescriptors(ds)
	f.put(snapKey(f.root, 3), body, &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd",
		CacheControl: "no-cache", Metadata: snapMeta(f.root, 3, "checkpoint")})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§16", snapKey(f.root, 3), "no-cache")
}

func TestSequenceNumbers(t *testing.T) {
	cases := []struct {
		name   string
		v      uint32
		mutate func(ds []layout.Descriptor) []layout.Descriptor
		substr string
	}{
		{"gap across snapshots", 2, func(ds []layout.Descriptor) []layout.Descriptor {
			ds[0].SequenceNumber += 2
			return ds
		}, "skipped"},
		{"duplicate across snapshots", 2, func(ds []layout.Descriptor) []layout.Descriptor {
			ds[0].SequenceNumber--
			return ds
		}, "duplicate"},
		{"not increasing within a snapshot", 1, func(ds []layout.Descriptor) []layout.Descriptor {
			ds[1].SequenceNumber, ds[2].SequenceNumber = ds[2].SequenceNumber, ds[1].SequenceNumber
			return ds
		}, "duplicate or out of order"},
		{"duplicate within a snapshot", 1, func(ds []layout.Descriptor) []layout.Descriptor {
			ds[1].SequenceNumber = ds[0].SequenceNumber
			return ds
		}, "duplicate"},
		{"not starting at first-sequence-number", 1, func(ds []layout.Descriptor) []layout.Descriptor {
			for i := range ds {
				ds[i].SequenceNumber += 10
			}
			return ds
		}, "want 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.rewrite(f.root, tc.v, tc.mutate)
			rep := f.check(fsck.Options{})
			want(t, rep, fsck.Error, "§7.3", snapKey(f.root, tc.v), tc.substr)
		})
	}
}

func TestEmptySnapshotIsValid(t *testing.T) {
	f := newFixture(t)
	f.commit(layout.Provisional)
	f.commit(layout.Checkpoint, f.desc("after-empty.txt", []byte("x")))
	rep := f.check(fsck.Options{})
	if len(rep.Findings) > 0 {
		t.Errorf("findings: %v", rep.Findings)
	}
}

func TestBlobDigestMismatch(t *testing.T) {
	f := newFixture(t)
	f.put(layout.BlobKey(f.big.Digest), bytes.Repeat([]byte("x"), len(f.bigB)), &blob.WriterOptions{CacheControl: layout.CacheImmutable})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§3", layout.BlobKey(f.big.Digest), "does not match its key")

	// --no-blobs does not read bodies, so it cannot see this.
	rep = f.check(fsck.Options{NoBlobs: true})
	if !rep.OK() {
		t.Errorf("NoBlobs read a blob body: %v", rep.Findings)
	}
}

func TestBlobSizeMismatch(t *testing.T) {
	f := newFixture(t)
	f.put(layout.BlobKey(f.big.Digest), []byte("short"), &blob.WriterOptions{CacheControl: layout.CacheImmutable})
	rep := f.check(fsck.Options{NoBlobs: true})
	want(t, rep, fsck.Error, "§7", snapKey(f.root, 1), "size 2000")
}

func TestMissingBlob(t *testing.T) {
	f := newFixture(t)
	f.del(layout.BlobKey(f.big.Digest))
	for _, noBlobs := range []bool{false, true} {
		rep := f.check(fsck.Options{NoBlobs: noBlobs})
		want(t, rep, fsck.Error, "§3", snapKey(f.root, 1), "does not exist")
	}
}

func TestBlobCacheControl(t *testing.T) {
	f := newFixture(t)
	key := layout.BlobKey(f.big.Digest)
	f.put(key, f.bigB, &blob.WriterOptions{CacheControl: "max-age=60"})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§16", key, "max-age=60")

	f.put(key, f.bigB, &blob.WriterOptions{ContentType: "text/plain", Metadata: map[string]string{"x": "y"}})
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§16", key, "no Cache-Control")
	if !rep.OK() {
		t.Errorf("missing Cache-Control is an error: %v", rep.Findings)
	}
}

func TestBlobContentEncodingMismatch(t *testing.T) {
	f := newFixture(t)
	f.rewrite(f.root, 1, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[1].ContentEncoding = "gzip"
		return ds
	})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§15", snapKey(f.root, 1), "gzip magic")
}

// TestBlobCutShort: a body with a declared encoding that stops short
// matches its digest (the key names the stored bytes) but no reader can
// decode it; fsck said clean while the mount said EIO (the conformance
// audit). A whole one is clean.
func TestBlobCutShort(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("pugmark "), 4096))
	zw.Close()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zs := enc.EncodeAll(bytes.Repeat([]byte("pugmark "), 4096), nil)
	enc.Close()
	for _, c := range []struct {
		enc  string
		body []byte
		bad  bool
	}{
		{layout.EncodingGzip, gz.Bytes(), false},
		{layout.EncodingGzip, gz.Bytes()[:gz.Len()-12], true},
		{layout.EncodingZstd, zs, false},
		{layout.EncodingZstd, zs[:len(zs)-5], true},
	} {
		f := newFixture(t)
		key := layout.BlobKey(layout.DigestOf(c.body))
		f.put(key, c.body, &blob.WriterOptions{CacheControl: layout.CacheImmutable, ContentEncoding: c.enc})
		rep := f.check(fsck.Options{})
		if c.bad {
			want(t, rep, fsck.Error, "§15", key, "does not decode")
			continue
		}
		for _, fd := range rep.Findings {
			if strings.Contains(fd.Message, "does not decode") {
				t.Errorf("a whole %s body: %v", c.enc, fd)
			}
		}
	}
}

// TestDescriptorDeclaredEncodingCutShort: an encoding a descriptor
// declares, on a blob whose object does not repeat it, is decoded too:
// the blob as read, and inline data. A body cut short was reported clean
// while the mount answered EIO (audit 7, a writer that sets the
// descriptor's content-encoding only). An object that carries an
// encoding its descriptor does not declare is a warning: the tree shows
// its stored bytes.
func TestDescriptorDeclaredEncodingCutShort(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	for i := range 3000 {
		fmt.Fprintf(zw, "%d ", i*i*i) // a few KiB compressed: not inlined
	}
	zw.Close()
	cut := gz.Bytes()[:gz.Len()-12]
	small := cut[:200] // a stream of 200 bytes is inlined
	for _, c := range []struct {
		name          string
		body          []byte
		objEnc, dsEnc string
		inline        bool
		sev           fsck.Severity
		substr        string
	}{
		{"blob cut short", cut, "", layout.EncodingGzip, false, fsck.Error, "does not decode"},
		{"inline data cut short", small, "", layout.EncodingGzip, true, fsck.Error, "inline data does not decode"},
		{"whole", gz.Bytes(), "", layout.EncodingGzip, false, 0, ""},
		{"object encoded, descriptor silent", gz.Bytes(), layout.EncodingGzip, "", false, fsck.Warning, "shows the stored bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			d := layout.DigestOf(c.body)
			f.put(layout.BlobKey(d), c.body, &blob.WriterOptions{CacheControl: layout.CacheImmutable, ContentEncoding: c.objEnc})
			f.rewrite(f.root, 1, func(ds []layout.Descriptor) []layout.Descriptor {
				ds[1].Digest, ds[1].Size, ds[1].ContentEncoding, ds[1].Data = d, int64(len(c.body)), c.dsEnc, nil
				if c.inline {
					ds[1].Data = c.body
				}
				return ds
			})
			rep := f.check(fsck.Options{})
			if c.substr != "" {
				want(t, rep, c.sev, "§15", snapKey(f.root, 1), c.substr)
				return
			}
			for _, fd := range rep.Findings {
				if fd.Rule == "§15" {
					t.Errorf("a whole body: %v", fd)
				}
			}
		})
	}
}

func TestUnknownContentEncoding(t *testing.T) {
	f := newFixture(t)
	f.rewrite(f.root, 1, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[0].ContentEncoding = "br"
		return ds
	})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§15", snapKey(f.root, 1), `"br"`)
}

func TestInlineData(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(f *fixture, ds []layout.Descriptor)
		sev    fsck.Severity
		rule   string
		substr string
	}{
		{"mismatch", func(f *fixture, ds []layout.Descriptor) { ds[0].Data = []byte("HELLO\n") }, fsck.Error, "§7.1", "does not match"},
		{"oversized", func(f *fixture, ds []layout.Descriptor) { ds[1].Data = f.bigB }, fsck.Error, "§3.1", "2000 bytes"},
		{"missing", func(f *fixture, ds []layout.Descriptor) { ds[0].Data = nil }, fsck.Warning, "§7.1", "without inline data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.rewrite(f.root, 1, func(ds []layout.Descriptor) []layout.Descriptor { tc.mutate(f, ds); return ds })
			rep := f.check(fsck.Options{})
			want(t, rep, tc.sev, tc.rule, snapKey(f.root, 1), tc.substr)
			if tc.sev == fsck.Warning && !rep.OK() {
				t.Errorf("missing inline data is an error (§3.1 says MAY): %v", rep.Findings)
			}
		})
	}
}

func TestTombstones(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(f *fixture, d *layout.Descriptor)
		sev    fsck.Severity
		substr string
	}{
		{"with data", func(f *fixture, d *layout.Descriptor) { d.Data = []byte("x") }, fsck.Warning, "inline data"},
		{"without name", func(f *fixture, d *layout.Descriptor) { d.Name = "" }, fsck.Error, "without a name"},
		{"with digest", func(f *fixture, d *layout.Descriptor) { d.Digest, d.Size = f.small.Digest, f.small.Size }, fsck.Info, "conventional"},
		{"fork", func(f *fixture, d *layout.Descriptor) { d.Fork = true; d.TargetSession = f.child }, fsck.Error, "fork record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.rewrite(f.root, 3, func(ds []layout.Descriptor) []layout.Descriptor { tc.mutate(f, &ds[0]); return ds })
			rep := f.check(fsck.Options{})
			want(t, rep, tc.sev, "§10", snapKey(f.root, 3), tc.substr)
		})
	}
}

func TestDescriptorWithoutDigest(t *testing.T) {
	f := newFixture(t)
	f.rewrite(f.root, 2, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[0].Digest, ds[0].Data = layout.Digest{}, nil
		return ds
	})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§7", snapKey(f.root, 2), "no digest")
}

func TestDescriptorBadDigestShape(t *testing.T) {
	f := newFixture(t)
	// Not hex at all (upper-case hex names the same blob and parses).
	js := fmt.Sprintf(`[{"digest":"sha256:%s","size":1,"name":"x","sequence-number":5}]`, strings.Repeat("zz", 32))
	f.plantSnapshot(f.root, 3, zstdOf([]byte(js)), snapMeta(f.root, 3, "checkpoint"))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§7", snapKey(f.root, 3), "does not parse")
	// The sequence number was still recovered: no §7.3 cascade.
	for _, fd := range rep.Findings {
		if fd.Rule == "§7.3" {
			t.Errorf("cascading finding: %s", fd)
		}
	}
}

// A digest in upper-case hex names the same blob (readers accept it) but
// is not how keys or writers spell it: a warning, not an error.
func TestDescriptorUpperCaseDigest(t *testing.T) {
	f := newFixture(t)
	d := f.desc("x", []byte("upper\n"))
	js := fmt.Sprintf(`[{"digest":"sha256:%s","size":%d,"name":"x","sequence-number":5}]`, strings.ToUpper(d.Digest.Hex()), d.Size)
	f.plantSnapshot(f.root, 3, zstdOf([]byte(js)), snapMeta(f.root, 3, "checkpoint"))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§7", snapKey(f.root, 3), "upper-case hex")
	for _, fd := range rep.Findings {
		if fd.Severity == fsck.Error {
			t.Errorf("an upper-case digest made an error: %s", fd)
		}
	}
}

// A snapshot descriptor without its sequence-number reads as 0, but
// §7.3 has every descriptor carry one (audit 24: pugfs left it out of
// the first descriptor of a session starting at 0): a warning.
func TestDescriptorWithoutSequenceNumber(t *testing.T) {
	f := newFixture(t)
	d := f.desc("x", []byte("no number\n"))
	js := fmt.Sprintf(`[{"digest":%q,"size":%d,"name":"x"}]`, d.Digest.String(), d.Size)
	f.plantSnapshot(f.root, 3, zstdOf([]byte(js)), snapMeta(f.root, 3, "checkpoint"))
	want(t, f.check(fsck.Options{}), fsck.Warning, "§7.3", snapKey(f.root, 3), "no sequence-number")
}

func TestHostileNames(t *testing.T) {
	for _, name := range []string{"../../etc/passwd", "a//b", "./x", "dir/", strings.Repeat("n", 256)} {
		t.Run(name[:min(len(name), 16)], func(t *testing.T) {
			f := newFixture(t)
			f.commit(layout.Checkpoint, f.desc(name, []byte("evil\n")))
			rep := f.check(fsck.Options{})
			want(t, rep, fsck.Warning, "decisions/names", snapKey(f.root, 5), "cannot be a path")
			if !rep.OK() {
				t.Errorf("hostile name is an error: %v", rep.Findings)
			}
		})
	}
	// A name under the session root's .pugmark/ is a path, but one the
	// tree keeps for its own files.
	for _, name := range []string{".pugmark", ".pugmark/manifest.json"} {
		f := newFixture(t)
		f.commit(layout.Checkpoint, f.desc(name, []byte("mine\n")))
		want(t, f.check(fsck.Options{}), fsck.Warning, "tree.md", snapKey(f.root, 5), "keeps .pugmark/")
	}
}

// A name with bytes that are not UTF-8 (another writer's raw JSON) is an
// error: other readers see U+FFFD, and two such names can become one.
func TestNameNotUTF8(t *testing.T) {
	f := newFixture(t)
	d := f.desc("x", []byte("latin-1\n"))
	js := fmt.Sprintf(`[{"digest":%q,"size":%d,"name":"caf`+"\xe9"+`.txt","sequence-number":5}]`, d.Digest.String(), d.Size)
	f.plantSnapshot(f.root, 3, zstdOf([]byte(js)), snapMeta(f.root, 3, "checkpoint"))
	want(t, f.check(fsck.Options{}), fsck.Error, "§7", snapKey(f.root, 3), "not UTF-8")
}

func TestFileAndDirectoryName(t *testing.T) {
	f := newFixture(t)
	f.commit(layout.Checkpoint, f.desc("a.txt/inner", []byte("x\n")))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Info, "decisions/names", "", `"a.txt" is a file and also the directory`)
}

func TestManifestIDMismatch(t *testing.T) {
	f := newFixture(t)
	m, _ := f.s.LoadManifest(f.ctx, f.child)
	m.Session = layout.NewSessionID(f.root.Time())
	f.putManifest(m, f.child)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§5", manifestKey(f.child), "its path is that of")
}

func TestManifestNotJSON(t *testing.T) {
	f := newFixture(t)
	f.put(manifestKey(f.child), []byte("not json"), &blob.WriterOptions{CacheControl: layout.CacheImmutable})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§5", manifestKey(f.child), "not a JSON object")
}

func TestDanglingParent(t *testing.T) {
	f := newFixture(t)
	m, _ := f.s.LoadManifest(f.ctx, f.child)
	m.Parent.Session = layout.NewSessionID(f.root.Time())
	f.putManifest(m, f.child)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§5", manifestKey(f.child), "dangling parent")
}

func TestParentVersionBeyondLatest(t *testing.T) {
	f := newFixture(t)
	m, _ := f.s.LoadManifest(f.ctx, f.child)
	m.Parent.Version = 99
	f.putManifest(m, f.child)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§11.2", manifestKey(f.child), "latest version is 4")
}

func TestParentCycle(t *testing.T) {
	f := newFixture(t)
	a := &layout.Manifest{Session: layout.NewSessionID(f.root.Time()), FirstSequenceNumber: 1}
	b := &layout.Manifest{Session: layout.NewSessionID(f.root.Time()), FirstSequenceNumber: 1}
	a.Parent = &layout.ParentRef{Session: b.Session}
	b.Parent = &layout.ParentRef{Session: a.Session}
	f.putManifest(a, a.Session)
	f.putManifest(b, b.Session)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§5", manifestKey(a.Session), "cycle")
	want(t, rep, fsck.Error, "§5", manifestKey(b.Session), "cycle")
}

func TestSelfParent(t *testing.T) {
	f := newFixture(t)
	a := &layout.Manifest{Session: layout.NewSessionID(f.root.Time()), FirstSequenceNumber: 1}
	a.Parent = &layout.ParentRef{Session: a.Session}
	f.putManifest(a, a.Session)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§5", manifestKey(a.Session), "cycle")
}

func TestForkChildFirstSequenceNumber(t *testing.T) {
	f := newFixture(t)
	m, _ := f.s.LoadManifest(f.ctx, f.child)
	m.FirstSequenceNumber += 3
	f.putManifest(m, f.child)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§7.3", manifestKey(f.child), "want 7")
}

func TestForkAtEarlierVersion(t *testing.T) {
	// A child forked at version 2 while the record sits at a later
	// version (pugfs fork --at) is valid.
	f := newFixture(t)
	d := f.desc("at2.md", []byte("fork at 2\n"))
	child, res, err := f.s.RecordFork(f.ctx, f.root, layout.ForkRequest{Descriptor: d})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.MaterializeFork(f.ctx, layout.PendingFork{Parent: f.root, Version: 2, Descriptor: res.Descriptors[0]}); err != nil {
		t.Fatal(err)
	}
	rep := f.check(fsck.Options{})
	if len(rep.Findings) > 0 {
		t.Errorf("findings for %s: %v", child, rep.Findings)
	}
}

func TestPendingAndUndiscoverableForks(t *testing.T) {
	f := newFixture(t)
	child, _, err := f.s.RecordFork(f.ctx, f.root, layout.ForkRequest{Descriptor: f.desc("p.md", []byte("p\n"))})
	if err != nil {
		t.Fatal(err)
	}
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Info, "§11.1", snapKey(f.root, 5), child.String())
	if !rep.OK() || rep.Warnings > 0 {
		t.Errorf("pending fork is more than info: %v", rep.Findings)
	}

	// A child whose parent has no fork record for it.
	f.rewrite(f.root, 4, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[0].Fork, ds[0].TargetSession = false, layout.SessionID{}
		return ds
	})
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§17", manifestKey(f.child), "branch discovery")
}

func TestForkRecordShape(t *testing.T) {
	f := newFixture(t)
	f.rewrite(f.root, 4, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[0].TargetSession = f.root
		return ds
	})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§11", snapKey(f.root, 4), "its own session")
}

func TestLegacyForkForm(t *testing.T) {
	f := newFixture(t)
	ds, _ := f.s.ReadSnapshot(f.ctx, f.root, 4)
	js := fmt.Sprintf(`[{"digest":%q,"size":%d,"name":%q,"data":%q,"sequence-number":%d,"fork-session-id":%q}]`,
		ds[0].Digest, ds[0].Size, ds[0].Name, base64.StdEncoding.EncodeToString(ds[0].Data), ds[0].SequenceNumber, f.child)
	f.plantSnapshot(f.root, 4, zstdOf([]byte(js)), snapMeta(f.root, 4, "checkpoint"))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Info, "§7.2", snapKey(f.root, 4), "legacy")
	if len(rep.Findings) != 1 {
		t.Errorf("the legacy form is still a valid fork record: %v", rep.Findings)
	}
	// An ID of zeros makes no fork record (§7.2: a non-zero one does).
	zeros := strings.Replace(js, f.child.String(), strings.Repeat("0", 32), 1)
	f.plantSnapshot(f.root, 4, zstdOf([]byte(zeros)), snapMeta(f.root, 4, "checkpoint"))
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Info, "§7.2", snapKey(f.root, 4), "of zeros (read as no fork record)")
	for _, fd := range rep.Findings {
		if strings.Contains(fd.Message, "read as fork = true") {
			t.Errorf("a fork-session-id of zeros: %v", fd)
		}
	}
}

func TestForkChildSnapshotOne(t *testing.T) {
	f := newFixture(t)
	f.rewrite(f.child, 1, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[0].Name = "renamed.md"
		return ds
	})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§11.2", snapKey(f.child, 1), "copy of the fork record")
}

func TestCrossSessionWrites(t *testing.T) {
	f := newFixture(t)
	d := f.desc("msg.md", []byte("to the child\n"))
	d.TargetSession = f.child
	res := f.commit(layout.Checkpoint, d)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Info, "§12.2", snapKey(f.root, res.Version), "not delivered")

	if _, err := f.s.DeliverCrossSession(f.ctx, f.root, res.Version, res.Descriptors); err != nil {
		t.Fatal(err)
	}
	rep = f.check(fsck.Options{})
	if len(rep.Findings) > 0 {
		t.Errorf("delivered write has findings: %v", rep.Findings)
	}

	// A delivered record whose source snapshot has no such write.
	f.rewrite(f.child, 2, func(ds []layout.Descriptor) []layout.Descriptor {
		ds[0].SourceVersion = 1
		return ds
	})
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§12.2", snapKey(f.child, 2), "holds no cross-session write")
}

func TestCrossSessionToMissingSession(t *testing.T) {
	f := newFixture(t)
	d := f.desc("msg.md", []byte("to nobody\n"))
	d.TargetSession = layout.NewSessionID(f.root.Time())
	res := f.commit(layout.Checkpoint, d)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§12", snapKey(f.root, res.Version), "does not exist")
}

// TestMemoryRecordName: §8.3's MUSTs (non-empty, no /) are errors; a
// name §8.3 allows but no path can show is a warning (the mount hides it),
// as is a name held twice (readers take the last record).
func TestMemoryRecordName(t *testing.T) {
	for _, c := range []struct {
		names []string
		sev   fsck.Severity
		msg   string
	}{
		{[]string{"a/b"}, fsck.Error, "no /"},
		{[]string{""}, fsck.Error, "non-empty"},
		{[]string{"."}, fsck.Warning, "no path can show"},
		{[]string{".."}, fsck.Warning, "no path can show"},
		{[]string{"a\x00b"}, fsck.Warning, "no path can show"},
		{[]string{"x.md", "x.md"}, fsck.Warning, "same name as record 0"},
	} {
		t.Run(fmt.Sprintf("%q", c.names), func(t *testing.T) {
			f := newFixture(t)
			var ds []layout.Descriptor
			for _, n := range c.names {
				d := f.desc(n, []byte("x"))
				d.Commit = &layout.MemoryCommit{Session: f.root, Version: 1, Transaction: 9}
				ds = append(ds, d)
			}
			f.putMemory("team/notes", 3, ds)
			rep := f.check(fsck.Options{})
			want(t, rep, c.sev, "§8.3", "memories/team/notes/FFFFFFFD.json", c.msg)
			if c.sev == fsck.Warning && rep.Errors != 0 {
				t.Errorf("%d error(s), want none: %+v", rep.Errors, rep.Findings)
			}
		})
	}
}

func TestMemoryEnvelope(t *testing.T) {
	f := newFixture(t)
	d := f.desc("x.md", []byte("x"))
	f.putMemory("team/notes", 3, []layout.Descriptor{d})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§8.2", "memories/team/notes/FFFFFFFD.json", "no commit envelope")

	d.Commit = &layout.MemoryCommit{Session: f.root, Version: 40, Transaction: 9}
	f.putMemory("team/notes", 3, []layout.Descriptor{d})
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§8.2", "memories/team/notes/FFFFFFFD.json", "latest version is 4")
}

func TestMemoryVersionGap(t *testing.T) {
	f := newFixture(t)
	key, _ := layout.MemoryKey("team/notes", 1)
	f.del(key)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§8.1", "memories/team/notes/", "version 1 is missing")
}

func TestMemoryNotZstd(t *testing.T) {
	f := newFixture(t)
	key, _ := layout.MemoryKey("team/notes", 2)
	f.put(key, []byte(`[]`), &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd", CacheControl: layout.CacheImmutable,
		Metadata: map[string]string{layout.MetaTransactionID: "5"}})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§8.2", key, "not zstd")
}

func TestRefs(t *testing.T) {
	cases := []struct {
		name, ref, body string
		rule, substr    string
	}{
		{"two lines", "plain", "a\nb\n", "§9", "more than one line"},
		{"empty", "plain", "\n", "§9", "empty"},
		{"session ref to missing manifest", "sessions/ghost", "sessions/year=2026/month=01/day=01/hour=00/0123456789ABCDEF01234567/manifest.json", "§9.1", "does not exist"},
		{"session ref not a manifest key", "sessions/junk", "hello", "§9.1", "not a manifest key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.putRef(tc.ref, tc.body)
			rep := f.check(fsck.Options{})
			want(t, rep, fsck.Error, tc.rule, "refs/"+tc.ref, tc.substr)
		})
	}
}

// A name reassigned to another session (§9.1 expects it: the session's
// manifest keeps its own name) is a warning, not an error: the ref
// resolves.
func TestSessionRefNameMismatch(t *testing.T) {
	f := newFixture(t)
	// refs/sessions/other points at the manifest named "main".
	f.putRef("sessions/other", manifestKey(f.root))
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§9.1", "refs/sessions/other", `named "main"`)
	for _, fd := range rep.Findings {
		if fd.Severity == fsck.Error {
			t.Errorf("a reassigned name is an error: %+v", fd)
		}
	}
}

func TestNamedManifestWithoutRef(t *testing.T) {
	f := newFixture(t)
	f.del("refs/sessions/main")
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§9.1", manifestKey(f.root), "does not exist")
}

func TestDanglingNamedManifest(t *testing.T) {
	// The loser of a §9.2 race that crashed before deleting its manifest.
	f := newFixture(t)
	m := &layout.Manifest{Session: layout.NewSessionID(f.root.Time()), Name: "main", FirstSequenceNumber: 1}
	f.putManifest(m, m.Session)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "§9.2", manifestKey(m.Session), "lost the name")
}

func TestRefHeaders(t *testing.T) {
	f := newFixture(t)
	f.put("refs/plain", []byte("hello"), &blob.WriterOptions{ContentType: "text/plain", CacheControl: layout.CacheImmutable})
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Error, "§16", "refs/plain", "no-cache")
}

func TestRootFirstSequenceNumber(t *testing.T) {
	f := newFixture(t)
	m := &layout.Manifest{Session: layout.NewSessionID(f.root.Time()), FirstSequenceNumber: 7}
	f.putManifest(m, m.Session)
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "decisions/first-seq", manifestKey(m.Session), "starts at 1")

	// Any int64 starts a sequence (§7.3 has no sign): the same warning.
	m.FirstSequenceNumber = -5
	f.putManifest(m, m.Session)
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Warning, "decisions/first-seq", manifestKey(m.Session), "at first-sequence-number -5")
	if rep.Errors != 0 {
		t.Errorf("%d error(s), want none: %+v", rep.Errors, rep.Findings)
	}
}

func TestOrphanBlob(t *testing.T) {
	f := newFixture(t)
	if _, err := f.s.PutBlobBytes(f.ctx, []byte("nobody uses me"), layout.BlobOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := f.check(fsck.Options{})
	want(t, rep, fsck.Info, "§3", "objects/", "1 blob(s)")
}

func TestMaxPerRule(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		f.put(fmt.Sprintf("objects/junk%d", i), []byte("x"), nil)
	}
	rep := f.check(fsck.Options{MaxPerRule: 2})
	if n := rep.Suppressed["error §3"]; n != 3 || rep.Errors != 5 {
		t.Errorf("suppressed %v, errors %d", rep.Suppressed, rep.Errors)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	f := newFixture(t)
	f.del(snapKey(f.root, 2))
	rep := f.check(fsck.Options{})
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"severity":"error"`) {
		t.Errorf("severity not a string: %s", js)
	}
	var back fsck.Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Findings) != len(rep.Findings) || back.Findings[0] != rep.Findings[0] {
		t.Errorf("round trip: %+v", back)
	}
}

func TestProgress(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
	f := newFixtureOn(t, faultblob.Wrap(memblob.OpenBucket(nil), inj))
	// Slow reads make Check take long enough for the ticker to fire.
	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Latency: 2 * time.Millisecond})
	var calls atomic.Int64
	var last fsck.Progress
	rep, err := fsck.Check(f.ctx, f.s, fsck.Options{ProgressInterval: time.Millisecond, Progress: func(p fsck.Progress) {
		calls.Add(1)
		last = p
	}})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() == 0 || last.Listed == 0 || last.Phase == "" {
		t.Errorf("progress: %d calls, last %+v", calls.Load(), last)
	}
	if len(rep.Findings) > 0 {
		t.Errorf("findings: %v", rep.Findings)
	}
}

// Transient backend errors are retried, not reported as findings.
func TestTransientErrorsAreRetried(t *testing.T) {
	inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
	f := newFixtureOn(t, faultblob.Wrap(memblob.OpenBucket(nil), inj))
	inj.Add(faultblob.Rule{Ops: faultblob.OpList, FailNth: 1})
	inj.Add(faultblob.Rule{Ops: faultblob.OpHead, FailNth: 2})
	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, FailNth: 3})
	rep := f.check(fsck.Options{})
	if len(rep.Findings) > 0 {
		t.Errorf("findings: %v", rep.Findings)
	}
	// A permanent failure is a finding, and Check goes on.
	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Match: faultblob.Match{Prefix: "refs/"}, FailFirst: 100, Err: faultblob.PermanentError(gcerrors.PermissionDenied)})
	rep = f.check(fsck.Options{})
	want(t, rep, fsck.Error, "read", "refs/plain", "cannot read")
}

// A local bucket copied with cp -r has no metadata: every header check
// must degrade to a warning, and nothing else may be reported.
func TestCopiedLocalBucket(t *testing.T) {
	src := t.TempDir()
	b, err := localblob.OpenBucket(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := layout.New(b, nil)
	if _, err := demo.Write(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	b.Close()
	dst := t.TempDir()
	err = filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if strings.HasPrefix(rel, ".pugfs-") {
			return filepath.SkipDir
		}
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), body, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := localblob.OpenBucket(dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	rep, err := fsck.Check(context.Background(), layout.New(cb, nil), fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("copied bucket has errors: %v", rep.Findings)
	}
	want(t, rep, fsck.Warning, "§2.3", "objects/", "no stored metadata")
	want(t, rep, fsck.Warning, "§2.3", "snapshots/", "no stored metadata")
}
