package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/pugmark/pugfs/internal/fsck"
)

func fsckCommand() *command {
	return &command{
		name:     "fsck",
		synopsis: "pugfs fsck [--json] [--quiet] [--no-blobs] BUCKET-URL",
		short:    "check a bucket against the storage layout",
		long: `
Checks every rule of storage-layout.txt and decisions.md that can be checked
from the bucket: key shapes under objects/, sessions/, memories/ and refs/;
manifests (ID, parent, cycles); snapshot versions (contiguous), encoding,
metadata and sequence numbers; descriptors (blob exists, digest and size
match, inline data, tombstones, forks, cross-session writes); memory files;
refs; Cache-Control and Content-Encoding headers; and names that cannot be
paths. Every blob body is read and hashed unless --no-blobs. Nothing is
written.

Findings are printed one a line with a severity (error: breaks a MUST;
warning: a SHOULD, a legacy shape or a copied bucket's missing metadata;
info: a valid state worth knowing, such as a pending fork), the rule, the
key and what is wrong. Progress goes to stderr on big buckets. Exit status
is 1 when there is any error finding, 0 otherwise.`,
		examples: `  pugfs fsck ./demo-bucket
  pugfs fsck --quiet --no-blobs s3://bucket?region=us-east-1
  pugfs fsck --json ./bucket | jq '.findings[] | select(.severity == "error")'`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			timeout := requestTimeoutFlag(fs)
			asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
			quiet := fs.Bool("quiet", false, "no progress, no info findings, no summary when clean")
			noBlobs := fs.Bool("no-blobs", false, "do not read blobs (existence and size are still checked from the listing)")
			return func(ctx context.Context, sio *stdio, args []string) error {
				if len(args) != 1 {
					return usagef("want one BUCKET-URL, got %d argument(s)", len(args))
				}
				s, b, err := openStore(ctx, args[0], false, *timeout)
				if err != nil {
					return err
				}
				defer b.Close()
				opts := fsck.Options{NoBlobs: *noBlobs}
				if !*quiet {
					opts.Progress = func(p fsck.Progress) {
						fmt.Fprintf(sio.err, "fsck: %s: %d objects listed, %d checked, %s read, %s\n",
							p.Phase, p.Listed, p.Checked, formatBytes(p.Bytes), p.Elapsed.Round(time.Second))
					}
				}
				rep, err := fsck.Check(ctx, s, opts)
				if err != nil {
					return err
				}
				if *asJSON {
					enc := json.NewEncoder(sio.out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(rep); err != nil {
						return err
					}
				} else {
					printReport(sio, rep, *quiet)
				}
				if !rep.OK() {
					return &exitError{1}
				}
				return nil
			}
		},
	}
}

func printReport(sio *stdio, rep *fsck.Report, quiet bool) {
	for _, f := range rep.Findings {
		if quiet && f.Severity == fsck.Info {
			continue
		}
		fmt.Fprintln(sio.out, f)
	}
	for k, n := range rep.Suppressed {
		if quiet && len(k) > 4 && k[:4] == "info" {
			continue
		}
		fmt.Fprintf(sio.out, "... and %d more %s findings not listed\n", n, k)
	}
	if quiet && rep.Errors == 0 && rep.Warnings == 0 {
		return
	}
	st := rep.Stats
	verdict := "clean"
	if !rep.OK() {
		verdict = "HAS ERRORS"
	}
	fmt.Fprintf(sio.out, "fsck: %s: %d error(s), %d warning(s), %d info; checked %d objects: %d sessions, %d snapshots, %d descriptors, %d memory files, %d refs, %d blobs (%d read, %s)\n",
		verdict, rep.Errors, rep.Warnings, rep.Infos, st.Objects, st.Sessions, st.Snapshots, st.Descriptors, st.MemoryFiles, st.Refs, st.Blobs, st.BlobsRead, formatBytes(st.BytesRead))
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
