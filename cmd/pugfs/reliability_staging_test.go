package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The staging directory of a mount that is gone (SIGKILL, a crash) is
// removed by the next mount on the same state directory; salvage files of
// failed commits inside it are moved to the failed directory first; a pid
// reused by another program does not keep a dead mount's directory alive;
// what is not a staging directory is left alone.
//
// Without cleanStaging, staging/<pid> of every killed mount stays forever
// (and TestReliabilityCrashDuringWriteStorm fails on it end to end).
func TestReliabilityCleanStaging(t *testing.T) {
	state := t.TempDir()
	failed := filepath.Join(state, "failed")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "60") // alive, but not a pugfs
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	mk := func(rel, body string) {
		p := filepath.Join(state, "staging", rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	deadDir := fmt.Sprint(dead.Process.Pid)
	otherDir := fmt.Sprint(other.Process.Pid)
	mk(deadDir+"/spill-1", "half a write")
	mk(deadDir+"/failed/sess/a.txt.20260101T000000", "kept bytes")
	mk(otherDir+"/spill-2", "x")
	mk("notapid/keep", "y")
	// Today's directories: one whose owner holds its lock (this test,
	// as a live mount or pugfs exec does: every exec's inner process is
	// PID 1 of its own namespace, so PIDs cannot tell), one whose owner
	// is gone (its lock file there, unlocked).
	live, release, err := ownDir(filepath.Join(state, "staging"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	mk(filepath.Base(live)+"/spill-3", "staged by a live mount")
	mk("p0123456789abcdef/spill-4", "left by a dead one")
	mk("p0123456789abcdef.lock", "")
	cleanStaging(state, failed, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if b, err := os.ReadFile(filepath.Join(live, "spill-3")); err != nil || string(b) != "staged by a live mount" {
		t.Errorf("a live owner's staging directory was touched: %q, %v", b, err)
	}
	for _, gone := range []string{"p0123456789abcdef", "p0123456789abcdef.lock"} {
		if _, err := os.Stat(filepath.Join(state, "staging", gone)); !os.IsNotExist(err) {
			t.Errorf("staging/%s of a dead owner is still there: %v", gone, err)
		}
	}
	for _, gone := range []string{deadDir, otherDir} {
		if _, err := os.Stat(filepath.Join(state, "staging", gone)); !os.IsNotExist(err) {
			t.Errorf("staging/%s is still there: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "staging", "notapid", "keep")); err != nil {
		t.Errorf("a directory that is not a pid was touched: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(failed, "sess", "a.txt.20260101T000000")); err != nil || string(b) != "kept bytes" {
		t.Errorf("salvage not moved to the failed directory: %q %v", b, err)
	}
}
