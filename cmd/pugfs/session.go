package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/pugmark/pugfs/layout"
)

func sessionCommand() *command {
	return &command{
		name:     "session",
		synopsis: "pugfs session SUBCOMMAND [flags] [arguments]",
		short:    "manage sessions",
		long:     `Commands that work on sessions.`,
		examples: `  pugfs session new --name review ./demo-bucket`,
		subs:     []*command{sessionNewCommand()},
	}
}

func sessionNewCommand() *command {
	return &command{
		name:     "session new",
		synopsis: "pugfs session new [--name N] [--agent A] [--handler H] BUCKET-URL",
		short:    "create a session and print its ID",
		long: `
Creates a root session (a manifest, storage-layout §5; no snapshots yet) and
prints its 32-hex ID. With --name, the session is named: refs/sessions/<N>
points at it (§9.1), and if that name already exists its session's ID is
printed instead and nothing is written, so running the command twice prints
the same ID. Two concurrent creators of one name agree on a single winner
(§9.2). A local directory that does not exist yet is created, so this
also starts a new bucket.`,
		examples: `  pugfs session new ./demo-bucket
  pugfs session new --name review --agent alice ./demo-bucket
  id=$(pugfs session new --name nightly s3://bucket?region=us-east-1)`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			timeout := requestTimeoutFlag(fs)
			name := fs.String("name", "", "name the session (refs/sessions/`NAME`); reuse it if it exists")
			agent := fs.String("agent", "", "the manifest's agent `ID`")
			handler := fs.String("handler", "", "the manifest's handler `NAME`")
			return func(ctx context.Context, sio *stdio, args []string) error {
				if len(args) != 1 {
					return usagef("want one BUCKET-URL, got %d argument(s)", len(args))
				}
				named := false
				fs.Visit(func(f *flag.Flag) { named = named || f.Name == "name" })
				if named {
					if err := layout.ValidateRefName(layout.SessionRefName(*name)); err != nil {
						return usagef("--name=%q: a session name is one path component without NUL or newlines", *name)
					}
					if len(*name) > layout.MaxNameComponent {
						// names/<name> and refs/sessions/<name> of a mount.
						return usagef("--name: %d bytes; a session name is a file name on a mount, at most %d bytes", len(*name), layout.MaxNameComponent)
					}
					if strings.HasPrefix(*name, "-") {
						// pugfs exec takes it where a flag may stand.
						return usagef("--name=%q: a session name starting with - reads as a flag on pugfs exec's command line", *name)
					}
				}
				s, b, err := openStore(ctx, args[0], true, *timeout)
				if err != nil {
					return err
				}
				defer b.Close()
				m := s.NewRootManifest()
				m.Agent, m.Handler = *agent, *handler
				if *name == "" {
					if _, _, err := s.CreateSession(ctx, m); err != nil {
						return err
					}
					fmt.Fprintln(sio.out, m.Session)
					return nil
				}
				got, created, err := s.CreateNamedSession(ctx, *name, m)
				if err != nil {
					return err
				}
				if !created && (*agent != "" || *handler != "") && (got.Agent != *agent || got.Handler != *handler) {
					fmt.Fprintf(sio.err, "pugfs session new: session %q exists with agent %q and handler %q; left as it is\n", *name, got.Agent, got.Handler)
				}
				fmt.Fprintln(sio.out, got.Session)
				return nil
			}
		},
	}
}
