package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gocloud.dev/blob"
)

// Cache-Control values (decisions.md §16) and content types.
const (
	CacheImmutable = "max-age=31536000, immutable"
	CacheNoCache   = "no-cache"
	typeJSON       = "application/json"
	typeRef        = "text/plain; charset=utf-8"
)

// maxManifest bounds a manifest body; real ones are a few hundred bytes.
const maxManifest = 1 << 20

// LoadManifest reads and validates a session's manifest. A manifest whose
// session field disagrees with its path is ErrCorrupt.
func (s *Store) LoadManifest(ctx context.Context, id SessionID) (*Manifest, error) {
	key, err := ManifestKey(id)
	if err != nil {
		return nil, err
	}
	body, keep, err := s.readOnce(ctx, key, s.sessionObject(id, 0), maxManifest)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("load manifest of %s: %w", id, ErrSessionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load manifest of %s: %w", id, err)
	}
	m, err := decodeManifestAt(key, id, body)
	if err == nil {
		keep()
	}
	return m, err
}

// decodeManifestAt decodes the manifest body stored at key, which must be
// id's manifest.
func decodeManifestAt(key string, id SessionID, body []byte) (*Manifest, error) {
	body, err := DecodeBody(body, "", maxManifest)
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", key, err)
	}
	m, err := DecodeManifest(body)
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", key, err)
	}
	if m.Session != id {
		return nil, fmt.Errorf("load manifest %s: %w: it names session %s", key, ErrCorrupt, m.Session)
	}
	m.Stored = body
	return m, nil
}

// CreateSession writes m's manifest with If-None-Match (§5.1). If the
// manifest already exists it is loaded and returned with created=false
// (idempotent creation with an explicit ID) — unless it holds exactly the
// bytes this call writes, which is what a retry after a lost response
// finds (§13.2): then created is true.
func (s *Store) CreateSession(ctx context.Context, m *Manifest) (got *Manifest, created bool, err error) {
	if m.Session.IsZero() {
		return nil, false, fmt.Errorf("create session: %w: zero session ID", ErrInvalid)
	}
	key, err := ManifestKey(m.Session)
	if err != nil {
		return nil, false, err
	}
	body, err := EncodeManifest(m)
	if err != nil {
		return nil, false, err
	}
	err = s.put(ctx, key, body, &blob.WriterOptions{
		IfNotExist: true, ContentType: typeJSON, CacheControl: CacheImmutable,
	})
	if err == nil {
		return m, true, nil
	}
	precondition := isPrecondition(err)
	// The manifest exists, or the write's outcome is unknown (§13.2): read
	// it back. Our own bytes there mean our write landed (a retry whose
	// first attempt's response was lost), or an identical create did.
	raw, gerr := s.getAll(ctx, key, maxManifest)
	if gerr == nil && bytes.Equal(raw, body) {
		return m, true, nil
	}
	if !precondition {
		return nil, false, fmt.Errorf("create session %s: %w", m.Session, err)
	}
	if gerr != nil {
		return nil, false, fmt.Errorf("create session %s: exists but: %w", m.Session, gerr)
	}
	existing, err := decodeManifestAt(key, m.Session, raw)
	if err != nil {
		return nil, false, fmt.Errorf("create session %s: exists but: %w", m.Session, err)
	}
	return existing, false, nil
}

// NewRootManifest returns a manifest for a fresh root session (first
// sequence number 1, decisions.md).
func (s *Store) NewRootManifest() *Manifest {
	return &Manifest{Session: NewSessionID(s.opts.Now()), FirstSequenceNumber: 1}
}

// SessionExists reports whether the session's manifest exists.
func (s *Store) SessionExists(ctx context.Context, id SessionID) (bool, error) {
	key, err := ManifestKey(id)
	if err != nil {
		return false, err
	}
	return s.exists(ctx, key)
}

// SnapshotType is a snapshot's pugmark-snapshot-type (§6.4).
type SnapshotType string

// The three snapshot types (§6.4, closed for v1, §18).
const (
	Checkpoint  SnapshotType = "checkpoint"
	Provisional SnapshotType = "provisional"
	Queueing    SnapshotType = "queueing"
)

// ParseSnapshotType accepts the three v1 type names.
func ParseSnapshotType(s string) (SnapshotType, error) {
	switch t := SnapshotType(strings.ToLower(s)); t {
	case Checkpoint, Provisional, Queueing:
		return t, nil
	}
	return "", fmt.Errorf("%w: snapshot type %q: want checkpoint, provisional or queueing", ErrInvalid, s)
}

// Snapshot metadata keys (decisions.md §6.2).
const (
	MetaSnapshotSession = "pugmark-snapshot-session"
	MetaSnapshotVersion = "pugmark-snapshot-version"
	MetaTransactionID   = "pugmark-transaction-id"
	MetaSnapshotType    = "pugmark-snapshot-type"
	MetaSchema          = "schema"
)

// SnapshotMeta is a snapshot object's metadata (§6.2).
type SnapshotMeta struct {
	Type SnapshotType
	// TypeMissing is set when the object carries no type key; Type is then
	// checkpoint (§6.2 backward compatibility).
	TypeMissing bool
	// TypeInvalid is the type key's value when it is none of the three
	// (§18: the set is closed); Type is then checkpoint, as for a missing
	// key, and a reader says so rather than pass it off as one.
	TypeInvalid   string
	TransactionID uint64
	Session       string
	Version       string
	Schema        string
}

func parseSnapshotMeta(md map[string]string) SnapshotMeta {
	var m SnapshotMeta
	m.Type = Checkpoint
	if t, ok := md[MetaSnapshotType]; ok {
		if st, err := ParseSnapshotType(t); err == nil {
			m.Type = st
		} else {
			m.TypeInvalid = t
		}
	} else {
		m.TypeMissing = true
	}
	// Decimal only (decisions.md §6.2): fmt.Sscan would also take "0x10",
	// "1_000" or a valid prefix of "12abc".
	if txn, err := strconv.ParseUint(md[MetaTransactionID], 10, 64); err == nil {
		m.TransactionID = txn
	}
	m.Session, m.Version, m.Schema = md[MetaSnapshotSession], md[MetaSnapshotVersion], md[MetaSchema]
	return m
}

// LatestVersion returns the latest snapshot version of a session with one
// LIST max-keys=1 (§6.3); 0 when the session exists without snapshots;
// ErrSessionNotFound when there is no manifest. Keys in snapshots/ that are
// not version files are skipped.
func (s *Store) LatestVersion(ctx context.Context, id SessionID) (uint32, error) {
	prefix, err := SnapshotsPrefix(id)
	if err != nil {
		return 0, err
	}
	var latest uint32
	err = s.walkFirstPage(ctx, prefix, func(o *blob.ListObject) bool {
		v, err := ParseVersionFileName(strings.TrimPrefix(o.Key, prefix))
		if err != nil {
			return true
		}
		latest = v
		s.noteStamp(id, v, o)
		return false
	})
	if err != nil {
		return 0, fmt.Errorf("latest version of %s: %w", id, err)
	}
	if latest > 0 {
		return latest, nil
	}
	ok, err := s.SessionExists(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("latest version of %s: %w", id, err)
	}
	if !ok {
		return 0, fmt.Errorf("latest version of %s: %w", id, ErrSessionNotFound)
	}
	return 0, nil
}

// walkFirstPage lists prefix with max-keys=1 and widens only while the
// keys seen are not accepted (stray files, §6.1 "readers skip it"). fn
// returns true to keep going.
func (s *Store) walkFirstPage(ctx context.Context, prefix string, fn func(*blob.ListObject) bool) error {
	token := blob.FirstPageToken
	size := 1
	for {
		var page []*blob.ListObject
		var next []byte
		err := s.retry(ctx, func() error {
			s.st.lists.Add(1)
			var err error
			page, next, err = s.b.ListPage(ctx, token, size, &blob.ListOptions{Prefix: prefix, Delimiter: "/"})
			return err
		})
		if err != nil {
			return err
		}
		for _, o := range page {
			if o.IsDir {
				continue
			}
			if !fn(o) {
				return nil
			}
		}
		if len(next) == 0 {
			return nil
		}
		token = next
		if size < 1000 {
			size *= 10
		}
	}
}

// SnapshotVersions lists every snapshot version of a session, newest
// first. It reads the whole listing; use it for fsck and history views,
// not to find the latest (§6.1).
func (s *Store) SnapshotVersions(ctx context.Context, id SessionID) ([]uint32, error) {
	prefix, err := SnapshotsPrefix(id)
	if err != nil {
		return nil, err
	}
	var vs []uint32
	err = s.walk(ctx, prefix, "/", func(o *blob.ListObject) (bool, error) {
		if v, err := ParseVersionFileName(strings.TrimPrefix(o.Key, prefix)); err == nil && !o.IsDir {
			vs = append(vs, v)
		}
		return true, nil
	})
	sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
	return vs, err
}

// tooLargeIsCorrupt makes err, a snapshot's, ErrCorrupt as well when it
// is ErrTooLarge: a snapshot past the mount's limit (a zstd bomb of
// another writer's: 3 GiB of blanks) is damage to the session as much as
// one that does not decode. Its versions before it, manifest and log
// then work as for any damaged snapshot; the whole session was EIO, not
// a directory (audit 24).
func tooLargeIsCorrupt(err error) error {
	if errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// ReadSnapshot returns the descriptors committed at version v (the delta,
// §6.5). One GET; the encoding is sniffed, which is exact for JSON bodies.
func (s *Store) ReadSnapshot(ctx context.Context, id SessionID, v uint32) ([]Descriptor, error) {
	return s.readSnapshot(ctx, id, v, nil)
}

// readSnapshot is ReadSnapshot within a range whose snapshots lst lists
// (nil: none): the read waits for the listing to vouch for a kept copy.
func (s *Store) readSnapshot(ctx context.Context, id SessionID, v uint32, lst *stampListing) ([]Descriptor, error) {
	key, err := SnapshotKey(id, v)
	if err != nil {
		return nil, err
	}
	if err := lst.wait(ctx, v); err != nil {
		return nil, fmt.Errorf("load snapshot %d of %s: %w", v, id, err)
	}
	body, keep, err := s.readOnce(ctx, key, s.sessionObject(id, v), s.opts.MaxDecoded)
	if err != nil {
		return nil, fmt.Errorf("load snapshot %d of %s: %w", v, id, tooLargeIsCorrupt(err))
	}
	ds, err := DecodeDescriptors(body, "", s.opts.MaxDecoded)
	if err != nil {
		return nil, fmt.Errorf("load snapshot %d of %s (%s): %w", v, id, key, tooLargeIsCorrupt(err))
	}
	keep()
	s.damagedIn(ds, key)
	// §12.3: a cross-session write aimed at its own session is a local
	// write; a writer that kept the field made a named slot all the same.
	for i := range ds {
		if !ds[i].Fork && ds[i].TargetSession == id {
			ds[i].TargetSession = SessionID{}
		}
	}
	return ds, nil
}

// ReadSnapshotMeta returns the metadata of snapshot v (one HEAD).
func (s *Store) ReadSnapshotMeta(ctx context.Context, id SessionID, v uint32) (SnapshotMeta, error) {
	key, err := SnapshotKey(id, v)
	if err != nil {
		return SnapshotMeta{}, err
	}
	a, err := s.head(ctx, key)
	if err != nil {
		return SnapshotMeta{}, fmt.Errorf("snapshot %d of %s: %w", v, id, err)
	}
	return parseSnapshotMeta(a.Metadata), nil
}

// LatestCheckpoint returns the newest version whose type is checkpoint
// (§6.3), walking the listing forward from the latest and reading each
// candidate's metadata. It returns 0 with ok=false when the session has
// no checkpoint, and ErrSessionNotFound when it does not exist.
func (s *Store) LatestCheckpoint(ctx context.Context, id SessionID) (v uint32, ok bool, err error) {
	prefix, err := SnapshotsPrefix(id)
	if err != nil {
		return 0, false, err
	}
	any := false
	err = s.walk(ctx, prefix, "/", func(o *blob.ListObject) (bool, error) {
		ver, perr := ParseVersionFileName(strings.TrimPrefix(o.Key, prefix))
		if perr != nil || o.IsDir {
			return true, nil
		}
		any = true
		m, err := s.ReadSnapshotMeta(ctx, id, ver)
		if err != nil {
			return false, err
		}
		if m.Type == Checkpoint {
			v, ok = ver, true
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("latest checkpoint of %s: %w", id, err)
	}
	if !any {
		exists, err := s.SessionExists(ctx, id)
		if err != nil {
			return 0, false, err
		}
		if !exists {
			return 0, false, fmt.Errorf("latest checkpoint of %s: %w", id, ErrSessionNotFound)
		}
	}
	return v, ok, nil
}
