package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/pugmark/pugfs/internal/s3test"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tinyConfig is the harness at its smallest: 50 files, a 4 MiB blob, one
// run, no rclone or fio (their cells must say why), page cache left alone.
func tinyConfig(t *testing.T, data string, out, log *syncWriter) Config {
	t.Helper()
	c, err := parseFlags([]string{"-preset", "tiny", "-peers", "native,loopback", "-fio=false",
		"-drop-caches=false", "-install=false", "-data", data}, out, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mustRoot(t), ".tools", "bin", "versitygw")); err != nil && os.Getenv("PUGFS_TOOLS") == "" {
		c.S3 = false // make deps builds it; the S3 rows then say why they are missing
	}
	return c
}

func mustRoot(t *testing.T) string {
	t.Helper()
	r, err := s3test.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTinyBench runs the whole harness (generation, every mount, every
// row, the table) and then interrupts a second run, which must unmount
// everything it mounted.
func TestTinyBench(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse: cannot mount")
	}
	data := t.TempDir()
	out, log := &syncWriter{}, &syncWriter{}
	c := tinyConfig(t, data, out, log)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, &c); err != nil {
		t.Fatalf("run: %v\nlog:\n%s", err, log.String())
	}
	table := out.String()
	for _, want := range []string{
		"| read 4 MiB blob (cat), cold | ",
		"| grep -rl over 50 files, warm | ",
		"| ls -lR of 50 files, warm | ",
		"| first ls of a session with 50 versions, fresh mount, 5ms/request | ",
		"| commit 40 files of 1 KiB, 8 writers | ",
		"| peak RSS (VmHWM), blob reads | ",
		"not requested (-peers)",
		"not requested (-fio=false)",
		"Goals (pugfs",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "error [") {
		t.Errorf("table has errors:\n%s\nlog:\n%s", table, log.String())
	}
	if c.S3 && !strings.Contains(table, "| S3: grep -rl over 50 files, cold | ") {
		t.Errorf("no S3 rows:\n%s", table)
	}
	checkUnmounted(t, data)
	if _, err := os.Stat(filepath.Join(data, "scratch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scratch directory left behind: %v", err)
	}

	// The data sets are cached now; interrupt the second run as soon as
	// it has measured something (its mounts are live then).
	out2, log2 := &syncWriter{}, &syncWriter{}
	c2 := tinyConfig(t, data, out2, log2)
	c2.PugfsBin = filepath.Join(data, "bin", "pugfs") // built by the first run
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	log2.onWrite = func(s string) {
		if strings.Contains(s, "generating") {
			t.Errorf("second run regenerated a cached data set: %s", s)
		}
		if strings.Contains(s, "] run 1: ") && strings.Contains(s, "on pugfs") {
			cancel2()
		}
	}
	err := run(ctx2, &c2)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("interrupted run returned %v, want context.Canceled\nlog:\n%s", err, log2.String())
	}
	checkUnmounted(t, data)
}

func checkUnmounted(t *testing.T, data string) {
	t.Helper()
	for mp := range mountPoints() {
		if strings.HasPrefix(mp, data+"/") {
			t.Errorf("%s is still mounted", mp)
		}
	}
}

// syncWriter collects output; onWrite sees every write.
type syncWriter struct {
	mu      sync.Mutex
	b       bytes.Buffer
	onWrite func(string)
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.b.Write(p)
	f := w.onWrite
	w.mu.Unlock()
	if f != nil {
		f(string(p))
	}
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
