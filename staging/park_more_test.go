package staging

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/goroutines"
	"github.com/pugmark/pugfs/layout"
)

var keptStamp = regexp.MustCompile(`\.\d{8}T\d{6}\.\d{9}-\d+$`)

// TestWriterParkLostThenParked: a file whose parked bytes went with the
// staging directory is parked again under a kept name with its stamp,
// and named plain when written again. parkedLostLocked forgot the name
// and not its stamp, and the file was then kept under a name without
// one, recorded as plain: a crash kept half-written bytes (review 21).
func TestWriterParkLostThenParked(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	r.write(t, "f", "one\n")
	if err := os.RemoveAll(r.cfg.StagingDir); err != nil {
		t.Fatal(err)
	}
	if err := r.w.FsyncSession(ctx, r.id); err == nil {
		t.Fatal("fsync of lost bytes succeeded")
	}
	for _, n := range r.keptNames(t) {
		if !keptStamp.MatchString(n) {
			t.Errorf("kept name without a stamp: %s", n)
		}
	}
	s, err := r.w.Open(ctx, r.id, "f", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("half"), 0); err != nil {
		t.Fatal(err)
	}
	if kept := r.keptNames(t); len(kept) != 0 {
		t.Errorf("kept while written again: %v", kept)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
}

// TestWriterParkCommittedWhileRead: a file committed while a handle
// holds it and reads keep it busy is named plain all the same. It was
// named so only when a TryLock after the commit won, and a crash then
// kept committed bytes in failed/ (review 21).
func TestWriterParkCommittedWhileRead(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	r.write(t, "f", "one\n")
	s := r.w.Staged(r.id, "f")
	if !r.w.Retain(r.id, s) {
		t.Fatal("not retained")
	}
	// Reads and stats of the held file go on meanwhile, each holding
	// s.mu shared for a moment.
	stop := hammerReads(s)
	err := r.w.FsyncSession(ctx, r.id)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if kept := r.keptNames(t); len(kept) != 0 {
		t.Errorf("committed while held and read, still kept: %v", kept)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
}

// hammerReads holds s.mu shared for a millisecond at a time, as
// reads and stats of a busy file do, until the returned stop is called.
func hammerReads(s *File) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			s.mu.RLock()
			time.Sleep(time.Millisecond)
			s.mu.RUnlock()
		}
	}()
	return func() { close(quit); <-done }
}

// TestWriterParkRenameBackAndForth: a kept name follows renames to a
// long name and back, and a directory rename, keeping its stamp.
func TestWriterParkRenameBackAndForth(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	r.write(t, "d/f", "one\n")
	first := r.keptNames(t)
	for _, step := range [][2]string{{"d/f", deep("g")}, {deep("g"), "d/f"}} {
		if err := r.w.Rename(ctx, r.id, step[0], step[1], false); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.w.Rename(ctx, r.id, "d", "e", true); err != nil {
		t.Fatal(err)
	}
	kept := r.keptNames(t)
	if len(kept) != 1 || len(first) != 1 || !regexp.MustCompile(`/e%2Ff\.`).MatchString(kept[0]) ||
		kept[0][len(kept[0])-10:] != first[0][len(first[0])-10:] {
		t.Fatalf("kept %v, first %v", kept, first)
	}
}

// TestWriterRefuseSummaryUnchanged: a lost checkpoint of files whose
// content is unchanged (a chmod -R) logs ten lines and a summary that
// counts them as such; they counted toward neither dropped nor kept
// (review 21).
func TestWriterRefuseSummaryUnchanged(t *testing.T) {
	r, logBuf := loggedHoldRig(t)
	ctx := context.Background()
	r.attrsChanged(t, 14)
	if _, err := r.store.Commit(ctx, r.id, layout.CommitRequest{Type: layout.Checkpoint, Descriptors: []layout.Descriptor{{Name: "theirs", CreatedAt: time.Now().UTC(), Deleted: true}}}); err != nil {
		t.Fatal(err)
	}
	r.cache.Invalidate(r.id)
	if _, err := r.w.CommitSession(ctx, r.id, layout.Position{}, MergeLateInput); !errors.Is(err, layout.ErrConflict) {
		t.Fatalf("CommitSession over a foreign checkpoint = %v, want ErrConflict", err)
	}
	out := logBuf.String()
	m := regexp.MustCompile(`more=(\d+) dropped=(\d+) kept=(\d+) unchanged=(\d+) lost=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line:\n%s", out)
	}
	c := make([]int, 5)
	for i := range c {
		c[i], _ = strconv.Atoi(m[i+1])
	}
	if more, dropped, kept, unchanged, lost := c[0], c[1], c[2], c[3], c[4]; more != 4 || dropped+kept+lost != 0 || unchanged != 14 {
		t.Errorf("summary: more=%d dropped=%d kept=%d unchanged=%d lost=%d, want 4 more of 14 unchanged", more, dropped, kept, unchanged, lost)
	}
}

// TestWriterParkBusyRelease: a file written again (named plain) and
// released while reads and stats keep it busy is parked under a kept
// name once they let it go. parkLater gave up after three tries, and the
// file, closed and not committed, stayed plain: a crash lost it (review
// 21).
func TestWriterParkBusyRelease(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	r.write(t, "f", "one\n")
	s, err := r.w.Open(ctx, r.id, "f", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	var stops []func()
	for range 4 {
		stops = append(stops, hammerReads(s))
	}
	time.Sleep(20 * time.Millisecond)
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	for _, stop := range stops {
		stop()
	}
	time.Sleep(200 * time.Millisecond) // the reads are over: nothing parks it now
	if kept := r.keptNames(t); len(kept) != 1 {
		t.Errorf("closed and not committed, kept names %v (parked %v, parked now: %v), want one", kept, r.parkedNames(t), r.parked(t, "f"))
	}
}

// TestWriterParkUnderSteadyReads: a file released while reads and stats
// keep coming is parked, kept, while they go on. parkLater waited for
// them, then took Writer.mu and only tried File.mu, which the next reads
// had by then, for as long as they kept coming (review 22).
func TestWriterParkUnderSteadyReads(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	s, err := r.w.Open(ctx, r.id, "f", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		defer hammerReads(s)()
	}
	for s.mu.TryLock() { // until the reads hold it: the release finds it busy
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.keptNames(t)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("not parked in 10 s of steady reads")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriterParkLaterOnce: one parkLater waits for a busy file, however
// many fsyncs find it busy meanwhile (parkIdle started one each: review
// 22).
func TestWriterParkLaterOnce(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	s, err := r.w.Open(ctx, r.id, "f", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	s.mu.RLock() // a stat
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		r.w.parkIdle(r.id)
	}
	// Started (parkLater) or not yet: the go statement's wrapper is
	// named for the function it is in.
	n := goroutines.Waiting("", "staging.(*Writer).parkOrLaterLocked")
	s.mu.RUnlock()
	if n != 1 {
		t.Errorf("%d parkLater for one busy file, want 1", n)
	}
}

// TestWriterParkWrittenDuringCommit: a file written and closed again
// while its commit is in flight stays kept after that commit (what it
// holds is not committed), and is not once the next one lands.
func TestWriterParkWrittenDuringCommit(t *testing.T) {
	ctx := context.Background()
	r := newWriterRig(t, CommitOnFsync)
	r.write(t, "f", "one\n")
	g := r.stallSnapshots()
	done := make(chan error, 1)
	go func() { done <- r.w.FsyncSession(ctx, r.id) }()
	waitStalled(t, g, 1)
	s, err := r.w.Open(ctx, r.id, "f", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, []byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	held, err := r.w.Open(ctx, r.id, "f", nil, false) // held across the commit
	if err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, s); err != nil {
		t.Fatal(err)
	}
	g.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := r.w.Release(ctx, r.id, held); err != nil {
		t.Fatal(err)
	}
	if kept := r.keptNames(t); len(kept) != 1 || !r.parked(t, "f") {
		t.Errorf("written since its commit, closed: kept names %v (parked %v)", kept, r.parkedNames(t))
	}
	if err := r.w.FsyncSession(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	if kept := r.keptNames(t); len(kept) != 0 {
		t.Errorf("committed: kept names %v", kept)
	}
}
