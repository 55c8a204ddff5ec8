package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// TestReadOthersCommits: what other writers commit to the bucket after the
// mount read it appears within the metadata TTL (tree.md "Reading"):
// new versions of a cached session, new sessions, moved names, memory and
// ref changes, new blobs. With --metadata-ttl=0 it appears at once.
func TestReadOthersCommits(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		ctx := context.Background()
		s := bk.Store
		put := func(name, body string, at time.Time) layout.Descriptor {
			t.Helper()
			defer rdCatch(t)
			return rdPutDesc(t, s, name, "text/plain", "", []byte(body), at)
		}
		commit := func(id layout.SessionID, ds ...layout.Descriptor) {
			t.Helper()
			if _, err := s.Commit(ctx, id, layout.CommitRequest{Type: layout.Provisional, Descriptors: ds}); err != nil {
				t.Fatal(err)
			}
		}
		a, _, err := s.CreateNamedSession(ctx, "alpha", s.NewRootManifest())
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := s.CreateSession(ctx, s.NewRootManifest())
		if err != nil {
			t.Fatal(err)
		}
		commit(a.Session, put("f.txt", "one\n", fixT1), put("gone.txt", "bye\n", fixT1))
		commit(b.Session, put("b.txt", "b\n", fixT1))
		memRec := func(body string) {
			t.Helper()
			defer rdCatch(t)
			rdMemPut(t, s, "shared", "note.md", body)
		}
		memRec("v1\n")
		if err := s.Link(ctx, "pointer", "first"); err != nil {
			t.Fatal(err)
		}

		m := mount(t, bk) // default TTL, 1 s
		zero := mount(t, bk, "--metadata-ttl=0", "--read-only")
		for _, mm := range []*Mount{m, zero} {
			r := &rdCtx{t: t, bk: bk, m: mm, dir: mm.Dir}
			// Read everything once, so that it is cached.
			r.sh("ls -lR sessions names memories refs > /dev/null && cat " + sess(a.Session) + "/f.txt " + meta(a.Session) + "/version memories/shared/note.md refs/pointer names/alpha/f.txt > /dev/null")
		}
		mtime0 := sh(t, m.Dir, "stat -c %Y "+sess(a.Session))

		// Other writers, after the mount read it all.
		later := time.Now().UTC().Truncate(time.Second)
		commit(a.Session, put("f.txt", "two\n", later), put("new.txt", "new\n", later), layout.Descriptor{Name: "gone.txt", Deleted: true, CreatedAt: later})
		c, _, err := s.CreateSession(ctx, s.NewRootManifest())
		if err != nil {
			t.Fatal(err)
		}
		commit(c.Session, put("c.txt", "c\n", later))
		key, _ := layout.ManifestKey(b.Session)
		if err := s.Link(ctx, layout.SessionRefName("alpha"), key); err != nil { // the name moves to b
			t.Fatal(err)
		}
		if err := s.Link(ctx, layout.SessionRefName("gamma"), key); err != nil {
			t.Fatal(err)
		}
		memRec("v2\n")
		if err := s.Link(ctx, "pointer", "second"); err != nil {
			t.Fatal(err)
		}
		fresh := put("fresh-blob.txt", "a blob no session names yet\n", later)

		checks := []struct{ what, script, want string }{
			{"changed file", "cat " + sess(a.Session) + "/f.txt", "two\n"},
			{"new file", "cat " + sess(a.Session) + "/new.txt", "new\n"},
			{"tombstoned file", "ls " + sess(a.Session), "f.txt\nnew.txt\n"},
			{"version", "cat " + meta(a.Session) + "/version", "2\n"},
			{"history", "ls " + meta(a.Session) + "/at", "0\n1\n2\n"},
			{"old version kept", "cat " + meta(a.Session) + "/at/1/f.txt", "one\n"},
			{"snapshots", "ls " + meta(a.Session) + "/snapshots", "1.json\n2.json\n"},
			{"log", "wc -l < " + meta(a.Session) + "/log.jsonl", "5\n"},
			{"session mtime", "stat -c %Y " + sess(a.Session), strconv.FormatInt(later.Unix(), 10) + "\n"},
			{"new session listed", "ls sessions | grep -c " + c.Session.String(), "1\n"},
			{"new session", "cat " + sess(c.Session) + "/c.txt", "c\n"},
			{"moved name", "readlink names/alpha", "../sessions/" + b.Session.String() + "\n"},
			{"through the moved name", "ls names/alpha/", "b.txt\n"},
			{"new name", "ls names", "alpha\ngamma\n"},
			{"memory", "cat memories/shared/note.md", "v2\n"},
			{"ref", "cat refs/pointer", "second\n"},
			{"new blob", "cat objects/" + fresh.Digest.String(), "a blob no session names yet\n"},
			{"new blob listed", "ls objects | grep -c " + fresh.Digest.Hex(), "1\n"},
		}
		// TTL 0: at once, no polling.
		for _, c := range checks {
			if got, _, err := run(zero.Dir, c.script); err != nil || got != c.want {
				t.Errorf("--metadata-ttl=0: %s: %q (%v), want %q", c.what, got, err, c.want)
			}
		}
		// Default TTL: within it (polled, generously).
		for _, c := range checks {
			waitFor(t, c.what+" on a 1 s TTL mount", func() bool {
				got, _, err := run(m.Dir, c.script)
				return err == nil && got == c.want
			})
		}
		if mtime0 == sh(t, m.Dir, "stat -c %Y "+sess(a.Session)) {
			t.Errorf("the session's mtime did not move with its content append")
		}
		// The two sessions with the newest content come first.
		got := strings.Fields(sh(t, m.Dir, "ls -t sessions | head -2"))
		want := sorted([]string{a.Session.String(), c.Session.String()})
		if strings.Join(sorted(got), " ") != strings.Join(want, " ") {
			t.Errorf("ls -t sessions starts with %v, want %v", got, want)
		}
	})
}
