package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pugmark/pugfs/internal/syncbuf"
	"github.com/pugmark/pugfs/layout"
)

// probeOf opens url as a mount does and probes it: what the probe
// logged, and its error.
func probeOf(t *testing.T, url string) (*syncbuf.Buffer, error) {
	t.Helper()
	ctx := context.Background()
	b, _, err := openBucketURL(ctx, url, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logged := &syncbuf.Buffer{}
	return logged, probe(ctx, layout.New(b, nil), logged.Logger(slog.LevelInfo))
}

// TestProbeRetries: a bucket that answers every LIST with an error fails
// the probe after its retries, says so once while retrying (a refused
// endpoint must not keep a mount silent), as an error, not as silence,
// and its error reads without gocloud's prefixes.
func TestProbeRetries(t *testing.T) {
	logged, err := probeOf(t, "fault+mem://?fault_ops=list&fault_error_rate=1")
	if err == nil {
		t.Fatal("probe of a bucket whose every LIST fails succeeded")
	}
	if n := logged.Count("bucket answered with an error; trying again"); n != 1 {
		t.Errorf("logged the retry %d times, want once:\n%s", n, logged.String())
	}
	if text := oneLine(err); strings.Contains(text, "code=") {
		t.Errorf("error text keeps gocloud's prefix: %s", text)
	}
}

// TestProbeRequestRejected: an S3 server that rejects the request itself
// (HTTP 400, InvalidBucketName for a name it does not accept) fails the
// probe at its first LIST, with a hint, and no "retrying": it was asked
// five times as if it were silent, then reported as the SDK's bare text
// (audit 10). The 4xx answers S3 gives for a passing state are asked
// again.
func TestProbeRequestRejected(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_PROFILE", "")
	for _, c := range []struct {
		status    int
		code      string
		wantLists int32
	}{
		{http.StatusBadRequest, "InvalidBucketName", 1},
		{http.StatusConflict, "OperationAborted", probeAttempts},
	} {
		t.Run(c.code, func(t *testing.T) {
			var lists atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("prefix") == "sessions/" {
					lists.Add(1) // the probe's (openBucket's check lists the bucket first)
				}
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(c.status)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>no</Message></Error>`, c.code)
			}))
			defer srv.Close()
			logged, err := probeOf(t, "s3://b1?endpoint="+srv.URL+"&use_path_style=true&disable_https=true&region=us-east-1")
			if err == nil {
				t.Fatal("probe of a bucket that rejects every request succeeded")
			}
			if n := lists.Load(); n != c.wantLists {
				t.Errorf("the probe sent %d LISTs, want %d", n, c.wantLists)
			}
			if retried := strings.Contains(logged.String(), "trying again"); retried != (c.wantLists > 1) {
				t.Errorf("retry logged %v, want %v:\n%s", retried, c.wantLists > 1, logged.String())
			}
			if h := probeHint(err); c.status == http.StatusBadRequest && !strings.Contains(h, "bucket name") {
				t.Errorf("no hint for a 400 (%v): %q", err, h)
			}
			if c.status != http.StatusBadRequest {
				return
			}
			// The other commands say it too.
			var out, errOut bytes.Buffer
			if code := run(context.Background(), []string{"session", "new", "s3://b1?endpoint=" + srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "bucket name") {
				t.Errorf("pugfs session new: exit %d, stderr without the hint:\n%s", code, errOut.String())
			}
		})
	}
}

// TestProbeHintCredentials: an S3 request with no credentials anywhere
// fails with the SDK's refusal from the EC2 metadata service; the hint
// says what is missing (audit 25).
func TestProbeHintCredentials(t *testing.T) {
	err := errors.New("get credentials: failed to refresh cached credentials, no EC2 IMDS role found, operation error ec2imds: GetMetadata, http response error StatusCode: 403")
	if h := probeHint(err); !strings.Contains(h, "AWS_ACCESS_KEY_ID") {
		t.Errorf("hint %q does not name the credentials to set", h)
	}
	if h := probeHint(errors.New("dial tcp: connection refused")); h != "" {
		t.Errorf("hint %q for an error that is not about credentials", h)
	}
}

// TestCommandsOnASilentBucket: session new, fork and fsck on an endpoint
// that accepts connections and never answers fail after about their
// --request-timeout, saying the bucket did not answer; session new took
// 332 s to fail, every request retried to its end (audit 27).
func TestCommandsOnASilentBucket(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	u := "s3://b1?endpoint=http://" + ln.Addr().String() + "&use_path_style=true&disable_https=true&region=us-east-1"
	for _, args := range [][]string{
		{"session", "new", "--request-timeout=300ms", u},
		{"fork", "--request-timeout=300ms", u, "00000000000000000000000000000001"},
		{"fsck", "--request-timeout=300ms", u},
	} {
		t.Run(args[0], func(t *testing.T) {
			// A bound against a hang, far above what the command takes.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			code := run(ctx, args, &out, &errOut)
			if ctx.Err() != nil {
				t.Fatalf("pugfs %s still running after 2 minutes", strings.Join(args, " "))
			}
			if code == 0 || !strings.Contains(errOut.String(), "did not answer within 300ms") {
				t.Fatalf("pugfs %s: exit %d, stderr:\n%s", args[0], code, errOut.String())
			}
		})
	}
}

// TestRequestTimeoutMustBePositive: --request-timeout=0 of fsck, session
// new and fork is a usage error, as a mount's: it was taken, and a
// bucket that answers at once was said not to answer within 0s (review
// 30).
func TestRequestTimeoutMustBePositive(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"session", "new", "--request-timeout=0", dir},
		{"fork", "--request-timeout=0", dir, "00000000000000000000000000000001"},
		{"fsck", "--request-timeout=-1s", dir},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--request-timeout must be positive") {
			t.Errorf("pugfs %s: exit %d, stderr:\n%s", strings.Join(args, " "), code, errOut.String())
		}
	}
}

// TestCommandErrorsScrubSecrets: a command's error text repeats no
// secret of its arguments: an endpoint URL the SDK cannot parse was
// printed back by fsck with its password, where mount scrubbed it
// (audit 29).
func TestCommandErrorsScrubSecrets(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	u := "s3://aud29?endpoint=http://u29:p%2Fass29@127.0.0.1:1&region=us-east-1&use_path_style=true&disable_https=true"
	for _, args := range [][]string{
		{"fsck", "--request-timeout=2s", u},
		{"session", "new", "--request-timeout=2s", u},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		if code == 0 || strings.Contains(errOut.String(), "ass29") {
			t.Errorf("pugfs %s: exit %d, stderr shows the password:\n%s", args[0], code, errOut.String())
		}
	}
}

// TestUsageErrorsScrubSecrets: a usage error about a URL the parser
// refuses (a password with a stray %) is scrubbed of the argument's
// secrets too; only the other errors were (review 31).
func TestUsageErrorsScrubSecrets(t *testing.T) {
	u := "s3://AKIAREVIEW31:hunter2%zzsecret@bucket"
	for _, args := range [][]string{
		{"fsck", "--request-timeout=2s", u},
		{"session", "new", "--request-timeout=2s", u},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		if strings.Contains(errOut.String(), "hunter2") {
			t.Errorf("pugfs %s: exit %d, stderr shows the password:\n%s", args[0], code, errOut.String())
		}
	}
}
