package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// tools are the binaries a run uses; a missing optional one is a reason
// printed in place of its cells.
type tools struct {
	pugfs, loopback, rclone, fio, versitygw string
	// why says why an optional tool is missing, by name.
	why map[string]string
}

// prepareTools builds pugfs (unless given) and the no-passthrough
// loopback, finds rclone, fio and versitygw, and installs rclone and fio
// with apt-get when allowed.
func prepareTools(ctx context.Context, c *Config, logf func(string, ...any)) (*tools, error) {
	t := &tools{why: map[string]string{}}
	binDir := filepath.Join(c.DataDir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	t.pugfs = c.PugfsBin
	if t.pugfs == "" {
		t.pugfs = filepath.Join(binDir, "pugfs")
		logf("building pugfs into %s", t.pugfs)
		if out, err := runQuiet(ctx, 5*time.Minute, c.Root, nil, "go", "build", "-o", t.pugfs, "./cmd/pugfs"); err != nil {
			return nil, fmt.Errorf("build pugfs: %v\n%s", err, out)
		}
	}
	if _, err := os.Stat(t.pugfs); err != nil {
		return nil, fmt.Errorf("pugfs binary: %w", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err2 := exec.LookPath("fusermount"); err2 != nil {
			t.why["fusermount"] = "no fusermount3 (apt-get install fuse3)"
		}
	}
	if wants(c.Peers, colLoopback) {
		// The upstream example hands files to the kernel (FUSE
		// passthrough) when run as root; loopback/main.go is the same
		// filesystem with that turned off.
		// Built per data directory, so that a bench and the tiny test
		// never overwrite a binary the other is running.
		t.loopback = filepath.Join(binDir, "loopback-nopt")
		if out, err := runQuiet(ctx, 5*time.Minute, c.Root, nil, "go", "build", "-o", t.loopback, "./cmd/pugfs-bench/loopback"); err != nil {
			t.why[colLoopback] = "could not build the go-fuse loopback: " + firstLine(string(out))
			t.loopback = ""
		} else if r := t.why["fusermount"]; r != "" {
			t.why[colLoopback] = r
		}
	} else {
		t.why[colLoopback] = "not requested (-peers)"
	}
	if wants(c.Peers, colRclone) {
		t.rclone, t.why[colRclone] = findOrInstall(ctx, c, "rclone", "rclone", logf)
		if t.rclone != "" && t.why["fusermount"] != "" {
			t.rclone, t.why[colRclone] = "", t.why["fusermount"]
		}
	} else {
		t.why[colRclone] = "not requested (-peers)"
	}
	if c.FIO {
		t.fio, t.why["fio"] = findOrInstall(ctx, c, "fio", "fio", logf)
	} else {
		t.why["fio"] = "not requested (-fio=false)"
	}
	if c.S3 {
		dir := os.Getenv("PUGFS_TOOLS")
		if dir == "" {
			dir = filepath.Join(c.Root, ".tools", "bin")
		}
		t.versitygw = filepath.Join(dir, "versitygw")
		if fi, err := os.Stat(t.versitygw); err != nil || fi.Mode()&0o111 == 0 {
			t.why["s3"] = "versitygw not built (run make deps)"
			t.versitygw = ""
		}
	} else {
		t.why["s3"] = "not requested (-s3=false)"
	}
	for k, v := range t.why {
		if v == "" {
			delete(t.why, k)
		}
	}
	return t, nil
}

func wants(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// findOrInstall returns the path of bin, installing pkg with apt-get when
// it is missing and the run may (root, -install); else a reason.
func findOrInstall(ctx context.Context, c *Config, bin, pkg string, logf func(string, ...any)) (string, string) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, ""
	}
	if !c.Install {
		return "", bin + " not installed (and -install=false)"
	}
	if os.Geteuid() != 0 {
		return "", bin + " not installed (apt-get install " + pkg + " needs root)"
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", bin + " not installed and no apt-get"
	}
	logf("installing %s with apt-get", pkg)
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	if _, err := runQuiet(ctx, 5*time.Minute, "/", env, "apt-get", "install", "-y", "-qq", pkg); err != nil {
		if _, err := runQuiet(ctx, 5*time.Minute, "/", env, "apt-get", "update", "-qq"); err != nil {
			return "", "apt-get update failed: " + firstLine(err.Error())
		}
		if _, err := runQuiet(ctx, 5*time.Minute, "/", env, "apt-get", "install", "-y", "-qq", pkg); err != nil {
			return "", "apt-get install " + pkg + " failed: " + firstLine(err.Error())
		}
	}
	if p, err := exec.LookPath(bin); err == nil {
		return p, ""
	}
	return "", "apt-get installed " + pkg + " but " + bin + " is not on PATH"
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
