// Command pugfs-bench measures where pugfs stands against the native disk
// and other FUSE filesystems, and prints one Markdown table: workload x
// {pugfs, native disk, go-fuse's loopback example with passthrough off,
// rclone mount with --vfs-cache-mode off}, medians of alternated runs
// (pugfs, native, loopback, rclone, pugfs, ...), the ratio to native, and
// the peak RSS (VmHWM) of every FUSE daemon.
//
//	pugfs-bench [-preset quick|full|tiny] [flags]
//
// `make bench` runs the quick preset, `make bench BENCH=full` the full one,
// `make bench BENCH=remote` issue #12's workloads on S3 behind a 20 ms
// delay, pugfs against rclone mount (remote.go).
// The harness generates its data sets with the layout package (a pugmark
// bucket, the same files as a plain tree for the others, and a copy on
// versitygw for the S3 rows) and caches them in .bench/data keyed by size,
// so reruns skip generation. It mounts and unmounts every filesystem
// itself, under .bench/mnt; all mounts are unmounted when it exits, also
// on Ctrl-C (a second Ctrl-C kills it; the next run detaches what was
// left). Cold runs drop the page cache (root). fio and rclone are
// installed with apt-get when missing and the harness runs as root; a
// column or row that cannot run says why instead.
//
// Run with -h for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/layout/localblob"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		// After the first signal the default handlers are back: a second
		// Ctrl-C kills a harness whose cleanup is stuck.
		<-ctx.Done()
		stop()
	}()
	cfg, err := parseFlags(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pugfs-bench:", err)
		os.Exit(2)
	}
	if err := run(ctx, &cfg); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "pugfs-bench: interrupted; every mount was unmounted")
		} else {
			fmt.Fprintln(os.Stderr, "pugfs-bench:", err)
		}
		os.Exit(1)
	}
}

// run is the whole bench: tools, data sets, mounts, measurements, table.
func run(ctx context.Context, c *Config) error {
	if err := c.finish(); err != nil {
		return err
	}
	if c.Preset == "remote" {
		return runRemote(ctx, c)
	}
	start := time.Now()
	b := &bench{cfg: c, start: start, results: map[*row]map[string]*cellResult{}}
	dataDir := filepath.Join(c.DataDir, "data")
	mntDir := filepath.Join(c.DataDir, "mnt")
	b.scratch = filepath.Join(c.DataDir, "scratch")
	for _, d := range []string{dataDir, mntDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	sweepStaleMounts(mntDir, b.logf)
	if err := os.RemoveAll(b.scratch); err != nil {
		return err
	}
	if err := os.MkdirAll(b.scratch, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(b.scratch) // deferred first: runs after the unmounts

	t, err := prepareTools(ctx, c, b.logf)
	if err != nil {
		return err
	}
	b.tools = t

	ds := sets{
		blob:     newDataset(dataDir, kindBlob, 1, c.BlobSize),
		small:    newDataset(dataDir, kindSmall, c.Files, 0),
		sessions: newDataset(dataDir, kindSessions, c.Sessions, 0),
		versions: newDataset(dataDir, kindVersions, c.Versions, 0),
	}
	ds.s3small = ds.small
	if c.S3Files != c.Files {
		ds.s3small = newDataset(dataDir, kindSmall, c.S3Files, 0)
	}
	all := []*dataset{ds.blob, ds.small, ds.sessions, ds.versions}
	if ds.s3small != ds.small {
		all = append(all, ds.s3small)
	}
	for _, d := range all {
		if err := ensureLocal(ctx, d, b.logf); err != nil {
			return err
		}
	}
	if t.versitygw != "" {
		srv, err := startS3(t.versitygw, filepath.Join(dataDir, "s3root"))
		if err != nil {
			t.why["s3"] = err.Error()
		} else {
			defer srv.Stop()
			b.s3 = srv
			for _, d := range all {
				if err := ensureS3(ctx, srv, d, dataDir, b.logf); err != nil {
					return err
				}
			}
		}
	}

	writeBucket := filepath.Join(b.scratch, "write-bucket")
	wb, err := localblob.OpenBucket(writeBucket, &localblob.Options{CreateDir: true})
	if err != nil {
		return err
	}
	wb.Close()
	writePlain := filepath.Join(b.scratch, "write-plain")
	if err := os.MkdirAll(filepath.Join(writePlain, "sessions"), 0o755); err != nil {
		return err
	}
	b.buildRows(ds, writeBucket, writePlain)
	bins := map[string]string{colPugfs: t.pugfs, colLoopback: t.loopback, colRclone: t.rclone}
	if err := b.measureAll(ctx, mntDir, bins, "alternating the columns"); err != nil {
		return err
	}
	b.report(c.Out, b.header(start))
	return nil
}

// measureAll runs every row with the daemons in bins, mounted under
// mntDir, and unmounts them all when done (their peak RSS is then
// recorded for the report).
func (b *bench) measureAll(ctx context.Context, mntDir string, bins map[string]string, how string) error {
	rcloneConf := filepath.Join(b.scratch, "rclone.conf")
	if err := os.WriteFile(rcloneConf, nil, 0o600); err != nil {
		return err
	}
	env := []string{"XDG_CACHE_HOME=" + filepath.Join(b.scratch, "xdg"), "RCLONE_CONFIG=" + rcloneConf}
	b.m = newMounter(mntDir, bins, env, b.logf)
	defer b.m.stopAll()
	var err error
	if b.devnull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
		return err
	}
	defer b.devnull.Close()
	if b.cfg.DropCaches && os.Geteuid() != 0 {
		b.dropErr = errors.New("not root")
	}
	b.logf("measuring: %d rows, %d run(s) each, %s", len(b.rows), b.cfg.Runs, how)
	return b.runAll(ctx)
}

// header describes the machine, the data and the flags of a run.
func (b *bench) header(start time.Time) []string {
	c := b.cfg
	host := []string{runtime.GOOS + "/" + runtime.GOARCH, strconv.Itoa(runtime.NumCPU()) + " CPUs"}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		host = append(host, "kernel "+utsString(u.Release[:]))
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		host = append(host, fmt.Sprintf("%.0f GiB RAM", float64(si.Totalram)*float64(si.Unit)/(1<<30)))
		host = append(host, fmt.Sprintf("load %.2f at the end", float64(si.Loads[0])/65536))
	}
	gofuse := "go-fuse"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/hanwen/go-fuse/v2" {
				gofuse += " " + m.Version
			}
		}
	}
	cold := "fresh mount, then sync and echo 3 > /proc/sys/vm/drop_caches"
	if !c.DropCaches {
		cold = "fresh mount only (-drop-caches=false)"
	} else if b.dropErr != nil {
		cold = "fresh mount only: dropping the page cache failed (" + b.dropErr.Error() + ")"
	}
	rcl := "rclone"
	if b.tools.rclone != "" {
		if out, err := runQuiet(context.Background(), 10*time.Second, "/", nil, b.tools.rclone, "version"); err == nil {
			rcl = firstLine(string(out))
		}
	}
	cacheDir := "no --cache-dir"
	if c.CacheDir {
		cacheDir = "an empty --cache-dir for every mount"
	}
	s3files := ""
	if c.S3 && c.S3Files != c.Files {
		s3files = fmt.Sprintf("; the S3 rows' small-file session has %s files", thousands(c.S3Files))
	}
	lines := []string{
		fmt.Sprintf("pugfs-bench -preset %s: %d alternated run(s), %s, %.1f min in all", c.Preset, c.Runs, time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(start).Minutes()),
		"",
		"- machine: " + strings.Join(host, ", "),
		fmt.Sprintf("- data: a %s blob; one session of %s files of 1-4 KiB (100 a directory); %s sessions of one file; one session of %s versions (one file each)",
			humanBytes(c.BlobSize), thousands(c.Files), thousands(c.Sessions), thousands(c.Versions)) + s3files,
		fmt.Sprintf("- pugfs: `pugfs mount --read-only --cache-size %s` for reads (default --metadata-ttl 1s, %s), without --read-only for writes; S3 rows: versitygw on 127.0.0.1", humanBytes(c.CacheSize), cacheDir),
		"- go-fuse loopback: " + gofuse + " example loopback with FUSE passthrough off (cmd/pugfs-bench/loopback), -ro for reads; rclone: " + rcl + ", `rclone mount --vfs-cache-mode off` of the local directory, --read-only for reads",
		"- cold: " + cold + "; warm: the same mount after one untimed run; writes: each into a fresh session directory, close(2) included",
	}
	return lines
}

func utsString(a []int8) string {
	var b strings.Builder
	for _, c := range a {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}
