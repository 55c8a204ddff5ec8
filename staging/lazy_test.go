package staging

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/gcerrors"
)

// refuseBlobReads makes every blob GET fail while the returned switch is
// on: what an operation does then without error, it did without reading
// a blob.
func (r *writerRig) refuseBlobReads() *atomic.Bool {
	var on atomic.Bool
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, FailProb: 1,
		Err: faultblob.PermanentError(gcerrors.PermissionDenied), While: on.Load})
	return &on
}

// countBlobStores counts the requests that store a blob or find it
// stored (a PUT, or a HEAD: layout.Options.PutBlindBelow).
func (r *writerRig) countBlobStores() *atomic.Int64 {
	var n atomic.Int64
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpPut | faultblob.OpHead, Match: faultblob.Match{Prefix: layout.ObjectsPrefix},
		While: func() bool { n.Add(1); return false }})
	return &n
}

// futimens sets s's modification time through its descriptor, as
// touch(1) does once it opened the file.
func futimens(s *File) {
	mt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.Touch()
	s.changeAttrs(func(a *Attrs) { a.Meta = AttrChange{Mtime: &mt}.Apply(a.Meta, time.Time{}) })
}

// TestWriterOpenFetchesOnlyWhatAChangeNeeds: a file opened for writing
// without O_TRUNC holds its committed content lazily. An open, a touch,
// a cut to nothing or to its own size, and a rename read no blob (the
// bucket refuses every blob read here) and store none: the commit names
// the same blob, as does a hard link's copy. A read, a write or a cut to another size fetches the
// content; when that fetch fails the change fails, and the file is still
// what it was, whole. `touch` of a committed 1 GB file on a remote bucket
// downloaded all of it at the open (audit 5).
func TestWriterOpenFetchesOnlyWhatAChangeNeeds(t *testing.T) {
	ctx := context.Background()
	body := big("0123456789abcdef\n")
	n := int64(len(body))
	for _, c := range []struct {
		name    string
		change  func(w *Writer, id layout.SessionID, s *File) error
		fetches bool   // needs the committed bytes
		want    string // content committed
		as      string // name committed as, "" for f
		ctype   string // content type committed, "" for f's
	}{
		{name: "touch", change: func(*Writer, layout.SessionID, *File) error { return nil }, want: body},
		{name: "truncate-to-its-size", change: func(_ *Writer, _ layout.SessionID, s *File) error {
			return s.Truncate(ctx, n)
		}, want: body},
		{name: "truncate-to-nothing", change: func(_ *Writer, _ layout.SessionID, s *File) error {
			return s.Truncate(ctx, 0)
		}, want: "", ctype: "application/octet-stream"},
		{name: "rename", change: func(w *Writer, id layout.SessionID, s *File) error {
			return w.Rename(ctx, id, "f", "g.md", false)
		}, want: body, as: "g.md", ctype: "text/markdown; charset=utf-8"},
		{name: "link", change: func(w *Writer, id layout.SessionID, s *File) error {
			futimens(s) // changed and not committed: the link copies the staged file
			return w.Link(ctx, id, "f", "h")
		}, want: body, as: "h"},
		{name: "read", fetches: true, change: func(_ *Writer, _ layout.SessionID, s *File) error {
			buf := make([]byte, 10)
			k, err := s.ReadAt(ctx, buf, 5)
			if err == nil && string(buf[:k]) != body[5:15] {
				t.Errorf("read %q at 5, want %q", buf[:k], body[5:15])
			}
			return err
		}, want: body},
		{name: "write-in-place", fetches: true, change: func(_ *Writer, _ layout.SessionID, s *File) error {
			_, err := s.WriteAt(ctx, []byte("XY"), 10)
			return err
		}, want: body[:10] + "XY" + body[12:]},
		{name: "append", fetches: true, change: func(_ *Writer, _ layout.SessionID, s *File) error {
			_, err := s.Append(ctx, []byte("more\n"))
			return err
		}, want: body + "more\n"},
		{name: "truncate-shorter", fetches: true, change: func(_ *Writer, _ layout.SessionID, s *File) error {
			return s.Truncate(ctx, 100)
		}, want: body[:100]},
		{name: "truncate-longer", fetches: true, change: func(_ *Writer, _ layout.SessionID, s *File) error {
			return s.Truncate(ctx, n+5)
		}, want: body + "\x00\x00\x00\x00\x00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newWriterRigTTL(t, time.Hour, nil)
			base := r.commitBlob(t, "f", body, "")
			refuse := r.refuseBlobReads()
			refuse.Store(true)
			stores := r.countBlobStores()
			s, err := r.w.Open(ctx, r.id, "f", &base, false)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			if got := s.Stat().Size; got != n {
				t.Fatalf("size %d once open, want %d", got, n)
			}
			err = c.change(r.w, r.id, s)
			if c.fetches {
				if err == nil {
					t.Fatal("the change went on while the bucket refused the blob")
				}
				refuse.Store(false)
				whole := make([]byte, n+1)
				k, rerr := s.ReadAt(ctx, whole, 0)
				if rerr != nil || string(whole[:k]) != body || s.Stat().Size != n {
					t.Fatalf("after the failed fetch the file reads %d bytes (%v), size %d; want its %d bytes", k, rerr, s.Stat().Size, n)
				}
				err = c.change(r.w, r.id, s)
			}
			if err != nil {
				t.Fatal(err)
			}
			futimens(s)
			if err := r.w.Release(ctx, r.id, s); err != nil {
				t.Fatalf("release: %v", err)
			}
			refuse.Store(false)
			as := c.as
			if as == "" {
				as = "f"
			}
			e, ok := r.slot(t, as)
			if !ok || e.Version <= base.Version {
				t.Fatalf("%s at version %d (%v), want a commit above %d", as, e.Version, ok, base.Version)
			}
			if stored := stores.Load(); (c.want == body) != (e.Digest == base.Digest) || (c.want == body) != (stored == 0) {
				t.Fatalf("committed blob %s (was %s), %d blob stores; want the same blob, none stored, iff the bytes stayed",
					e.Digest, base.Digest, stored)
			}
			got, err := r.store.ReadBlob(ctx, e.Digest, 1<<20)
			if err != nil || string(got) != c.want {
				t.Fatalf("%s holds %d bytes (%v), want %d", as, len(got), err, len(c.want))
			}
			ctype := c.ctype
			if ctype == "" {
				ctype = base.ContentType
			}
			if e.ContentType != ctype {
				t.Fatalf("content type %q, want %q", e.ContentType, ctype)
			}
		})
	}
}

// TestWriterOpenKeepsAnEncodedBlob: a file whose body is gzip-encoded,
// opened for writing and closed unchanged (touch), stays that blob, its
// encoding declared; written to, it becomes a plain blob of the decoded
// bytes with the change.
func TestWriterOpenKeepsAnEncodedBlob(t *testing.T) {
	ctx := context.Background()
	body := big("compressible line\n")
	r := newWriterRigTTL(t, time.Hour, nil)
	base := r.commitBlob(t, "f", body, layout.EncodingGzip)
	touch := func(change func(s *File)) layout.Entry {
		t.Helper()
		cur, _ := r.slot(t, "f")
		s, err := r.w.Open(ctx, r.id, "f", &cur, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Stat().Size; got != int64(len(body)) {
			t.Fatalf("size %d once open, want the decoded %d", got, len(body))
		}
		change(s)
		futimens(s)
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		e, _ := r.slot(t, "f")
		return e
	}
	e := touch(func(*File) {})
	if e.Digest != base.Digest || e.ContentEncoding != layout.EncodingGzip || e.Version != base.Version+1 {
		t.Fatalf("touched: blob %s, encoding %q, version %d; want %s, gzip, %d", e.Digest, e.ContentEncoding, e.Version, base.Digest, base.Version+1)
	}
	e = touch(func(s *File) {
		if _, err := s.Append(ctx, []byte("more\n")); err != nil {
			t.Fatal(err)
		}
	})
	got, err := r.store.ReadBlob(ctx, e.Digest, 1<<20)
	if err != nil || e.ContentEncoding != "" || !bytes.Equal(got, []byte(body+"more\n")) {
		t.Fatalf("appended: encoding %q, %d bytes (%v), ends %q; want plain, the decoded body and the line",
			e.ContentEncoding, len(got), err, got[max(0, len(got)-20):])
	}
	if !strings.HasSuffix(string(got), "line\nmore\n") {
		t.Fatalf("appended blob ends %q", got[len(got)-20:])
	}
}

// TestWriterFillHoldsNothing: while the first write of a file held
// lazily waits for its bytes, the file answers stat and reads (from the
// blob), and a cut to nothing made meanwhile stands: the write lands on
// the cut file, not on the copy that was being fetched.
func TestWriterFillHoldsNothing(t *testing.T) {
	ctx := context.Background()
	body := big("0123456789abcdef\n")
	r := newWriterRigTTL(t, time.Hour, nil)
	base := r.commitBlob(t, "f", body, "")
	s, err := r.w.Open(ctx, r.id, "f", &base, false)
	if err != nil {
		t.Fatal(err)
	}
	// The fill's blob read waits at the gate.
	var armed atomic.Bool
	armed.Store(true)
	g := faultblob.NewGate()
	t.Cleanup(g.Release) // before the rig's: a failure here must not hang its shutdown
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g, While: armed.Load})
	wrote := make(chan error, 1)
	go func() {
		_, err := s.WriteAt(ctx, []byte("XY"), 10)
		wrote <- err
	}()
	waitStalled(t, g, 1)
	armed.Store(false)
	answered := make(chan FileStat, 1)
	go func() { answered <- s.Stat() }()
	select {
	case st := <-answered:
		if st.Size != int64(len(body)) {
			t.Fatalf("size %d while the bytes are fetched, want %d", st.Size, len(body))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stat waits for the fill")
	}
	if err := s.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	g.Release()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	k, err := s.ReadAt(ctx, buf, 0)
	if want := "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00XY"; err != nil || string(buf[:k]) != want {
		t.Fatalf("after the cut and the write the file reads %q (%v), want %q", buf[:k], err, want)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
}

// TestWriterXattrOfCommittedFileCommitsAtClose: setxattr of a committed
// file open for writing commits at the descriptor's close, as a chmod
// through it does, so that close(2) says how the commit went. Left to the
// release, a refusal reached nobody: close returned 0 and the metadata
// went to failed/ (audit 6). Here another mount rewrote the file since it
// was opened: the attribute goes on the rewrite, as a chmod's does
// (audit 41, F7: the close was ESTALE). A file created and never
// committed keeps its metadata for the commit of its content.
func TestWriterXattrOfCommittedFileCommitsAtClose(t *testing.T) {
	ctx := context.Background()
	setK := func(s *File) {
		s.changeAttrs(func(a *Attrs) { a.Meta = map[string]string{"k": "v"} })
	}
	t.Run("committed", func(t *testing.T) {
		r := newWriterRigTTL(t, time.Hour, nil)
		base := r.commitBlob(t, "f", big("base\n"), "")
		s, err := r.w.Open(ctx, r.id, "f", &base, false)
		if err != nil {
			t.Fatal(err)
		}
		r.otherWriter(t, "f", "theirs\n")
		setK(s)
		if err := r.w.Flush(ctx, r.id, s, false); err != nil {
			t.Fatalf("close after setxattr: %v", err)
		}
		if e, _ := r.slot(t, "f"); e.Metadata["k"] != "v" {
			t.Fatalf("f's metadata %v after the close, want k=v committed", e.Metadata)
		}
		r.w.Release(ctx, r.id, s)
		if got := r.slotBody(t, "f"); got != "theirs\n" {
			t.Fatalf("f holds %q, want the other mount's", got)
		}
	})
	t.Run("created", func(t *testing.T) {
		r := newWriterRigTTL(t, time.Hour, nil)
		v := r.latest(t)
		s, err := r.w.Open(ctx, r.id, "g", nil, true)
		if err != nil {
			t.Fatal(err)
		}
		setK(s)
		if err := r.w.Flush(ctx, r.id, s, false); err != nil {
			t.Fatal(err)
		}
		if got := r.latest(t); got != v {
			t.Fatalf("a flush of a new file with metadata only committed version %d", got)
		}
		if _, err := s.WriteAt(ctx, []byte("body\n"), 0); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Release(ctx, r.id, s); err != nil {
			t.Fatal(err)
		}
		e, ok := r.slot(t, "g")
		if !ok || e.Version != v+1 || e.Metadata["k"] != "v" || string(e.Data) != "body\n" {
			t.Fatalf("g at version %d (%v), metadata %v, %q; want one commit of both at %d", e.Version, ok, e.Metadata, e.Data, v+1)
		}
	})
}

// TestWriterLazyReadHoldsNothing: a read of a file held lazily that
// waits for the bucket holds up no change of the file's attributes (and
// so no stat behind that change).
func TestWriterLazyReadHoldsNothing(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigTTL(t, time.Hour, nil)
	base := r.commitBlob(t, "f", big("0123456789abcdef\n"), "")
	s, err := r.w.Open(ctx, r.id, "f", &base, false)
	if err != nil {
		t.Fatal(err)
	}
	g := faultblob.NewGate()
	t.Cleanup(g.Release) // before the rig's: a failure here must not hang its shutdown
	r.inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Match: faultblob.Match{Prefix: layout.ObjectsPrefix}, Stall: g})
	read := make(chan error, 1)
	go func() {
		_, err := s.ReadAt(ctx, make([]byte, 10), 0)
		read <- err
	}()
	waitStalled(t, g, 1)
	changed := make(chan struct{})
	go func() {
		futimens(s)
		_ = s.Stat()
		close(changed)
	}()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a change of the file's attributes waits for a read of its blob")
	}
	g.Release()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
}

// TestWriterFillRemakesStagingDir: the first write to a committed file
// opened without O_TRUNC (held lazily) copies its bytes into a new spill
// file; when the staging directory was removed meanwhile (a cleaner
// emptying ~/.cache), that copy makes it again, as a create does. It
// failed with ENOENT, on an open descriptor, until some create happened
// to make the directory again.
func TestWriterFillRemakesStagingDir(t *testing.T) {
	ctx := context.Background()
	r := newWriterRigTTL(t, time.Hour, nil)
	body := big("0123456789abcdef\n")
	base := r.commitBlob(t, "f", body, "")
	s, err := r.w.Open(ctx, r.id, "f", &base, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(r.cfg.StagingDir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("X"), 0); err != nil {
		t.Fatalf("first write after the staging directory was removed: %v", err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	if e, ok := r.slot(t, "f"); !ok || e.Digest != layout.DigestOf([]byte("X"+body[1:])) {
		t.Fatalf("f after the write: %+v, %v; want the edited bytes", e, ok)
	}
}
