package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/faultblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// TestRecords: memory records and refs written without a kernel; each
// write drops the view it makes stale, and refusals are the package's
// sentinels (fs/errno.go maps them).
func TestRecords(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	var memDrops, refDrops int
	var made []layout.SessionID
	r := NewRecords(store, RecordCaches{
		InvalidateMemories: func() { memDrops++ },
		InvalidateRefs:     func() { refDrops++ },
		SessionCreated:     func(id layout.SessionID) { made = append(made, id) },
	}, RecordOptions{})

	for _, body := range []string{"one", "two"} {
		d, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "a", Metadata: map[string]string{"k": "v"}}, []byte(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Name != "a" || d.Metadata["k"] != "v" || string(d.Data) != body {
			t.Fatalf("record %+v, want a with metadata and %q inline", d, body)
		}
	}
	if len(made) != 1 {
		t.Fatalf("%d writer sessions made for two memory writes, want one", len(made))
	}
	if _, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "b"}, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := r.RenameMemory(ctx, "notes", "a", "b", true); !errors.Is(err, ErrExist) {
		t.Fatalf("rename onto an existing record with noReplace: %v, want ErrExist", err)
	}
	if err := r.RenameMemory(ctx, "notes", "a", "c", false); err != nil {
		t.Fatal(err)
	}
	if err := r.RenameMemory(ctx, "notes", "a", "d", false); !errors.Is(err, ErrNotExist) {
		t.Fatalf("rename of a moved record: %v, want ErrNotExist", err)
	}
	if err := r.RemoveMemory(ctx, "notes", "c"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveMemory(ctx, "notes", "c"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("second remove: %v, want ErrNotExist", err)
	}
	if memDrops != 6 {
		t.Fatalf("memory view dropped %d times for 6 writes", memDrops)
	}

	if _, _, err := r.WriteRef(ctx, "tags/x", layout.Ref{}, false, []byte("two\nlines\n")); !errors.Is(err, ErrBadRef) {
		t.Fatalf("a two-line ref: %v, want ErrBadRef", err)
	}
	prev, existed, err := r.WriteRef(ctx, "tags/x", layout.Ref{}, false, []byte("objects/one\n"))
	if err != nil || !existed || prev.Target != "objects/one" {
		t.Fatalf("create: %+v %v %v", prev, existed, err)
	}
	if prev, _, err = r.WriteRef(ctx, "tags/x", prev, true, []byte("objects/two")); err != nil || prev.Target != "objects/two" {
		t.Fatalf("replace: %+v %v", prev, err)
	}
	if err := r.DeleteRef(ctx, "tags/x"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteRef(ctx, "tags/x"); !errors.Is(err, layout.ErrNotFound) {
		t.Fatalf("second delete: %v, want not found", err)
	}
	if refDrops != 3 {
		t.Fatalf("ref view dropped %d times for 3 writes", refDrops)
	}
}

// failingPuts is a RecordStore whose memory and ref writes fail.
type failingPuts struct{ RecordStore }

var errPutFails = errors.New("the bucket refuses")

func (failingPuts) WriteMemory(context.Context, string, layout.MemoryWrite) (layout.MemoryResult, error) {
	return layout.MemoryResult{}, errPutFails
}
func (failingPuts) RenameRef(context.Context, string, layout.Ref, string) error {
	return errPutFails
}

// TestRecordsWriterKeptAcrossMounts: the session a mount names as the
// writer of its memory records (§8.2) is named again by the next mount
// of the bucket (RecordOptions.WriterFile), while the bucket has it;
// every mount that wrote a record made an empty session of its own
// (audit 30). A file naming a session the bucket lacks, or no ID at all,
// makes a new one.
func TestRecordsWriterKeptAcrossMounts(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	file := filepath.Join(t.TempDir(), "memory-writer")
	writer := func() (made []layout.SessionID) {
		t.Helper()
		r := NewRecords(store, RecordCaches{SessionCreated: func(id layout.SessionID) { made = append(made, id) }},
			RecordOptions{WriterFile: file})
		d, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "a"}, []byte(fmt.Sprint(time.Now().UnixNano())), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Commit == nil || d.Commit.Session != r.id {
			t.Fatalf("record committed by %+v, the mount's writer is %s", d.Commit, r.id)
		}
		return append(made, r.id)
	}
	first := writer()
	if len(first) != 2 {
		t.Fatalf("the first mount made %d sessions, want one", len(first)-1)
	}
	for i := range 3 {
		if again := writer(); len(again) != 1 || again[0] != first[0] {
			t.Fatalf("mount %d made %v, want none and the first mount's writer %s", i+2, again[:len(again)-1], first[0])
		}
	}
	for _, content := range []string{layout.NewSessionID(time.Now()).String(), "garbage"} {
		if err := os.WriteFile(file, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if made := writer(); len(made) != 2 || made[1] == first[0] {
			t.Fatalf("with %q kept: made %v, want a new writer session", content, made)
		}
	}
	ids, err := store.ListSessions(ctx, nil)
	if err != nil || len(ids) != 3 {
		t.Fatalf("the bucket holds %d sessions (%v), want the three writers made", len(ids), err)
	}
}

// TestRecordsKeepFailedWrites: a memory or ref write that fails keeps
// what was written under the failed directory (a shell redirection never
// sees close's error), and a session ref holds a manifest path of a
// session that exists (§9.1) or is refused.
func TestRecordsKeepFailedWrites(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	failed := t.TempDir()
	r := NewRecords(failingPuts{store}, RecordCaches{}, RecordOptions{FailedDir: failed})
	if _, err := r.PutMemory(ctx, "team/notes", layout.Descriptor{Name: "standup.md"}, []byte("memory body\n"), nil); !errors.Is(err, errPutFails) {
		t.Fatalf("memory write: %v", err)
	}
	if _, _, err := r.WriteRef(ctx, "tags/x", layout.Ref{}, false, []byte("objects/one\n")); !errors.Is(err, errPutFails) {
		t.Fatalf("ref write: %v", err)
	}
	for dir, want := range map[string]string{"memories": "memory body\n", "refs": "objects/one\n"} {
		ents, err := os.ReadDir(filepath.Join(failed, dir))
		if err != nil || len(ents) != 1 {
			t.Fatalf("failed/%s: %v, %v; want the one write kept", dir, ents, err)
		}
		if got, _ := os.ReadFile(filepath.Join(failed, dir, ents[0].Name())); string(got) != want {
			t.Errorf("failed/%s/%s holds %q, want %q", dir, ents[0].Name(), got, want)
		}
	}

	r = NewRecords(store, RecordCaches{}, RecordOptions{FailedDir: t.TempDir()})
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	key, _ := layout.ManifestKey(m.Session)
	absent, _ := layout.ManifestKey(layout.NewSessionID(time.Now()))
	for _, tc := range []struct {
		body string
		want error
	}{
		{"not a manifest path", ErrBadRef},
		{strings.ToUpper(key), ErrBadRef},
		{absent, layout.ErrSessionNotFound},
		{key, nil},
	} {
		if _, _, err := r.WriteRef(ctx, layout.SessionRefName("nm"), layout.Ref{}, false, []byte(tc.body+"\n")); !errors.Is(err, tc.want) {
			t.Errorf("refs/sessions/nm = %q: %v, want %v", tc.body, err, tc.want)
		}
	}
}

// TestFailedName: kept files of a/b and a%2Fb do not share a name.
func TestFailedName(t *testing.T) {
	for in, want := range map[string]string{"a/b": "a%2Fb", "a%2Fb": "a%252Fb", "plain.txt": "plain.txt"} {
		if got := failedName(in); got != want {
			t.Errorf("failedName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAppendMemoryOutlastsOtherWriters: an append-only write of a memory
// record puts its bytes on the record as another writer keeps changing
// it, for as long as a commit of a session would retry (decisions.md
// §13.3: 100), not five times: two mounts appending in a loop to one
// record had one close in 25 fail with ESTALE (audit 8 #3). Every other
// writer's line stays, and the appended line ends the record.
func TestAppendMemoryOutlastsOtherWriters(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	r := NewRecords(store, RecordCaches{}, RecordOptions{})
	other := NewRecords(store, RecordCaches{}, RecordOptions{})
	latest := func() layout.Descriptor {
		v, err := store.LatestMemoryVersion(ctx, "notes")
		if err != nil {
			t.Fatal(err)
		}
		recs, err := store.ReadMemory(ctx, "notes", v)
		if err != nil || len(recs) != 1 {
			t.Fatalf("version %d: %v, %d records", v, err, len(recs))
		}
		return recs[0]
	}
	base, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "log"}, []byte("base\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	want.WriteString("base\n")
	otherAppends := func(i int) {
		cur := latest()
		line := "other " + strconv.Itoa(i) + "\n"
		if _, err := other.PutMemory(ctx, "notes", layout.Descriptor{Name: "log"}, append(cur.Data, line...), &cur.Digest); err != nil {
			t.Fatal(err)
		}
		want.WriteString(line)
	}
	otherAppends(0) // after this writer read the record
	const races = 20
	reads := 0
	current := func(ctx context.Context) ([]byte, *layout.Digest, error) {
		cur := latest()
		if reads++; reads <= races {
			otherAppends(reads) // lands between this read and the put
		}
		return cur.Data, &cur.Digest, nil
	}
	if _, _, err := r.AppendMemory(ctx, "notes", layout.Descriptor{Name: "log"}, []byte("base\nmine\n"), &base.Digest, len("mine\n"), nil, current); err != nil {
		t.Fatalf("append after %d lost races: %v", reads, err)
	}
	want.WriteString("mine\n")
	if got := string(latest().Data); got != want.String() {
		t.Fatalf("record = %q, want %q", got, want.String())
	}
}

// racingStore is a RecordStore whose next WriteMemory first runs
// between: another writer's change landing after a write read the
// namespace and before its merge.
type racingStore struct {
	*layout.Store
	between func()
}

func (s *racingStore) WriteMemory(ctx context.Context, ns string, w layout.MemoryWrite) (layout.MemoryResult, error) {
	if f := s.between; f != nil {
		s.between = nil
		f()
	}
	return s.Store.WriteMemory(ctx, ns, w)
}

// memRecords returns the bodies of the records of ns's latest version.
func memRecords(t *testing.T, store *layout.Store, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	v, err := store.LatestMemoryVersion(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.ReadMemory(ctx, ns, v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range recs {
		out[d.Name] = string(d.Data)
	}
	return out
}

// TestRecordsRaceOtherWriters: a rename or an append of a record meets
// another writer's change that lands between its read and its merge.
// The rename moved the bytes it had read and dropped the other writer's
// new ones with the old name; the append to a log another writer rotated
// away (`mv log log.1`) brought back every line it had read (audit 28).
func TestRecordsRaceOtherWriters(t *testing.T) {
	tests := []struct {
		name  string
		setup map[string]string
		// other is the other writer's change; mine, this writer's.
		other func(ctx context.Context, o *Records) error
		mine  func(ctx context.Context, r *Records, store *layout.Store) error
		want  map[string]string
	}{
		{
			name:  "rename meets a rewrite of its source",
			setup: map[string]string{"m": "old"},
			other: func(ctx context.Context, o *Records) error {
				_, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: "m"}, []byte("new"), nil)
				return err
			},
			mine: func(ctx context.Context, r *Records, _ *layout.Store) error {
				return r.RenameMemory(ctx, "ns", "m", "dst", false)
			},
			want: map[string]string{"dst": "new"},
		},
		{
			name:  "rename meets a removal of its source",
			setup: map[string]string{"m": "old"},
			other: func(ctx context.Context, o *Records) error { return o.RemoveMemory(ctx, "ns", "m") },
			mine: func(ctx context.Context, r *Records, _ *layout.Store) error {
				if err := r.RenameMemory(ctx, "ns", "m", "dst", false); !errors.Is(err, ErrNotExist) {
					return fmt.Errorf("rename of a record removed meanwhile: %v, want ErrNotExist", err)
				}
				return nil
			},
			want: map[string]string{},
		},
		{
			name:  "append meets a rotation",
			setup: map[string]string{"log": "start\n"},
			other: func(ctx context.Context, o *Records) error { return o.RenameMemory(ctx, "ns", "log", "log.1", false) },
			mine:  appendLine("line\n"),
			want:  map[string]string{"log.1": "start\n", "log": "line\n"},
		},
		{
			name:  "append meets another append",
			setup: map[string]string{"log": "start\n"},
			other: func(ctx context.Context, o *Records) error {
				_, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: "log"}, []byte("start\nother\n"), nil)
				return err
			},
			mine: appendLine("line\n"),
			want: map[string]string{"log": "start\nother\nline\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := layout.New(memblob.OpenBucket(nil), nil)
			rs := &racingStore{Store: store}
			r := NewRecords(rs, RecordCaches{}, RecordOptions{})
			o := NewRecords(store, RecordCaches{}, RecordOptions{})
			for name, body := range tt.setup {
				if _, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: name}, []byte(body), nil); err != nil {
					t.Fatal(err)
				}
			}
			rs.between = func() {
				if err := tt.other(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.mine(ctx, r, store); err != nil {
				t.Fatal(err)
			}
			if got := memRecords(t, store, "ns"); !maps.Equal(got, tt.want) {
				t.Fatalf("records %q, want %q", got, tt.want)
			}
		})
	}
}

// appendLine appends line to record log as a `>>` does: built on the
// record as it was read, re-read (current) when that changed.
func appendLine(line string) func(ctx context.Context, r *Records, store *layout.Store) error {
	return func(ctx context.Context, r *Records, store *layout.Store) error {
		current := func(ctx context.Context) ([]byte, *layout.Digest, error) {
			v, err := store.LatestMemoryVersion(ctx, "ns")
			if err != nil {
				return nil, nil, err
			}
			recs, err := store.ReadMemory(ctx, "ns", v)
			if err != nil {
				return nil, nil, err
			}
			for _, d := range recs {
				if d.Name == "log" {
					return d.Data, &d.Digest, nil
				}
			}
			return nil, nil, nil
		}
		body, dig, err := current(ctx)
		if err != nil {
			return err
		}
		_, _, err = r.AppendMemory(ctx, "ns", layout.Descriptor{Name: "log"}, append(bytes.Clone(body), line...), dig, len(line), nil, current)
		return err
	}
}

// TestRecordsRenameNoReplaceRace: a RENAME_NOREPLACE of a record (GNU
// mv's first try, mv -n) fails with EEXIST, and leaves it, on a record
// another writer makes under the new name between the rename's read and
// its merge: the merge replaced it with the moved one (review 30).
func TestRecordsRenameNoReplaceRace(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	rs := &racingStore{Store: store}
	r := NewRecords(rs, RecordCaches{}, RecordOptions{})
	o := NewRecords(store, RecordCaches{}, RecordOptions{})
	if _, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: "m"}, []byte("mine"), nil); err != nil {
		t.Fatal(err)
	}
	rs.between = func() {
		if _, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: "dst"}, []byte("theirs"), nil); err != nil {
			t.Fatal(err)
		}
	}
	err := r.RenameMemory(ctx, "ns", "m", "dst", true)
	got := memRecords(t, store, "ns")
	want := map[string]string{"m": "mine", "dst": "theirs"}
	if !errors.Is(err, ErrExist) || !maps.Equal(got, want) {
		t.Fatalf("noReplace rename onto a name made meanwhile: err %v, records %q; want ErrExist and %q", err, got, want)
	}
}

// TestRecordsAttrsRetryKeepsOthersMetadata: a chmod made through
// PutMemoryAttrs that is refused because another mount appended and set
// a metadata key meanwhile is made again on the record's current bytes
// and keeps that key: it was retried with the metadata read at its open,
// and the other mount's key was dropped (review 31).
func TestRecordsAttrsRetryKeepsOthersMetadata(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), nil)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Hour); return clock }
	r := NewRecords(store, RecordCaches{}, RecordOptions{Now: now})
	other := NewRecords(store, RecordCaches{}, RecordOptions{Now: now})

	base, err := r.PutMemory(ctx, "ns", layout.Descriptor{Name: "log"}, []byte("base\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// This mount: chmod 600, which keeps the record's shown mtime.
	mode := uint32(0o600)
	keep := layout.ShownMtime(base.Metadata, base.CreatedAt, time.Time{})
	mine := AttrChange{Mode: &mode}.Apply(nil, keep)

	// The other mount, meanwhile: appends and sets a metadata key.
	_, err = other.PutMemory(ctx, "ns", layout.Descriptor{Name: "log", Metadata: map[string]string{"topic": "ops"}}, []byte("base\nother\n"), &base.Digest)
	if err != nil {
		t.Fatal(err)
	}
	var theirs layout.Descriptor
	current := func(ctx context.Context) ([]byte, *layout.Descriptor, error) {
		v, _ := store.LatestMemoryVersion(ctx, "ns")
		recs, err := store.ReadMemory(ctx, "ns", v)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range recs {
			if d.Name == "log" {
				theirs = d
				return append([]byte(nil), d.Data...), &d, nil
			}
		}
		return nil, nil, nil
	}
	d, merged, err := r.PutMemoryAttrs(ctx, "ns", layout.Descriptor{Name: "log", Metadata: mine}, []byte("base\n"), &base.Digest, map[string]string{}, true, current)
	if err != nil {
		t.Fatal(err)
	}
	if string(merged) != "base\nother\n" {
		t.Fatalf("merged %q", merged)
	}
	if d.Metadata["topic"] != "ops" {
		t.Errorf("metadata after the chmod %v: the other mount's key topic=ops is gone", d.Metadata)
	}
	// The chmod kept the shown time of the bytes it read; on the other
	// mount's newer bytes it keeps theirs (review 31: the older time
	// came back with them).
	if got, want := layout.ShownMtime(d.Metadata, d.CreatedAt, time.Time{}), layout.ShownMtime(theirs.Metadata, theirs.CreatedAt, time.Time{}); !got.Equal(want) {
		t.Errorf("record holding the other mount's append (shown at %v) shows %v after the chmod", want, got)
	}
	if d.Metadata[layout.MetaPosixMode] != "0600" {
		t.Errorf("mode after the chmod: %v", d.Metadata)
	}
}

// TestRecordsKeepOthersChmod: another mount's chmod of a record lands
// between this writer's read of the record and its merge; a rename, an
// append (>>) and an edit in place of the same record keep that mode and
// add their own metadata change (a key). Each committed the metadata it
// had read and put the old mode back (review 40, F2).
func TestRecordsKeepOthersChmod(t *testing.T) {
	read := map[string]string{layout.MetaPosixMode: "0644"}
	mine := map[string]string{layout.MetaPosixMode: "0644", "mine": "yes"}
	tests := []struct {
		name string
		// write is this writer's change of record m ("body\n", read with
		// the metadata read); it returns the name the record has after.
		write func(ctx context.Context, r *Records, store *layout.Store) (string, error)
		body  string
	}{
		{"rename", func(ctx context.Context, r *Records, _ *layout.Store) (string, error) {
			return "dst", r.RenameMemory(ctx, "ns", "m", "dst", false)
		}, "body\n"},
		{"append", func(ctx context.Context, r *Records, store *layout.Store) (string, error) {
			current := func(ctx context.Context) ([]byte, *layout.Digest, error) {
				return []byte("body\n"), ptr(layout.DigestOf([]byte("body\n"))), nil
			}
			_, _, err := r.AppendMemory(ctx, "ns", layout.Descriptor{Name: "m", Metadata: mine}, []byte("body\nmore\n"),
				ptr(layout.DigestOf([]byte("body\n"))), len("more\n"), read, current)
			return "m", err
		}, "body\nmore\n"},
		{"edit in place", func(ctx context.Context, r *Records, _ *layout.Store) (string, error) {
			_, err := r.EditMemory(ctx, "ns", layout.Descriptor{Name: "m", Metadata: mine}, []byte("BODY\n"), layout.DigestOf([]byte("body\n")), read)
			return "m", err
		}, "BODY\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := layout.New(memblob.OpenBucket(nil), nil)
			rs := &racingStore{Store: store}
			r := NewRecords(rs, RecordCaches{}, RecordOptions{})
			o := NewRecords(store, RecordCaches{}, RecordOptions{})
			if _, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: "m", Metadata: read}, []byte("body\n"), nil); err != nil {
				t.Fatal(err)
			}
			rs.between = func() {
				if _, err := o.PutMemory(ctx, "ns", layout.Descriptor{Name: "m", Metadata: map[string]string{layout.MetaPosixMode: "0600"}}, []byte("body\n"), nil); err != nil {
					t.Fatal(err)
				}
			}
			name, err := tt.write(ctx, r, store)
			if err != nil {
				t.Fatal(err)
			}
			v, err := store.LatestMemoryVersion(ctx, "ns")
			if err != nil {
				t.Fatal(err)
			}
			recs, err := store.ReadMemory(ctx, "ns", v)
			if err != nil {
				t.Fatal(err)
			}
			d, ok := lastRecordOf(recs, name)
			if !ok || string(d.Data) != tt.body {
				t.Fatalf("record %s after the write: %+v, %v; want %q", name, d, ok, tt.body)
			}
			if got := d.Metadata[layout.MetaPosixMode]; got != "0600" {
				t.Errorf("mode of %s = %q, want the other mount's 0600", name, got)
			}
			if tt.name != "rename" && d.Metadata["mine"] != "yes" {
				t.Errorf("metadata of %s = %v, want this writer's key too", name, d.Metadata)
			}
		})
	}
}

// lastRecordOf returns the last record of name in recs.
func lastRecordOf(recs []layout.Descriptor, name string) (layout.Descriptor, bool) {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Name == name {
			return recs[i], true
		}
	}
	return layout.Descriptor{}, false
}

// TestRecordsWriterSessionCreateFails: a memory write whose first step,
// making the session the mount names as the writer of its records (§8.2),
// fails leaves at most that one session in the bucket, whatever happens
// next: the next write, or the next mount (RecordOptions.WriterFile),
// names the session the failed create may have landed, creating it again
// (§5.1 makes that idempotent) instead of another. §5.1 forbids deleting
// a manifest to tidy up, so reusing it is the way.
//
// Before, every failed first step made a new session ID: a create cut by
// its deadline or whose reply was lost, then not read back, left an empty
// session (a manifest with agent "pugfs" and no snapshot) per failed
// write, and one more per mount; a writer session named by WriterFile
// whose lookup got no answer was replaced by a new one too.
func TestRecordsWriterSessionCreateFails(t *testing.T) {
	ctx := context.Background()
	deadline := faultblob.TransientError(gcerrors.DeadlineExceeded)
	for _, c := range []struct {
		name string
		// faults are on while failing writes are made.
		faults []faultblob.Rule
		// kept: a mount made the writer session before, and WriterFile
		// names it.
		kept     bool
		failing  int
		newMount bool // the write after the failing ones is another mount's
	}{
		{name: "lands, reply lost, no read back", failing: 3, faults: []faultblob.Rule{
			{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, FailProb: 1, LoseResponse: true, Err: deadline},
			{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, FailProb: 1},
		}},
		{name: "lands, reply lost, no read back, next mount", failing: 1, newMount: true, faults: []faultblob.Rule{
			{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, FailProb: 1, LoseResponse: true, Err: deadline},
			{Ops: faultblob.OpGet | faultblob.OpHead, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, FailProb: 1},
		}},
		{name: "cut by a deadline", failing: 3, faults: []faultblob.Rule{
			{Ops: faultblob.OpPut, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, FailProb: 1, Err: deadline},
		}},
		{name: "kept writer not answered", kept: true, failing: 2, faults: []faultblob.Rule{
			{Ops: faultblob.OpHead | faultblob.OpGet, Match: faultblob.Match{Prefix: layout.SessionsPrefix}, FailProb: 1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inner := memblob.OpenBucket(nil)
			plain := layout.New(inner, nil)
			inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
			store := layout.New(faultblob.Wrap(inner, inj), &layout.Options{Retries: 1, RetryBase: time.Millisecond})
			file := filepath.Join(t.TempDir(), "memory-writer")
			mount := func() *Records {
				return NewRecords(store, RecordCaches{}, RecordOptions{WriterFile: file, FailedDir: t.TempDir()})
			}
			var before layout.SessionID
			if c.kept {
				d, err := mount().PutMemory(ctx, "notes", layout.Descriptor{Name: "first"}, []byte("first"), nil)
				if err != nil {
					t.Fatal(err)
				}
				before = d.Commit.Session
			}
			r := mount()
			var ids []faultblob.RuleID
			for _, f := range c.faults {
				ids = append(ids, inj.Add(f))
			}
			for i := range c.failing {
				if _, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "a"}, []byte("a"), nil); err == nil {
					t.Fatalf("memory write %d succeeded with the faults on", i+1)
				}
			}
			for _, id := range ids {
				inj.Remove(id)
			}
			if c.newMount {
				r = mount()
			}
			d, err := r.PutMemory(ctx, "notes", layout.Descriptor{Name: "a"}, []byte("a"), nil)
			if err != nil {
				t.Fatalf("memory write once the bucket answers: %v", err)
			}
			sessions, err := plain.ListSessions(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(sessions) != 1 || d.Commit == nil || d.Commit.Session != sessions[0] {
				t.Fatalf("the bucket holds sessions %v and the record names %+v; want one session, the record's writer", sessions, d.Commit)
			}
			if c.kept && sessions[0] != before {
				t.Fatalf("the writer is %s, want the kept %s", sessions[0], before)
			}
		})
	}
}
