package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/cloudtest"
	"github.com/pugmark/pugfs/internal/s3test"
)

// TestMissingBucket: fsck and mount (and, on the clouds, session new and
// exec) of a bucket or container that does not exist say so in one line
// that names what to create and with which tool, on every backend, and
// exit 1. A mount and exec learn it from their probe.
func TestMissingBucket(t *testing.T) {
	s3 := s3test.Start(t)
	gcs := cloudtest.StartGCS(t)
	az := cloudtest.StartAzure(t)
	missing := t.TempDir() + "/missing"
	for _, tc := range []struct {
		name, url string
		env       []string
		want      []string
	}{
		{"local", missing, nil, []string{"bucket directory " + missing + " does not exist", "pugfs demo"}},
		{"s3", s3.URL("no-such-bucket"), s3.Env(), []string{`S3 bucket "no-such-bucket" does not exist`, "aws s3 mb s3://no-such-bucket"}},
		{"gcs", gcs.URL("no-such-bucket"), gcs.Env(), []string{`GCS bucket "no-such-bucket" does not exist`, "gcloud storage buckets create gs://no-such-bucket"}},
		{"azure", az.URL("no-such-container"), az.Env(), []string{`Azure container "no-such-container" does not exist`, "az storage container create --name no-such-container"}},
		// Through the fault injector: the raw 404 of the first request,
		// naming a key, 860 bytes (audit 19).
		{"fault+s3", "fault+" + s3.URL("no-such-bucket") + "&fault_latency=1ms", s3.Env(), []string{`S3 bucket "no-such-bucket" does not exist`, "aws s3 mb s3://no-such-bucket"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds := [][]string{{"fsck", tc.url}, {"mount", tc.url, t.TempDir()}}
			if tc.name != "local" {
				// session new creates a missing local directory on
				// purpose; a cloud bucket it cannot create.
				cmds = append(cmds, []string{"session", "new", tc.url}, []string{"exec", tc.url, "00079d76b2c700a1fb7d5fa39569554b", "--", "true"})
			}
			for _, args := range cmds {
				// A bound, so that a mount that wrongly came up fails
				// the test instead of hanging it.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = append(os.Environ(), tc.env...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				_ = cmd.Run()
				code := cmd.ProcessState.ExitCode()
				msg := strings.TrimRight(stderr.String(), "\n")
				if code != 1 || strings.Count(msg, "\n") != 0 {
					t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line", args[0], code, msg)
				}
				for _, w := range tc.want {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: stderr %q lacks %q", args[0], msg, w)
					}
				}
			}
		})
	}
}

// TestMissingBucketMakesNothing: a mount or pugfs exec of a cloud bucket
// that does not exist (a typo) leaves nothing in the cache directory:
// they learn it from their probe, after the bucket's state directory was
// made (review 24).
func TestMissingBucketMakesNothing(t *testing.T) {
	s3 := s3test.Start(t)
	for _, args := range [][]string{{"mount", s3.URL("no-such-bucket"), t.TempDir()}, {"exec", s3.URL("no-such-bucket"), "00079d76b2c700a1fb7d5fa39569554b", "--", "true"}} {
		cache := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(append(os.Environ(), s3.Env()...), "XDG_CACHE_HOME="+cache)
		out, _ := cmd.CombinedOutput()
		cancel()
		if !strings.Contains(string(out), "does not exist") {
			t.Fatalf("%s: %s", args[0], out)
		}
		var made []string
		filepath.WalkDir(cache, func(p string, d os.DirEntry, err error) error {
			if p != cache && p != filepath.Join(cache, "pugfs") {
				made = append(made, strings.TrimPrefix(p, cache))
			}
			return nil
		})
		if len(made) > 0 {
			t.Errorf("%s of a missing bucket left %v in the cache directory", args[0], made)
		}
	}
}
