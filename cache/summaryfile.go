package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// summaryFile keeps the summaries (a session's version and, at that
// version, its last content append) in the cache directory, so that a
// fresh mount's first listing confirms them with its freshness pass (one
// LIST per hour partition) instead of reading a snapshot per session. A
// summary is a fact about immutable snapshots: the same (session,
// version) always has the same last append, so a record never goes stale,
// it only stops being the latest. Unless the bucket was emptied and
// written again with the same session IDs: so a record keeps the stamp
// (size and modification time) of the snapshot it came from, and a
// listing that shows that snapshot with another stamp has it computed
// again.
//
// The file is "pugfs-summaries 2\n", then one 44-byte record per session
// (16 bytes of ID, the version, the time in Unix nanoseconds, the
// snapshot's size and modification time in Unix seconds, big-endian),
// then the SHA-256 of everything before it. A file of an older format is
// read as empty. It is replaced
// whole (temp file and rename) by a deferred flush, merged with what is on
// disk at that moment so that two mounts sharing the directory both keep
// what they learnt (the newer version of a session wins); it holds at most
// maxSummaryRecords sessions, the newest IDs (latest hours) first.
type summaryFile struct {
	path  string
	delay time.Duration
	// dirty and timer are guarded by the cache's state lock (Cache.mu).
	dirty bool
	timer *time.Timer
	// flushMu serialises flushes (capture, merge, write); taken before
	// state, never while holding it.
	flushMu sync.Mutex
}

const (
	summaryMagic      = "pugfs-summaries 2\n"
	summaryRecord     = 16 + 4 + 8 + 8 + 8
	maxSummaryRecords = 1 << 19
)

// loadSummaries reads the summary file into c.summaries (checked zero: a
// loaded summary is never fresh by itself, only confirmed by a pass). A
// missing file is no error; a damaged one is logged and ignored.
func (c *Cache) loadSummaries() {
	f := c.sumFile
	if f == nil {
		return
	}
	rows, err := readSummaryFile(f.path)
	if err != nil {
		c.log.Warn("summary file unreadable; starting without it", "path", f.path, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.summaries == nil {
		c.summaries = make(map[layout.SessionID]summary, len(rows))
	}
	for id, s := range rows {
		if _, ok := c.summaries[id]; !ok {
			c.summaries[id] = s
		}
	}
}

// summaryLearntLocked notes a summary worth keeping; c.mu is held.
func (c *Cache) summaryLearntLocked() {
	f := c.sumFile
	if f == nil {
		return
	}
	f.dirty = true
	if f.timer == nil {
		f.timer = time.AfterFunc(f.delay, func() { _ = c.flushSummaries() }) // it logs its failures
	}
}

// flushSummaries writes the summaries if any were learnt since the last
// flush. A failed write is logged and leaves them dirty for the next.
func (c *Cache) flushSummaries() error {
	f := c.sumFile
	if f == nil {
		return nil
	}
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	c.mu.Lock()
	f.timer = nil
	if !f.dirty {
		c.mu.Unlock()
		return nil
	}
	f.dirty = false
	rows := make(map[layout.SessionID]summary, len(c.summaries))
	for id, s := range c.summaries {
		rows[id] = s
	}
	c.mu.Unlock()

	disk, err := readSummaryFile(f.path)
	if err == nil {
		for id, s := range disk {
			if mine, ok := rows[id]; !ok || s.version > mine.version {
				rows[id] = s
			}
		}
	}
	err = writeFileAtomic(f.path, encodeSummaries(rows))
	if err != nil {
		c.mu.Lock()
		c.summaryLearntLocked()
		c.mu.Unlock()
		c.log.Warn("summary file not written; summaries kept in memory", "path", f.path, "err", err)
	}
	return err
}

func encodeSummaries(rows map[layout.SessionID]summary) []byte {
	ids := make([]layout.SessionID, 0, len(rows))
	for id, s := range rows {
		if y := s.updatedAt.Year(); y > 1678 && y < 2262 { // what Unix nanoseconds can hold
			ids = append(ids, id)
		}
	}
	// Newest hours first: those are what listings ask for most.
	slices.SortFunc(ids, func(a, b layout.SessionID) int { return b.Compare(a) })
	ids = ids[:min(len(ids), maxSummaryRecords)]
	var b bytes.Buffer
	b.Grow(len(summaryMagic) + len(ids)*summaryRecord + sha256.Size)
	b.WriteString(summaryMagic)
	var rec [summaryRecord]byte
	for _, id := range ids {
		s := rows[id]
		copy(rec[:16], id[:])
		binary.BigEndian.PutUint32(rec[16:], s.version)
		binary.BigEndian.PutUint64(rec[20:], uint64(s.updatedAt.UnixNano()))
		binary.BigEndian.PutUint64(rec[28:], uint64(s.stamp.Size))
		binary.BigEndian.PutUint64(rec[36:], uint64(s.stamp.Mod))
		b.Write(rec[:])
	}
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// readSummaryFile reads a summary file; a missing one is empty.
func readSummaryFile(path string) (map[layout.SessionID]summary, error) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	limit := int64(len(summaryMagic) + maxSummaryRecords*summaryRecord + sha256.Size)
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(data, []byte("pugfs-summaries ")) && !bytes.HasPrefix(data, []byte(summaryMagic)) {
		return nil, nil // an older format: learnt again, then replaced
	}
	body := len(data) - sha256.Size
	if int64(len(data)) > limit || body < len(summaryMagic) || !bytes.HasPrefix(data, []byte(summaryMagic)) ||
		(body-len(summaryMagic))%summaryRecord != 0 {
		return nil, fmt.Errorf("%s: not a summary file of this pugfs", path)
	}
	if sum := sha256.Sum256(data[:body]); !bytes.Equal(sum[:], data[body:]) {
		return nil, fmt.Errorf("%s: checksum mismatch (a torn or damaged file)", path)
	}
	rows := make(map[layout.SessionID]summary, (body-len(summaryMagic))/summaryRecord)
	for p := len(summaryMagic); p < body; p += summaryRecord {
		var id layout.SessionID
		copy(id[:], data[p:p+16])
		rows[id] = summary{
			version:   binary.BigEndian.Uint32(data[p+16:]),
			updatedAt: time.Unix(0, int64(binary.BigEndian.Uint64(data[p+20:]))).UTC(),
			stamp: layout.Stamp{Size: int64(binary.BigEndian.Uint64(data[p+28:])),
				Mod: int64(binary.BigEndian.Uint64(data[p+36:]))},
		}
	}
	return rows, nil
}
