package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/pugmark/pugfs/internal/demo"
	"github.com/pugmark/pugfs/internal/redact"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/deadlineblob"
)

func demoCommand() *command {
	return &command{
		name:     "demo",
		synopsis: "pugfs demo [--force] DIR",
		short:    "write a demo bucket into a directory",
		long: `
Writes a small, realistic pugmark bucket into DIR (a local directory, created
if missing) using the storage layout library alone: named sessions with
history (checkpoint, provisional and queueing snapshots), nested file names,
a deleted and a renamed file, gzip- and zstd-encoded files, inline and large
(200 KiB) files, a materialised and a pending fork, a delivered cross-session
write, memory namespaces with history (team/notes, user/alice, project) and
a plain ref. File contents are the same on every run; session IDs and times
differ.

DIR must be empty or absent, so that a demo never mixes into real data;
--force writes into a non-empty bucket anyway (the named sessions "demo" and
"inbox" are reused and gain versions). DIR may also be a bucket URL.`,
		examples: `  pugfs demo ./demo-bucket && pugfs mount ./demo-bucket ./mnt
  pugfs demo --force ./demo-bucket
  pugfs demo s3://scratch-bucket?region=us-east-1`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			force := fs.Bool("force", false, "write into a bucket that is not empty")
			return func(ctx context.Context, sio *stdio, args []string) error {
				if len(args) != 1 {
					return usagef("want one DIR, got %d argument(s)", len(args))
				}
				b, u, err := openBucket(ctx, args[0], true, deadlineblob.DefaultTimeout)
				if err != nil {
					return err
				}
				// As every other command's (openStore): a bucket that
				// stops answering fails the demo instead of hanging it.
				b = deadlineblob.Wrap(b, deadlineblob.DefaultTimeout)
				defer b.Close()
				empty, err := isEmptyBucket(ctx, b)
				if err != nil {
					return fmt.Errorf("list %s: %w", redact.URL(u), err)
				}
				if !empty && !*force {
					return fmt.Errorf("%s is not empty; use an empty or new directory, or --force to add the demo to it", args[0])
				}
				sum, err := demo.Write(ctx, layout.New(b, nil))
				if err != nil {
					return err
				}
				fmt.Fprintf(sio.out, "wrote a demo bucket into %s:\n%s\nmount it with: pugfs mount %s MOUNTPOINT\n", args[0], sum, args[0])
				return nil
			}
		},
	}
}
