package staging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pugmark/pugfs/layout"
	"golang.org/x/sys/unix"
)

// Shutdown runs when the mount stops. What it still holds uncommitted is
// not dropped silently: written files (staged for --commit=fsync, or
// still open when the mount went away) are kept in the failed directory,
// and renames and removals waiting for an fsync are logged.
func (w *Writer) Shutdown() {
	w.laterCancel()
	w.later.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, ws := range w.ss {
		w.keepLocked(id, ws)
		for _, op := range ws.pending {
			if d := op.desc; d != nil {
				w.log.Error("unmounted before fsync: change not committed", "session", id, "name", d.Name, "removal", d.Deleted)
			}
		}
		ws.pending = nil
	}
	w.park.close()
}

// KeepSession keeps what is staged in session id in the failed directory
// now, as Shutdown does at the end, and reports how many files were kept
// and how many could not be (a full disk): pugfs exec says which, where it
// said "kept" of copies that were never made (audit 8).
func (w *Writer) KeepSession(id layout.SessionID) (kept, lost int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.ss[id]; ws != nil {
		kept, lost = w.keepLocked(id, ws)
	}
	return kept, lost
}

// keepLocked keeps the dirty staged files of ws (salvageLocked), once
// each, and counts them; a file holding only the blob it was opened on
// is neither (that blob is in the bucket). Caller holds w.mu.
//
// The first keepLogged files kept get a line each, the rest one line for
// all (each is at debug level): a failed pugfs exec of 20,000 files
// printed 20,000 lines (audit 15).
func (w *Writer) keepLocked(id layout.SessionID, ws *session) (kept, lost int) {
	// Files with a line of their own: those kept, and those unchanged
	// (lazy: only a name or attributes changed), which have no copy but
	// a line all the same (review 15: 20,000 for a chmod -R).
	logged, unchanged := 0, 0
	for _, s := range ws.files {
		s.mu.RLock()
		keep, lazy, gen := s.dirty && !s.unlinked, s.lazy != nil, s.gen
		s.mu.RUnlock()
		if !keep || (s.keptAt != "" && s.keptGen == gen) {
			continue
		}
		level := slog.LevelError
		if logged >= keepLogged {
			level = slog.LevelDebug // a file that could not be kept is an error whatever this is
		}
		saved := w.salvageAt(id, s, "unmounted with uncommitted data; staged data kept", level) != ""
		switch {
		case saved:
			kept++
			logged++
		case lazy:
			unchanged++
			logged++
		default:
			lost++
		}
		// An upload holds the file shared while its commit is in flight
		// (the mount stopped during a close): waiting for it here held
		// the stop up for the upload's deadline. keptAt says the file is
		// kept, and that commit's end, landed or not, settles it.
		if s.mu.TryLock() {
			if s.gen == gen {
				s.dirty = false // kept once: a second Shutdown keeps nothing again
			}
			if saved {
				// Its parked name is no copy to keep once more if the
				// process dies before the park directory goes (review 23).
				s.unkeepLocked()
			}
			s.mu.Unlock()
		}
	}
	if more := logged - keepLogged; more > 0 {
		w.log.Error("unmounted with uncommitted data; more staged files kept, as above", "session", id, "more", more, "kept", kept, "unchanged", unchanged, "dir", filepath.Join(w.cfg.FailedDir, id.String()))
	}
	return kept, lost
}

// keepLogged is how many kept files of a session keepLocked logs one by
// one.
const keepLogged = 10

// salvageLocked keeps the bytes of a staged file whose commit failed (or
// never happened) and whose last descriptor is gone, so that data is
// never dropped silently; msg says why in the log. It returns the copy's
// path, "" when none could be kept.
func (w *Writer) salvageLocked(id layout.SessionID, s *File, msg string) string {
	return w.salvageAt(id, s, msg, slog.LevelError)
}

// salvageAt is salvageLocked with the kept file's line at level (its
// failures are errors whatever it is).
func (w *Writer) salvageAt(id layout.SessionID, s *File, msg string, level slog.Level) string {
	s.mu.RLock()
	lazy, cause, gen := s.lazy, s.failed, s.gen
	s.mu.RUnlock()
	if s.keptAt != "" && s.keptGen == gen {
		// Kept already, unchanged since: the stop of the mount kept it
		// while its commit was in flight, and that commit failed after.
		w.log.Log(context.Background(), level, strings.Replace(msg, "staged data kept", "its data was kept already", 1),
			"session", id, "name", s.name, "path", s.keptAt)
		return s.keptAt
	}
	dst := w.salvageCopy(id, s, msg, level, lazy, cause)
	if dst != "" {
		var d layout.Digest
		s.mu.RLock()
		if s.gen == gen && s.lazy == nil && s.sum != nil && s.summed == s.size {
			// Unchanged across the copy: the running hash is the copy's
			// digest (Sum leaves the hash state as it is).
			copy(d[:], s.sum.Sum(nil))
		}
		s.mu.RUnlock()
		s.keptAt, s.keptGen, s.keptDigest = dst, gen, d
	}
	return dst
}

// salvageCopy is salvageAt's copy, made whatever was kept before.
func (w *Writer) salvageCopy(id layout.SessionID, s *File, msg string, level slog.Level, lazy *layout.Entry, cause error) string {
	// Why the commit failed, when it did: the line said only that
	// (audit 10: a session removed by another writer).
	why := []any{}
	if cause != nil {
		why = []any{"err", cause}
	}
	if lazy != nil {
		// Its bytes are a blob in the bucket, never fetched: only its
		// name or attributes changed, and a copy would be a download.
		w.log.Log(context.Background(), level, strings.Replace(msg, "staged data kept", "its content is unchanged, the blob of the version it was opened on", 1),
			append([]any{"session", id, "name", s.name, "blob", lazy.Digest.String()}, why...)...)
		return ""
	}
	dir := filepath.Join(w.cfg.FailedDir, id.String())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		w.log.Error("could not keep the data of a failed commit", "session", id, "name", s.name, "err", err)
		return ""
	}
	dst := filepath.Join(dir, keptName(s.name, "."+time.Now().UTC().Format("20060102T150405.000000000")))
	s.mu.RLock()
	defer s.mu.RUnlock()
	f, done, err := s.spillLocked()
	if err != nil {
		w.log.Error("could not keep the data of a failed commit", "session", id, "name", s.name, "err", err)
		return ""
	}
	defer done()
	if linkSpill(s, f, dst) == nil {
		w.log.Log(context.Background(), level, msg, append([]any{"session", id, "name", s.name, "path", dst}, why...)...)
		return dst
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil && f == nil {
		err = ErrClosed
	}
	if err == nil {
		buf := make([]byte, 1<<20)
		for off := int64(0); off < s.size && err == nil; {
			n, rerr := f.ReadAt(buf[:min(int64(len(buf)), s.size-off)], off)
			if n > 0 {
				_, err = out.Write(buf[:n])
				off += int64(n)
			}
			if rerr != nil && off < s.size && err == nil {
				// A read error, or the end before the size: the copy
				// would be cut.
				err = fmt.Errorf("read staged data at byte %d of %d: %w", off, s.size, rerr)
			}
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		// A cut copy would read as the data: nothing is better.
		os.Remove(dst)
		w.log.Error("could not keep the data of a failed commit", "session", id, "name", s.name, "err", err)
		return ""
	}
	w.log.Log(context.Background(), level, msg, append([]any{"session", id, "name", s.name, "path", dst}, why...)...)
	return dst
}

// linkSpill gives s's spill file the name dst, without a copy: the
// spill file is released after salvage, so nothing writes it again. A
// copy needed as much space again on the disk that had just run out of
// it (a commit failing for a full staging disk lost the write, and left
// a cut copy in its place: the fault audit). It fails for a spill file
// that is not an O_TMPFILE, one the backend published as the blob (the
// bucket's object, shared), one a write failed for, one longer than the
// file, or another file system; the caller copies then.
func linkSpill(s *File, f *os.File, dst string) error {
	if s.linked.Load() {
		return errors.New("the spill file is the bucket's object")
	}
	if s.werr != nil {
		// A write failed (a full disk, most often): the bytes are not
		// the file, and keeping them must not hold the space the
		// mount's next writes need. They are kept if a copy fits.
		return errors.New("a write of the file failed")
	}
	if f == nil {
		return ErrClosed
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Size != s.size {
		return errors.New("the spill file is longer than the file")
	}
	return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
}

// failedName is a name as the file of its kept data is named: "/" as
// %2F, and "%" as %25, so that a/b and a%2Fb keep apart.
func failedName(name string) string { return failedNames.Replace(name) }

// failedNames escapes names for failedName, built once: a replacer built
// per call was 6 KiB, 124 MB for a checkout of 20,000 files parked.
var failedNames = strings.NewReplacer("%", "%25", "/", "%2F")

// keptName is the file name of name's kept data: failedName(name) and
// suffix, shortened to fit a file name (255 bytes) by a hash of the whole
// name in place of its start. The kept copy of a file deep in a tree was
// refused (ENAMETOOLONG) and its bytes lost at unmount (review 20).
func keptName(name, suffix string) string {
	const most = 255
	n := failedName(name)
	if len(n)+len(suffix) <= most {
		return n + suffix
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:8]) + "~"
	cut := len(n) - max(0, most-len(h)-len(suffix))
	// Not inside a character, nor inside an escape (%2F, %25): a name
	// starting "2F..." reads as a name that was never there.
	for cut < len(n) && (!utf8.RuneStart(n[cut]) || n[cut-1] == '%' || cut >= 2 && n[cut-2] == '%') {
		cut++
	}
	return h + n[cut:] + suffix
}
