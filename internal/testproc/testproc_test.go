package testproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBucketName checks names that S3, GCS and Azure all accept, and that
// two numbers give two names.
func TestBucketName(t *testing.T) {
	for _, in := range []string{"TestX", "TestX/sub_test#01", "Test/Sub#01/--x--", strings.Repeat("Sub/Test_", 20), "---", "ÜÖ/ä"} {
		got := BucketName(in, 7)
		if len(got) < 3 || len(got) > 63 || strings.Contains(got, "--") {
			t.Errorf("BucketName(%q) = %q", in, got)
		}
		for i, r := range got {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(got)-1) {
				t.Errorf("BucketName(%q) = %q: bad character %q at %d", in, got, r, i)
			}
		}
	}
	if a, b := BucketName("T", 1), BucketName("T", 2); a == b {
		t.Errorf("two names for one test are equal: %q", a)
	}
}

// TestNeverReady checks that a server that runs but never answers fails
// after the ready timeout, with its output, and is killed.
func TestNeverReady(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := "#!/bin/sh\necho \"$$\" > " + pidFile + "\necho 'stuck starting' >&2\nexec sleep 60\n"
	bin := filepath.Join(dir, "server")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := Server{Name: "stuck", Argv: func(int, string) []string { return []string{bin} },
		Probe: func(string) error { return os.ErrNotExist }, ReadyTimeout: 300 * time.Millisecond}
	_, _, err := s.Start()
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "stuck starting") {
		t.Fatalf("start of a server that never answers: %v", err)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err == nil {
		t.Fatalf("server process %s still running after a failed start", pid)
	}
}

// TestToolMissing says what to run when a tool is not installed.
func TestToolMissing(t *testing.T) {
	t.Setenv(BinaryEnv, t.TempDir())
	if _, err := Tool("versitygw"); err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Tool of a missing binary: %v", err)
	}
}
