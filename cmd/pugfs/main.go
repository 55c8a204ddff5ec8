// Command pugfs mounts a pugmark bucket as a directory tree, and writes,
// checks and edits pugmark buckets from the command line.
//
//	pugfs mount [flags] BUCKET-URL MOUNTPOINT
//	pugfs demo [--force] DIR
//	pugfs fsck [--json] [--quiet] [--no-blobs] BUCKET-URL
//	pugfs session new [--name N] [--agent A] [--handler H] BUCKET-URL
//	pugfs fork [--at V] [--name FILE] BUCKET-URL SESSION
//	pugfs exec [flags] BUCKET-URL SESSION -- COMMAND [ARGS...]
//	pugfs version
//
// Run `pugfs help` or `pugfs CMD --help` for details. Exit status: 0 on
// success, 1 when the command failed (or fsck found errors), 2 for a usage
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/pugmark/pugfs/internal/redact"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	// Bucket drivers, linked in so every URL scheme works everywhere:
	// s3://, gs://, azblob://, mem://, file:// (the project's own
	// multi-process-safe driver; gocloud's fileblob must not be linked,
	// both register "file") and fault+<scheme>:// for fault injection.
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/pugmark/pugfs/layout/blobwrap"
	_ "github.com/pugmark/pugfs/layout/drivers"
	_ "github.com/pugmark/pugfs/layout/faultblob"
	_ "github.com/pugmark/pugfs/layout/localblob"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

// stopSignals end a command cleanly: a mount unmounts (keeping what it
// could not commit in failed/), pugfs exec passes them to its handler and
// commits nothing. SIGHUP is one: a foreground mount whose terminal or
// ssh session went away died of Go's default action, leaving a dead
// mount (ENOTCONN) and losing --commit=fsync changes not yet fsynced.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

func main() {
	execTrampoline()
	helper := isMountHelper(os.Args[0], os.Args[1:], commands())
	if helper || len(os.Args) > 1 && (os.Args[1] == "mount" || os.Args[1] == "exec") {
		// A mount and a run keep going when the reader of their log is
		// gone (a log shipper that died, exec ... 2>&1 | head): a write
		// to it fails, and is dropped. By default the first one killed
		// the process with SIGPIPE, and pugfs exec's inner process (PID
		// 1 of its namespace, which the signal does not kill) exited 2:
		// a landed checkpoint reported as a usage error, a failed run's
		// files not kept in failed/, staging left behind (audit 15).
		// Caught, not ignored: an ignored signal stays ignored in the
		// processes started (a handler's yes | head would not end).
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	if helper {
		os.Exit(runMountHelper(filepath.Base(os.Args[0]), os.Args[1:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	if len(os.Args) > 1 && os.Args[1] == "exec" {
		catchQuit() // from the start: a SIGQUIT is the handler's
	}
	if !signalsCaught() && !(len(os.Args) > 1 && os.Args[1] == "mount") {
		go func() {
			// After the first signal, restore the default handlers so
			// that a second Ctrl-C kills a command (an unmount, say)
			// that is stuck. Not in a pugfs exec's inner process: PID 1
			// of its namespace cannot be killed by a signal, and the Go
			// runtime, finding itself alive after one, exits with status
			// 2, committing nothing and saying nothing. Nor in a mount,
			// which takes the second itself (runMount: it stops waiting,
			// and keeps what was not committed).
			<-ctx.Done()
			stop()
		}()
	}
	stopProfile := startProfile()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	stop()
	os.Exit(code)
}

// command is one subcommand (or a group of them, like "session").
type command struct {
	name     string // "fsck", or "session new" for a subcommand
	synopsis string // usage line after "Usage: "
	short    string // one line for `pugfs help`
	long     string // what it does, for --help
	examples string // indented example lines, for --help
	// setup defines the command's flags on fs and returns the function
	// that runs it with the positional arguments.
	setup func(fs *flag.FlagSet) func(ctx context.Context, io *stdio, args []string) error
	subs  []*command
	// dashAfter, when > 0, is the number of positional arguments that
	// come before a required "--" (pugfs exec: BUCKET-URL SESSION --
	// COMMAND...): without it, flags meant for COMMAND would be taken for
	// pugfs's own.
	dashAfter int
}

// stdio is where a command writes.
type stdio struct {
	out, err io.Writer
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// exitError carries an exit status for a failure already reported (fsck
// printed its findings).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func commands() []*command {
	return []*command{mountCommand(), demoCommand(), fsckCommand(), sessionCommand(), forkCommand(), execCommand(), versionCommand()}
}

// run is main without the process: it parses args, runs the command and
// returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sio := &stdio{out: stdout, err: stderr}
	cmds := commands()
	if len(args) == 0 {
		fmt.Fprintln(stderr, "pugfs: missing command; run 'pugfs help' for the list")
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			c, rest := find(cmds, args[1:])
			if c == nil {
				fmt.Fprintf(stderr, "pugfs help: unknown command %q; run 'pugfs help' for the list\n", strings.Join(args[1:], " "))
				return 2
			}
			if len(rest) > 0 {
				fmt.Fprintf(stderr, "pugfs help: unknown command %q; run 'pugfs help %s' for the list\n", strings.Join(args[1:], " "), c.name)
				return 2
			}
			printHelp(stdout, c)
			return 0
		}
		printOverview(stdout, cmds)
		return 0
	case "--version", "-version":
		args = []string{"version"}
	}
	c, rest := find(cmds, args)
	if c == nil {
		fmt.Fprintf(stderr, "pugfs: unknown command %q; run 'pugfs help' for the list\n", args[0])
		return 2
	}
	return runCommand(ctx, sio, c, rest)
}

// find resolves a command path ("session", "new") and returns the
// remaining arguments. A group with no (or an unknown) subcommand is
// returned itself, with the arguments.
func find(cmds []*command, args []string) (*command, []string) {
	for _, c := range cmds {
		if len(args) > 0 && lastWord(c.name) == args[0] {
			if len(c.subs) > 0 && len(args) > 1 {
				if sub, rest := find(c.subs, args[1:]); sub != nil {
					return sub, rest
				}
			}
			return c, args[1:]
		}
	}
	return nil, args
}

func lastWord(s string) string { return s[strings.LastIndexByte(s, ' ')+1:] }

func runCommand(ctx context.Context, sio *stdio, c *command, args []string) int {
	prefix := "pugfs " + c.name
	if len(c.subs) > 0 {
		// A group: only --help, or a subcommand, makes sense here.
		if len(args) > 0 && isHelp(args[0]) {
			printHelp(sio.out, c)
			return 0
		}
		if len(args) == 0 {
			fmt.Fprintf(sio.err, "%s: missing subcommand; run '%s --help'\n", prefix, prefix)
		} else {
			fmt.Fprintf(sio.err, "%s: unknown subcommand %q; run '%s --help'\n", prefix, args[0], prefix)
		}
		return 2
	}
	fs := flag.NewFlagSet(prefix, flag.ContinueOnError)
	// The flag package's own error output is multi-line and includes the
	// whole usage; errors here are one line saying what to do.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	exec := c.setup(fs)
	pos, dash, err := parseInterspersed(fs, args)
	if err == nil && c.dashAfter > 0 && len(pos) > c.dashAfter && dash != c.dashAfter {
		err = fmt.Errorf("want -- after the first %d arguments (%s), so that the command's own flags are not taken for pugfs's", c.dashAfter, c.synopsis)
	}
	if errors.Is(err, flag.ErrHelp) {
		printHelp(sio.out, c)
		return 0
	}
	if err != nil {
		fmt.Fprintf(sio.err, "%s: %s; run '%s --help'\n", prefix, dashes(scrubArgs(err, args).Error()), prefix)
		return 2
	}
	err = exec(ctx, sio, pos)
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(sio.err, "%s: %s; run '%s --help'\n", prefix, scrubArgs(errors.New(ue.msg), args).Error(), prefix)
		return 2
	case errors.As(err, &ee):
		return ee.code
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		fmt.Fprintf(sio.err, "%s: interrupted\n", prefix)
		return 1
	default:
		// A 400 of the bucket read as the SDK's bare text in every
		// command but mount and exec, whose probe explains it (audit 11).
		fmt.Fprintf(sio.err, "%s: %s%s\n", prefix, oneLine(scrubArgs(err, args)), probeHint(err))
		return 1
	}
}

// scrubArgs is err with the secrets of every argument scrubbed from its
// text, as a mount's errors are: a driver's error, or a usage error
// about a URL, may repeat an endpoint with its password (audit 29,
// review 31).
func scrubArgs(err error, args []string) error {
	for _, a := range args {
		err = redact.Err(err, a)
	}
	return err
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// parseInterspersed parses flags anywhere on the command line (the flag
// package stops at the first positional argument, which would make
// `pugfs fsck ./bucket --json` ignore --json). A "--" ends the flags;
// dash is the number of positional arguments before it, -1 without one.
func parseInterspersed(fs *flag.FlagSet, args []string) (pos []string, dash int, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			return nil, -1, err
		}
		consumed := len(args) - fs.NArg()
		rest := fs.Args()
		if consumed > 0 && args[consumed-1] == "--" {
			if i := slices.Index(rest, "--"); len(pos) == 0 && i >= 0 {
				// A "--" before every positional argument ends the
				// flags, as getopt has it, and a second one is the
				// separator (pugfs exec -- BUCKET SESSION -- COMMAND).
				return slices.Delete(slices.Clone(rest), i, i+1), i, nil
			}
			return append(pos, rest...), len(pos), nil
		}
		if len(rest) == 0 {
			return pos, -1, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// dashes rewrites the flag package's "-name" in messages to the "--name"
// the help text uses.
func dashes(msg string) string {
	msg = strings.Replace(msg, "defined: -", "defined: --", 1)
	return strings.Replace(msg, "for flag -", "for flag --", 1)
}

func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(blobwrap.Text(err.Error())), "\n", "; ")
}

func printOverview(w io.Writer, cmds []*command) {
	fmt.Fprint(w, `pugfs mounts a pugmark bucket (S3, GCS, Azure Blob, a local directory) as a
directory tree, and writes, checks and edits pugmark buckets.

Usage: pugfs COMMAND [flags] [arguments]

Commands:
`)
	var rows [][2]string
	var walk func(cs []*command)
	walk = func(cs []*command) {
		for _, c := range cs {
			if len(c.subs) > 0 {
				walk(c.subs)
				continue
			}
			rows = append(rows, [2]string{c.name, c.short})
		}
	}
	walk(cmds)
	for _, r := range rows {
		fmt.Fprintf(w, "  %-13s %s\n", r[0], r[1])
	}
	fmt.Fprint(w, `
BUCKET-URL is a directory path (./bucket, /srv/bucket), file:///abs/path,
mem://, s3://bucket?region=..., gs://bucket, azblob://container, or any of
those prefixed with fault+ to inject faults (fault+file:///tmp/b?fault_latency=5ms).

Run 'pugfs help COMMAND' or 'pugfs COMMAND --help' for a command's flags and
examples. Exit status: 0 success, 1 failure, 2 usage error.
`)
}

func printHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, strings.TrimSpace(c.long))
	if len(c.subs) > 0 {
		fmt.Fprint(w, "\nSubcommands:\n")
		for _, s := range c.subs {
			fmt.Fprintf(w, "  %-13s %s\n", s.name, s.short)
		}
	}
	if c.setup != nil {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs)
		var lines []string
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			head := "--" + f.Name
			if name != "" {
				head += "=" + name
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "-1" {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			lines = append(lines, fmt.Sprintf("  %-26s %s", head, usage))
		})
		sort.Strings(lines)
		if len(lines) > 0 {
			fmt.Fprintf(w, "\nFlags:\n%s\n", strings.Join(lines, "\n"))
		}
	}
	if c.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(c.examples, "\n"))
	}
}
