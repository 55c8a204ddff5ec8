package layout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gocloud.dev/blob"
)

// ValidateMemoryName checks §8.3: non-empty, no "/" (plus no NUL, and not
// "." or "..", which no path could show).
func ValidateMemoryName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || !utf8.ValidString(name) {
		return fmt.Errorf("%w: memory record name %q: must be non-empty UTF-8 without / or NUL", ErrInvalid, truncate(name))
	}
	return nil
}

// Namespace is a memory namespace and its latest version.
type Namespace struct {
	Name    string
	Version uint32
}

// ListNamespaces lists memories/ recursively and returns every namespace
// with its latest version (§8.4), sorted by name. Keys that do not parse
// are passed to bad, if set.
func (s *Store) ListNamespaces(ctx context.Context, bad func(key string, err error)) ([]Namespace, error) {
	latest := map[string]uint32{}
	newest := map[string]*blob.ListObject{} // the latest version's file, for its stamp
	err := s.walk(ctx, MemoriesPrefix, "", func(o *blob.ListObject) (bool, error) {
		ns, v, err := ParseMemoryKey(o.Key)
		if err != nil {
			if bad != nil {
				bad(o.Key, err)
			}
			return true, nil
		}
		if v > latest[ns] {
			latest[ns] = v
			newest[ns] = o
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	for _, o := range newest {
		s.noteMemoryStamp(o)
	}
	out := make([]Namespace, 0, len(latest))
	for ns, v := range latest {
		out = append(out, Namespace{ns, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// LatestMemoryVersion returns a namespace's latest version (§8.4), 0 when
// it has none. Only files directly under memories/<ns>/ count: nested
// namespaces are directories and are skipped.
func (s *Store) LatestMemoryVersion(ctx context.Context, ns string) (uint32, error) {
	dir, err := MemoryDir(ns)
	if err != nil {
		return 0, err
	}
	var latest uint32
	err = s.walkFirstPage(ctx, dir, func(o *blob.ListObject) bool {
		v, err := ParseVersionFileName(strings.TrimPrefix(o.Key, dir))
		if err != nil {
			return true
		}
		latest = v
		s.noteMemoryStamp(o)
		return false
	})
	if err != nil {
		return 0, fmt.Errorf("latest version of memory %s: %w", ns, err)
	}
	return latest, nil
}

// ReadMemory returns the records of version v of a namespace.
func (s *Store) ReadMemory(ctx context.Context, ns string, v uint32) ([]Descriptor, error) {
	key, err := MemoryKey(ns, v)
	if err != nil {
		return nil, err
	}
	body, keep, err := s.readOnce(ctx, key, func() (Stamp, bool) { return s.listedMemoryStamp(key) }, s.opts.MaxDecoded)
	if err != nil {
		return nil, fmt.Errorf("load memory %s version %d: %w", ns, v, err)
	}
	ds, err := DecodeDescriptors(body, "", s.opts.MaxDecoded)
	if err != nil {
		return nil, fmt.Errorf("load memory %s (%s): %w", ns, key, err)
	}
	keep()
	s.damagedIn(ds, key)
	return ds, nil
}

// MemoryWrite is one merge into a namespace (§8.3).
type MemoryWrite struct {
	// Put records replace records of the same name (and are appended).
	Put []Descriptor
	// Remove names are dropped.
	Remove []string
	// Commit is stamped on the Put records; a zero Transaction gets a
	// fresh ID.
	Commit MemoryCommit
	// Unchanged guards against lost updates: name -> the digest of the
	// record a Put was built on (an append to it, an edit in place). A
	// merge that finds another digest under the name refuses the write
	// (ErrChangedUnder): the other writer's record would be lost under
	// it. A name with no record is written (it was removed meanwhile).
	Unchanged map[string]Digest
	// Holds is Unchanged for a write that needs the record itself: name
	// -> the digest the record must still have, where no record refuses
	// the write too, and the zero Digest asks for no record. A rename
	// moves the record it read (audit 28: it moved the old bytes over
	// another writer's new ones), and an append goes on the record as it
	// is, not on one since removed or renamed away.
	Holds map[string]Digest
	// Inherited is, for a Put that replaces a record's bytes, the
	// metadata it took from the record as its writer read it (its mode,
	// its user.pugmark.meta keys). The merge keeps the writer's own
	// changes of those and takes the rest from the record as it is then:
	// a rewrite (>) from a mount whose view was older than another
	// mount's chmod or setfattr put the old mode back (audit 28). The
	// writer's posix-mtime is kept as it is (a content write clears it).
	Inherited map[string]map[string]string
	// Moved is, for a Put that moves a record (a rename: new name -> old
	// name, the old one in Remove and held by its digest in Holds), the
	// record it moves: the Put takes that record's metadata and schema
	// as they are at the merge. A chmod or setfattr another writer made
	// between the rename's read and its merge was dropped (review 40).
	Moved map[string]string
}

// MergeMetadata is the metadata of a file or record rewritten from base
// (what its writer read) to mine, when it holds theirs at the merge: each
// key the writer did not change is theirs, posix-mtime is mine (a content
// write clears it, a utimes sets it).
func MergeMetadata(base, mine, theirs map[string]string) map[string]string {
	out := map[string]string{}
	keys := map[string]bool{}
	for _, m := range []map[string]string{base, mine, theirs} {
		for k := range m {
			keys[k] = true
		}
	}
	for k := range keys {
		bv, inBase := base[k]
		mv, inMine := mine[k]
		from := theirs
		if k == MetaPosixMtime || inBase != inMine || bv != mv {
			from = mine
		}
		if v, ok := from[k]; ok {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// MemoryResult reports a memory merge.
type MemoryResult struct {
	Version uint32
	// Changed is false when the merge changed nothing and no version was
	// written.
	Changed  bool
	Records  []Descriptor
	Attempts int
}

// WriteMemory merges w into the latest version of ns and writes the next
// version with If-None-Match, retrying against the new latest on a
// precondition failure (§8.3, §13.4). A merge that changes nothing writes
// nothing.
func (s *Store) WriteMemory(ctx context.Context, ns string, w MemoryWrite) (MemoryResult, error) {
	if _, err := MemoryDir(ns); err != nil {
		return MemoryResult{}, err
	}
	for _, d := range w.Put {
		if err := ValidateMemoryName(d.Name); err != nil {
			return MemoryResult{}, err
		}
	}
	for _, n := range w.Remove {
		if err := ValidateMemoryName(n); err != nil {
			return MemoryResult{}, err
		}
	}
	if w.Commit.Transaction == 0 {
		w.Commit.Transaction = NewTransactionID()
	}
	txn := strconv.FormatUint(w.Commit.Transaction, 10)
	// floor is the newest version known to exist, so that a stale listing
	// (§14.3) cannot send us back to a version already taken.
	var floor uint32
	for attempt := 1; attempt <= s.opts.CommitRetries; attempt++ {
		v, err := s.LatestMemoryVersion(ctx, ns)
		if err != nil {
			return MemoryResult{}, err
		}
		v = max(v, floor)
		var cur []Descriptor
		if v > 0 {
			if cur, err = s.ReadMemory(ctx, ns, v); err != nil {
				return MemoryResult{}, err
			}
		}
		has := map[string]Digest{}
		for _, d := range cur {
			if want, ok := w.Unchanged[d.Name]; ok && d.Digest != want {
				return MemoryResult{}, fmt.Errorf("write memory %s: record %q changed in version %d since it was read: %w", ns, d.Name, v, ErrChangedUnder)
			}
			has[d.Name] = d.Digest
		}
		for name, want := range w.Holds {
			if got, ok := has[name]; got != want || ok == want.IsZero() {
				return MemoryResult{}, fmt.Errorf("write memory %s: record %q changed in version %d since it was read: %w", ns, name, v, ErrChangedUnder)
			}
		}
		mw := w
		if len(w.Inherited) > 0 || len(w.Moved) > 0 {
			mw.Put = slices.Clone(w.Put)
			for i, d := range mw.Put {
				if from, ok := w.Moved[d.Name]; ok {
					if c, found := lastRecord(cur, from); found {
						mw.Put[i].Metadata, mw.Put[i].SchemaURL = maps.Clone(c.Metadata), c.SchemaURL
					}
					continue
				}
				base, ok := w.Inherited[d.Name]
				c, found := lastRecord(cur, d.Name)
				if ok && found {
					mw.Put[i].Metadata = MergeMetadata(base, d.Metadata, c.Metadata)
				}
			}
		}
		merged, changed := MergeMemory(cur, mw)
		if !changed {
			return MemoryResult{Version: v, Records: cur, Attempts: attempt}, nil
		}
		if v == ^uint32(0) {
			return MemoryResult{}, fmt.Errorf("write memory %s: %w: version space exhausted", ns, ErrInvalid)
		}
		key, _ := MemoryKey(ns, v+1)
		body, err := EncodeDescriptors(merged)
		if err != nil {
			return MemoryResult{}, err
		}
		err = s.put(ctx, key, body, &blob.WriterOptions{
			IfNotExist: true, ContentType: typeJSON, ContentEncoding: EncodingZstd, CacheControl: CacheImmutable,
			Metadata: map[string]string{MetaTransactionID: txn},
		})
		if err == nil {
			return MemoryResult{Version: v + 1, Changed: true, Records: merged, Attempts: attempt}, nil
		}
		// Precondition failed, or the outcome is unknown: read the key back.
		// The transaction ID is the writer's (§8.2), which several writes
		// of one session snapshot share, so a matching ID alone does not
		// prove the file is ours: its body must be the one we wrote.
		a, herr := s.head(ctx, key)
		switch {
		case herr == nil && a.Metadata[MetaTransactionID] == txn:
			got, gerr := s.getAll(ctx, key, s.opts.MaxDecoded)
			if gerr != nil {
				return MemoryResult{}, fmt.Errorf("write memory %s: read back %s: %w", ns, key, gerr)
			}
			if bytes.Equal(got, body) {
				return MemoryResult{Version: v + 1, Changed: true, Records: merged, Attempts: attempt}, nil
			}
			floor = v + 1 // a sibling write of the same transaction: merge again
		case herr == nil:
			floor = v + 1 // another writer's version: merge again
		case isPrecondition(err) && errors.Is(herr, ErrNotFound):
			// Listing raced a delete, or another writer's create of the
			// version is in flight, not served yet: try again, after a
			// moment, or the hundred attempts passed in milliseconds
			// (review 17).
			select {
			case <-ctx.Done():
				return MemoryResult{}, fmt.Errorf("write memory %s: %w", ns, ctx.Err())
			case <-time.After(min(time.Duration(attempt)*5*time.Millisecond, 50*time.Millisecond)):
			}
			continue
		default:
			return MemoryResult{}, fmt.Errorf("write memory %s: %w", ns, err)
		}
	}
	return MemoryResult{}, fmt.Errorf("write memory %s: %w", ns, ErrRetriesExhausted)
}

// lastRecord returns the record of name in recs: its last one (§8.3).
func lastRecord(recs []Descriptor, name string) (Descriptor, bool) {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Name == name {
			return recs[i], true
		}
	}
	return Descriptor{}, false
}

// MergeMemory applies w to cur (§8.3): drop records whose name is written
// or removed, append the written records in call order (of several records
// of one name in a call, the last wins, at the position of the first). A
// written record equal to the current one of its name (same content,
// ignoring created-at, sequence number and commit envelope) changes
// nothing; changed is false when the result equals cur. Remove applies
// before Put, so a name both removed and written ends up written.
// Records of cur whose names §8.3 forbids (empty, or holding a /: another
// writer's) are left out of a changed result: the version written must
// conform, the versions before it keep them, and no path shows them.
func MergeMemory(cur []Descriptor, w MemoryWrite) (merged []Descriptor, changed bool) {
	byName := map[string]int{}
	for i, d := range cur {
		byName[d.Name] = i
	}
	removed := map[string]bool{}
	for _, n := range w.Remove {
		if _, ok := byName[n]; ok {
			removed[n] = true
		}
	}
	// The call's final record per name, in first-occurrence order.
	var order []string
	final := map[string]Descriptor{}
	for _, d := range w.Put {
		if _, ok := final[d.Name]; !ok {
			order = append(order, d.Name)
		}
		final[d.Name] = d
	}
	drop := maps.Clone(removed)
	var puts []Descriptor
	for _, n := range order {
		d := final[n]
		if i, ok := byName[n]; ok && !removed[n] && sameRecord(cur[i], d) {
			continue
		}
		d = d.Clone()
		c := w.Commit
		d.Commit = &c
		puts = append(puts, d)
		drop[n] = true
	}
	if len(drop) == 0 {
		return cur, false
	}
	merged = make([]Descriptor, 0, len(cur)+len(puts))
	for _, d := range cur {
		if !drop[d.Name] && d.Name != "" && !strings.Contains(d.Name, "/") {
			merged = append(merged, d)
		}
	}
	return append(merged, puts...), true
}

// sameRecord reports whether b would store the same content as a: every
// field but created-at, sequence number, the commit envelope and inline
// data (which only mirrors the blob the digest names, §7.1).
func sameRecord(a, b Descriptor) bool {
	return a.Name == b.Name && a.Digest == b.Digest && a.Size == b.Size &&
		a.ContentType == b.ContentType && a.ContentEncoding == b.ContentEncoding &&
		a.CacheControl == b.CacheControl && a.SchemaURL == b.SchemaURL &&
		a.Deleted == b.Deleted && a.Fork == b.Fork && a.TargetSession == b.TargetSession &&
		a.SourceSession == b.SourceSession && a.SourceVersion == b.SourceVersion &&
		maps.Equal(a.Metadata, b.Metadata) &&
		sameExtra(a.Extra, b.Extra)
}

func sameExtra(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(canonicalRaw(v), canonicalRaw(w)) {
			return false
		}
	}
	return true
}

// ResolveMemoryKey splits key = <namespace>/<name> by longest-prefix match
// against the known namespaces (§8.5). The remainder must be a record name
// (§8.3: non-empty, no "/"); otherwise ok is false.
func ResolveMemoryKey(namespaces []string, key string) (ns, name string, ok bool) {
	for _, n := range namespaces {
		if n != "" && strings.HasPrefix(key, n+"/") && len(n) > len(ns) {
			ns = n
		}
	}
	if ns == "" {
		return "", "", false
	}
	name = key[len(ns)+1:]
	if ValidateMemoryName(name) != nil {
		return "", "", false
	}
	return ns, name, true
}
