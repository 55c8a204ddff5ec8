package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"gocloud.dev/blob"

	"github.com/pugmark/pugfs/layout"
)

// TestReadCorruptObjects: a corrupt snapshot, manifest, memory file or ref
// is EIO for what depends on it, with a log line naming the key; the rest
// of the tree keeps working (tree.md "Errors a user sees"). Stray keys in
// pugmark's prefixes are skipped.
func TestReadCorruptObjects(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		ctx := context.Background()
		s := bk.Store
		raw := func(key string, body []byte, o *blob.WriterOptions) {
			t.Helper()
			if err := s.Bucket().WriteAll(ctx, key, body, o); err != nil {
				t.Fatal(err)
			}
		}
		file := func(name, body string) layout.Descriptor {
			t.Helper()
			defer rdCatch(t)
			return rdPutDesc(t, s, name, "text/plain", "", []byte(body), fixT1)
		}
		newSess := func(files ...layout.Descriptor) layout.SessionID {
			t.Helper()
			id := newSession(t, bk)
			if len(files) > 0 {
				if _, err := s.Commit(ctx, id, layout.CommitRequest{Descriptors: files}); err != nil {
					t.Fatal(err)
				}
			}
			return id
		}

		good := newSess(file("ok.txt", "fine\n"))
		// p: snapshot 1 fine, snapshot 2 garbage. Its fork at version 1
		// does not depend on snapshot 2.
		p := newSess(file("p.txt", "p at 1\n"))
		child, err := s.Fork(ctx, p, layout.ForkRequest{Descriptor: file("forked.txt", "child\n")})
		if err != nil {
			t.Fatal(err)
		}
		snap3, _ := layout.SnapshotKey(p, 3)
		raw(snap3, []byte("this is not zstd json"), &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd",
			Metadata: map[string]string{layout.MetaSnapshotType: "checkpoint"}})
		// q: a manifest that is not JSON.
		q := layout.NewSessionID(fixT1)
		mk, _ := layout.ManifestKey(q)
		raw(mk, []byte("{not json"), &blob.WriterOptions{ContentType: "application/json"})
		// gone: a file whose blob was deleted from the bucket (too large to
		// be inline in its descriptor).
		lost := file("lost.txt", strings.Repeat("lost line\n", layout.InlineLimit/10+1))
		gone := newSess(lost, file("kept.txt", "kept\n"))
		lostKey := layout.BlobKey(lost.Digest)
		if err := s.Bucket().Delete(ctx, lostKey); err != nil {
			t.Fatal(err)
		}
		// dmg: snapshot 2, written by another implementation, holds one
		// descriptor whose digest cannot be read (it replaces prev.txt
		// of snapshot 1) and one whose created-at and metadata cannot;
		// the rest of the snapshot is sound.
		dmg := newSess(file("prev.txt", "old\n"), file("ok.txt", "ok\n"))
		v1, err := s.ReadSnapshot(ctx, dmg, 1)
		if err != nil {
			t.Fatal(err)
		}
		seq := v1[1].SequenceNumber
		snap2, _ := layout.SnapshotKey(dmg, 2)
		when := file("when.txt", "when\n")
		also := file("also.txt", "also\n")
		func() {
			defer rdCatch(t)
			rdPutRawSnapshot(t, s.Bucket(), dmg, 2, "provisional", 7, []json.RawMessage{
				json.RawMessage(fmt.Sprintf(`{"name":"prev.txt","digest":"sha256:zz","size":4,"sequence-number":%d}`, seq+1)),
				json.RawMessage(fmt.Sprintf(`{"name":"when.txt","digest":%q,"size":5,"created-at":"yesterday","metadata":{"n":3},"sequence-number":%d}`, when.Digest, seq+2)),
				json.RawMessage(fmt.Sprintf(`{"name":"also.txt","digest":%q,"size":5,"created-at":"2026-01-01T00:00:00Z","sequence-number":%d}`, also.Digest, seq+3)),
			})
		}()
		// mid: snapshot 2 of 3 garbage. Snapshots 1 and 3 do not depend
		// on it, nor do the bodies of their descriptors (seq/<n>).
		mid := newSess(file("a.txt", "a\n"))
		var midSeq []int64
		for _, f := range []layout.Descriptor{file("b.txt", "b\n"), file("c.txt", "c\n")} {
			res, err := s.Commit(ctx, mid, layout.CommitRequest{Descriptors: []layout.Descriptor{f}})
			if err != nil {
				t.Fatal(err)
			}
			midSeq = append(midSeq, res.Descriptors[0].SequenceNumber)
		}
		midSnap2, _ := layout.SnapshotKey(mid, 2)
		raw(midSnap2, []byte("this is not zstd json"), &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd",
			Metadata: map[string]string{layout.MetaSnapshotType: "provisional"}})
		// gap: snapshot 2 of 3 deleted; bare: snapshots, manifest
		// deleted. Both are damage, not sessions that do not exist.
		gap := newSess(file("a.txt", "a\n"))
		for _, f := range []layout.Descriptor{file("b.txt", "b\n"), file("c.txt", "c\n")} {
			if _, err := s.Commit(ctx, gap, layout.CommitRequest{Descriptors: []layout.Descriptor{f}}); err != nil {
				t.Fatal(err)
			}
		}
		gapSnap2, _ := layout.SnapshotKey(gap, 2)
		var gapSeq int64
		if v3, err := s.ReadSnapshot(ctx, gap, 3); err != nil {
			t.Fatal(err)
		} else {
			gapSeq = v3[0].SequenceNumber
		}
		// far: a stray snapshot key of the last version there can be
		// (4,294,967,295) beside snapshot 1. Its history listed every
		// number up to it, and the mount ran out of memory (audit 13).
		far := newSess(file("a.txt", "a\n"))
		func() {
			defer rdCatch(t)
			rdPutRawSnapshot(t, s.Bucket(), far, ^uint32(0), "provisional", 11, []json.RawMessage{
				json.RawMessage(fmt.Sprintf(`{"name":"w.txt","digest":%q,"size":5,"sequence-number":99}`, also.Digest)),
			})
		}()
		bare := newSess(file("a.txt", "a\n"))
		bareManifest, _ := layout.ManifestKey(bare)
		// nosize: a descriptor that left its size out (0) for a body
		// of 14 bytes. It read as an empty file: the kernel reads
		// nothing of a file of size 0.
		nosizeDesc := file("nosize.txt", "fourteen bytes")
		nosizeDesc.Size, nosizeDesc.Data = 0, nil
		nosize := newSess(nosizeDesc, file("sized.txt", "sized\n"))
		// huge: another writer's descriptor claiming 2^62 bytes for a
		// blob of 5. stat showed that size, and tar padded the read that
		// failed with zeros up to it, for ever (audit 24).
		hugeDesc := file("huge.bin", "hello")
		hugeDesc.Size, hugeDesc.Data = 1<<62, nil
		huge := newSess(hugeDesc, file("beside.txt", "beside\n"))
		// bomb: snapshot 2 decodes past the mount's limit (another
		// writer's 40 MiB of blanks, a few KiB stored). The session was
		// no directory at all (audit 24).
		bomb := newSess(file("a.txt", "a\n"))
		bombSnap2, _ := layout.SnapshotKey(bomb, 2)
		raw(bombSnap2, rdZstd([]byte("["+strings.Repeat(" ", 40<<20)+"]")), &blob.WriterOptions{ContentType: "application/json", ContentEncoding: "zstd",
			Metadata: map[string]string{layout.MetaSnapshotType: "checkpoint"}})
		for _, k := range []string{gapSnap2, bareManifest} {
			if err := s.Bucket().Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		// weird: a snapshot type outside the closed set.
		weird := newSess()
		func() {
			defer rdCatch(t)
			rdPutRawSnapshot(t, s.Bucket(), weird, 1, "weird", 9, []json.RawMessage{
				json.RawMessage(fmt.Sprintf(`{"name":"w.txt","digest":%q,"size":5,"sequence-number":1}`, also.Digest)),
			})
		}()
		// Stray keys: not a snapshot file, not a session path, not a
		// memory file.
		sp, _ := layout.SnapshotsPrefix(good)
		raw(sp+"README", []byte("stray\n"), nil)
		raw("sessions/year=2025/stray.txt", []byte("stray\n"), nil)
		raw("memories/stray.txt", []byte("stray\n"), nil)
		// Memories: a corrupt namespace above a good one.
		func() { defer rdCatch(t); rdMemPut(t, s, "broken/inner", "x.md", "inner\n") }()
		mem, _ := layout.MemoryKey("broken", 1)
		raw(mem, []byte("garbage"), &blob.WriterOptions{ContentType: "application/json"})
		func() { defer rdCatch(t); rdMemPut(t, s, "fine", "y.md", "fine\n") }()
		// Refs: a session ref whose body is two lines, a plain one fine.
		raw("refs/sessions/twolines", []byte("a\nb\n"), nil)
		gk, _ := layout.ManifestKey(good)
		if err := s.Link(ctx, layout.SessionRefName("good"), gk); err != nil {
			t.Fatal(err)
		}

		m := mount(t, bk)
		r := &rdCtx{t: t, bk: bk, m: m, dir: m.Dir}
		eio := "Input/output error"
		// What depends on the corrupt objects fails...
		r.fails("ls "+sess(p), eio)
		r.fails("ls "+sess(q), eio)
		r.fails("ls memories/broken", eio)
		r.fails("readlink -v names/twolines", eio)
		r.fails("cat refs/sessions/twolines", eio)
		// A listed file whose blob is gone is a damaged bucket, not a
		// missing name.
		r.fails("cat "+sess(gone)+"/lost.txt", eio)
		for _, key := range []string{snap3, mk, mem, "refs/sessions/twolines", lostKey} {
			waitFor(t, "a log line naming "+key, func() bool { return strings.Contains(m.Log(), key) })
		}
		// ... and nothing else.
		// The damaged session is still a directory, and what does not
		// depend on its snapshots works.
		r.eq("stat of the damaged session", r.sh("stat -c %F "+sess(p)), "directory\n")
		r.eq("its manifest", r.sh("grep -c "+p.String()+" "+meta(p)+"/manifest.json"), "1\n")
		r.eq("its .pugmark/", r.sh("ls "+meta(p)+" | grep -c manifest.json"), "1\n")
		// Its latest version and checkpoint come from the listing and
		// the snapshots' metadata, not from their bodies.
		r.eq("its version", r.sh("cat "+meta(p)+"/version"), "3\n")
		r.eq("its checkpoint", r.sh("cat "+meta(p)+"/checkpoint"), "3\n")
		// Its history before the damaged snapshot 3 is there, built from
		// snapshots 1 and 2 alone; version 3 fails as the live tree does.
		r.eq("its versions", r.sh("ls "+meta(p)+"/at"), "0\n1\n2\n3\n")
		r.eq("version 1", r.sh("cat "+meta(p)+"/at/1/p.txt"), "p at 1\n")
		r.eq("version 2", r.sh("ls "+meta(p)+"/at/2"), "p.txt\n")
		r.fails("ls "+meta(p)+"/at/3", eio)
		r.eq("its snapshots", r.sh("ls "+meta(p)+"/snapshots"), "1.json\n2.json\n3.json\n")
		r.eq("snapshot 1", r.sh("grep -c '\"p.txt\"' "+meta(p)+"/snapshots/1.json"), "1\n")
		r.fails("cat "+meta(p)+"/snapshots/3.json", eio)
		// A damaged snapshot in the middle costs its own version and
		// what depends on it, not the versions beside it.
		r.fails("ls "+sess(mid), eio)
		r.fails("cat "+meta(mid)+"/snapshots/2.json", eio)
		r.eq("the snapshot after the damaged one", r.sh("grep -c '\"c.txt\"' "+meta(mid)+"/snapshots/3.json"), "1\n")
		r.eq("a body of the snapshot before it", r.sh(fmt.Sprintf("cat %s/seq/%d", meta(mid), midSeq[0]-1)), "a\n")
		r.eq("a body of the snapshot after it", r.sh(fmt.Sprintf("cat %s/seq/%d", meta(mid), midSeq[1])), "c\n")
		r.fails(fmt.Sprintf("cat %s/seq/%d", meta(mid), midSeq[0]), eio) // in the damaged one
		r.fails(fmt.Sprintf("cat %s/seq/%d", meta(mid), midSeq[1]+1), eio)
		r.fails("cat "+meta(mid)+"/log.jsonl", eio)
		// A gap in a history, or snapshots without a manifest, used to
		// show an empty directory with no error and no log line.
		r.fails("ls "+sess(gap), eio)
		r.fails("cat "+sess(gap)+"/a.txt", eio)
		r.eq("the version of a session with a gap", r.sh("cat "+meta(gap)+"/version"), "3\n")
		r.eq("the history before the gap", r.sh("cat "+meta(gap)+"/at/1/a.txt"), "a\n")
		// Its history shows the versions in the bucket, each readable
		// alone; the missing one is no name. Snapshots 1 and 3 were
		// ENOENT, though listed with 2 (audit 13).
		r.eq("the versions of a session with a gap", r.sh("ls "+meta(gap)+"/at"), "0\n1\n3\n")
		r.eq("its snapshots", r.sh("ls "+meta(gap)+"/snapshots"), "1.json\n3.json\n")
		r.eq("the snapshot after the gap", r.sh("grep -c '\"c.txt\"' "+meta(gap)+"/snapshots/1.json "+meta(gap)+"/snapshots/3.json"),
			meta(gap)+"/snapshots/1.json:0\n"+meta(gap)+"/snapshots/3.json:1\n")
		r.fails("cat "+meta(gap)+"/snapshots/2.json", "No such file")
		r.eq("a body of the snapshot after the gap", r.sh(fmt.Sprintf("cat %s/seq/%d", meta(gap), gapSeq)), "c\n")
		r.fails("ls "+meta(gap)+"/at/3", eio)
		r.eq("the version of a session with a stray last key", r.sh("cat "+meta(far)+"/version"), "4294967295\n")
		r.eq("its versions", r.sh("ls "+meta(far)+"/at"), "0\n1\n4294967295\n")
		r.eq("its snapshots", r.sh("ls "+meta(far)+"/snapshots"), "1.json\n4294967295.json\n")
		r.eq("its history", r.sh("cat "+meta(far)+"/at/1/a.txt"), "a\n")
		r.fails("ls "+sess(far), eio)
		r.fails("ls "+sess(bare), eio)
		r.eq("an invalid snapshot type", r.sh("grep -c '\"type-invalid\": \"weird\"' "+meta(weird)+"/snapshots/1.json"), "1\n")
		waitFor(t, "a log line about the invalid type", func() bool { return strings.Contains(m.Log(), `type=weird`) })
		r.fails("cat "+sess(nosize)+"/nosize.txt", eio)
		r.eq("beside a size left out", r.sh("cat "+sess(nosize)+"/sized.txt"), "sized\n")
		r.fails("stat "+sess(huge)+"/huge.bin", eio)
		r.eq("stat of a session whose snapshot decodes past the limit", r.sh("stat -c %F "+sess(bomb)), "directory\n")
		r.fails("ls "+sess(bomb), eio)
		r.eq("its version", r.sh("cat "+meta(bomb)+"/version"), "2\n")
		r.eq("its version 1", r.sh("cat "+meta(bomb)+"/at/1/a.txt"), "a\n")
		r.eq("tar of a session with a file claiming 2^62 bytes", r.sh("(timeout 60 tar cf - -C "+sess(huge)+" . 2>/dev/null; echo $? >&2) | tar tf - | sort"), "./\n./beside.txt\n")
		for _, what := range []string{"version 3 is missing", "no manifest"} {
			waitFor(t, "a log line saying "+what, func() bool { return strings.Contains(m.Log(), what) })
		}
		r.eq("good", r.sh("cat "+sess(good)+"/ok.txt"), "fine\n")
		r.eq("beside the lost blob", r.sh("cat "+sess(gone)+"/kept.txt"), "kept\n")
		r.eq("the lost file is listed", r.sh("ls "+sess(gone)), "kept.txt\nlost.txt\n")
		r.eq("stray snapshot key", r.sh("cat "+meta(good)+"/version"), "1\n")
		listed := r.sh("ls sessions")
		for _, id := range []layout.SessionID{good, p, child, q} {
			if !strings.Contains(listed, id.String()) {
				t.Errorf("ls sessions lacks %s:\n%s", id, listed)
			}
		}
		// One damaged descriptor costs its own file, not its snapshot:
		// every name is listed, the sound files read, the damaged one
		// is EIO (never the content it replaced), and the one whose
		// created-at and metadata could not be read keeps its body.
		r.eq("damaged descriptor's session", r.sh("ls "+sess(dmg)), "also.txt\nok.txt\nprev.txt\nwhen.txt\n")
		r.eq("beside a damaged descriptor", r.sh("cat "+sess(dmg)+"/ok.txt "+sess(dmg)+"/also.txt"), "ok\nalso\n")
		r.fails("cat "+sess(dmg)+"/prev.txt", eio)
		waitFor(t, "a log line naming the damaged descriptor", func() bool {
			return strings.Contains(m.Log(), `\"prev.txt\" in `+snap2+`: unreadable digest \"sha256:zz\"`)
		})
		r.eq("counted", r.sh("grep -c 'descriptors read with unreadable fields [1-9]' .pugmark/stats"), "1\n")
		r.eq("unreadable created-at and metadata", r.sh("cat "+sess(dmg)+"/when.txt"), "when\n")
		r.eq("metadata of another JSON type", r.sh("getfattr --only-values -n user.pugmark.meta.n "+sess(dmg)+"/when.txt"), "3")
		r.eq("its version", r.sh("cat "+meta(dmg)+"/version"), "2\n")
		// log.jsonl shows the fields as stored.
		r.eq("log.jsonl", r.sh("grep -c -e '\"digest\":\"sha256:zz\"' -e '\"created-at\":\"yesterday\"' "+meta(dmg)+"/log.jsonl"), "2\n")
		r.eq("history before the damage", r.sh("cat "+meta(dmg)+"/at/1/prev.txt"), "old\n")
		// A rename commits a sound descriptor for the same blob, with
		// the metadata as read.
		r.sh("mv " + sess(dmg) + "/when.txt " + sess(dmg) + "/moved.txt")
		last, err := s.ReadSnapshot(ctx, dmg, 3)
		if err != nil {
			t.Fatal(err)
		} else if d := last[len(last)-1]; d.Name != "moved.txt" || d.Damage != nil || d.Digest != when.Digest || d.Metadata["n"] != "3" {
			t.Errorf("renamed descriptor %+v", d)
		}
		r.eq("renamed", r.sh("cat "+sess(dmg)+"/moved.txt"), "when\n")
		r.eq("fork of the good part", r.sh("cat "+sess(child)+"/p.txt "+sess(child)+"/forked.txt"), "p at 1\nchild\n")
		r.eq("inner namespace", r.sh("cat memories/broken/inner/x.md"), "inner\n")
		r.eq("other namespace", r.sh("cat memories/fine/y.md"), "fine\n")
		r.eq("memories", r.sh("ls memories"), "broken\nfine\n")
		r.eq("names", r.sh("readlink names/good"), "../sessions/"+good.String()+"\n")
		r.eq("ls names", r.sh("ls names"), "good\ntwolines\n")
		r.eq("ls -l names still lists", r.sh("{ ls -l names 2>/dev/null || true; } | grep -c good"), "1\n")
	})
}
