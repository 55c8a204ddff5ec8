package main

import (
	"flag"
	"fmt"
	"github.com/pugmark/pugfs/internal/s3test"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is one bench run.
type Config struct {
	Preset string
	// Root is the pugfs module root: .tools/bin, and where pugfs and the
	// loopback are built from.
	Root string
	// DataDir caches generated data sets (keyed by size) and holds the
	// mount points and scratch space.
	DataDir string
	// Runs is how many times each measurement is repeated, alternating
	// the filesystems; the table shows medians.
	Runs int

	BlobSize  int64 // the sequential-read blob
	Files     int   // small files in one session (1-4 KiB each)
	S3Files   int   // the same for the S3 rows
	Sessions  int   // sessions for the ls -l sessions/ row
	Versions  int   // versions of one session for the first-listing rows
	Commits   int   // 1 KiB files per commit-rate measurement
	WriteSize int64 // the large-file write
	// Latencies are the fault-injected per-request latencies of the
	// first-listing rows.
	Latencies []time.Duration
	// The remote preset's: the proxy's delay per request, the hour
	// partitions the sessions span, and the snapshot counts of its
	// history rows (one of at most 2,000 is measured at 5 ms).
	Latency        time.Duration
	Hours          int
	RemoteVersions []int
	// ManySessions over ManyHours partitions are the remote preset's
	// `ls sessions/` at scale row (0: no such row).
	ManySessions, ManyHours int

	// Peers are the columns besides pugfs: native, loopback, rclone.
	Peers []string
	FIO   bool // fio rows
	S3    bool // rows against versitygw
	// DropCaches makes cold runs drop the page cache (root only); without
	// it a cold run is only a fresh mount.
	DropCaches bool
	// Install lets the harness apt-get install fio and rclone (root).
	Install bool
	// PugfsBin is the pugfs binary; "" builds one into DataDir.
	PugfsBin string
	// CacheSize is pugfs's --cache-size: its memory budget for blobs.
	CacheSize int64
	// CacheDir gives every pugfs mount a --cache-dir of its own, emptied
	// before the mount starts, so a cold run reads from the bucket and a
	// warm one may keep verified copies on disk.
	CacheDir bool
	// Only, if set, keeps the rows whose name matches.
	Only *regexp.Regexp
	// CmdTimeout bounds every timed command.
	CmdTimeout time.Duration

	Out io.Writer // the table
	Log io.Writer // progress
}

// presets: quick (make bench), full (make bench BENCH=full), tiny (the
// test).
func preset(name string) (Config, error) {
	c := Config{
		Preset: name, Runs: 3,
		BlobSize: 1 << 30, Files: 10000, Sessions: 10000, Versions: 10000,
		Commits: 1000, WriteSize: 256 << 20,
		Latencies: []time.Duration{5 * time.Millisecond, 20 * time.Millisecond},
		Peers:     []string{colNative, colLoopback, colRclone},
		FIO:       true, S3: true, DropCaches: true, Install: true,
		CacheSize:  256 << 20,
		CacheDir:   true,
		CmdTimeout: 10 * time.Minute,
	}
	switch name {
	case "quick":
		// A few minutes on a 2-core machine: the goal sizes where a goal
		// depends on the count (10,000 files, 10,000 versions), smaller
		// elsewhere (the blob still exceeds the default cache budget).
		c.BlobSize = 512 << 20
		c.Sessions = 2000
		c.S3Files = 2000
	case "full":
		c.Runs = 5
		c.Commits = 4000
		c.WriteSize = 1 << 30
	case "remote":
		// Issue #12's table: 20 ms a request on the S3 server, pugfs
		// against rclone mount of the same files.
		c.Files, c.Sessions, c.Hours = 2000, 2000, 48
		c.ManySessions, c.ManyHours = 100000, 2000
		c.Latency = 20 * time.Millisecond
		c.RemoteVersions = []int{2000, 10000}
		c.Peers = []string{colRclone}
		c.FIO = false
	case "tiny":
		c.Runs = 1
		c.BlobSize = 4 << 20
		c.Files, c.Sessions, c.Versions, c.Commits = 50, 50, 50, 40
		c.S3Files = 50
		c.WriteSize = 4 << 20
		c.Latencies = []time.Duration{5 * time.Millisecond}
		c.CacheSize = 64 << 20
		c.CmdTimeout = 30 * time.Second
	default:
		return c, fmt.Errorf("-preset %q: want quick, full, remote or tiny", name)
	}
	return c, nil
}

// parseFlags builds a Config from a preset and the flags that override it.
func parseFlags(args []string, out, log io.Writer) (Config, error) {
	fs := flag.NewFlagSet("pugfs-bench", flag.ContinueOnError)
	fs.SetOutput(log)
	name := "quick"
	for i, a := range args {
		// The preset fixes the defaults the other flags override, so it
		// is read first.
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "preset="); ok {
			name = v
		} else if strings.TrimLeft(a, "-") == "preset" && i+1 < len(args) {
			name = args[i+1]
		}
	}
	c, err := preset(name)
	if err != nil {
		return c, err
	}
	var blob, write, cache, only, lat, peers string
	fs.StringVar(&c.Preset, "preset", name, "quick, full, remote or tiny: the defaults of every flag below")
	fs.StringVar(&c.Root, "root", "", "the pugfs module root (default: found from the working directory)")
	fs.StringVar(&c.DataDir, "data", "", "cache of generated data sets, mount points and scratch (default ROOT/.bench)")
	fs.IntVar(&c.Runs, "runs", c.Runs, "alternated runs per measurement (the table shows medians)")
	fs.StringVar(&blob, "blob-size", humanBytes(c.BlobSize), "size of the sequential-read blob")
	fs.IntVar(&c.Files, "files", c.Files, "small files (1-4 KiB) in the grep/find/ls -lR session")
	fs.IntVar(&c.S3Files, "s3-files", c.S3Files, "small files in the S3 rows' session (0: as -files)")
	fs.IntVar(&c.Sessions, "sessions", c.Sessions, "sessions for ls -l sessions/")
	fs.IntVar(&c.Versions, "versions", c.Versions, "versions of the first-listing session")
	fs.IntVar(&c.Commits, "commit-files", c.Commits, "1 KiB files written per commit-rate measurement")
	fs.StringVar(&write, "write-size", humanBytes(c.WriteSize), "size of the large-file write")
	fs.StringVar(&lat, "latencies", durations(c.Latencies), "fault-injected per-request latencies of the first-listing rows")
	fs.StringVar(&peers, "peers", strings.Join(c.Peers, ","), "columns besides pugfs: native, loopback, rclone")
	fs.BoolVar(&c.FIO, "fio", c.FIO, "run the fio rows")
	fs.BoolVar(&c.S3, "s3", c.S3, "run the rows against versitygw (S3)")
	fs.BoolVar(&c.DropCaches, "drop-caches", c.DropCaches, "drop the page cache before cold runs (root)")
	fs.BoolVar(&c.Install, "install", c.Install, "apt-get install fio and rclone when missing (root)")
	fs.StringVar(&c.PugfsBin, "pugfs", "", "pugfs binary (default: build one)")
	var rvers string
	fs.StringVar(&rvers, "remote-versions", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.RemoteVersions)), ","), "[]"), "remote preset: snapshot counts of the history rows (at most 2,000 is measured at 5 ms)")
	fs.IntVar(&c.Hours, "hours", c.Hours, "remote preset: hour partitions the sessions span")
	fs.IntVar(&c.ManySessions, "many-sessions", c.ManySessions, "remote preset: sessions of the ls sessions/ at scale row (0: no such row)")
	fs.IntVar(&c.ManyHours, "many-hours", c.ManyHours, "remote preset: hour partitions those sessions span")
	fs.StringVar(&cache, "cache-size", humanBytes(c.CacheSize), "pugfs --cache-size")
	fs.BoolVar(&c.CacheDir, "pugfs-cache-dir", c.CacheDir, "give each pugfs mount a fresh --cache-dir of its own (emptied before it starts)")
	fs.StringVar(&only, "only", "", "only rows whose name matches this regexp")
	fs.DurationVar(&c.CmdTimeout, "timeout", c.CmdTimeout, "bound on each timed command")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.RemoteVersions = nil
	for _, v := range strings.Split(rvers, ",") {
		if v = strings.TrimSpace(v); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return c, fmt.Errorf("-remote-versions: %q is not a count", v)
			}
			c.RemoteVersions = append(c.RemoteVersions, n)
		}
	}
	if c.S3Files <= 0 {
		c.S3Files = c.Files
	}
	if c.BlobSize, err = parseSize(blob); err != nil {
		return c, err
	}
	if c.WriteSize, err = parseSize(write); err != nil {
		return c, err
	}
	if c.CacheSize, err = parseSize(cache); err != nil {
		return c, err
	}
	if c.Latencies, err = parseDurations(lat); err != nil {
		return c, err
	}
	c.Peers = nil
	for _, p := range strings.Split(peers, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case colNative, colLoopback, colRclone:
			c.Peers = append(c.Peers, p)
		default:
			return c, fmt.Errorf("-peers: unknown column %q (want native, loopback, rclone)", p)
		}
	}
	if only != "" {
		if c.Only, err = regexp.Compile(only); err != nil {
			return c, fmt.Errorf("-only: %w", err)
		}
	}
	if c.ManySessions > 0 && c.ManyHours < 1 {
		return c, fmt.Errorf("want -many-hours >= 1")
	}
	if c.Runs < 1 || c.Files < 1 || c.Sessions < 1 || c.Versions < 1 || c.Commits < 8 || c.BlobSize < 4<<20 || c.WriteSize < 1<<20 {
		return c, fmt.Errorf("want -runs >= 1, -files/-sessions/-versions >= 1, -commit-files >= 8, -blob-size >= 4MiB, -write-size >= 1MiB")
	}
	c.Out, c.Log = out, log
	return c, nil
}

// finish fills the paths that depend on the module root.
func (c *Config) finish() error {
	if c.Root == "" {
		r, err := s3test.ModuleRoot()
		if err != nil {
			return err
		}
		c.Root = r
	}
	var err error
	if c.Root, err = filepath.Abs(c.Root); err != nil {
		return err
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join(c.Root, ".bench")
	}
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return err
	}
	if c.PugfsBin != "" {
		if c.PugfsBin, err = filepath.Abs(c.PugfsBin); err != nil {
			return err
		}
	}
	return nil
}

func durations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		d, err := time.ParseDuration(p)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-latencies: %q is not a positive duration", p)
		}
		out = append(out, d)
	}
	return out, nil
}
