package layout

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// DeliveryOutcome says what happened to one target of a cross-session
// write.
type DeliveryOutcome int

const (
	// Delivered: a provisional snapshot of the target now holds the batch.
	Delivered DeliveryOutcome = iota
	// AlreadyDelivered: the (source-session, source-version) key was
	// already in the target (§12.2 step 2).
	AlreadyDelivered
	// NoTarget: the target is no session (never created, or an ID with
	// no partition): the writes stay recorded in the writer's snapshot
	// (fsck reports them), and nothing can receive them. Failing the
	// delivery instead failed every later one too, since each retries
	// the writer's latest checkpoint.
	NoTarget
)

// Delivery reports one target of DeliverCrossSession.
type Delivery struct {
	Target  SessionID
	Outcome DeliveryOutcome
	Version uint32
}

// DeliverCrossSession runs the target side of cross-session writes
// (§12.2) for the snapshot committed by writer at version: descriptors
// with target-session set and fork false, grouped by target.
func (s *Store) DeliverCrossSession(ctx context.Context, writer SessionID, version uint32, committed []Descriptor) ([]Delivery, error) {
	groups := map[SessionID][]Descriptor{}
	for _, d := range committed {
		if d.Fork || d.TargetSession.IsZero() || d.TargetSession == writer {
			continue
		}
		groups[d.TargetSession] = append(groups[d.TargetSession], d)
	}
	targets := make([]SessionID, 0, len(groups))
	for t := range groups {
		targets = append(targets, t)
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].String() < targets[j].String() })
	var out []Delivery
	for _, t := range targets {
		dl, err := s.deliver(ctx, writer, version, t, groups[t])
		if errors.Is(err, ErrSessionNotFound) || errors.Is(err, ErrInvalid) {
			out = append(out, Delivery{Target: t, Outcome: NoTarget})
			continue
		}
		if err != nil {
			return out, fmt.Errorf("deliver %s@%d to %s: %w", writer, version, t, err)
		}
		out = append(out, dl)
	}
	return out, nil
}

// deliver commits the copies of ds as a provisional snapshot of target,
// unless the (writer, version) key is already there.
//
// A version taken under us is retried at the next free one, after the
// key is checked again in the snapshots that took it (decisions.md §13.3:
// a provisional commit moves on). §12.2 step 4 calls the refused create
// a success instead, which holds when the winner is this batch's own
// retry, but another sender's batch or a checkpoint of the target took
// the version as often: the copies were then never delivered, and the
// sender never learned it (§13.5, §14.2: concurrent senders each land).
// The key check before each try keeps a retry from landing twice.
func (s *Store) deliver(ctx context.Context, writer SessionID, version uint32, target SessionID, ds []Descriptor) (Delivery, error) {
	latest, err := s.LatestVersion(ctx, target)
	if err != nil {
		return Delivery{}, err
	}
	snaps, err := s.ReadSnapshotRange(ctx, target, 1, latest, 8)
	if err != nil {
		return Delivery{}, err
	}
	txn := NewTransactionID()
	awaits := 0 // awaitTaken's waits, as Commit counts them
	for attempt := 1; attempt <= s.opts.CommitRetries; attempt++ {
		if v, ok := deliveredIn(snaps, writer, version); ok {
			return Delivery{Target: target, Outcome: AlreadyDelivered, Version: v}, nil
		}
		pos, err := s.positionFromSnaps(ctx, target, snaps)
		if err != nil {
			return Delivery{}, err
		}
		if err := seqRoom(target, pos.LastSeq, len(ds)); err != nil {
			return Delivery{}, fmt.Errorf("deliver to %s: %w", target, err)
		}
		copies := make([]Descriptor, len(ds))
		for i, d := range ds {
			c := d.Clone()
			c.TargetSession, c.SourceSession, c.SourceVersion = SessionID{}, writer, version
			c.SequenceNumber = pos.LastSeq + 1 + int64(i)
			copies[i] = c
		}
		v := pos.Version + 1
		landed, err := s.commitAt(ctx, target, v, Provisional, txn, copies)
		if err != nil {
			return Delivery{}, err
		}
		if landed {
			return Delivery{Target: target, Outcome: Delivered, Version: v}, nil
		}
		// Refused as taken: another writer's create of v may still be in
		// flight, not served yet (audit 18, reviews 17, 18).
		if _, err := s.ReadSnapshotMeta(ctx, target, v); errors.Is(err, ErrNotFound) && awaits < maxAwaits {
			awaits++
			if _, err := s.awaitTaken(ctx, target, v); errors.Is(err, errNotTaken) {
				continue // it failed: v is free
			} else if err != nil {
				return Delivery{}, fmt.Errorf("deliver to %s: %w", target, err)
			}
		}
		// Read what took v (and whatever landed above it) before the
		// next try.
		if latest, err = s.LatestVersion(ctx, target); err != nil {
			return Delivery{}, err
		}
		more, err := s.ReadSnapshotRange(ctx, target, v, max(latest, v), 8)
		if err != nil {
			return Delivery{}, err
		}
		snaps = append(snaps, more...)
	}
	return Delivery{}, fmt.Errorf("deliver to %s: %w after %d attempts", target, ErrRetriesExhausted, s.opts.CommitRetries)
}

// deliveredIn returns the version of snaps (snapshot 1 first) holding a
// copy delivered from writer@version (§12.2 step 2).
func deliveredIn(snaps [][]Descriptor, writer SessionID, version uint32) (uint32, bool) {
	for i, snap := range snaps {
		for _, d := range snap {
			if d.SourceSession == writer && d.SourceVersion == version {
				return uint32(i) + 1, true
			}
		}
	}
	return 0, false
}

// positionFromSnaps is positionAt for snapshots 1..len(snaps) already read.
func (s *Store) positionFromSnaps(ctx context.Context, id SessionID, snaps [][]Descriptor) (Position, error) {
	for i := len(snaps) - 1; i >= 0; i-- {
		if n := len(snaps[i]); n > 0 {
			return Position{Version: uint32(len(snaps)), LastSeq: snaps[i][n-1].SequenceNumber}, nil
		}
	}
	m, err := s.LoadManifest(ctx, id)
	if err != nil {
		return Position{}, err
	}
	return Position{Version: uint32(len(snaps)), LastSeq: m.FirstSequenceNumber - 1}, nil
}
