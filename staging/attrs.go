package staging

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
)

// AttrChange is what one chmod or utimes asks of a file's POSIX metadata
// (decisions.md "POSIX metadata in descriptors").
type AttrChange struct {
	Mode     *uint32    // chmod: the new permission bits
	Mtime    *time.Time // utimes with a given time
	MtimeNow bool       // utimes to now: posix-mtime is dropped, the commit's created-at is the time
}

// Apply makes the change in meta, which it may allocate, and returns it.
// keep is the modification time the file shows now: a metadata-only
// change of committed content must not move it (chmod does not change
// mtime), so it is kept as posix-mtime when the new descriptor's
// created-at would otherwise replace it; zero when content changes too.
//
// A chmod to the mode the file has already (editors chmod after every
// save) changes nothing, so that it commits nothing.
func (c AttrChange) Apply(meta map[string]string, keep time.Time) map[string]string {
	if c.Mode != nil && c.Mtime == nil && !c.MtimeNow && layout.PosixMode(meta, layout.DefaultFileMode) == *c.Mode&layout.KeptModeBits {
		return meta
	}
	if meta == nil {
		meta = map[string]string{}
	}
	if c.Mode != nil {
		meta[layout.MetaPosixMode] = layout.FormatPosixMode(*c.Mode)
	}
	switch {
	case c.Mtime != nil:
		meta[layout.MetaPosixMtime] = layout.FormatPosixMtime(*c.Mtime)
	case c.MtimeNow:
		delete(meta, layout.MetaPosixMtime)
	case !keep.IsZero():
		if _, set := meta[layout.MetaPosixMtime]; !set {
			meta[layout.MetaPosixMtime] = layout.FormatPosixMtime(keep)
		}
	}
	if len(meta) == 0 {
		return nil
	}
	return meta
}

// AttrResult is where a metadata change landed: on the staged file of
// the name (File) or as a committed entry (Entry, nil when the name was
// removed just after).
type AttrResult struct {
	File  *File
	Entry *layout.Entry
}

// SetAttrs keeps a chmod or utimes of a session's file as posix-mode /
// posix-mtime metadata. A file being written (content not committed yet)
// takes the change on its staged file, so that it lands with the content
// in one descriptor, at the close that commits it. A committed file gets
// a new descriptor of the same blob at once (no upload), also when
// another open holds it without having written to it since its last
// commit (commitHeldLocked). It is ErrNotExist when the name has no file.
//
// baseOf and shown are the front end's: what a staged copy starts from
// (OpenFrom), and the entry the file shows now, whose mtime a metadata
// change of clean content keeps.
func (w *Writer) SetAttrs(ctx context.Context, id layout.SessionID, name string, c AttrChange, baseOf func() *layout.Entry, shown *layout.Entry) (AttrResult, error) {
	if err := layout.CheckUTF8(name); err != nil {
		return AttrResult{}, err
	}
	var e *layout.Entry
	var held *File
	var staged bool
	var err error
	for attempt := 1; ; attempt++ {
		// A refused commit (another mount rewrote the file after it
		// was read) looks again: see setCommittedAttrs.
		e, held, staged, err = w.setCommittedAttrs(ctx, id, name, c, attempt > 1)
		if !errors.Is(err, layout.ErrChangedUnder) || attempt == lookAgain {
			break
		}
	}
	if held != nil && err == nil {
		return AttrResult{File: held}, nil
	}
	if err != nil || !staged {
		return AttrResult{Entry: e}, err
	}
	s, err := w.OpenFrom(ctx, id, name, baseOf, false)
	if err != nil {
		return AttrResult{}, err
	}
	s.mu.Lock()
	var keep time.Time
	if !s.dirty {
		// Clean: the bytes are committed already; only the metadata
		// changes, and the modification time stays what it was.
		if s.committed != nil {
			shown = s.committed
		}
		if shown != nil {
			keep = layout.ShownMtime(shown.Metadata, shown.CreatedAt, id.Time())
		}
	}
	before := maps.Clone(s.meta)
	s.meta = c.Apply(maps.Clone(s.meta), keep)
	if c.MtimeNow || !maps.Equal(before, s.meta) {
		s.changedLocked()
	}
	s.mu.Unlock()
	return AttrResult{File: s}, w.Release(ctx, id, s)
}

// ChangeAttrs changes the user-set descriptor fields of s (setxattr and
// removexattr) with fn, and releases the open the caller took for it
// (OpenFresh). The change commits as a chmod's does (SetAttrs): at once
// when the file's bytes are committed and nothing was written to it
// since, else with the content.
func (w *Writer) ChangeAttrs(ctx context.Context, id layout.SessionID, s *File, fn func(*Attrs)) error {
	ws := w.session(id)
	ws.nsMu.Lock()
	w.waitCommits(id, s.Name())
	// The new descriptor of the committed bytes keeps the time they show
	// (keepingMtime), and s takes the same change once it landed.
	var kept func(*Attrs)
	onDesc := func(d *layout.Descriptor) {
		kept = keepingMtime(fn, layout.ShownMtime(d.Metadata, d.CreatedAt, id.Time()))
		a := Attrs{Meta: maps.Clone(d.Metadata), ContentType: d.ContentType, SchemaURL: d.SchemaURL}
		kept(&a)
		d.Metadata, d.ContentType, d.SchemaURL = a.Meta, a.ContentType, a.SchemaURL
	}
	onFile := func(s *File) {
		a := Attrs{Meta: maps.Clone(s.meta), ContentType: s.ctype, SchemaURL: s.schema}
		kept(&a)
		s.meta, s.ctype, s.schema = a.Meta, a.ContentType, a.SchemaURL
	}
	done, err := w.commitHeldLocked(ctx, id, s, onDesc, onFile, false)
	ws.nsMu.Unlock()
	if !done && err == nil {
		s.changeAttrsKeepingMtime(fn, id.Time())
	}
	if rerr := w.Release(ctx, id, s); err == nil {
		err = rerr
	}
	return err
}

// keepingMtime wraps fn, a setxattr's or removexattr's change, so that
// it pins keep, the time the file's committed bytes show, as posix-mtime:
// metadata set on those bytes must not move their modification time, as
// a chmod's does not (AttrChange.Apply; README: setfattr "commits the
// same way"). Left out, the new descriptor's created-at became the
// file's mtime, and a file tagged after it was written looked new to
// make and rsync. It pins nothing when keep is zero (bytes not committed
// yet: their commit is their time), when fn changed nothing (no new
// version), or when the metadata had or has a posix-mtime of its own (a
// removexattr of it asks for the time of the change).
func keepingMtime(fn func(*Attrs), keep time.Time) func(*Attrs) {
	if keep.IsZero() {
		return fn
	}
	return func(a *Attrs) {
		before := Attrs{Meta: maps.Clone(a.Meta), ContentType: a.ContentType, SchemaURL: a.SchemaURL}
		fn(a)
		_, had := before.Meta[layout.MetaPosixMtime]
		_, has := a.Meta[layout.MetaPosixMtime]
		same := maps.Equal(before.Meta, a.Meta) && before.ContentType == a.ContentType && before.SchemaURL == a.SchemaURL
		if had || has || same {
			return
		}
		if a.Meta == nil {
			a.Meta = map[string]string{}
		}
		a.Meta[layout.MetaPosixMtime] = layout.FormatPosixMtime(keep)
	}
}

// commitHeldLocked commits a metadata change of staged file s as a new
// descriptor of the entry s was last committed as, when nothing was
// written to s since (close mode): the change is in the bucket when the
// call returns, though another open still holds the file. Left to the
// file's last release, it waited for that: the kernel sends the RELEASE
// of `echo x > f`'s descriptor after close(2) has returned, so a
// `setfattr` or `chmod` run next returned before its change had landed,
// and a program holding a file open kept every change of its metadata
// local until it closed.
//
// The bytes are the committed entry's, not the staged file's: a write
// through another open racing the change is not committed with it, and a
// failed commit leaves s as it was (review 25: committed from the staged
// file, a write half done landed with a chmod, and a failed chmod left s
// failed, its committed bytes then kept in failed/ as a lost write).
// onDesc makes the change on the new descriptor; onFile makes it on s,
// under s.mu, once it landed, so that the bytes written next carry it.
// With always, a descriptor that changes nothing is committed too (a
// touch to now). It reports false, and does nothing, when s holds bytes
// not committed (or in fsync mode): the change then lands with them.
// The caller holds ws.nsMu, so that no release commits the name
// meanwhile.
func (w *Writer) commitHeldLocked(ctx context.Context, id layout.SessionID, s *File, onDesc func(*layout.Descriptor), onFile func(*File), always bool) (bool, error) {
	if w.cfg.Commit != CommitOnClose {
		return false, nil
	}
	s.mu.RLock()
	var cur layout.Entry
	clean := !s.dirty && !s.unlinked && s.committed != nil
	if clean {
		cur = *s.committed
	}
	s.mu.RUnlock()
	if !clean {
		return false, nil
	}
	d := cur.Descriptor.Clone()
	onDesc(&d)
	if !always && maps.Equal(d.Metadata, cur.Metadata) && d.ContentType == cur.ContentType && d.SchemaURL == cur.SchemaURL {
		return true, nil // nothing changes: no new version
	}
	d.CreatedAt = w.cfg.Now().UTC()
	res, err := w.commit(ctx, id, []pendingOp{{desc: &d, base: fileBase(id, &cur)}}, nil)
	if err != nil {
		return true, err
	}
	s.mu.Lock()
	onFile(s)
	for _, c := range res.Descriptors {
		if c.Name == d.Name && !c.Deleted {
			// What s was last committed as, now: the next change of
			// it is guarded by this entry, not by the one before it,
			// which a second chmod found changed under it (review 26).
			s.committed = &layout.Entry{Descriptor: c, Session: id, Version: res.Version}
		}
	}
	s.mu.Unlock()
	return true, nil
}

// setCommittedAttrs commits c for a committed file as a clone of its
// descriptor with the metadata changed and a new created-at: the same
// blob, so nothing is uploaded. It returns the entry the name has then
// (nil when it was removed just after). When the name has a staged file
// whose bytes are committed, the change is committed for it
// (commitHeldLocked), and held is that file; when its bytes are not
// committed yet, staged is true, and nothing is done: the caller changes
// the staged file instead.
//
// It holds nsMu, as rename does, so that no release commits the name
// between the look at its state and the new descriptor.
//
// The new descriptor copies the digest of the entry in the state, as
// trusted for the metadata TTL (or confirmed by this mount's last
// commit, cache.Committed): a chmod or utimes costs one PUT. It is
// guarded by the entry it copies, so another mount's rewrite or removal
// of the file that the state does not show refuses the commit
// (ErrChangedUnder), and SetAttrs looks again with recheck set: the state
// read from the bucket (one LIST). Taken from a stale state unguarded, a
// touch would have committed the old bytes again over the rewrite, or
// brought back the removed file.
func (w *Writer) setCommittedAttrs(ctx context.Context, id layout.SessionID, name string, c AttrChange, recheck bool) (e *layout.Entry, held *File, staged bool, err error) {
	ws := w.session(id)
	ws.nsMu.Lock()
	defer ws.nsMu.Unlock()
	w.waitCommits(id, name)
	if s := w.Staged(id, name); s != nil {
		onDesc := func(d *layout.Descriptor) {
			d.Metadata = c.Apply(maps.Clone(d.Metadata), layout.ShownMtime(d.Metadata, d.CreatedAt, id.Time()))
		}
		onFile := func(s *File) { s.meta = c.Apply(maps.Clone(s.meta), time.Time{}) }
		if done, err := w.commitHeldLocked(ctx, id, s, onDesc, onFile, c.MtimeNow); done {
			return nil, s, false, err
		}
		return nil, nil, true, nil
	}
	st, err := w.stateFor(ctx, id, recheck)
	if err != nil {
		return nil, nil, false, err
	}
	slots, _ := w.Live(st)
	cur, ok := slots(name)
	if !ok && !recheck {
		// Made by another mount after the state: the kernel has seen it.
		if st, err = w.stateFor(ctx, id, true); err != nil {
			return nil, nil, false, err
		}
		slots, _ = w.Live(st)
		cur, ok = slots(name)
	}
	if !ok || w.Hidden(id, name) {
		return nil, nil, false, ErrNotExist
	}
	d := cur.Descriptor.Clone()
	d.Metadata = c.Apply(maps.Clone(d.Metadata), layout.ShownMtime(cur.Metadata, cur.CreatedAt, id.Time()))
	if !c.MtimeNow && maps.Equal(d.Metadata, cur.Metadata) {
		return &cur, nil, false, nil // nothing changes: no new version
	}
	d.CreatedAt = w.cfg.Now().UTC()
	if err := w.queue(ctx, id, []pendingOp{{desc: &d, base: w.baseOf(ws, &cur), attr: &c}}); err != nil {
		return nil, nil, false, err
	}
	// An open that staged the name meanwhile (it read the old entry as
	// its base) keeps the change too.
	if s := w.Staged(id, name); s != nil {
		s.mu.Lock()
		s.meta = c.Apply(maps.Clone(s.meta), time.Time{})
		s.mu.Unlock()
	}
	if st, err = w.cache.State(ctx, id); err != nil {
		return nil, nil, false, err
	}
	slots, _ = w.Live(st)
	if now, ok := slots(name); ok {
		return &now, nil, false, nil
	}
	return nil, nil, false, nil
}

// reapplyAttrs makes the chmods and utimes of b waiting to be made again
// (batch.reapply: the file changed under them before the fsync) on what
// their files hold in st: the new descriptor keeps the other writer's
// bytes and takes the change, guarded by the entry it copies. A file
// gone since, or one that has the change already, drops it; so does a
// change made again too often (a state that keeps lagging the bucket).
func (w *Writer) reapplyAttrs(b *batch, id layout.SessionID, st *cache.State) {
	// In the batch's order, each on what the ones before it of the same
	// name made: chmod then touch, both made again on a rewrite, each on
	// the rewrite alone, kept only the last (review 36).
	order := slices.Sorted(maps.Keys(b.reapply))
	made := map[string]layout.Descriptor{}
	for _, i := range order {
		delete(b.reapply, i)
		c := b.attrs[b.bases[i]]
		// The bucket's entry (st), not this mount's view (Live), which
		// shows the pending change itself.
		var cur layout.Entry
		ok := false
		if st != nil {
			cur, ok = st.Slot(b.descs[i].Name)
		}
		base := cur
		if d, again := made[b.descs[i].Name]; ok && again {
			cur.Descriptor = d
		}
		b.reapplied[i]++
		if !ok || c == nil || b.reapplied[i] > reapplyLimit {
			b.drop(i)
			w.log.Warn("change not committed: another writer changed or removed the file before the fsync", "session", id, "name", b.descs[i].Name)
			continue
		}
		d := cur.Descriptor.Clone()
		d.Metadata = c.Apply(maps.Clone(d.Metadata), layout.ShownMtime(cur.Metadata, cur.CreatedAt, id.Time()))
		if !c.MtimeNow && maps.Equal(d.Metadata, cur.Metadata) {
			b.drop(i) // the rewrite has the change already
			continue
		}
		d.CreatedAt = w.cfg.Now().UTC()
		fb := fileBase(id, &base)
		b.descs[i], b.bases[i] = d, fb
		made[d.Name] = d
		b.soft[fb], b.attrs[fb] = true, c
		w.log.Info("change made again on the file another writer rewrote before the fsync", "session", id, "name", d.Name, "version", cur.Version)
	}
}

// reapplyLimit bounds how often one chmod or utimes is made again in one
// commit (reapplyAttrs).
const reapplyLimit = 3
