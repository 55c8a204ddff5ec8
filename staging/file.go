package staging

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/layout"
)

// File is a staged file, one being written: its bytes live in a spill
// file in the staging directory, never whole in memory. It is shared by
// every handle open on the same name in one session.
type File struct {
	// opens counts the handles open on the file. GUARDED_BY(Writer.mu),
	// not mu: it decides, under Writer.mu, whether a release is the
	// last and the file is forgotten.
	opens int
	// readers counts those of opens that only read (Retain; released
	// with ReleaseRead): a file only they hold is parked, and kept at
	// its writer's close. GUARDED_BY(Writer.mu).
	readers int
	// fillMu serialises fills of the lazy content (fill), which run
	// without mu: one copy at a time. Taken with no lock of the Writer
	// held, and before mu.
	fillMu sync.Mutex
	// mu guards everything below and serialises I/O on the spill file.
	// An upload holds it shared: reads and stats of the file go on while
	// its blob is stored, writes wait.
	mu sync.RWMutex
	// name is the slot name. Written under both writer.mu and mu (a
	// rename), so either lock is enough to read it; use Name() when
	// holding neither.
	name string
	// file is the spill file; nil when closed for good, or while the
	// file is parked (park.go): parked is then its name in the park
	// directory. A parked file opened again keeps the name until the
	// spill file is replaced or closed.
	file   *os.File
	parked string
	// parkStamp is the suffix of parked when it is a kept name ("" for
	// a plain one), parkedIn and parkedAs the park directory and the
	// session it was parked in (park.go).
	parkStamp string
	parkedIn  *parking
	parkedAs  layout.SessionID
	// parkWaiting is set while a parkLater of the file waits.
	// GUARDED_BY(Writer.mu).
	parkWaiting bool
	// keptAt is the copy in the failed directory salvageAt made of the
	// content at generation keptGen: a file kept by the stop of the mount
	// while its commit was in flight, and kept again when that commit
	// failed, had two copies (CI, TestStopTwiceWhileCommitting).
	// GUARDED_BY(Writer.mu).
	// keptDigest is the digest of that copy's bytes when the file's
	// running hash gave it (zero otherwise): a commit that lands those
	// very bytes removes the copy, which would read as bytes never
	// committed. GUARDED_BY(Writer.mu).
	keptAt     string
	keptGen    uint64
	keptDigest layout.Digest
	// parkedEmpty marks a file parked while it held its content lazily:
	// its empty spill file was closed, with no name (park.go).
	parkedEmpty bool
	size        int64
	dirty       bool
	// touched is set once bytes or metadata were changed through a
	// handle. A freshly created, untouched file is committed at release,
	// not at the first flush: shells dup and close the new fd before
	// writing, and committing that empty file would add a version.
	touched bool
	meta    map[string]string // user.pugmark.meta.<k>
	// cacheControl is the base descriptor's, kept in what the file is
	// committed as.
	cacheControl string
	ctype        string // set by setxattr user.pugmark.content-type
	schema       string
	created      time.Time
	// changed is when the content last changed (contentChangedLocked),
	// the mtime stat shows while the file is being written; now is the
	// Writer's clock.
	changed time.Time
	now     func() time.Time
	// committing is closed when the commit in flight for this file ends.
	committing chan struct{}
	// failed is the error of a commit of the current content that failed
	// and went back to the caller (close(2), fsync(2)); the next change
	// clears it. Nothing commits that content again behind the caller's
	// back: not the release, not another flush (a dup'd descriptor, or
	// the copy a forked child closes at exec), not an fsync of the
	// session directory. After a lost checkpoint that would land the
	// loser's content on the winner's state.
	failed error
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
	// committed is the descriptor this staged file last became; before
	// its first commit, the entry it was filled from (if any).
	committed *layout.Entry
	// absent, for a file created with O_EXCL (OpenExclusive) or created
	// keeping content (OpenFresh: >> of a new name), is the name as
	// found absent then: zero digest, the version of the state
	// it was absent in, and the name (absentAs). Until the file's first
	// commit it guards that commit as committed guards a file built on
	// what it held: another writer's file committed under the name
	// since refuses it.
	absent   *layout.FileBase
	absentAs string
	// unknown is the file's last commit when its outcome was unknown
	// (its close was EIO), and unknownName the name it committed the
	// file under: landed after all, it is what the file was committed
	// as (settleUnknown).
	unknown     *layout.OutcomeUnknownError
	unknownName string
	// landed is the generation (gen) of the content the last commit that
	// landed took (Flush): writes up to it are in the session, whatever
	// later commits of the file do (FlushSince).
	landed uint64
	// wholeOpens counts the descriptors opened with O_TRUNC that are
	// still open (OpenedWhole): while there is one, what the file holds
	// replaces the name, as a new O_TRUNC file does, and its commits are
	// not guarded by the entry it last became. Two threads on one mount
	// writing a file whole share its staged file, and the second close
	// was refused (ESTALE) for another mount's commit after the first
	// close's (audit 8).
	wholeOpens atomic.Int32
	// replaced is the entry an open(O_TRUNC) cut away (committed stays
	// nil: nothing was filled from it). Until a commit lands, it is what
	// the name shows if the commit is refused (Shows).
	replaced *layout.Entry
	// rebased is set when an open staged the file from content another
	// writer committed after the front end looked the name up
	// (OpenFresh): the front end's size of it is older. Set before the
	// file is shared, never changed.
	rebased bool
	// spill makes a new spill file (Writer.spill, which makes the
	// staging directory again if it was removed). Set before the file
	// is shared, never changed.
	spill func() (*os.File, error)
	// linked is set (while an upload holds mu shared, so before any
	// writer gets it) when the backend published the spill file itself as
	// the blob (the local driver links it): the next change copies the
	// bytes to a new spill file first (unshareLocked), never into the
	// bucket's object.
	linked atomic.Bool
	// lazy is the entry an open for writing without O_TRUNC kept the
	// content of, while the spill file does not hold it yet (empty):
	// reads go to the entry's blob, and the first change that needs the
	// bytes copies them in (fill). A file only opened, touched,
	// chmod'ed or renamed never fetches them: its commit names the same
	// blob. `touch` of a committed 1 GB file on a remote bucket
	// downloaded all of it at the open (audit 5).
	lazy *layout.Entry
	// blobs reads lazy's content. Set before the file is shared.
	blobs Blobs
	// appendFrom is the size of the content the file was staged from
	// (none: 0), or last committed as, while every change since appended
	// to it through an O_APPEND descriptor (Append); -1 once anything
	// else changed it (a write at an offset, a truncate, a metadata
	// change, an O_TRUNC or O_EXCL open). Such a file's bytes past it go
	// onto what another writer committed meanwhile, as O_APPEND does on
	// one disk, instead of its close being refused (rebaseAppended).
	appendFrom int64
	// rebases counts those rebases: the front end's pages and size of
	// the file are older than the file after one (Rebases).
	rebases atomic.Uint64
	// werr is set when a write or truncate of the content failed (the
	// staging disk is full, say): the file does not hold what was
	// written to it, so it is not committed (the error is returned by
	// close and fsync instead) until it is truncated to nothing or
	// written whole again from its start.
	werr error
}

// newStaged creates a spill file. A file that keeps the base's content
// (no truncate) holds it lazily: copied in only when a change needs it,
// except an inline body, which costs no request.
func (w *Writer) newStaged(ctx context.Context, name string, base *layout.Entry, truncate bool) (*File, error) {
	f, err := w.spill()
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", name, err)
	}
	s := &File{name: name, file: f, spill: w.spill, created: w.cfg.Now(), now: w.cfg.Now, sum: sha256.New(), blobs: w.blobs}
	if truncate {
		s.appendFrom = -1
	}
	if base == nil {
		return s, nil
	}
	s.meta = cloneMap(base.Metadata)
	s.schema = base.SchemaURL
	// Another writer's cache-control stays through an edit: a touch,
	// which opens the file for writing, dropped it.
	s.cacheControl = base.CacheControl
	e := *base
	switch {
	case truncate:
		s.replaced = &e
		// Cut: the content changed at the open, so a time set on the
		// old content is not the file's (open(O_TRUNC) and truncate(2)
		// set mtime, even to an empty file's size).
		s.contentChangedLocked()
		return s, nil
	case e.InlineOK():
		n, sum, ctype, err := copyContent(ctx, w.blobs, f, &e, name)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("stage %s: %w", name, err)
		}
		s.size, s.sum, s.summed, s.ctype = n, sum, n, ctype
		s.appendFrom = n
	default:
		size, err := s.blobs.Size(ctx, &e.Descriptor)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("stage %s: size of the current content: %w", name, err)
		}
		s.holdLazilyLocked(&e, size)
		s.appendFrom = size
	}
	// Until it changes, the file is the entry it was staged from: an open
	// for writing that writes nothing leaves the name showing that entry
	// (and its mtime) once released.
	s.committed = &e
	return s, nil
}

// holdLazilyLocked makes s hold e's content, of (decoded) size size,
// without a copy (lazy); the spill file must be empty. Caller holds
// s.mu, and took the size without it: for an encoded blob whose decoded
// size is not known yet, that is a pass over the whole blob.
func (s *File) holdLazilyLocked(e *layout.Entry, size int64) {
	s.lazy, s.size = e, size
	s.sum.Reset()
	s.summed = 0
}

// errNeedsFill is what a change of a file held lazily returns, with s.mu
// held, when it needs the bytes: the caller lets mu go, fills (fill) and
// tries again (withContent).
var errNeedsFill = errors.New("the content is not staged yet")

// withContent runs change with s.mu held, filling s first (without mu)
// when change says it needs the content.
func (s *File) withContent(ctx context.Context, change func() error) error {
	for {
		s.mu.Lock()
		err := change()
		s.mu.Unlock()
		if !errors.Is(err, errNeedsFill) {
			return err
		}
		if err := s.fill(ctx); err != nil {
			return err
		}
	}
}

// fill copies the content s holds lazily into a new spill file and makes
// it s's. It holds fillMu (one copy at a time), not mu: stat, reads
// (which go to the blob meanwhile) and listings of the directory go on
// while a large file is fetched. What could change the content while it
// is lazy (a cut to nothing, a restore, the last release) makes the copy
// stale, which the swap checks.
func (s *File) fill(ctx context.Context) error {
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	s.mu.RLock()
	e, name, open := s.lazy, s.name, !s.closedLocked()
	s.mu.RUnlock()
	if !open {
		return ErrClosed
	}
	if e == nil {
		return nil
	}
	nf, err := s.spill()
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	n, sum, ctype, err := copyContent(ctx, s.blobs, nf, e, name)
	if err != nil {
		nf.Close()
		return fmt.Errorf("stage %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lazy != e || s.closedLocked() {
		nf.Close()
		if s.closedLocked() {
			return ErrClosed
		}
		return nil // the caller looks at what s holds now
	}
	s.setSpillLocked(nf) // the old one is empty
	s.size, s.sum, s.summed, s.lazy = n, sum, n, nil
	if s.ctype == "" {
		s.ctype = ctype
	}
	return nil
}

// copyContent copies e's (decoded) content into the empty file f,
// hashing it on the way (an append then hashes only what it adds). It
// returns the size, the hash state, and the content type to keep: one e
// has that neither its name (name when e has none) nor its content gives
// was set on purpose (setxattr) and stays through edits.
func copyContent(ctx context.Context, blobs Blobs, f *os.File, e *layout.Entry, name string) (int64, hash.Hash, string, error) {
	sum := sha256.New()
	n, err := copyIn(ctx, blobs, f, e, sum)
	if err != nil {
		return 0, nil, "", fmt.Errorf("copy current content: %w", err)
	}
	var head [512]byte
	k, _ := f.ReadAt(head[:], 0)
	if e.Name != "" {
		name = e.Name
	}
	if e.ContentType != "" && e.ContentType != ContentTypeOf(name, head[:k]) {
		return n, sum, e.ContentType, nil
	}
	return n, sum, "", nil
}

// spill makes a spill file in the staging directory (createSpill),
// making the directory again when it is gone: it lives in the cache
// directory, under ~/.cache by default, which people and cleaners empty
// while a mount runs; every create and write then failed with ENOENT, a
// file that exists said not to, until the mount was restarted.
func (w *Writer) spill() (*os.File, error) {
	f, err := createSpill(w.cfg.StagingDir)
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		w.warnDescriptors()
	}
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if merr := os.MkdirAll(w.cfg.StagingDir, 0o700); merr != nil {
		return nil, fmt.Errorf("%w (making the staging directory again: %v)", err, merr)
	}
	w.log.Warn("the staging directory was removed while mounted (with the cache directory?); made it again", "dir", w.cfg.StagingDir)
	return createSpill(w.cfg.StagingDir)
}

// warnDescriptors says, at most once a minute, that the process is out
// of file descriptors: each file open for writing holds one, and past
// the limit every open on the mount fails, reads and listings too, which
// the log did not say (audit 31).
func (w *Writer) warnDescriptors() {
	now := w.cfg.Now().UnixNano()
	last := w.emfileAt.Load()
	if now-last < int64(time.Minute) || !w.emfileAt.CompareAndSwap(last, now) {
		return
	}
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	w.log.Warn("out of file descriptors: each file open for writing holds one until its close, and every open on the mount fails past the limit; close files, or raise the limit of pugfs (ulimit -n, LimitNOFILE=)", "limit", lim.Cur)
}

// createSpill makes a spill file without a name, so that a crash leaves
// nothing behind: an O_TMPFILE, which the local driver can still link
// into the bucket as the blob (no copy at commit), else a file removed
// as soon as it is open.
func createSpill(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(spill file)")), nil
	}
	f, err := os.CreateTemp(dir, "stage-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

// unshareLocked moves the bytes to a new spill file of their own before
// they change, when the current one became a blob in the bucket (linked).
// Caller holds s.mu.
func (s *File) unshareLocked() error {
	if !s.linked.Load() {
		return nil
	}
	if err := s.unparkLocked(); err != nil {
		return err
	}
	nf, err := s.spill()
	if err != nil {
		return err
	}
	// copy_file_range where the file system has it: no copy through here.
	copyAll := func() error {
		if _, err := s.file.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if _, err := nf.Seek(0, io.SeekStart); err != nil {
			return err
		}
		_, err := io.Copy(nf, io.LimitReader(s.file, s.size))
		return err
	}
	if err = copyAll(); noSpace(err) && roomFrom(s.blobs, s.size) {
		err = copyAll() // the cache's copies took the room (audit 37)
	}
	if err != nil {
		nf.Close()
		return err
	}
	s.setSpillLocked(nf)
	s.linked.Store(false)
	return nil
}

// copyIn copies the current (decoded) content of e into f, and into sum.
func copyIn(ctx context.Context, blobs Blobs, f *os.File, e *layout.Entry, sum io.Writer) (int64, error) {
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := blobs.ReadAt(ctx, &e.Descriptor, buf, off)
		if n > 0 {
			_, werr := f.WriteAt(buf[:n], off)
			if noSpace(werr) && roomFrom(blobs, e.Size-off) {
				// The cache's copies took the room (audit 37): a >> or
				// an edit of a committed file starts with this copy.
				_, werr = f.WriteAt(buf[:n], off)
			}
			if werr != nil {
				return off, werr
			}
			sum.Write(buf[:n])
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

// Name returns the name s is staged under now; a rename changes it.
// Callers must not hold s.mu.
func (s *File) Name() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.name
}

// WriteAt writes p at off, as pwrite(2); the running hash follows
// writes that continue where it stopped. The first write of a file held
// lazily fetches its content (ctx bounds that).
func (s *File) WriteAt(ctx context.Context, p []byte, off int64) (n int, err error) {
	err = s.withContent(ctx, func() error {
		n, err = s.writeAtLocked(p, off, false)
		return err
	})
	return n, err
}

// Append writes p at the end the file has now (O_APPEND), not at the
// offset the kernel computed from its own idea of the size: two kernel
// inodes can stand for one staged file (a lookup after a commit
// invalidated the name makes a second), each with its own size, and a
// write at a stale one overwrote another appender's bytes or left a hole
// of zeros.
func (s *File) Append(ctx context.Context, p []byte) (n int, err error) {
	err = s.withContent(ctx, func() error {
		n, err = s.writeAtLocked(p, 0, true)
		return err
	})
	return n, err
}

// writeAtLocked writes p at off, or at the end with atEnd; errNeedsFill
// when s holds its content lazily. s.mu is held.
func (s *File) writeAtLocked(p []byte, off int64, atEnd bool) (int, error) {
	if s.lazy != nil {
		return 0, errNeedsFill
	}
	if err := s.unparkLocked(); err != nil {
		return 0, err
	}
	if err := s.unshareLocked(); err != nil {
		return 0, fmt.Errorf("stage %s: copy the committed bytes: %w", s.name, err)
	}
	if atEnd {
		off = s.size
	} else {
		// At an offset the writer chose: moved onto other content,
		// the bytes would land elsewhere.
		s.appendFrom = -1
	}
	whole := off == 0 && int64(len(p)) >= s.size // every byte the file holds, written again
	n, err := s.file.WriteAt(p, off)
	if noSpace(err) && roomFrom(s.blobs, int64(len(p)-n)) {
		// The cache's copies beside the staged files took the room:
		// given back, the write goes on (audit 37).
		var m int
		m, err = s.file.WriteAt(p[n:], off+int64(n))
		n += m
	}
	if end := off + int64(n); end > s.size {
		s.size = end
	}
	if err == nil && whole && s.werr != nil {
		// Written whole again since the write that failed (the program
		// retried it once the disk had room): what it holds is what
		// was written. Left set, every later fsync failed (review 30).
		s.werr = nil
	}
	switch {
	case off == s.summed:
		s.sum.Write(p[:n])
		s.summed += int64(n)
	case off < s.summed:
		s.summed = -1 // rewrote hashed bytes
	}
	if n > 0 {
		s.dirty, s.touched, s.failed = true, true, nil
		s.gen++
		s.contentChangedLocked()
	}
	if err != nil && s.werr == nil {
		s.werr, s.dirty = fmt.Errorf("an earlier write of %s failed: %w", s.name, err), true
	}
	return n, err
}

// noSpace reports whether err says the file system (or the user's quota
// on it) is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// ReadAt reads what the file holds at off; past its end it reads
// nothing, a sparse tail reads as zeros. A file held lazily is read from
// its blob, without mu: a read that waits for the bucket holds up no
// stat and no fill (a writer waiting for mu would make every later
// reader of it wait too), and the blob does not change.
func (s *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s.mu.RLock()
	if s.closedLocked() {
		s.mu.RUnlock()
		return 0, ErrClosed
	}
	if off >= s.size {
		s.mu.RUnlock()
		return 0, nil
	}
	if max := s.size - off; int64(len(p)) > max {
		p = p[:max]
	}
	if e := s.lazy; e != nil {
		s.mu.RUnlock()
		n, err := s.blobs.ReadAt(ctx, &e.Descriptor, p, off)
		if errors.Is(err, io.EOF) && n == len(p) {
			err = nil
		}
		return n, err
	}
	defer s.mu.RUnlock()
	// A parked file is opened for this read only: a read without a
	// handle (fs's fh == nil) would have kept it open for good.
	f, done, err := s.spillLocked()
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		// A sparse tail past the last write reads as zeros.
		for i := n; i < len(p); i++ {
			p[i] = 0
		}
		return len(p), nil
	}
	return n, err
}

// Truncate sets the size, as ftruncate(2). Cutting a file held lazily
// to another size than nothing fetches its content first (ctx bounds
// that); cutting it to nothing fetches nothing.
func (s *File) Truncate(ctx context.Context, n int64) error {
	return s.withContent(ctx, func() error { return s.truncateLocked(n) })
}

// truncateLocked is Truncate; errNeedsFill when s holds its content
// lazily and n is neither nothing nor its size. Caller holds s.mu.
func (s *File) truncateLocked(n int64) error {
	// First: a cut that cannot open the spill file changes nothing (a
	// lazy file cut to nothing with an empty spill file it could not
	// open read as zeros, and committed so: review 19).
	if err := s.unparkLocked(); err != nil {
		return err
	}
	if s.lazy != nil {
		switch n {
		case 0:
			s.lazy = nil // the spill file is empty: what is cut is never fetched
			s.appendFrom = -1
		case s.size:
			s.touched = true
			return nil
		default:
			return errNeedsFill
		}
	}
	if n != s.size {
		if err := s.unshareLocked(); err != nil {
			return fmt.Errorf("stage %s: copy the committed bytes: %w", s.name, err)
		}
	}
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
		s.appendFrom = -1
		s.dirty, s.failed = true, nil
		s.gen++
		s.contentChangedLocked()
	}
	s.touched = true
	return nil
}

// contentChangedLocked drops posix-mtime: the commit's created-at is the
// new modification time (decisions.md). A utimes after the write sets it
// again (cp -p, tar x and rsync set times last). Caller holds s.mu.
func (s *File) contentChangedLocked() {
	delete(s.meta, layout.MetaPosixMtime)
	if s.now != nil {
		s.changed = s.now()
	}
}

// cleanDigestLocked returns the digest of the content when it is what
// its last upload hashed and nothing changed since: the staged file is
// then the same file as a descriptor of that digest, whether or not the
// commit in flight has landed yet. Caller holds s.mu (shared is enough:
// Sum does not change the hash state).
func (s *File) cleanDigestLocked() (layout.Digest, bool) {
	var d layout.Digest
	if e := s.lazy; e != nil {
		return e.Digest, !s.dirty && !s.unlinked
	}
	if s.dirty || s.unlinked || s.summed != s.size || s.sum == nil {
		return d, false
	}
	copy(d[:], s.sum.Sum(nil))
	return d, true
}

// describeLocked hashes the spill file (what the running hash has not
// seen of it) and returns the descriptor it becomes. Caller holds s.mu.
func (s *File) describeLocked(now time.Time) (layout.Descriptor, error) {
	if e := s.lazy; e != nil {
		return s.describeLazyLocked(e, now), nil
	}
	if s.closedLocked() {
		return layout.Descriptor{}, ErrClosed
	}
	f, done, err := s.spillLocked()
	if err != nil {
		return layout.Descriptor{}, s.parkedLostLocked(err)
	}
	defer done()
	fi, err := f.Stat()
	if err != nil {
		return layout.Descriptor{}, err
	}
	if fi.Size() != s.size {
		// A sparse tail (truncate up) is part of the content. Never
		// needed on a linked file, whose size is what it was committed at.
		if err := f.Truncate(s.size); err != nil {
			return layout.Descriptor{}, err
		}
	}
	if s.summed < 0 || s.summed > s.size {
		s.sum.Reset()
		s.summed = 0
	}
	if s.summed < s.size {
		// io.Copy would take a 32 KiB buffer per call, hashed bytes or
		// none (cp's writes keep the sum whole): 625 MB of garbage for
		// a commit of 20,000 files.
		buf := hashBufs.Get().(*[]byte)
		_, err := io.CopyBuffer(s.sum, io.NewSectionReader(f, s.summed, s.size-s.summed), *buf)
		hashBufs.Put(buf)
		if err != nil {
			s.summed = -1
			return layout.Descriptor{}, err
		}
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
	d.CacheControl = s.cacheControl
	if c := s.committed; c != nil && c.Digest == d.Digest {
		// Same bytes (a touch, a chmod through a descriptor): the
		// fields of a later spec (§18) still describe them.
		d.Extra = c.Clone().Extra
	}
	var head [512]byte
	n, _ := f.ReadAt(head[:], 0)
	d.ContentType = s.ctype
	if d.ContentType == "" {
		d.ContentType = ContentTypeOf(s.name, head[:n])
	}
	if s.size <= layout.InlineLimit {
		d.Data = make([]byte, s.size)
		if _, err := f.ReadAt(d.Data, 0); err != nil && !errors.Is(err, io.EOF) {
			return layout.Descriptor{}, err
		}
	}
	return d, nil
}

// hashBufs hold the buffers describeLocked hashes spill files through.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// describeLazyLocked is describeLocked for a file whose content is still
// e's (lazy): e's blob, encoding and fields of a later spec, under the
// file's name and with its attributes, as a chmod of a committed file
// describes it. Caller holds s.mu.
func (s *File) describeLazyLocked(e *layout.Entry, now time.Time) layout.Descriptor {
	d := e.Descriptor.Clone()
	d.Name = s.name
	d.CreatedAt = now.UTC()
	d.Metadata = cloneMap(s.meta)
	d.SchemaURL = s.schema
	d.CacheControl = s.cacheControl
	switch {
	case s.ctype != "":
		d.ContentType = s.ctype
	case e.Name != s.name:
		retype(&d, e.Name, s.name) // renamed while open
	}
	return d
}

// ContentTypeOf picks a type from the name's extension, else sniffs.
func ContentTypeOf(name string, head []byte) string {
	if t := extType(name); t != "" {
		return t
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

// extType is the type the name's extension gives, or "".
func extType(name string) string {
	ext := path.Ext(name)
	if ext == "" {
		return ""
	}
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
	return ""
}

// retype gives a committed file renamed from from to to the type its new
// name gives, where its type came from its old name or from sniffing: the
// write-a-temporary-then-rename pattern (sed -i, rsync, os.replace)
// otherwise left README.md typed text/plain, as its temporary name was.
// A type that neither name gives and the old name had an extension for
// was set on purpose (setxattr) and stays; so does any type when the new
// name's extension says nothing (sniffing would need the content).
func retype(d *layout.Descriptor, from, to string) {
	nt := extType(to)
	if nt == "" {
		return
	}
	if ot := extType(from); ot == "" || d.ContentType == "" || d.ContentType == ot {
		d.ContentType = nt
	}
}

func (s *File) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setSpillLocked(nil)
}

// waitCommitLocked waits until no commit of s is in flight. Caller holds
// s.mu (exclusively); it is released while waiting.
func (s *File) waitCommitLocked() {
	for s.committing != nil {
		ch := s.committing
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
}

// waitIdle waits until s.mu is free (an upload holds it shared while it
// lasts) and no commit of s is in flight. The caller holds no lock.
func (s *File) waitIdle() {
	s.mu.Lock()
	s.waitCommitLocked()
	s.mu.Unlock()
}

// changedLocked marks a change of metadata: the file must be committed
// again, and an earlier failed commit of it is history. Caller holds
// s.mu.
func (s *File) changedLocked() {
	s.dirty, s.failed = true, nil
	s.gen++
}

// FileStat is what stat(2) shows of a staged file.
type FileStat struct {
	Size  int64
	Mode  uint32 // permission bits
	Mtime time.Time
}

// Stat returns the size, mode and modification time the file shows now:
// its open time until it is committed, then the commit's time, unless a
// utimes set one.
func (s *File) Stat() FileStat {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mt := s.created
	switch c := s.committed; {
	case c != nil && !s.dirty:
		mt = c.CreatedAt // what it became, as after its release
	case s.changed.After(mt):
		// Being written: the time of the last write, as a disk shows
		// it; its commit's created-at comes later still. It stayed at
		// the open until the close (audit 12).
		mt = s.changed
	}
	return FileStat{Size: s.size, Mode: layout.PosixMode(s.meta, layout.DefaultFileMode), Mtime: layout.PosixMtime(s.meta, mt)}
}

// Touch notes a change through a handle without a content change (a
// utimes or chmod while the file is open): the next close commits the
// file at once instead of leaving a fresh, empty create to its release.
func (s *File) Touch() {
	s.mu.Lock()
	s.touched = true
	s.mu.Unlock()
}

// SetCreateMode keeps the mode a create(2) asked for (decisions.md:
// written when it is not the default).
func (s *File) SetCreateMode(m uint32) {
	m &= layout.KeptModeBits
	if m == layout.DefaultFileMode {
		return
	}
	s.mu.Lock()
	s.meta = AttrChange{Mode: &m}.Apply(s.meta, time.Time{})
	s.mu.Unlock()
}

// Attrs are the descriptor fields a user sets through xattrs.
type Attrs struct {
	Meta        map[string]string // user.pugmark.meta.<k>
	ContentType string            // set by setxattr user.pugmark.content-type
	SchemaURL   string
}

// Attrs returns a copy of the file's user-set descriptor fields.
func (s *File) Attrs() Attrs {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Attrs{Meta: cloneMap(s.meta), ContentType: s.ctype, SchemaURL: s.schema}
}

// changeAttrs changes the user-set descriptor fields with fn, for
// Writer.ChangeAttrs when s holds bytes not committed yet (or in fsync
// mode). The file is dirty, and touched when it holds committed content: the next flush
// commits the change then, and close(2) says if that fails, as for a
// chmod through a descriptor; left to the release, a refused commit of
// it reached nobody (audit 6: close returned 0, the metadata went to
// failed/). A file created and not committed yet is not touched: a
// metadata change alone does not make the next flush commit it (a
// shell's setfattr child closes its inherited copy of the descriptor
// first, which would commit it empty), so the metadata lands with the
// content, in one descriptor.
func (s *File) changeAttrs(fn func(*Attrs)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changeAttrsLocked(fn)
}

// changeAttrsKeepingMtime is changeAttrs for a setxattr or removexattr:
// when the staged bytes are the ones committed (nothing written since),
// the change pins the time they show as posix-mtime, as a chmod does
// (SetAttrs), so that it does not move the file's mtime. born is the
// session's time, what a file with no time of its own shows.
func (s *File) changeAttrsKeepingMtime(fn func(*Attrs), born time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keep time.Time
	if !s.dirty && s.committed != nil {
		keep = layout.ShownMtime(s.committed.Metadata, s.committed.CreatedAt, born)
	}
	s.changeAttrsLocked(keepingMtime(fn, keep))
}

// changeAttrsLocked is changeAttrs with s.mu held.
func (s *File) changeAttrsLocked(fn func(*Attrs)) {
	a := Attrs{Meta: s.meta, ContentType: s.ctype, SchemaURL: s.schema}
	fn(&a)
	s.meta, s.ctype, s.schema = a.Meta, a.ContentType, a.SchemaURL
	s.appendFrom = -1 // rebased, the other writer's attributes would go
	s.changedLocked()
	if s.committed != nil {
		s.touched = true
	}
}

// CleanDigest returns the digest of the content when it is what its last
// upload hashed and nothing changed since: the staged file is then the
// same file as a descriptor of that digest, whether or not the commit in
// flight has landed yet.
func (s *File) CleanDigest() (layout.Digest, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cleanDigestLocked()
}

// CommittedAsIs returns the entry s was last committed as when s holds
// exactly that: the same name, the bytes it hashed (nothing written
// since) and the same user-set fields; else nil. A file whose close has
// committed it and whose release the kernel has not sent yet is such a
// file: its descriptor is in the bucket, and what the mount shows of it
// (its digest, version and the like) is that descriptor's.
func (s *File) CommittedAsIs() *layout.Entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.committed
	if c == nil || c.Name != s.name || s.unlinked {
		return nil
	}
	if d, ok := s.cleanDigestLocked(); !ok || d != c.Digest {
		return nil
	}
	if !maps.Equal(s.meta, c.Metadata) || s.schema != c.SchemaURL || (s.ctype != "" && s.ctype != c.ContentType) {
		return nil
	}
	return c
}

// Committed returns the entry this staged file last became (before its
// first commit, the entry it was filled from), or nil.
func (s *File) Committed() *layout.Entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.committed
}

// Gen returns the file's generation, which every change of its content or
// metadata moves on: a descriptor notes it after its writes (FlushSince).
func (s *File) Gen() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// OpenedWhole counts a descriptor opened with O_TRUNC (File.wholeOpens);
// ClosedWhole, once it is released.
func (s *File) OpenedWhole() { s.wholeOpens.Add(1) }

// ClosedWhole: see OpenedWhole.
func (s *File) ClosedWhole() { s.wholeOpens.Add(-1) }

// Shows is what the name shows instead of the staged bytes, or nil: when
// the file's last commit failed (close(2) or fsync(2) said so) and it has
// not changed since, the entry it was last committed as, or the one an
// open(O_TRUNC) cut away. Its refused bytes are not the file's content
// (the release keeps them in the failed directory).
func (s *File) Shows() *layout.Entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.failed == nil {
		return nil
	}
	if s.committed != nil {
		return s.committed
	}
	return s.replaced
}

// Rebases counts the times the file's appended bytes went onto content
// another writer committed meanwhile (rebaseAppended): after one, what
// the front end keeps of the file (a kernel's pages and size) is older
// than the file.
func (s *File) Rebases() uint64 { return s.rebases.Load() }

// Rebased reports whether the file was staged from content another
// writer committed after the front end looked its name up (OpenFresh):
// whatever the front end keeps of the file (a kernel's size and pages of
// it) is older than the file, and must not be trusted for this open.
func (s *File) Rebased() bool { return s.rebased }

// OpenUnlinked reports a file removed (or renamed over) while open whose
// spill file open descriptors still read: what they hold, committed or
// not, is what fstat shows (posixtest FstatDeleted).
func (s *File) OpenUnlinked() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.unlinked && !s.closedLocked()
}
