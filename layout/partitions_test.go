package layout

import (
	"errors"
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
		got, err := s.ListHours(bg, 4, func(k string, err error) { bad = append(bad, k) })
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
			if _, err := s.ListHours(bg, 0, nil); err == nil && tt.prefix != hourKey {
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
