package main

// The remote preset (make bench BENCH=remote): issue #12's workloads on
// an S3 server as far away as a cloud bucket. versitygw serves the data;
// a delaying TCP proxy in front of it holds every request for the
// latency (20 ms, 5 ms for the row the issue asks at 5 ms) before passing
// it on, and counts it, so pugfs and rclone pay the same round trips and
// the table can say how many each one sent.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pugmark/pugfs/internal/s3test"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
)

// kindHourSessions is many sessions of one 2 KiB file each, spread over
// hour partitions (Config.Hours).
const kindHourSessions = "hsessions"

// kindManySessions is a great many sessions spread over hour partitions
// (Config.ManySessions, ManyHours), each with one small inline file of
// the same body: the listing at scale, written in minutes (two PUTs a
// session, 64 in flight) and only to the S3 server.
const kindManySessions = "msessions"

// manyPar is how many requests generating kindManySessions keeps in
// flight.
const manyPar = 64

func fillManySessions(ctx context.Context, store *layout.Store, d *dataset) error {
	body := []byte("one of many sessions\n")
	desc, err := store.PutBody(ctx, "b.txt", body, layout.BlobOptions{ContentType: "text/plain; charset=utf-8"})
	if err != nil {
		return err
	}
	return parallelN(ctx, d.N, manyPar, func(ctx context.Context, i int) error {
		id := hsessionID(d.Name, i, d.Hours)
		pos, err := createSession(ctx, store, id)
		if err != nil {
			return err
		}
		return commit(ctx, store, id, &pos, []layout.Descriptor{desc})
	})
}

// hsessionBodySize is the size of each session's b.txt.
const hsessionBodySize = 2048

// hsessionBody is the b.txt of session i: 2 KiB, too large to be inline,
// so that reading it is a blob GET.
func hsessionBody(i int) []byte {
	line := fmt.Sprintf("session %06d of the hour-spread set\n", i)
	return []byte(strings.Repeat(line, hsessionBodySize/len(line)+1)[:hsessionBodySize])
}

// hsessionID is session i of a set spread over hours partitions.
func hsessionID(name string, i, hours int) layout.SessionID {
	id := benchID(name, i)
	hour := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()/3600 + int64(i%hours)
	id[0], id[1], id[2], id[3] = byte(hour>>24), byte(hour>>16), byte(hour>>8), byte(hour)
	return id
}

func fillHourSessions(ctx context.Context, store *layout.Store, d *dataset, plain bool) error {
	return parallel(ctx, d.N, func(ctx context.Context, i int) error {
		id := hsessionID(d.Name, i, d.Hours)
		body := hsessionBody(i)
		if plain {
			if err := writePlain(d.plainDir(), id.String(), "b.txt", body); err != nil {
				return err
			}
		}
		pos, err := createSession(ctx, store, id)
		if err != nil {
			return err
		}
		desc, err := store.PutBody(ctx, "b.txt", body, layout.BlobOptions{ContentType: "text/plain; charset=utf-8"})
		if err != nil {
			return err
		}
		return commit(ctx, store, id, &pos, []layout.Descriptor{desc})
	})
}

// delayProxy is a TCP proxy to the S3 server that holds every byte a
// client sends for delay before passing it on (in order, so a request
// costs one delay and a stream of them is not slowed further), and counts
// the requests by their request lines. Answers come back at once. A TCP
// proxy rather than an HTTP one keeps the server's replies exactly as they
// are (versitygw answers some HEADs with a body, which Go's HTTP proxy
// does not pass on). The count is exact for the read workloads measured
// here; a request body holding " HTTP/1.1\r\n" would be counted too.
type delayProxy struct {
	delay    time.Duration
	target   string
	Endpoint string // http://127.0.0.1:PORT
	reqs     atomic.Int64
	ln       net.Listener
}

func startProxy(target string, delay time.Duration) (*delayProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{delay: delay, target: u.Host, Endpoint: "http://" + ln.Addr().String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p, nil
}

// requestLine ends every HTTP/1.1 request line.
var requestLine = []byte(" HTTP/1.1\r\n")

// chunk is bytes a client sent, with when they arrived.
type chunk struct {
	at  time.Time
	b   []byte
	buf *[]byte // the pooled buffer b is in
}

// proxyBufs are the proxy's read buffers: a fresh 32 KiB buffer per read
// made the proxy's garbage collection a visible share of every request's
// CPU on this two-core machine, which the client and the server pay for.
var proxyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (p *delayProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		var tail []byte // the end of the last chunk, for a line cut in two
		for {
			bp := proxyBufs.Get().(*[]byte)
			buf := *bp
			n, err := c.Read(buf)
			if n == 0 {
				proxyBufs.Put(bp)
			}
			if n > 0 {
				seen := append(tail, buf[:n]...)
				p.reqs.Add(int64(bytes.Count(seen, requestLine)))
				tail = append([]byte(nil), seen[max(0, len(seen)-len(requestLine)+1):]...)
				if bytes.HasSuffix(seen, requestLine) {
					tail = nil
				}
				q <- chunk{time.Now(), buf[:n], bp}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		io.Copy(c, s)
		c.Close()
	}()
	for ch := range q {
		if d := time.Until(ch.at.Add(p.delay)); d > 0 {
			time.Sleep(d)
		}
		_, err := s.Write(ch.b)
		proxyBufs.Put(ch.buf)
		if err != nil {
			return
		}
	}
	if tc, ok := s.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

func (p *delayProxy) Close() { p.ln.Close() }

// s3URL is srv's URL of bucket, reached through the proxy.
func (p *delayProxy) s3URL(srv *s3test.Server, bucket string) string {
	return strings.Replace(srv.URL(bucket), url.QueryEscape(srv.Endpoint), url.QueryEscape(p.Endpoint), 1)
}

// rcloneEnv configures rclone's remote "pbench" as the S3 server through
// the proxy (rclone reads its config from the environment).
func (p *delayProxy) rcloneEnv() []string {
	return []string{
		"RCLONE_CONFIG_PBENCH_TYPE=s3", "RCLONE_CONFIG_PBENCH_PROVIDER=Other",
		"RCLONE_CONFIG_PBENCH_ENDPOINT=" + p.Endpoint,
		"RCLONE_CONFIG_PBENCH_ACCESS_KEY_ID=" + s3test.AccessKey,
		"RCLONE_CONFIG_PBENCH_SECRET_ACCESS_KEY=" + s3test.SecretKey,
		"RCLONE_CONFIG_PBENCH_REGION=" + s3test.Region,
		"RCLONE_CONFIG_PBENCH_FORCE_PATH_STYLE=true",
	}
}

// ensurePlainS3 uploads d's plain tree (sessions/<id>/<name>) to the S3
// bucket plain-<name>, the bucket rclone mounts, unless done before.
func ensurePlainS3(ctx context.Context, srv *s3test.Server, d *dataset, markerDir string, logf func(string, ...any)) (string, error) {
	name := "plain-" + d.Name
	marker := filepath.Join(markerDir, "s3-"+name+".complete")
	if b, err := os.ReadFile(marker); err == nil && string(b) == genVersion {
		return name, nil
	}
	logf("uploading the plain tree of %s to versitygw", d.Name)
	if err := recreateS3Bucket(ctx, srv, name); err != nil {
		return "", err
	}
	b, err := openS3Bucket(ctx, srv, name)
	if err != nil {
		return "", err
	}
	defer b.Close()
	var files []string
	root := d.plainDir()
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	err = parallel(ctx, len(files), func(ctx context.Context, i int) error {
		body, err := os.ReadFile(files[i])
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, files[i])
		return b.WriteAll(ctx, filepath.ToSlash(rel), body, &blob.WriterOptions{ContentType: "text/plain"})
	})
	if err != nil {
		return "", fmt.Errorf("upload %s: %w", name, err)
	}
	return name, os.WriteFile(marker, []byte(genVersion), 0o644)
}

// remoteGoal is a row's goal from issue #12: at most secs seconds, or at
// most frac of rclone's time.
type remoteGoal struct {
	secs, frac float64
}

func (g remoteGoal) String() string {
	if g.frac > 0 {
		return fmt.Sprintf("<= %.1fx rclone", g.frac)
	}
	if g.secs > 0 {
		return "<= " + formatValue(unitSeconds, g.secs)
	}
	return ""
}

// runRemote is the remote preset's whole run: data sets on versitygw, the
// proxies, the rows, the table.
func runRemote(ctx context.Context, c *Config) error {
	start := time.Now()
	b := &bench{cfg: c, start: start, results: map[*row]map[string]*cellResult{}, goalOf: map[*row]remoteGoal{}}
	dataDir := filepath.Join(c.DataDir, "data")
	mntDir := filepath.Join(c.DataDir, "mnt")
	b.scratch = filepath.Join(c.DataDir, "scratch-remote")
	for _, d := range []string{dataDir, mntDir, b.scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	defer os.RemoveAll(b.scratch)
	sweepStaleMounts(mntDir, b.logf)
	t, err := prepareTools(ctx, c, b.logf)
	if err != nil {
		return err
	}
	b.tools = t
	if t.versitygw == "" {
		return fmt.Errorf("the remote preset needs versitygw: %s", t.why["s3"])
	}
	// rclone's SDK refuses a CA bundle with its own transport; nothing
	// here uses TLS.
	os.Unsetenv("AWS_CA_BUNDLE")

	ds := sets{
		small:    newDataset(dataDir, kindSmall, c.Files, 0),
		sessions: newDataset(dataDir, kindHourSessions, c.Sessions, 0),
	}
	ds.sessions.Hours = c.Hours
	ds.sessions.Name += fmt.Sprintf("-h%d", c.Hours)
	ds.sessions.Dir += fmt.Sprintf("-h%d", c.Hours)
	vers := []*dataset{}
	for _, n := range c.RemoteVersions {
		vers = append(vers, newDataset(dataDir, kindVersions, n, 0))
	}
	all := append([]*dataset{ds.small, ds.sessions}, vers...)
	for _, d := range all {
		if err := ensureLocal(ctx, d, b.logf); err != nil {
			return err
		}
	}
	var many *dataset
	if c.ManySessions > 0 && (c.Only == nil || c.Only.MatchString(manyRowName(c))) {
		// Only on the S3 server, and only when its row runs: 100,000
		// sessions take minutes to write even there.
		many = newDataset(dataDir, kindManySessions, c.ManySessions, 0)
		many.Hours = c.ManyHours
		many.Name += fmt.Sprintf("-h%d", c.ManyHours)
		many.Dir += fmt.Sprintf("-h%d", c.ManyHours)
	}
	srv, err := startS3(t.versitygw, filepath.Join(dataDir, "s3root"))
	if err != nil {
		return err
	}
	defer srv.Stop()
	b.s3 = srv
	plain := map[*dataset]string{}
	s3sets := all
	if many != nil {
		s3sets = append(s3sets, many)
	}
	for _, d := range s3sets {
		if err := ensureS3(ctx, srv, d, dataDir, b.logf); err != nil {
			return err
		}
	}
	for _, d := range []*dataset{ds.small, ds.sessions} {
		if plain[d], err = ensurePlainS3(ctx, srv, d, dataDir, b.logf); err != nil {
			return err
		}
	}
	far, err := startProxy(srv.Endpoint, c.Latency)
	if err != nil {
		return err
	}
	defer far.Close()
	near, err := startProxy(srv.Endpoint, 5*time.Millisecond)
	if err != nil {
		return err
	}
	defer near.Close()
	b.reqCount = func() int64 { return far.reqs.Load() + near.reqs.Load() }
	b.serverPid = srv.Pid()

	b.buildRemoteRows(ds, vers, many, plain, far, near)
	bins := map[string]string{colPugfs: t.pugfs, colRclone: t.rclone}
	if err := b.measureAll(ctx, mntDir, bins, "alternating pugfs and rclone"); err != nil {
		return err
	}
	b.reportRemote(c.Out, start)
	return nil
}

// buildRemoteRows lays out the remote table.
func (b *bench) buildRemoteRows(ds sets, vers []*dataset, many *dataset, plain map[*dataset]string, far, near *delayProxy) {
	c := b.cfg
	lat := c.Latency.String()
	// freshCacheDir is the emptied --cache-dir of a pugfs target key
	// ("": none, with -pugfs-cache-dir=false).
	freshCacheDir := func(key string) string {
		if !c.CacheDir {
			return ""
		}
		return filepath.Join(b.scratch, "cache", key)
	}

	ro := []string{"--read-only", "--cache-size", fmt.Sprint(c.CacheSize)}
	rcl := []string{"--read-only", "--use-server-modtime"}
	noPeer := "no plain-bucket equivalent (versions are pugmark's)"
	pair := func(g string, d *dataset, p *delayProxy, pugArgs ...string) map[string]*target {
		pug := &target{key: g + "-pugfs", col: colPugfs, src: p.s3URL(b.s3, d.Name), env: b.s3.Env(), args: append(append([]string{}, ro...), pugArgs...)}
		if len(pugArgs) == 0 {
			// Cold is cold: without a cache directory of its own every
			// mount would share the default one, and the runs after the
			// first would find the bodies and summaries there.
			pug.cacheDir = freshCacheDir(pug.key)
		}
		m := map[string]*target{colPugfs: pug}
		if b.tools.rclone != "" && plain[d] != "" {
			m[colRclone] = &target{key: g + "-rclone", col: colRclone, src: "pbench:" + plain[d], env: p.rcloneEnv(), args: rcl}
		}
		return m
	}
	na := map[string]string{colNative: "not measured on the remote preset", colLoopback: "not measured on the remote preset"}
	if b.tools.rclone == "" {
		na[colRclone] = b.tools.why[colRclone]
	}
	naNoPeer := map[string]string{colNative: na[colNative], colLoopback: na[colLoopback], colRclone: noPeer}
	add := func(r *row, g remoteGoal) {
		if c.Only != nil && !c.Only.MatchString(r.name) {
			return
		}
		b.rows = append(b.rows, r)
		b.goalOf[r] = g
	}
	job := func(dir func(root string) string, argv ...string) func(root string, run int) (*job, error) {
		return func(root string, run int) (*job, error) {
			return &job{argv: argv, dir: dir(root)}, nil
		}
	}
	at := func(root string) string { return root }
	sh := func(script string) []string { return []string{"bash", "-c", script} }

	sessions := thousands(ds.sessions.N)
	g := "sessions"
	b.groups = append(b.groups, g)
	add(&row{name: fmt.Sprintf("`ls -l sessions/`, %s sessions over %d hour partitions, cold", sessions, ds.sessions.Hours), group: g, mode: modeCold,
		cells: pair(g, ds.sessions, far), na: na, job: job(at, "ls", "-l", "sessions")}, remoteGoal{secs: 2})
	add(&row{name: "the same `ls -l` again on the same mount", group: g, mode: modeWarm,
		cells: pair(g, ds.sessions, far), na: na, job: job(at, "ls", "-l", "sessions")}, remoteGoal{secs: 0.5})
	add(&row{name: "`cat sessions/*/b.txt` (one 2 KiB file per session), cold", group: g, mode: modeCold,
		cells: pair(g, ds.sessions, far), na: na, job: job(at, sh("cat sessions/*/b.txt >/dev/null")...)}, remoteGoal{secs: 6})
	gc := "cachedir"
	b.groups = append(b.groups, gc)
	cacheDir := filepath.Join(b.scratch, "pugfs-cache-dir")
	cd := pair(gc, ds.sessions, far, "--cache-dir", cacheDir)
	delete(cd, colRclone)
	add(&row{name: fmt.Sprintf("`ls -l sessions/` of %s sessions, fresh mount with the cache directory of an earlier mount", sessions), group: gc, mode: modeFresh,
		cells: cd, na: map[string]string{colNative: na[colNative], colLoopback: na[colLoopback], colRclone: "rclone keeps no listing across mounts here (--vfs-cache-mode off)"},
		job: job(at, "ls", "-l", "sessions"),
		// The check runs on a first mount, which fills the cache
		// directory the timed fresh mounts start from.
		check:  func(root string) (string, string) { return root, "ls -l sessions | wc -l" },
		expect: fmt.Sprint(ds.sessions.N + 1)}, remoteGoal{secs: 0.5})
	// The blobs, manifests and snapshots an earlier mount read are in
	// the cache directory, and the listing vouches for the copies
	// (layout.Keeper): what is left is the walk's LISTs. No goal in the
	// issue; measured to show what a second look at a bucket costs.
	cdCat := pair(gc, ds.sessions, far, "--cache-dir", cacheDir)
	delete(cdCat, colRclone)
	add(&row{name: "`cat sessions/*/b.txt`, fresh mount with the cache directory of an earlier mount", group: gc, mode: modeFresh,
		cells: cdCat, na: map[string]string{colNative: na[colNative], colLoopback: na[colLoopback], colRclone: "rclone keeps no cache across mounts here (--vfs-cache-mode off)"},
		job:    job(at, sh("cat sessions/*/b.txt >/dev/null")...),
		check:  func(root string) (string, string) { return root, "cat sessions/*/b.txt | wc -c" },
		expect: fmt.Sprint(ds.sessions.N * hsessionBodySize)}, remoteGoal{})

	if many != nil {
		gm := "many"
		b.groups = append(b.groups, gm)
		add(&row{name: manyRowName(c), group: gm, mode: modeCold,
			cells: pair(gm, many, far), na: map[string]string{colNative: na[colNative], colLoopback: na[colLoopback],
				colRclone: "not measured: the plain tree of this many sessions is not generated"},
			job:   job(at, sh("ls sessions | wc -l")...),
			check: func(root string) (string, string) { return root, "ls sessions | wc -l" }, expect: fmt.Sprint(many.N)},
			remoteGoal{secs: 10})
	}

	small := thousands(ds.small.N)
	sess := func(root string) string { return filepath.Join(root, ds.small.sessionPath()) }
	g = "session"
	b.groups = append(b.groups, g)
	add(&row{name: "`find SESSION -printf '%s %p\\n'`, " + small + " files of 1-4 KiB, cold", group: g, mode: modeCold,
		cells: pair(g, ds.small, far), na: na, job: job(sess, "find", ".", "-printf", "%s %p\n")}, remoteGoal{frac: 0.1})
	add(&row{name: "`ls -lR SESSION` of the same, cold", group: g, mode: modeCold,
		cells: pair(g, ds.small, far), na: na, job: job(sess, "ls", "-lR", ".")}, remoteGoal{frac: 0.1})
	add(&row{name: "`grep -rl NEEDLE SESSION` of the same, cold", group: g, mode: modeCold,
		cells: pair(g, ds.small, far), na: na, job: job(sess, "grep", "-rl", needle, ".")}, remoteGoal{frac: 0.1})

	g = "history"
	b.groups = append(b.groups, g)
	for _, d := range vers {
		p, l, goal := far, c.Latency, 5.0
		if d.N <= 2000 {
			p, l, goal = near, 5*time.Millisecond, 0.5
		}
		add(&row{name: fmt.Sprintf("first `ls` of a session with %s snapshots, %v per request, fresh mount", thousands(d.N), l), group: g, mode: modeFresh,
			cells: map[string]*target{colPugfs: {key: fmt.Sprintf("%s-pugfs-%d", g, d.N), col: colPugfs, src: p.s3URL(b.s3, d.Name), env: b.s3.Env(), args: ro,
				cacheDir: freshCacheDir(fmt.Sprintf("%s-pugfs-%d", g, d.N))}},
			na: naNoPeer, job: job(at, "ls", d.sessionPath()),
			ideal: float64(d.N) * l.Seconds() / fetchParallel}, remoteGoal{secs: goal})
		if d.N > 2000 {
			// The snapshots an earlier mount read are kept in the cache
			// directory; a listing of the session's snapshots (one LIST
			// per 1,000) vouches for them.
			key := fmt.Sprintf("%s-pugfs-%d-kept", g, d.N)
			hd := filepath.Join(b.scratch, "pugfs-cache-dir-"+key)
			path := d.sessionPath()
			add(&row{name: fmt.Sprintf("first `ls` of a session with %s snapshots, %v per request, fresh mount with the cache directory of an earlier mount", thousands(d.N), l), group: g, mode: modeFresh,
				cells: map[string]*target{colPugfs: {key: key, col: colPugfs, src: p.s3URL(b.s3, d.Name), env: b.s3.Env(), args: append(append([]string{}, ro...), "--cache-dir", hd)}},
				na:    naNoPeer, job: job(at, "ls", path),
				check: func(root string) (string, string) { return root, "ls " + path + " | wc -l" }}, remoteGoal{})
		}
	}
	b.notes = append(b.notes, "Every request goes through a proxy that holds it "+lat+" (5 ms for the 2,000-snapshot row) before versitygw on 127.0.0.1 answers.")
}

// manyRowName is the name of the listing at scale row.
func manyRowName(c *Config) string {
	return fmt.Sprintf("`ls sessions/`, %s sessions over %s hour partitions, cold", thousands(c.ManySessions), thousands(c.ManyHours))
}

// reportRemote prints the remote table: each workload's median time on
// pugfs and rclone, the requests each sent (median per run), pugfs's time
// as a share of rclone's, and the goal.
func (b *bench) reportRemote(w io.Writer, start time.Time) {
	c := b.cfg
	fmt.Fprintf(w, "pugfs-bench -preset remote: %d alternated run(s), %s, %.1f min in all\n\n", c.Runs, time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(start).Minutes())
	fmt.Fprintln(w, "| workload (cold unless said) | pugfs | requests | CPU s: pugfs / server | rclone | requests | pugfs / rclone | goal |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	var fn footnotes
	for _, r := range b.rows {
		pc, pr := b.remoteCell(r, colPugfs, &fn)
		rc, rr := b.remoteCell(r, colRclone, &fn)
		q := b.med(r, colPugfs) / b.med(r, colRclone)
		qs := "—"
		if !math.IsNaN(q) && !math.IsInf(q, 0) {
			qs = fmt.Sprintf("%.2fx", q)
		}
		goal := b.goalOf[r]
		gs := goal.String()
		if m := b.med(r, colPugfs); !math.IsNaN(m) && gs != "" {
			ok := (goal.secs > 0 && m <= goal.secs) || (goal.frac > 0 && !math.IsNaN(q) && q <= goal.frac)
			if ok {
				gs += ": met"
			} else {
				gs += ": missed"
			}
		}
		if r.ideal > 0 && !math.IsNaN(b.med(r, colPugfs)) {
			pc += fmt.Sprintf(" (%.2fx ideal %s)", b.med(r, colPugfs)/r.ideal, formatValue(unitSeconds, r.ideal))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, pc, pr, b.cpuCell(r, colPugfs), rc, rr, qs, gs)
	}
	for _, g := range b.groups {
		var cells []string
		any := false
		for _, col := range []string{colPugfs, colRclone} {
			peak := b.m.groupPeak(g, col)
			if peak == 0 {
				cells = append(cells, "—")
				continue
			}
			any = true
			cells = append(cells, fmt.Sprintf("%.0f MiB", float64(peak)/(1<<20)))
		}
		if any {
			fmt.Fprintf(w, "| peak RSS (VmHWM), %s | %s | | | %s | | | |\n", g, cells[0], cells[1])
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Medians of %d alternated run(s); requests are those the proxy saw during the timed command (median of the runs). The snapshot rows' ideal is N x latency / %d (the snapshot fetch width).\n", c.Runs, fetchParallel)
	fmt.Fprintf(w, "CPU s is the CPU time (medians) the pugfs daemon, and versitygw with the delay proxy, used during the timed command. All three share this machine's %d CPUs: a row whose server CPU divided by %d comes near its goal measures the test server as much as pugfs (a cloud bucket's server costs the client nothing).\n", runtime.NumCPU(), runtime.NumCPU())
	for _, n := range b.notes {
		fmt.Fprintln(w, n)
	}
	for i, s := range fn.list {
		fmt.Fprintf(w, "- [%d] %s\n", i+1, s)
	}
}

// cpuCell is a column's median CPU seconds: its daemon's, then the
// server's and proxy's.
func (b *bench) cpuCell(r *row, col string) string {
	res := b.results[r][col]
	if res == nil || res.err != nil || len(res.fsCPU) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f / %.2f", median(res.fsCPU), median(res.srvCPU))
}

// remoteCell is a column's median time and request count, or why not.
func (b *bench) remoteCell(r *row, col string, fn *footnotes) (string, string) {
	res := b.results[r][col]
	if res == nil {
		return "n/a " + fn.ref(r.na[col]), ""
	}
	if res.err != nil {
		return "error " + fn.ref(colTitle[col]+", "+r.name+": "+res.err.Error()), ""
	}
	m := b.med(r, col)
	if math.IsNaN(m) {
		return "—", ""
	}
	reqs := make([]float64, len(res.reqs))
	for i, n := range res.reqs {
		reqs[i] = float64(n)
	}
	rs := ""
	if len(reqs) > 0 {
		rs = thousands(int(median(reqs)))
	}
	return formatValue(unitSeconds, m), rs
}
