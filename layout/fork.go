package layout

import (
	"context"
	"fmt"
)

// ForkRequest is phase 1 of a fork (§11.1).
type ForkRequest struct {
	// Child is the new session's ID; zero means a fresh one.
	Child SessionID
	// Descriptor is the fork output: its body must already be stored
	// (PutBlob*); Fork and TargetSession are set here.
	Descriptor Descriptor
	// Type of the parent snapshot carrying the fork record (default
	// checkpoint: a fork is the session's own output).
	Type SnapshotType
	Base *Position
}

// RecordFork commits a fork record to the parent's next snapshot (§11.1).
// The child does not exist until MaterializeFork.
func (s *Store) RecordFork(ctx context.Context, parent SessionID, req ForkRequest) (SessionID, CommitResult, error) {
	child := req.Child
	if child.IsZero() {
		child = NewSessionID(s.opts.Now())
	}
	if child == parent {
		return SessionID{}, CommitResult{}, fmt.Errorf("fork %s: %w: a session cannot fork into itself", parent, ErrInvalid)
	}
	d := req.Descriptor.Clone()
	d.Fork, d.TargetSession = true, child
	if d.CreatedAt.IsZero() {
		d.CreatedAt = s.now()
	}
	res, err := s.Commit(ctx, parent, CommitRequest{Type: req.Type, Descriptors: []Descriptor{d}, Base: req.Base})
	if err != nil {
		return SessionID{}, CommitResult{}, fmt.Errorf("record fork of %s into %s: %w", parent, child, err)
	}
	return child, res, nil
}

// PendingFork is a fork record found in a parent's log.
type PendingFork struct {
	Parent     SessionID
	Version    uint32
	Descriptor Descriptor
}

// MaterializeFork runs phase 2 for one fork record at parent version v
// (§11.2). It is idempotent and crash-safe: an existing child manifest is
// loaded, a child already past version 0 is left alone, and losing the race
// for the child's snapshot 1 counts as success. It returns the child
// manifest.
func (s *Store) MaterializeFork(ctx context.Context, f PendingFork) (*Manifest, error) {
	d := f.Descriptor
	if !d.Fork || d.TargetSession.IsZero() {
		return nil, fmt.Errorf("materialise fork: %w: descriptor is not a fork record", ErrInvalid)
	}
	child := d.TargetSession
	pm, err := s.LoadManifest(ctx, f.Parent)
	if err != nil {
		return nil, fmt.Errorf("materialise fork %s: parent: %w", child, err)
	}
	pos, err := s.positionAt(ctx, f.Parent, f.Version)
	if err != nil {
		return nil, fmt.Errorf("materialise fork %s: parent position: %w", child, err)
	}
	if err := seqRoom(f.Parent, pos.LastSeq, 1); err != nil {
		return nil, fmt.Errorf("materialise fork %s: %w", child, err)
	}
	m := &Manifest{
		Session:             child,
		Parent:              &ParentRef{Session: f.Parent, Version: f.Version},
		Agent:               pm.Agent,
		Handler:             pm.Handler,
		Metadata:            d.Clone().Metadata,
		FirstSequenceNumber: pos.LastSeq + 1,
	}
	m, _, err = s.CreateSession(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("materialise fork %s: %w", child, err)
	}
	latest, err := s.LatestVersion(ctx, child)
	if err != nil {
		return nil, fmt.Errorf("materialise fork %s: %w", child, err)
	}
	if latest > 0 {
		return m, nil
	}
	cd := d.Clone()
	cd.Fork, cd.TargetSession = false, SessionID{}
	cd.SequenceNumber = m.FirstSequenceNumber
	txn := NewTransactionID()
	if _, err := s.commitAt(ctx, child, 1, Checkpoint, txn, []Descriptor{cd}); err != nil {
		return nil, fmt.Errorf("materialise fork %s: snapshot 1: %w", child, err)
	}
	// landed or lost the race: either way the child has its snapshot 1.
	return m, nil
}

// PendingForks returns the fork records of a session's snapshot at
// version v whose child has no snapshot yet (phase 2's input, §11.2).
func (s *Store) PendingForks(ctx context.Context, parent SessionID, v uint32) ([]PendingFork, error) {
	if v == 0 {
		return nil, nil
	}
	ds, err := s.ReadSnapshot(ctx, parent, v)
	if err != nil {
		return nil, err
	}
	return s.PendingForksIn(ctx, parent, v, ds)
}

// PendingForksIn is PendingForks for a caller that has read snapshot v
// already (ds): it reads nothing of parent.
func (s *Store) PendingForksIn(ctx context.Context, parent SessionID, v uint32, ds []Descriptor) ([]PendingFork, error) {
	var out []PendingFork
	for _, d := range ds {
		if !d.Fork || d.TargetSession.IsZero() {
			continue
		}
		latest, err := s.LatestVersion(ctx, d.TargetSession)
		if err == nil && latest > 0 {
			continue
		}
		out = append(out, PendingFork{Parent: parent, Version: v, Descriptor: d})
	}
	return out, nil
}

// Fork performs both phases: record the fork in parent's next snapshot,
// then materialise the child with parent = the snapshot holding the
// record. It returns the child's ID.
func (s *Store) Fork(ctx context.Context, parent SessionID, req ForkRequest) (SessionID, error) {
	child, res, err := s.RecordFork(ctx, parent, req)
	if err != nil {
		return SessionID{}, err
	}
	d := res.Descriptors[0]
	if _, err := s.MaterializeFork(ctx, PendingFork{Parent: parent, Version: res.Version, Descriptor: d}); err != nil {
		return child, err
	}
	return child, nil
}

// Branch is a child found by branch discovery (§17).
type Branch struct {
	Child SessionID
	// Version of the parent snapshot holding the fork record.
	Version uint32
}

// BranchesIn returns the fork records among snapshots (the first at
// version from), in log order, one per child (the first record wins).
func BranchesIn(from uint32, snaps [][]Descriptor) []Branch {
	var out []Branch
	seen := map[SessionID]bool{}
	for i, ds := range snaps {
		for _, d := range ds {
			if d.Fork && !d.TargetSession.IsZero() && !seen[d.TargetSession] {
				seen[d.TargetSession] = true
				out = append(out, Branch{Child: d.TargetSession, Version: from + uint32(i)})
			}
		}
	}
	return out
}

// Branches discovers a session's children by walking all its snapshots
// (§17), pending forks included.
func (s *Store) Branches(ctx context.Context, parent SessionID) ([]Branch, error) {
	latest, err := s.LatestVersion(ctx, parent)
	if err != nil {
		return nil, err
	}
	snaps, err := s.ReadSnapshotRange(ctx, parent, 1, latest, 8)
	if err != nil {
		return nil, fmt.Errorf("branches of %s: %w", parent, err)
	}
	return BranchesIn(1, snaps), nil
}
