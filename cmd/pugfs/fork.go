package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/pugmark/pugfs/internal/fsck"
	"github.com/pugmark/pugfs/layout"
)

// defaultForkFile names the body every fork record needs (§11.1: the
// fork descriptor references a blob): a small JSON note saying where the
// child came from. It becomes a file in the child's tree; the leading dot
// keeps it out of plain ls.
const defaultForkFile = ".pugmark-fork.json"

// forkNote is the body of the fork descriptor.
type forkNote struct {
	ForkedFrom layout.SessionID `json:"forked-from"`
	// At is the parent version the child starts from, when --at chose one;
	// otherwise the child starts from the snapshot holding the fork record.
	At        *uint32 `json:"at,omitempty"`
	CreatedBy string  `json:"created-by"`
}

func forkCommand() *command {
	return &command{
		name:     "fork",
		synopsis: "pugfs fork [--at V] [--name FILE] [--snapshot-type T] BUCKET-URL SESSION",
		short:    "fork a session into a new child session and print the child's ID",
		long: `
Forks SESSION (a 32-hex ID, or a name from refs/sessions/<name>) and prints
the child's ID. Both phases of storage-layout §11 run: the fork record is
committed to SESSION's next snapshot (so branch discovery, §17, finds the
child), then the child is materialised: its manifest names SESSION as parent
and its snapshot 1 holds the copy of the fork record.

The fork record's body is a small JSON file, named FILE in the child's tree
(default ` + defaultForkFile + `), saying which session and version the child
was forked from.

Without --at the child's parent is the snapshot holding the fork record, as
a runtime's fork is. With --at V it is version V (0 to the latest), so the
child sees SESSION as it was then; the record still goes into SESSION's next
snapshot, and the child's sequence numbers continue from version V (§7.3).`,
		examples: `  pugfs fork ./demo-bucket demo
  pugfs fork --at 3 ./demo-bucket demo
  child=$(pugfs fork --name FORK.json s3://bucket?region=us-east-1 0190a1b2c3d4e5f60718293a4b5c6d7e)`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			timeout := requestTimeoutFlag(fs)
			at := fs.Int64("at", -1, "fork from version `V` of SESSION instead of the snapshot holding the fork record")
			name := fs.String("name", defaultForkFile, "`FILE` name of the fork note in the child")
			snapType := fs.String("snapshot-type", string(layout.Provisional), "`TYPE` of SESSION's snapshot that records the fork (provisional: a tool writing into someone's session, decisions.md §6.4)")
			return func(ctx context.Context, sio *stdio, args []string) error {
				if len(args) != 2 {
					return usagef("want BUCKET-URL and SESSION, got %d argument(s)", len(args))
				}
				if !fsck.NameIsPath(*name) {
					return usagef("--name=%q cannot be a file name in the tree", *name)
				}
				typ, err := layout.ParseSnapshotType(*snapType)
				if err != nil {
					return usagef("--snapshot-type=%s: want provisional, checkpoint or queueing", *snapType)
				}
				atSet := false
				fs.Visit(func(f *flag.Flag) { atSet = atSet || f.Name == "at" })
				if atSet && *at < 0 || *at > int64(^uint32(0)) {
					return usagef("--at=%d: want a snapshot version (0 to the latest)", *at)
				}
				s, b, err := openStore(ctx, args[0], false, *timeout)
				if err != nil {
					return err
				}
				defer b.Close()
				parent, err := resolveSession(ctx, s, args[1])
				if err != nil {
					return err
				}
				note := forkNote{ForkedFrom: parent, CreatedBy: "pugfs fork"}
				if *at >= 0 {
					latest, err := s.LatestVersion(ctx, parent)
					if err != nil {
						return err
					}
					v := uint32(*at)
					if v > latest {
						return fmt.Errorf("--at=%d: session %s has versions 0 to %d", v, parent, latest)
					}
					note.At = &v
				}
				child, err := fork(ctx, s, parent, note, *name, typ)
				if err != nil {
					return err
				}
				fmt.Fprintln(sio.out, child)
				return nil
			}
		},
	}
}

// fork records the fork in parent's next snapshot and materialises the
// child, at note.At if set.
func fork(ctx context.Context, s *layout.Store, parent layout.SessionID, note forkNote, name string, typ layout.SnapshotType) (layout.SessionID, error) {
	body, err := json.MarshalIndent(note, "", "  ")
	if err != nil {
		return layout.SessionID{}, err
	}
	body = append(body, '\n')
	d, err := s.PutBody(ctx, name, body, layout.BlobOptions{ContentType: "application/json"})
	if err != nil {
		return layout.SessionID{}, err
	}
	req := layout.ForkRequest{Descriptor: d, Type: typ}
	if note.At == nil {
		return s.Fork(ctx, parent, req)
	}
	child, res, err := s.RecordFork(ctx, parent, req)
	if err != nil {
		return layout.SessionID{}, err
	}
	pf := layout.PendingFork{Parent: parent, Version: *note.At, Descriptor: res.Descriptors[0]}
	if _, err := s.MaterializeFork(ctx, pf); err != nil {
		return child, fmt.Errorf("fork recorded at %s@%d, but materialising %s failed (the record stays pending, §11.1): %w", parent, res.Version, child, err)
	}
	return child, nil
}
