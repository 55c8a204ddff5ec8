package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// fetchParallel is the session cache's snapshot fetch parallelism
// (cache.Options.Parallel's default, which pugfs mount uses): the ideal
// first listing of N versions at latency L is N*L/fetchParallel.
const fetchParallel = 64

// writerScript writes $3 files of exactly 1024 bytes (distinct contents)
// into $1 from each of $2 writer processes: bash builtins only, so the
// loop costs no fork per file.
const writerScript = `d=$1; w=$2; k=$3
body=$(printf '%01018d' 0)
pids=()
for ((j = 0; j < w; j++)); do
	( for ((i = 0; i < k; i++)); do printf '%s%06d' "$body" $((j * k + i)) > "$d/w$j-$i.txt" || exit 1; done ) &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done`

// sets are the data sets of a run.
type sets struct {
	blob, small, sessions, versions *dataset
	// s3small is the small-file set of the S3 rows (-s3-files).
	s3small *dataset
}

func fileURL(dir string) string { return (&url.URL{Scheme: "file", Path: dir}).String() }

// buildRows lays out the table: targets per group and column, and the rows.
func (b *bench) buildRows(ds sets, writeBucket, writePlain string) {
	c := b.cfg
	pugArgs := []string{"--cache-size", strconv.FormatInt(c.CacheSize, 10)}
	ro := append([]string{"--read-only"}, pugArgs...)
	// pug is a pugfs target, with a disk cache of its own (-pugfs-cache-dir).
	pug := func(key, src string, env, args []string) *target {
		t := &target{key: key, col: colPugfs, src: src, env: env, args: args}
		if c.CacheDir {
			t.cacheDir = filepath.Join(b.scratch, "cache", key)
		}
		return t
	}
	// readTargets are the columns of a local read group over d.
	readTargets := func(group string, d *dataset) map[string]*target {
		m := map[string]*target{colPugfs: pug(group+"-pugfs", fileURL(d.bucketDir()), nil, ro)}
		for _, p := range c.Peers {
			if b.tools.why[p] != "" {
				continue
			}
			t := &target{key: group + "-" + p, col: p, src: d.plainDir()}
			switch p {
			case colLoopback:
				t.args = []string{"-ro"}
			case colRclone:
				t.args = []string{"--read-only"}
			}
			m[p] = t
		}
		return m
	}
	peerNA := func(extra map[string]string) map[string]string {
		na := map[string]string{}
		for _, p := range []string{colNative, colLoopback, colRclone} {
			if !wants(c.Peers, p) {
				na[p] = "not requested (-peers)"
			} else if r := b.tools.why[p]; r != "" {
				na[p] = r
			}
		}
		for k, v := range extra {
			na[k] = v
		}
		return na
	}
	s3why := b.tools.why["s3"]
	s3NA := "n/a for S3: the loopback and this rclone mount serve a local directory, not a bucket"
	add := func(r *row) {
		if c.Only != nil && !c.Only.MatchString(r.name) {
			return
		}
		if r.na == nil {
			r.na = map[string]string{}
		}
		b.rows = append(b.rows, r)
	}
	groups := []string{}
	group := func(g string) string { groups = append(groups, g); return g }

	blobSize := humanBytes(c.BlobSize)
	blobPath := filepath.Join(ds.blob.sessionPath(), "blob.bin")
	cat := func(root string, run int) (*job, error) {
		return &job{argv: []string{"cat", blobPath}, dir: root, amount: float64(c.BlobSize)}, nil
	}
	fio := func(jobs int) func(root string, run int) (*job, error) {
		return func(root string, run int) (*job, error) {
			part := c.BlobSize / int64(jobs) / (1 << 20) * (1 << 20)
			return &job{dir: root, amount: float64(part * int64(jobs)), argv: []string{b.tools.fio,
				"--name=seqread", "--filename=" + blobPath, "--readonly", "--rw=read", "--bs=1M",
				"--ioengine=psync", "--invalidate=1", "--numjobs=" + strconv.Itoa(jobs),
				"--size=" + strconv.FormatInt(part, 10), "--offset_increment=" + strconv.FormatInt(part, 10),
				"--group_reporting", "--output=/dev/null"}}, nil
		}
	}
	blobCheck := func(root string) (string, string) {
		return root, fmt.Sprintf("f=%s; stat -c %%s $f; head -c 1048576 $f | cksum; tail -c 1048576 $f | cksum", blobPath)
	}
	lsSessions := func(root string, run int) (*job, error) {
		return &job{argv: []string{"ls", "-l", "sessions"}, dir: root}, nil
	}
	sessionsCheck := func(root string) (string, string) {
		return root, "ls sessions | cksum; cat sessions/" + benchID(ds.sessions.Name, ds.sessions.N-1).String() + "/note.txt"
	}
	lsVersions := func(root string, run int) (*job, error) {
		return &job{argv: []string{"ls", ds.versions.sessionPath()}, dir: root}, nil
	}
	versionsCheck := func(root string) (string, string) {
		return root, "ls " + ds.versions.sessionPath() + " | wc -l; cat " + ds.versions.sessionPath() + "/" + versionName(ds.versions.N)
	}
	versionsExpect := fmt.Sprintf("%d\n%s", min(ds.versions.N, 100), versionBody(ds.versions.N))
	versionsExpect = versionsExpect[:len(versionsExpect)-1]
	fioNA := b.tools.why["fio"]

	// readRows adds the read rows of one group: on the local bucket, or
	// (s3 set) on versitygw, where only pugfs and the native disk apply.
	readRows := func(prefix string, s3 bool) {
		sm := ds.small
		if s3 {
			sm = ds.s3small
		}
		small := thousands(sm.N)
		smallDir := func(root string) string { return filepath.Join(root, sm.sessionPath()) }
		grep := func(root string, run int) (*job, error) {
			return &job{argv: []string{"grep", "-rl", needle, "."}, dir: smallDir(root)}, nil
		}
		find := func(root string, run int) (*job, error) {
			return &job{argv: []string{"find", ".", "-type", "f"}, dir: smallDir(root)}, nil
		}
		lsR := func(root string, run int) (*job, error) {
			return &job{argv: []string{"ls", "-lR", "."}, dir: smallDir(root)}, nil
		}
		smallCheck := func(root string) (string, string) {
			return smallDir(root), "find . -type f | sort | cksum; grep -rl " + needle + " . | sort | cksum; cat $(find . -type f | sort | head -50) | cksum"
		}
		targets := func(g string, d *dataset) map[string]*target {
			m := readTargets(g, d)
			if s3 {
				for _, p := range []string{colLoopback, colRclone} {
					delete(m, p)
				}
				m[colPugfs] = pug(g+"-pugfs", b.s3.URL(d.Name), b.s3.Env(), ro)
			}
			return m
		}
		// with is targets with the pugfs mount given more flags (its own
		// mount, keyed by the flags).
		with := func(g string, d *dataset, key string, extra ...string) map[string]*target {
			m := targets(g, d)
			p := m[colPugfs]
			m[colPugfs] = pug(p.key+"-"+key, p.src, p.env, append(append([]string(nil), p.args...), extra...))
			return m
		}
		na := peerNA(nil)
		if s3 {
			na = peerNA(map[string]string{colLoopback: s3NA, colRclone: s3NA})
		}
		label := func(s string) string {
			if s3 {
				return "S3: " + s
			}
			return s
		}
		id := func(s string) string {
			if s3 {
				return ""
			}
			return s
		}
		g := group(prefix + "seq")
		add(&row{id: id("seq-cold"), name: label("read " + blobSize + " blob (cat), cold"), group: g, unit: unitMiBps, mode: modeCold,
			cells: targets(g, ds.blob), na: na, job: cat, check: blobCheck, floor: blobPath})
		if s3 {
			// Issue #14's remote row: every request 20 ms late (the fault
			// injector in front of versitygw), against the same floor.
			t := targets(g, ds.blob)
			p := t[colPugfs]
			u := "fault+" + p.src + "&fault_latency=20ms"
			t[colPugfs] = pug(p.key+"-20ms", u, p.env, p.args)
			add(&row{id: "s3-seq-cold-20ms", name: label("read " + blobSize + " blob (cat), cold, 20 ms/request"), group: g, unit: unitMiBps, mode: modeCold,
				cells: t, na: na, job: cat, floor: blobPath})
		}
		add(&row{id: id("seq-warm"), name: label("read " + blobSize + " blob (cat), warm"), group: g, unit: unitMiBps, mode: modeWarm,
			cells: targets(g, ds.blob), na: na, job: cat})
		// pugfs serves no byte of a blob before it verified all of it:
		// the first byte costs the whole verify pass (README, Limits).
		add(&row{id: id("ttfb"), name: label("first byte of a never-read " + blobSize + " blob (head -c 1), cold"), group: g, unit: unitSeconds, mode: modeCold,
			cells: targets(g, ds.blob), na: na, job: func(root string, run int) (*job, error) {
				return &job{argv: []string{"head", "-c", "1", blobPath}, dir: root}, nil
			}})
		// The same on a read-write mount asking for passthrough (its
		// --fast-path=auto is off; no-open on the read-only one above).
		rw := func() map[string]*target {
			m := targets(g, ds.blob)
			p := m[colPugfs]
			m[colPugfs] = pug(p.key+"-rw", p.src, p.env, append(slices.Clone(pugArgs), "--fast-path=passthrough"))
			return m
		}
		add(&row{id: id("seq-cold-rw"), name: label("read " + blobSize + " blob (cat), cold, pugfs read-write (passthrough)"), group: g, unit: unitMiBps, mode: modeCold,
			cells: rw(), na: na, job: cat, floor: blobPath})
		add(&row{id: id("seq-warm-rw"), name: label("read " + blobSize + " blob (cat), warm, pugfs read-write (passthrough)"), group: g, unit: unitMiBps, mode: modeWarm,
			cells: rw(), na: na, job: cat})
		for _, n := range []int{1, 4} {
			r := &row{name: label(fmt.Sprintf("fio 1 MiB reads, %d job(s), cold", n)), group: g, unit: unitMiBps, mode: modeCold,
				cells: targets(g, ds.blob), na: na, job: fio(n)}
			if fioNA != "" {
				r.cells, r.na = nil, map[string]string{colPugfs: fioNA, colNative: fioNA, colLoopback: fioNA, colRclone: fioNA}
			}
			add(r)
		}
		g = group(prefix + "small")
		add(&row{id: id("grep-cold"), name: label("grep -rl over " + small + " files, cold"), group: g, unit: unitSeconds, mode: modeCold,
			cells: targets(g, sm), na: na, job: grep, check: smallCheck})
		add(&row{id: id("grep-warm"), name: label("grep -rl over " + small + " files, warm"), group: g, unit: unitSeconds, mode: modeWarm,
			cells: targets(g, sm), na: na, job: grep})
		add(&row{name: label("find over " + small + " files, cold"), group: g, unit: unitSeconds, mode: modeCold,
			cells: targets(g, sm), na: na, job: find})
		add(&row{name: label("find over " + small + " files, warm"), group: g, unit: unitSeconds, mode: modeWarm,
			cells: targets(g, sm), na: na, job: find})
		add(&row{id: id("lsR-warm"), name: label("ls -lR of " + small + " files, warm"), group: g, unit: unitSeconds, mode: modeWarm,
			cells: targets(g, sm), na: na, job: lsR})
		add(&row{id: id("lsR-warm-noxattr"), name: label("ls -lR of " + small + " files, warm, pugfs --xattrs=off"), group: g, unit: unitSeconds, mode: modeWarm,
			cells: with(g, sm, "noxattrs", "--xattrs=off"), na: na, job: lsR})
		g = group(prefix + "sessions")
		add(&row{name: label("ls -l sessions/ (" + thousands(c.Sessions) + " sessions), cold"), group: g, unit: unitSeconds, mode: modeCold,
			cells: targets(g, ds.sessions), na: na, job: lsSessions, check: sessionsCheck})
		add(&row{name: label("ls -l sessions/ (" + thousands(c.Sessions) + " sessions), warm"), group: g, unit: unitSeconds, mode: modeWarm,
			cells: targets(g, ds.sessions), na: na, job: lsSessions})
		g = group(prefix + "versions")
		vname := "first ls of a session with " + thousands(c.Versions) + " versions, fresh mount"
		noPlain := "no plain-directory equivalent (versions are pugmark's)"
		vna := map[string]string{colNative: noPlain, colLoopback: noPlain, colRclone: noPlain}
		pugOnly := func(key, src string, env []string) map[string]*target {
			return map[string]*target{colPugfs: pug(key, src, env, ro)}
		}
		if s3 {
			add(&row{name: label(vname), group: g, unit: unitSeconds, mode: modeFresh,
				cells: pugOnly(g+"-pugfs", b.s3.URL(ds.versions.Name), b.s3.Env()), na: vna, job: lsVersions,
				check: versionsCheck, expect: versionsExpect})
			return
		}
		add(&row{name: vname + ", local driver", group: g, unit: unitSeconds, mode: modeFresh,
			cells: pugOnly(g+"-pugfs", fileURL(ds.versions.bucketDir()), nil), na: vna, job: lsVersions,
			check: versionsCheck, expect: versionsExpect})
		for _, l := range c.Latencies {
			u := "fault+" + fileURL(ds.versions.bucketDir()) + "?fault_latency=" + l.String()
			r := &row{name: fmt.Sprintf("%s, %v/request", vname, l), group: g, unit: unitSeconds, mode: modeFresh,
				cells: pugOnly(g+"-pugfs-"+l.String(), u, nil), na: vna, job: lsVersions,
				ideal: float64(c.Versions) * l.Seconds() / fetchParallel}
			if l == 5*time.Millisecond {
				r.id = "ver-5ms"
			}
			add(r)
		}
	}
	readRows("", false)

	// Writes: a scratch bucket (pugfs, read-write) and a scratch plain
	// directory (the others), fresh session directories per measurement.
	g := group("write")
	wt := func() map[string]*target {
		m := map[string]*target{colPugfs: pug(g+"-pugfs", fileURL(writeBucket), nil, pugArgs)}
		for _, p := range c.Peers {
			if b.tools.why[p] == "" {
				m[p] = &target{key: g + "-" + p, col: p, src: writePlain}
			}
		}
		return m
	}
	writers := func(w int) func(root string, run int) (*job, error) {
		return func(root string, run int) (*job, error) {
			dir := filepath.Join(root, "sessions", freshSession())
			k := c.Commits / w
			return &job{dir: root, setup: [][]string{{"mkdir", dir}}, amount: float64(k * w),
				argv: []string{"bash", "-c", writerScript, "writers", dir, strconv.Itoa(w), strconv.Itoa(k)}}, nil
		}
	}
	add(&row{id: "commit-1", name: "commit " + thousands(c.Commits) + " files of 1 KiB, 1 writer", group: g, unit: unitFilesps, mode: modeOnce,
		cells: wt(), na: peerNA(nil), job: writers(1)})
	add(&row{id: "commit-8", name: "commit " + thousands(c.Commits) + " files of 1 KiB, 8 writers", group: g, unit: unitFilesps, mode: modeOnce,
		cells: wt(), na: peerNA(nil), job: writers(8)})
	add(&row{id: "write-large", name: "write a " + humanBytes(c.WriteSize) + " file (cp from the native disk, then sync it)", group: g, unit: unitMiBps, mode: modeOnce,
		cells: wt(), na: peerNA(nil), job: func(root string, run int) (*job, error) {
			src, err := b.source(run, c.WriteSize)
			if err != nil {
				return nil, err
			}
			dir := filepath.Join(root, "sessions", freshSession())
			dst := filepath.Join(dir, "large.bin")
			// Durable at the end on every column: pugfs commits at close
			// (its sync finds nothing left), a disk needs the fsync.
			return &job{dir: root, setup: [][]string{{"mkdir", dir}}, cleanup: [][]string{{"rm", dst}},
				argv: []string{"sh", "-c", `cp "$1" "$2" && sync "$2"`, "cp-sync", src, dst}, amount: float64(c.WriteSize)}, nil
		}})

	if b.s3 != nil {
		readRows("s3-", true)
	} else if c.Only == nil || c.Only.MatchString("S3: ") {
		na := map[string]string{}
		for _, col := range columns {
			na[col] = s3why
		}
		add(&row{name: "S3: read workloads", group: group("s3"), na: na})
	}
	b.groups = groups
	// Rows without cells keep their n/a reasons for every column.
	for _, r := range b.rows {
		for _, col := range columns {
			if r.cells[col] == nil && r.na[col] == "" {
				r.na[col] = "n/a"
			}
		}
	}
}
