package fs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// errEOF is the end-of-content signal of the blob cache.
var errEOF = io.EOF

// staged is a file being written: its bytes live in a spill file in the
// staging directory, never whole in memory. It is shared by every handle
// open on the same name in one session.
type staged struct {
	// mu guards everything below and serialises I/O on the spill file.
	// An upload holds it shared: reads and stats of the file go on while
	// its blob is stored, writes wait.
	mu sync.RWMutex
	// name is the slot name. Written under both writer.mu and mu (a
	// rename), so either lock is enough to read it; use slot() when
	// holding neither.
	name  string
	file  *os.File
	size  int64
	dirty bool
	// touched is set once bytes or metadata were changed through a
	// handle. A freshly created, untouched file is committed at release,
	// not at the first flush: shells dup and close the new fd before
	// writing, and committing that empty file would add a version.
	touched bool
	meta    map[string]string // user.pugmark.meta.<k>
	ctype   string            // set by setxattr user.pugmark.content-type
	schema  string
	created time.Time
	opens   int
	// committing is closed when the commit in flight for this file ends.
	committing chan struct{}
	// failed is set when a commit of the current content failed and the
	// error went back to the caller; it is cleared by the next change.
	// Release does not retry such a commit behind the caller's back.
	failed bool
	// sum is the SHA-256 state of file[0:summed], kept up to date by
	// writes that continue at summed (cp, >, >>), so a commit hashes only
	// what was written elsewhere; summed < 0 means it must start over.
	sum    hash.Hash
	summed int64
	// gen counts changes of content and metadata, so that an upload
	// knows whether what it stored is still what the file holds.
	gen uint64
	// unlinked is set when the name was removed (or renamed over) while
	// the file was open: what is still written through open descriptors
	// goes nowhere, as with any unlinked file.
	unlinked bool
	// committed is the descriptor this staged file last became.
	committed *layout.Entry
	// werr is set when a write or truncate of the content failed (the
	// staging disk is full, say): the file does not hold what was
	// written to it, so it is not committed (the error is returned by
	// close and fsync instead) until it is truncated to nothing.
	werr error
}

// newStaged creates a spill file, filled from base when the write does not
// truncate.
func (w *writer) newStaged(ctx context.Context, name string, base *layout.Entry, truncate bool) (*staged, error) {
	f, err := os.CreateTemp(w.f.cfg.StagingDir, "stage-*")
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", name, err)
	}
	s := &staged{name: name, file: f, created: w.f.cfg.Now(), sum: sha256.New()}
	if base != nil {
		s.meta = cloneMap(base.Metadata)
		s.schema = base.SchemaURL
		if !truncate {
			n, err := w.copyIn(ctx, f, base)
			if err != nil {
				f.Close()
				os.Remove(f.Name())
				return nil, fmt.Errorf("stage %s: copy current content: %w", name, err)
			}
			s.size = n
			// A content type the name and content do not give was set
			// on purpose (setxattr): it stays through later edits.
			var head [512]byte
			k, _ := f.ReadAt(head[:], 0)
			if base.ContentType != "" && base.ContentType != contentTypeOf(name, head[:k]) {
				s.ctype = base.ContentType
			}
		}
	}
	// The spill file's name is not needed once open; an unlinked file
	// cannot be left behind by a crash.
	os.Remove(f.Name())
	return s, nil
}

// copyIn copies the current (decoded) content of e into f.
func (w *writer) copyIn(ctx context.Context, f *os.File, e *layout.Entry) (int64, error) {
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := w.f.blobs.ReadAt(ctx, &e.Descriptor, buf, off)
		if n > 0 {
			if _, werr := f.WriteAt(buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (s *staged) writeAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.file.WriteAt(p, off)
	if end := off + int64(n); end > s.size {
		s.size = end
	}
	switch {
	case off == s.summed:
		s.sum.Write(p[:n])
		s.summed += int64(n)
	case off < s.summed:
		s.summed = -1 // rewrote hashed bytes
	}
	if n > 0 {
		s.dirty, s.touched, s.failed = true, true, false
		s.gen++
		s.contentChangedLocked()
	}
	if err != nil && s.werr == nil {
		s.werr, s.dirty = fmt.Errorf("an earlier write of %s failed: %w", s.name, err), true
	}
	return n, err
}

// errStagedClosed is a read of a staged file after its last release
// closed the spill file: the reader looks again (the committed entry).
var errStagedClosed = errors.New("staged file already released")

func (s *staged) readAt(p []byte, off int64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.file == nil {
		return 0, errStagedClosed
	}
	if off >= s.size {
		return 0, nil
	}
	if max := s.size - off; int64(len(p)) > max {
		p = p[:max]
	}
	n, err := s.file.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		// A sparse tail past the last write reads as zeros.
		for i := n; i < len(p); i++ {
			p[i] = 0
		}
		return len(p), nil
	}
	return n, err
}

func (s *staged) truncate(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.file.Truncate(n); err != nil {
		if s.werr == nil {
			s.werr, s.dirty = fmt.Errorf("an earlier truncate of %s failed: %w", s.name, err), true
		}
		return err
	}
	if n == 0 {
		s.werr = nil // what was lost is gone now
	}
	if n < s.summed {
		s.summed = -1
	}
	if n != s.size {
		s.size = n
		s.dirty, s.failed = true, false
		s.gen++
		s.contentChangedLocked()
	}
	s.touched = true
	return nil
}

// contentChangedLocked drops posix-mtime: the commit's created-at is the
// new modification time (decisions.md). A utimes after the write sets it
// again (cp -p, tar x and rsync set times last). Caller holds s.mu.
func (s *staged) contentChangedLocked() {
	delete(s.meta, metaMtime)
}

// cleanDigestLocked returns the digest of the content when it is what
// its last upload hashed and nothing changed since: the staged file is
// then the same file as a descriptor of that digest, whether or not the
// commit in flight has landed yet. Caller holds s.mu (shared is enough:
// Sum does not change the hash state).
func (s *staged) cleanDigestLocked() (layout.Digest, bool) {
	var d layout.Digest
	if s.dirty || s.unlinked || s.summed != s.size || s.sum == nil {
		return d, false
	}
	copy(d[:], s.sum.Sum(nil))
	return d, true
}

// describeLocked hashes the spill file (what the running hash has not
// seen of it) and returns the descriptor it becomes. Caller holds s.mu.
func (s *staged) describeLocked(now time.Time) (layout.Descriptor, error) {
	if err := s.file.Truncate(s.size); err != nil {
		return layout.Descriptor{}, err
	}
	if s.summed < 0 || s.summed > s.size {
		s.sum.Reset()
		s.summed = 0
	}
	if _, err := io.Copy(s.sum, io.NewSectionReader(s.file, s.summed, s.size-s.summed)); err != nil {
		s.summed = -1
		return layout.Descriptor{}, err
	}
	s.summed = s.size
	var d layout.Descriptor
	copy(d.Digest[:], s.sum.Sum(nil))
	d.Size = s.size
	d.Name = s.name
	d.CreatedAt = now.UTC()
	if !s.touched && s.committed == nil && !s.created.IsZero() {
		// Never written (an empty create, an O_TRUNC open): the file
		// came to be at its open, which stat showed as its mtime before
		// this commit (at the last release, later); a commit must not
		// move it (posixtest FstatDeleted compares the two).
		d.CreatedAt = s.created.UTC()
	}
	d.Metadata = cloneMap(s.meta)
	d.SchemaURL = s.schema
	var head [512]byte
	n, _ := s.file.ReadAt(head[:], 0)
	d.ContentType = s.ctype
	if d.ContentType == "" {
		d.ContentType = contentTypeOf(s.name, head[:n])
	}
	if s.size <= layout.InlineLimit {
		d.Data = make([]byte, s.size)
		if _, err := s.file.ReadAt(d.Data, 0); err != nil && !errors.Is(err, io.EOF) {
			return layout.Descriptor{}, err
		}
	}
	return d, nil
}

// contentTypeOf picks a type from the name's extension, else sniffs.
func contentTypeOf(name string, head []byte) string {
	if ext := path.Ext(name); ext != "" {
		if t := mime.TypeByExtension(ext); t != "" {
			return t
		}
		switch ext {
		case ".md":
			return "text/markdown; charset=utf-8"
		case ".jsonl", ".ndjson":
			return "application/x-ndjson"
		case ".go", ".py", ".rs", ".sh", ".yaml", ".yml", ".toml":
			return "text/plain; charset=utf-8"
		}
	}
	if len(head) == 0 {
		return "application/octet-stream"
	}
	if t := http.DetectContentType(head); t != "" {
		if t == "text/plain; charset=utf-8" && bytes.HasPrefix(bytes.TrimSpace(head), []byte("{")) {
			return "application/json"
		}
		return t
	}
	return "application/octet-stream"
}

func (s *staged) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}
