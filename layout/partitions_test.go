package layout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/pugmark/pugfs/layout/faultblob"
)

// §4.2: the hour prefix and its inverse, with the range and calendar
// checks of session paths.
func TestSection4_2_HourPrefix(t *testing.T) {
	h := uint32(testNow.Unix() / 3600)
	p, err := HourPrefix(h)
	if err != nil || p != "sessions/year=2024/month=05/day=06/hour=07/" {
		t.Fatalf("HourPrefix = %q, %v", p, err)
	}
	tests := []struct {
		prefix string
		want   uint32
		ok     bool
	}{
		{p, h, true},
		{"sessions/year=1970/month=01/day=01/hour=00/", 0, true},
		{"sessions/year=2024/month=13/day=01/hour=00/", 0, false},
		{"sessions/year=2024/month=02/day=30/hour=00/", 0, false},
		{"sessions/year=2024/month=02/day=01/hour=24/", 0, false},
		{"sessions/year=2024/month=2/day=01/hour=00/", 0, false},
		{"sessions/year=2024/month=02/day=01/hour=00", 0, false},
		{"sessions/year=2024/month=02/day=01/", 0, false},
		{"sessions/year=2024/month=02/day=01/hour=00/x/", 0, false},
		{"other/year=2024/month=02/day=01/hour=00/", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseHourPrefix(tt.prefix)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("ParseHourPrefix(%q) = %d, %v; want %d, ok=%v", tt.prefix, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseHourPrefix(%q): %v is not ErrInvalid", tt.prefix, err)
		}
	}
}

// partitionSessions creates n sessions in each of the given hours and
// returns their IDs by hour.
func partitionSessions(t *testing.T, s *Store, hours []uint32, n int) map[uint32][]SessionID {
	t.Helper()
	out := map[uint32][]SessionID{}
	for _, h := range hours {
		for range n {
			id := NewSessionID(time.Unix(int64(h)*3600+1, 0))
			if _, _, err := s.CreateSession(bg, &Manifest{Session: id, FirstSequenceNumber: 1}); err != nil {
				t.Fatal(err)
			}
			out[h] = append(out[h], id)
		}
		slices.SortFunc(out[h], SessionID.Compare)
	}
	return out
}

// §4.2: hours and sessions found by the partition walk, whatever the
// years, months and days they spread over.
func TestSection4_2_PartitionWalk(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		base := uint32(testNow.Unix() / 3600)
		// Hours across a day, a month and a year boundary.
		hours := []uint32{base, base + 1, base + 30, base + 24*40, base + 24*400}
		byHour := partitionSessions(t, s, hours, 3)
		// Not a partition: skipped and reported, never an error.
		putRaw(t, b, "sessions/year=2024/month=05/day=06/hour=99/"+strings.Repeat("A", 24)+"/manifest.json", []byte("{}"), nil)

		var bad []string
		got, err := s.ListHours(bg, 4, nil, func(k string, err error) { bad = append(bad, k) })
		if err != nil || !slices.Equal(got, hours) {
			t.Fatalf("ListHours = %v, %v; want %v", got, err, hours)
		}
		if len(bad) != 1 || !strings.Contains(bad[0], "hour=99") {
			t.Fatalf("bad keys %v", bad)
		}
		var all []SessionID
		for _, h := range hours {
			ids, err := s.ListHour(bg, h, nil)
			if err != nil || !slices.Equal(ids, byHour[h]) {
				t.Fatalf("ListHour(%d) = %v, %v; want %v", h, ids, err, byHour[h])
			}
			all = append(all, ids...)
		}
		if ids, err := s.ListHour(bg, base+2, nil); err != nil || len(ids) != 0 {
			t.Fatalf("empty hour: %v, %v", ids, err)
		}
		ids, err := s.ListSessions(bg, nil)
		if err != nil || !slices.Equal(ids, all) {
			t.Fatalf("ListSessions = %v, %v; want %v", ids, err, all)
		}
	})
}

// A failed LIST of any level or page fails the walk with the prefix in
// the error: never a shorter listing.
func TestPartitionWalkFailure(t *testing.T) {
	base := uint32(testNow.Unix() / 3600)
	hours := []uint32{base, base + 1, base + 30}
	hourKey, _ := HourPrefix(base + 1)
	tests := []struct {
		name, prefix string
	}{
		{"sessions level", "sessions/"},
		{"day level", "sessions/year=2024/month=05/"},
		{"one hour", hourKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb, inj, _ := faulty(t, memblob.OpenBucket(nil))
			s := newStore(t, fb, &Options{Retries: -1})
			partitionSessions(t, s, hours, 2)
			inj.Add(faultblob.Rule{Ops: faultblob.OpList, Match: faultblob.Match{Glob: tt.prefix}, FailProb: 1})
			ids, err := s.ListSessions(bg, nil)
			if err == nil || ids != nil {
				t.Fatalf("ListSessions = %d IDs, %v; want an error", len(ids), err)
			}
			if !strings.Contains(err.Error(), tt.prefix) {
				t.Fatalf("error %q does not name %s", err, tt.prefix)
			}
			if _, err := s.ListHours(bg, 0, nil, nil); err == nil && tt.prefix != hourKey {
				t.Fatalf("ListHours succeeded past a failed level")
			}
		})
	}
}

// The walk overlaps its LISTs: with every request delayed, more than one
// is in flight at some point (counted, not timed).
func TestPartitionWalkOverlaps(t *testing.T) {
	fb, inj, _ := faulty(t, memblob.OpenBucket(nil))
	s := newStore(t, fb, nil)
	base := uint32(testNow.Unix() / 3600)
	var hours []uint32
	for i := range 24 {
		hours = append(hours, base+uint32(i)*5)
	}
	partitionSessions(t, s, hours, 1)
	inj.Add(faultblob.Rule{Ops: faultblob.OpList, Latency: 5 * time.Millisecond})
	before := s.Stats()
	ids, err := s.ListSessions(bg, nil)
	if err != nil || len(ids) != len(hours) {
		t.Fatalf("ListSessions = %d IDs, %v", len(ids), err)
	}
	st := s.Stats()
	if st.PeakInFlight < 8 {
		t.Fatalf("peak in flight %d (before the walk %d): the walk is not parallel", st.PeakInFlight, before.PeakInFlight)
	}
	if st.PeakInFlight > DefaultListParallel {
		t.Fatalf("peak in flight %d exceeds the bound %d", st.PeakInFlight, DefaultListParallel)
	}
	t.Logf("%d LISTs, peak in flight %d", st.Lists-before.Lists, st.PeakInFlight)
}

// A pass that knows the hours of an earlier one sends every LIST of the
// walk and of those partitions at once (one round trip deep, not five),
// with no more LISTs than without the hint; an hour it did not know is
// still found and listed, and the walk alone decides which hours there
// are. Counted with a gate that holds every LIST: all of them are waiting
// on it together before any is answered.
func TestListSessionVersionsKnownHours(t *testing.T) {
	base := uint32(testNow.Unix() / 3600)
	// Two days of one month: sessions/, year=, month=, two day= LISTs.
	hours := []uint32{base, base + 1, base + 30}
	const levels = 1 + 1 + 1 + 2
	tests := []struct {
		name  string
		known []uint32
		// waiting is how many LISTs are in flight before any answer.
		waiting int
	}{
		{"every hour known", hours, levels + len(hours)},
		// base+30 is of a day the hint does not name: its day= LIST
		// waits for the month='s answer.
		{"a new hour", hours[:2], levels - 1 + 2},
		{"a known hour gone", append(slices.Clone(hours), base+2), levels + len(hours) + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb, inj, _ := faulty(t, memblob.OpenBucket(nil))
			s := newStore(t, fb, nil)
			byHour := partitionSessions(t, s, hours, 2)
			var want []ListedSession
			for _, h := range hours {
				for _, id := range byHour[h] {
					want = append(want, ListedSession{ID: id, Manifest: true})
				}
			}
			slices.SortFunc(want, func(a, b ListedSession) int { return a.ID.Compare(b.ID) })

			gate, release := inj.Stall(faultblob.OpList, faultblob.Match{})
			defer release()
			before := s.Stats().Lists
			type result struct {
				got []ListedSession
				err error
			}
			done := make(chan result, 1)
			go func() {
				got, err := s.ListSessionVersions(bg, tt.known, everyHour, nil)
				done <- result{got, err}
			}()
			waitFor(t, func() bool { return gate.Waiting() >= tt.waiting },
				func() string { return fmt.Sprintf("%d LISTs in flight at once, want %d", gate.Waiting(), tt.waiting) })
			release()
			r := <-done
			if r.err != nil || !slices.Equal(r.got, want) {
				t.Fatalf("ListSessionVersions =\n%v, %v\nwant\n%v", r.got, r.err, want)
			}
			// Every prefix once: the levels, the hours found, and a
			// known hour that is gone.
			wantLists := int64(levels + len(hours))
			if len(tt.known) > len(hours) {
				wantLists++
			}
			if lists := s.Stats().Lists - before; lists != wantLists {
				t.Fatalf("%d LISTs, want %d", lists, wantLists)
			}
			hs, err := s.ListHours(bg, 0, tt.known, nil)
			if err != nil || !slices.Equal(hs, hours) {
				t.Fatalf("ListHours = %v, %v; want %v", hs, err, hours)
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test with what(), the
// state it waits on, if it has not after ten seconds.
func waitFor(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(time.Millisecond)
	}
}

// everyHour lists every partition in full.
func everyHour(uint32, int) bool { return true }

// idIn is a session ID of hour h whose other bytes are all b, so that
// tests can choose the key order of sessions in a partition.
func idIn(h uint32, b byte) SessionID {
	var id SessionID
	id[0], id[1], id[2], id[3] = byte(h>>24), byte(h>>16), byte(h>>8), byte(h)
	for i := 4; i < len(id); i++ {
		id[i] = b
	}
	return id
}

// §6.1, §6.3: one listing of each hour partition without a delimiter
// names every session and its latest version, as LatestVersion finds it
// (stray snapshot names skipped), with one LIST per partition.
func TestListSessionVersions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *blob.Bucket) {
		s := newStore(t, b, nil)
		base := uint32(testNow.Unix() / 3600)
		hours := []uint32{base, base + 1, base + 30}
		byHour := partitionSessions(t, s, hours, 3)
		for i, id := range byHour[base] {
			for range i + 1 {
				commit(t, s, id, Checkpoint, desc("a", "x"))
			}
		}
		// Not snapshots: a zero version and lowercase hex sort around the
		// real ones and are skipped.
		stray := byHour[base+1][0]
		commit(t, s, stray, Checkpoint, desc("a", "x"))
		dir, _ := SessionDir(stray)
		putRaw(t, b, dir+"snapshots/00000000.json", []byte("[]"), nil)
		putRaw(t, b, dir+"snapshots/fffffffe.json", []byte("[]"), nil)
		// Not a session directory: reported and skipped.
		hp, _ := HourPrefix(base + 30)
		putRaw(t, b, hp+"NOT-A-SESSION/manifest.json", []byte("{}"), nil)

		var bad []string
		before := s.Stats().Lists
		got, err := s.ListSessionVersions(bg, nil, everyHour, func(k string, err error) { bad = append(bad, k) })
		lists := s.Stats().Lists - before
		if err != nil {
			t.Fatal(err)
		}
		var want []ListedSession
		for _, h := range hours {
			for _, id := range byHour[h] {
				v, err := s.LatestVersion(bg, id)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, ListedSession{ID: id, Version: v, Manifest: true})
			}
		}
		slices.SortFunc(want, func(a, b ListedSession) int { return a.ID.Compare(b.ID) })
		if !slices.Equal(got, want) {
			t.Fatalf("ListSessionVersions =\n%v\nwant\n%v", got, want)
		}
		if len(bad) != 1 || !strings.Contains(bad[0], "NOT-A-SESSION") {
			t.Fatalf("bad keys %v", bad)
		}
		// sessions/, year=, month= (one), day= (two), then one LIST per
		// hour partition.
		if want := int64(1 + 1 + 1 + 2 + len(hours)); lists != want {
			t.Fatalf("%d LISTs, want %d", lists, want)
		}
	})
}

// A partition with a long history is not listed whole: once its pages
// bring few sessions, the sessions after the long one are found by a
// delimiter listing and a max-keys=1 LIST each.
func TestListSessionVersionsLongHistory(t *testing.T) {
	b := memBucket()
	s := newStore(t, b, nil)
	h := uint32(testNow.Unix() / 3600)
	before, long, after1, after2, empty := idIn(h, 0x10), idIn(h, 0x20), idIn(h, 0x30), idIn(h, 0x40), idIn(h, 0x50)
	for _, id := range []SessionID{before, long, after1, after2, empty} {
		if _, _, err := s.CreateSession(bg, &Manifest{Session: id, FirstSequenceNumber: 1}); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, s, before, Checkpoint, desc("a", "x"))
	commit(t, s, after1, Checkpoint, desc("a", "x"))
	commit(t, s, after2, Checkpoint, desc("a", "x"))
	commit(t, s, after2, Checkpoint, desc("a", "y"))
	// 3,000 versions: three pages of keys. The listing reads no body.
	const versions = 3000
	for v := uint32(1); v <= versions; v++ {
		k, _ := SnapshotKey(long, v)
		putRaw(t, b, k, []byte("[]"), nil)
	}
	startLists := s.Stats().Lists
	got, err := s.ListSessionVersions(bg, nil, everyHour, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []ListedSession{{before, 1, true}, {long, versions, true}, {after1, 1, true}, {after2, 2, true}, {empty, 0, true}}
	if !slices.Equal(got, want) {
		t.Fatalf("ListSessionVersions =\n%v\nwant\n%v", got, want)
	}
	// sessions/, year=, month=, day=; two pages of the partition, one
	// delimiter page, and a LIST for each of the three sessions after the
	// long one (plus a HEAD for the empty one) — not the four pages of
	// the whole history.
	if lists := s.Stats().Lists - startLists; lists != 4+2+1+3 {
		t.Fatalf("%d LISTs, want %d", lists, 4+2+1+3)
	}
}

// A partition the caller does not want in full is listed with a
// delimiter: its sessions, without versions.
func TestListSessionVersionsNamesOnly(t *testing.T) {
	s := newStore(t, memBucket(), nil)
	base := uint32(testNow.Unix() / 3600)
	byHour := partitionSessions(t, s, []uint32{base, base + 1}, 2)
	got, err := s.ListSessionVersions(bg, nil, func(h uint32, n int) bool { return h == base && n == 2 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []ListedSession
	for _, id := range byHour[base] {
		want = append(want, ListedSession{ID: id, Manifest: true})
	}
	for _, id := range byHour[base+1] {
		want = append(want, ListedSession{ID: id})
	}
	slices.SortFunc(want, func(a, b ListedSession) int { return a.ID.Compare(b.ID) })
	if !slices.Equal(got, want) {
		t.Fatalf("ListSessionVersions =\n%v\nwant\n%v", got, want)
	}
}

// ListHourVersions is one hour partition of a freshness pass: every
// session of the hour with its latest version, one LIST per 1,000 keys,
// and ErrLongPartition, after no more than maxPages LISTs, when the hour
// holds more keys than that.
func TestListHourVersions(t *testing.T) {
	b := memBucket()
	s := newStore(t, b, nil)
	h := uint32(testNow.Unix() / 3600)
	one, two, long, other := idIn(h, 0x10), idIn(h, 0x20), idIn(h, 0x30), idIn(h+1, 0x10)
	for _, id := range []SessionID{one, two, long, other} {
		if _, _, err := s.CreateSession(bg, &Manifest{Session: id, FirstSequenceNumber: 1}); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, s, one, Checkpoint, desc("a", "x"))
	commit(t, s, one, Checkpoint, desc("a", "y"))
	commit(t, s, other, Checkpoint, desc("a", "x"))

	lists := func(f func()) int64 { before := s.Stats().Lists; f(); return s.Stats().Lists - before }
	var got []ListedSession
	var err error
	if n := lists(func() { got, err = s.ListHourVersions(bg, h, 1, nil, nil) }); err != nil || n != 1 {
		t.Fatalf("ListHourVersions: %v after %d LISTs, want 1", err, n)
	}
	want := []ListedSession{{one, 2, true}, {two, 0, true}, {long, 0, true}}
	if !slices.Equal(got, want) {
		t.Fatalf("ListHourVersions =\n%v\nwant\n%v", got, want)
	}

	// 2,500 versions: three pages of keys.
	for v := uint32(1); v <= 2500; v++ {
		k, _ := SnapshotKey(long, v)
		putRaw(t, b, k, []byte("[]"), nil)
	}
	// Its newest version is the first of its snapshot keys: the first
	// page shows every session in full, and says so before the next.
	want[2].Version = 2500
	var shown [][]ListedSession
	collect := func(l []ListedSession) { shown = append(shown, l) }
	if n := lists(func() { got, err = s.ListHourVersions(bg, h, 2, nil, collect) }); !errors.Is(err, ErrLongPartition) || n != 2 {
		t.Fatalf("ListHourVersions of three pages, two allowed: %v after %d LISTs, want ErrLongPartition after 2", err, n)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListHourVersions of three pages, two allowed, returned\n%v\nwant what they show\n%v", got, want)
	}
	if len(shown) != 2 || !slices.Equal(shown[0], want) || !slices.Equal(shown[1], want) {
		t.Fatalf("pages shown: %v, want two of %v", shown, want)
	}
	shown = nil
	if n := lists(func() { got, err = s.ListHourVersions(bg, h, 3, nil, collect) }); err != nil || n != 3 {
		t.Fatalf("ListHourVersions of three pages, three allowed: %v after %d LISTs", err, n)
	}
	if !slices.Equal(got, want) || len(shown) != 2 {
		t.Fatalf("ListHourVersions =\n%v\nwant\n%v (and 2 pages shown before the last, got %d)", got, want, len(shown))
	}
}

// A page that ends inside a session's keys shows that session only when
// its newest snapshot was on it: a page ending on its manifest leaves it
// for the next page.
func TestListHourVersionsPageEnds(t *testing.T) {
	b := memBucket()
	s := newStore(t, b, nil)
	h := uint32(testNow.Unix() / 3600)
	id := func(i int) SessionID {
		id := idIn(h, 0)
		id[4], id[5] = byte(i>>8), byte(i)
		return id
	}
	manifest := func(id SessionID) {
		k, err := ManifestKey(id)
		if err != nil {
			t.Fatal(err)
		}
		putRaw(t, b, k, fmt.Appendf(nil, `{"session":%q,"first-sequence-number":1}`, id), nil)
	}
	// Keys 1-999: manifests alone. Key 1,000, the first page's last: the
	// manifest of a session whose snapshot is key 1,001.
	for i := range 1000 {
		manifest(id(i))
	}
	last := id(999)
	k, _ := SnapshotKey(last, 7)
	putRaw(t, b, k, []byte("[]"), nil)
	var shown [][]ListedSession
	got, err := s.ListHourVersions(bg, h, 0, nil, func(l []ListedSession) { shown = append(shown, l) })
	if err != nil || len(got) != 1000 || got[999] != (ListedSession{last, 7, true}) {
		t.Fatalf("ListHourVersions: %d sessions, the last %v, %v", len(got), got[len(got)-1], err)
	}
	if len(shown) != 1 || len(shown[0]) != 999 || shown[0][998] != (ListedSession{id(998), 0, true}) {
		t.Fatalf("page one showed %d lists, the first of %d sessions; want one of the 999 before the last", len(shown), len(shown[0]))
	}
}
