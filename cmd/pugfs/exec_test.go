package main

import (
	"bytes"
	"slices"
	"testing"
)

// TestHandlerEnv: the handler's environment loses the cloud credentials
// (unless passed on) and pugfs exec's own variables, and gets PUGMARK_*.
func TestHandlerEnv(t *testing.T) {
	env := []string{"HOME=/root", "AWS_SECRET_ACCESS_KEY=s3cr3t", "AWS_REGION=eu-west-1",
		"PUGMARK_SESSION=stale", execInnerEnv + "=1", execChdirEnv + "=/x", "GOOGLE_APPLICATION_CREDENTIALS=/k.json"}
	got := handlerEnv(env, false, "PUGMARK_SESSION=new")
	want := []string{"HOME=/root", "AWS_REGION=eu-west-1", "PUGMARK_SESSION=new"}
	if !slices.Equal(got, want) {
		t.Fatalf("handlerEnv = %q, want %q", got, want)
	}
	if got := handlerEnv(env, true); !slices.Contains(got, "AWS_SECRET_ACCESS_KEY=s3cr3t") {
		t.Fatalf("--pass-credentials dropped the credentials: %q", got)
	}
}

// TestExecUsage: exec wants a bucket, a session and a command.
func TestExecUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"exec", "./b", "s"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, errOut.String())
	}
}
