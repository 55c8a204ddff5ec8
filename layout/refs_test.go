package layout

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout/faultblob"
)

// §9: Link is an unconditional PUT of one text/plain line with
// Cache-Control no-cache (§16); ReadRef returns it.
func TestSection9_LinkAndReadRef(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		_, err := s.ReadRef(bg, "nope")
		wantErrIs(t, err, ErrNotFound)
		if err := s.Link(bg, "foo", "first target"); err != nil {
			t.Fatal(err)
		}
		if err := s.Link(bg, "foo", "second target"); err != nil { // overwrite
			t.Fatal(err)
		}
		r, err := s.ReadRef(bg, "foo")
		if err != nil || r.Target != "second target" || r.Name != "foo" {
			t.Fatalf("%+v %v", r, err)
		}
		body, _ := b.ReadAll(bg, "refs/foo")
		if string(body) != "second target" {
			t.Fatalf("body %q", body)
		}
		a, _ := b.Attributes(bg, "refs/foo")
		if a.CacheControl != CacheNoCache || !strings.HasPrefix(a.ContentType, "text/plain") {
			t.Fatalf("attributes cache %q type %q", a.CacheControl, a.ContentType)
		}
		// A trailing newline is tolerated; more lines are corrupt.
		putRaw(t, b, "refs/nl", []byte("target\n"), nil)
		if r, err := s.ReadRef(bg, "nl"); err != nil || r.Target != "target" {
			t.Fatalf("%+v %v", r, err)
		}
		putRaw(t, b, "refs/crlf", []byte("target\r\n"), nil)
		if r, err := s.ReadRef(bg, "crlf"); err != nil || r.Target != "target" {
			t.Fatalf("%+v %v", r, err)
		}
		putRaw(t, b, "refs/two", []byte("a\nb\n"), nil)
		_, err = s.ReadRef(bg, "two")
		wantErrIs(t, err, ErrCorrupt)
		for _, target := range []string{"", "a\nb", "a\rb", "a\x00b"} {
			wantErrIs(t, s.Link(bg, "foo", target), ErrInvalid)
		}
		wantErrIs(t, s.Link(bg, "a/b/c", "x"), ErrInvalid)
		if err := s.Link(bg, "sessions/x", "y"); err != nil {
			t.Fatal(err)
		}
		putRaw(t, b, "refs/deep/er/name", []byte("x"), nil)
		var bad []string
		refs, err := s.ListRefs(bg, func(k string, err error) { bad = append(bad, k) })
		if err != nil || strings.Join(refs, ",") != "crlf,foo,nl,sessions/x,two" || len(bad) != 1 {
			t.Fatalf("refs %v %v bad %v", refs, err, bad)
		}
		if err := s.DeleteRef(bg, "foo"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRef(bg, "foo"); err != nil { // idempotent
			t.Fatal(err)
		}
		_, err = s.ReadRef(bg, "foo")
		wantErrIs(t, err, ErrNotFound)
	})
}

// §15: a ref body is decoded per its Content-Encoding before it is read
// as a line, and a sniffed gzip or zstd body too; a body that does not
// decode is corrupt, never a target made of compressed bytes.
func TestSection15_EncodedRefs(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("gzipped target\n"))
	zw.Close()
	zs := encoder().EncodeAll([]byte("zstd target"), nil)
	cases := []struct {
		name, enc string
		body      []byte
		want      string // "" wants ErrCorrupt
	}{
		{"gz", EncodingGzip, gz.Bytes(), "gzipped target"},
		{"zs", EncodingZstd, zs, "zstd target"},
		{"sniffed", "", gz.Bytes(), "gzipped target"},
		{"identity", "identity", []byte("plain\n"), "plain"},
		{"broken", EncodingGzip, gz.Bytes()[:10], ""},
	}
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		for _, c := range cases {
			putRaw(t, b, "refs/sessions/"+c.name, c.body, &blob.WriterOptions{ContentType: "text/plain", ContentEncoding: c.enc})
			r, err := s.ReadRef(bg, "sessions/"+c.name)
			if c.want == "" {
				wantErrIs(t, err, ErrCorrupt)
				continue
			}
			if err != nil || r.Target != c.want {
				t.Errorf("%s: %+v %v, want target %q", c.name, r, err, c.want)
			}
		}
	})
}

// §9.1: a named session has refs/sessions/<n> whose body is exactly the
// manifest key; CheckSessionRef fails with ErrRefMoved once it points
// elsewhere.
func TestSection9_1_SessionRefs(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		m, created, err := s.CreateNamedSession(bg, "demo", nil)
		if err != nil || !created || m.Name != "demo" {
			t.Fatalf("%+v %v %v", m, created, err)
		}
		key, _ := ManifestKey(m.Session)
		body, _ := b.ReadAll(bg, "refs/sessions/demo")
		if string(body) != key {
			t.Fatalf("ref body %q, want %q", body, key)
		}
		stored, err := s.LoadManifest(bg, m.Session)
		if err != nil || stored.Name != "demo" || stored.FirstSequenceNumber != 1 {
			t.Fatalf("%+v %v", stored, err)
		}
		if id, err := s.ResolveSessionName(bg, "demo"); err != nil || id != m.Session {
			t.Fatalf("%v %v", id, err)
		}
		if err := s.CheckSessionRef(bg, "demo", m.Session); err != nil {
			t.Fatal(err)
		}
		// Creating it again returns the existing session.
		again, created, err := s.CreateNamedSession(bg, "demo", nil)
		if err != nil || created || again.Session != m.Session {
			t.Fatalf("%+v %v %v", again, created, err)
		}
		// The name is reassigned: the old owner must stop (§9.1, §14.1).
		other := newSession(t, s)
		okey, _ := ManifestKey(other)
		if err := s.Link(bg, "sessions/demo", okey); err != nil {
			t.Fatal(err)
		}
		wantErrIs(t, s.CheckSessionRef(bg, "demo", m.Session), ErrRefMoved)
		if err := s.CheckSessionRef(bg, "demo", other); err != nil {
			t.Fatal(err)
		}
		wantErrIs(t, s.CheckSessionRef(bg, "missing", m.Session), ErrNotFound)
		// A ref that does not hold a manifest key is corrupt.
		if err := s.Link(bg, "sessions/bad", "sessions/not/a/key"); err != nil {
			t.Fatal(err)
		}
		_, err = s.ResolveSessionName(bg, "bad")
		wantErrIs(t, err, ErrCorrupt)
		wantErrIs(t, s.CheckSessionRef(bg, "bad", m.Session), ErrCorrupt)
		_, _, err = s.CreateNamedSession(bg, "a/b", nil)
		wantErrIs(t, err, ErrInvalid)
	})
}

// §9.2: naming an existing session (an explicit manifest that already
// exists) and losing the race must not delete that session.
func TestSection9_2_LoserKeepsPreexistingManifest(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		pre := make([]*Manifest, racers)
		for i := range pre {
			pre[i] = s.NewRootManifest()
			if _, _, err := s.CreateSession(bg, pre[i]); err != nil {
				t.Fatal(err)
			}
		}
		errs := make([]error, racers)
		got := make([]*Manifest, racers)
		race(racers, func(i int) {
			m := *pre[i]
			got[i], _, errs[i] = s.CreateNamedSession(bg, "taken", &m)
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%d: %v", i, err)
			}
			if got[i].Session != got[0].Session {
				t.Fatalf("callers disagree on the winner")
			}
		}
		for i, m := range pre {
			if ok, err := s.SessionExists(bg, m.Session); !ok || err != nil {
				t.Fatalf("pre-existing session %d deleted by a losing CreateNamedSession: %v", i, err)
			}
		}
	})
}

// §9 Rename: compare-and-swap on the prior value. Without If-Match
// (memblob) it falls back to PUT + re-read and reports ErrWeakCAS; a stale
// prev is ErrConflict and changes nothing.
func TestSection9_RenameRefCAS(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, &Options{Retries: 4})
		if err := s.Link(bg, "r", "one"); err != nil {
			t.Fatal(err)
		}
		prev, err := s.ReadRef(bg, "r")
		if err != nil {
			t.Fatal(err)
		}
		before := s.Stats()
		err = s.RenameRef(bg, "r", prev, "two")
		switch {
		case err == nil:
			if testbucket.KindOf(t, b) == testbucket.Mem {
				t.Fatal("memblob has no If-Match, yet RenameRef claimed a strong swap")
			}
		case errors.Is(err, ErrWeakCAS):
		default:
			t.Fatalf("rename: %v", err)
		}
		if st := s.Stats(); st.Retries != before.Retries || st.Errors != before.Errors {
			t.Fatalf("rename made %d retries, %d errors (retrying an unsupported If-Match?)", st.Retries-before.Retries, st.Errors-before.Errors)
		}
		if testbucket.KindOf(t, b) == testbucket.Mem {
			wantErrIs(t, err, ErrWeakCAS)
		}
		if r, _ := s.ReadRef(bg, "r"); r.Target != "two" {
			t.Fatalf("target %q after rename", r.Target)
		}
		// prev is stale now: a conflict that says what changed (not the
		// checkpoint a commit's conflict speaks of).
		err = s.RenameRef(bg, "r", prev, "three")
		wantErrIs(t, err, ErrConflict)
		wantErrIs(t, err, ErrRefChanged)
		if strings.Contains(err.Error(), "checkpoint") {
			t.Errorf("a ref's conflict reads %q", err)
		}
		if r, _ := s.ReadRef(bg, "r"); r.Target != "two" {
			t.Fatalf("a stale rename changed the ref to %q", r.Target)
		}
		// A stale prev whose swap already holds the new target: the retry
		// of an If-Match PUT whose response was lost meets its own write,
		// which is a success, not a conflict (§13.2).
		if err := s.RenameRef(bg, "r", prev, "two"); err != nil && !errors.Is(err, ErrWeakCAS) {
			t.Fatalf("a swap to the target the ref already holds: %v", err)
		}
		// Stale target but an ETag from a HEAD of the same value.
		wantErrIs(t, s.RenameRef(bg, "r", Ref{Name: "r", Target: "one"}, "three"), ErrConflict)
		// Creating through RenameRef with an empty prev.
		if err := s.RenameRef(bg, "fresh", Ref{}, "v"); err != nil && !errors.Is(err, ErrWeakCAS) {
			t.Fatal(err)
		}
		if r, _ := s.ReadRef(bg, "fresh"); r.Target != "v" {
			t.Fatalf("fresh %q", r.Target)
		}
		// A second writer that also saw it absent loses: two mounts
		// creating one ref both succeeded, the first's value gone (the
		// cloud audit).
		wantErrIs(t, s.RenameRef(bg, "fresh", Ref{}, "w"), ErrRefChanged)
		if r, _ := s.ReadRef(bg, "fresh"); r.Target != "v" {
			t.Fatalf("a second create replaced the ref: %q", r.Target)
		}
		wantErrIs(t, s.RenameRef(bg, "r", prev, ""), ErrInvalid)
		wantErrIs(t, s.RenameRef(bg, "a/b/c", prev, "x"), ErrInvalid)
	})
}

// TestSection9_DeleteRefIf: the old name of a renamed ref is removed only
// if it still holds the value the rename copied: a plain delete removed a
// value another writer had put there meanwhile (audit 28). A ref gone
// already is no error; memblob, without conditional deletes, compares a
// re-read and says so (ErrWeakCAS), as does every backend here.
func TestSection9_DeleteRefIf(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, &Options{Retries: 4})
		if err := s.Link(bg, "r", "one"); err != nil {
			t.Fatal(err)
		}
		read, err := s.ReadRef(bg, "r")
		if err != nil {
			t.Fatal(err)
		}
		// Another writer sets it meanwhile: the delete is refused and
		// the value stays.
		if err := s.RenameRef(bg, "r", read, "two"); err != nil && !errors.Is(err, ErrWeakCAS) {
			t.Fatal(err)
		}
		wantErrIs(t, s.DeleteRefIf(bg, "r", read), ErrRefChanged)
		if r, err := s.ReadRef(bg, "r"); err != nil || r.Target != "two" {
			t.Fatalf("after a refused delete the ref reads %q, %v; want the other writer's value", r.Target, err)
		}
		// Unchanged since it was read: removed.
		now, err := s.ReadRef(bg, "r")
		if err != nil {
			t.Fatal(err)
		}
		// (The drivers' hooks are not registered here: every backend
		// compares a re-read; layout/drivers tests the conditional
		// deletes, TestDeleteRefIfStrong.)
		err = s.DeleteRefIf(bg, "r", now)
		wantErrIs(t, err, ErrWeakCAS)
		if _, err := s.ReadRef(bg, "r"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after the delete: %v, want ErrNotFound", err)
		}
		// Gone already: no error.
		if err := s.DeleteRefIf(bg, "r", now); err != nil {
			t.Fatalf("delete of a ref gone already: %v", err)
		}
	})
}

var _ = fmt.Sprint

// TestNamedSessionLoserWhoseReReadFails: §9.2. A writer whose claim of
// refs/sessions/<name> was refused at its first PUT lost the name for
// certain and deletes its manifest even when its re-read of the ref then
// fails; it returned the error and left the manifest, naming <name>, in
// the bucket for good (review 4: two sessions of one name, one without
// its ref). When the claim's outcome is unknown (an error after a PUT
// that may have landed), the manifest may be the winner's: it is left,
// and the error names it.
func TestNamedSessionLoserWhoseReReadFails(t *testing.T) {
	refKey, _ := RefKey(SessionRefName("job"))
	for _, c := range []struct {
		name     string
		rules    []faultblob.Rule
		wantErr  string
		dangling bool // the loser's manifest stays
	}{
		{"lost", []faultblob.Rule{
			// The loser's first look does not see the winner's ref yet,
			// then the ref's HEADs fail.
			{Ops: faultblob.OpHead, Match: faultblob.Match{Prefix: refKey}, FailNth: 1, Err: faultblob.PermanentError(gcerrors.NotFound)},
			{Ops: faultblob.OpHead, Match: faultblob.Match{Prefix: refKey}, FailProb: 1},
		}, "lost the name to another writer", false},
		{"unknown", []faultblob.Rule{
			{Ops: faultblob.OpHead, Match: faultblob.Match{Prefix: refKey}, FailNth: 1, Err: faultblob.PermanentError(gcerrors.NotFound)},
			{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: refKey}, FailProb: 1},
			{Ops: faultblob.OpHead, Match: faultblob.Match{Prefix: refKey}, FailProb: 1},
		}, "is left: it dangles unless the claim landed", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
			s := newStore(t, faultblob.Wrap(memBucket(), inj), &Options{Retries: 1})
			winner, _, err := s.CreateNamedSession(bg, "job", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range c.rules {
				inj.Add(r)
			}
			if _, _, err := s.CreateNamedSession(bg, "job", nil); err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("loser: %v, want an error saying %q", err, c.wantErr)
			}
			inj.Reset()
			if got, _, err := s.CreateNamedSession(bg, "job", nil); err != nil || got.Session != winner.Session {
				t.Fatalf("the caller's retry: %v %v, want the winner", got, err)
			}
			ids, err := s.ListSessions(bg, nil)
			if err != nil {
				t.Fatal(err)
			}
			named := 0
			for _, id := range ids {
				if m, err := s.LoadManifest(bg, id); err == nil && m.Name == "job" && id != winner.Session {
					named++
				}
			}
			if dangling := named > 0; dangling != c.dangling {
				t.Fatalf("%d other sessions named job in the bucket, want dangling %v", named, c.dangling)
			}
		})
	}
}

// TestSection9_RefWriteOutcomeUnknown: a ref write whose PUT may have
// landed (its reply lost, or cut by a deadline) and that the bucket then
// does not settle (its read back gets no answer, or finds the ref still
// as the PUT found it) is a *RefOutcomeUnknownError (ErrOutcomeUnknown,
// never a conflict), and ResolveRef answers once the bucket does. Before,
// it was the PUT's error, or ErrRefChanged when a retry met the
// precondition of its own landed write: a failure for good, for a ref
// that held exactly what was written. A write the bucket refused stays
// a plain failure. (Through these backends the swap is the weak one, and
// a create is If-None-Match; staging's TestRecordsRefWriteOutcomeUnknown
// runs the If-Match swap.)
func TestSection9_RefWriteOutcomeUnknown(t *testing.T) {
	deadline := faultblob.TransientError(gcerrors.DeadlineExceeded)
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		for _, c := range []struct {
			name      string
			existed   bool
			retries   int
			put       faultblob.Rule
			readsFail bool
			unknown   bool
			landed    bool
		}{
			{"create/reply lost, retry refused, no read back", false, 1, faultblob.Rule{FailFirst: 1, LoseResponse: true, Err: deadline}, true, true, true},
			{"create/cut by a deadline", false, -1, faultblob.Rule{FailFirst: 1, Err: deadline}, false, true, false},
			{"create/refused", false, -1, faultblob.Rule{FailFirst: 1}, false, false, false},
			{"swap/reply lost, no read back", true, -1, faultblob.Rule{FailFirst: 1, LoseResponse: true, Err: deadline}, true, true, true},
			{"swap/cut by a deadline", true, -1, faultblob.Rule{FailFirst: 1, Err: deadline}, false, true, false},
			{"swap/refused", true, -1, faultblob.Rule{FailFirst: 1}, false, false, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
				s := newStore(t, faultblob.Wrap(b, inj), &Options{Retries: c.retries})
				name := "unknown-" + strings.NewReplacer("/", "-", " ", "-", ",", "").Replace(c.name)
				key, _ := RefKey(name)
				var prev Ref
				if c.existed {
					if err := s.Link(bg, name, "before"); err != nil {
						t.Fatal(err)
					}
					var err error
					if prev, err = s.ReadRef(bg, name); err != nil {
						t.Fatal(err)
					}
				}
				c.put.Ops, c.put.Match = faultblob.OpPut, faultblob.Match{Prefix: key}
				inj.Add(c.put)
				if c.readsFail {
					// The weak swap reads the ref (a HEAD and a GET) before
					// its PUT; the bucket stops answering after that.
					skip := int64(0)
					if c.existed {
						skip = 2
					}
					var n atomic.Int64
					inj.Add(faultblob.Rule{Ops: faultblob.OpHead | faultblob.OpGet, Match: faultblob.Match{Prefix: key}, FailProb: 1,
						While: func() bool { return n.Add(1) > skip }})
				}
				err := s.RenameRef(bg, name, prev, "mine")
				inj.Reset()
				var u *RefOutcomeUnknownError
				switch {
				case err == nil, errors.Is(err, ErrWeakCAS):
					t.Fatalf("write whose PUT failed: %v, want an error", err)
				case errors.As(err, &u) != c.unknown || errors.Is(err, ErrOutcomeUnknown) != c.unknown:
					t.Fatalf("write: %v; want outcome unknown %v", err, c.unknown)
				case errors.Is(err, ErrConflict):
					t.Fatalf("write: %v reads as a conflict", err)
				}
				if !c.unknown {
					return
				}
				if u.Name != name || u.Target != "mine" {
					t.Fatalf("unknown outcome of %q -> %q, want %q -> mine", u.Name, u.Target, name)
				}
				cur, landed, err := s.ResolveRef(bg, u)
				if !c.landed {
					// Still as the PUT found it: a server may complete the
					// PUT yet, so nothing is settled (review 43) until the
					// ref changes.
					if !errors.Is(err, ErrOutcomeUnknown) || landed {
						t.Fatalf("ResolveRef of a ref still as the write found it: %+v, landed %v, %v; want it unknown still", cur, landed, err)
					}
					if err := s.Link(bg, name, "mine"); err != nil { // the server completes it
						t.Fatal(err)
					}
					if cur, landed, err = s.ResolveRef(bg, u); err != nil || !landed || cur.Target != "mine" {
						t.Fatalf("ResolveRef once the PUT landed late: %+v, landed %v, %v; want it landed", cur, landed, err)
					}
					return
				}
				if err != nil || landed != c.landed || landed && cur.Target != "mine" {
					t.Fatalf("ResolveRef: %+v, landed %v, %v; want landed %v", cur, landed, err, c.landed)
				}
			})
		}
	})
}
