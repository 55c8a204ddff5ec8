package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

func formatValue(u unit, v float64) string {
	switch u {
	case unitMiBps:
		return fmt.Sprintf("%.0f MiB/s", v)
	case unitFilesps:
		return fmt.Sprintf("%.0f files/s", v)
	}
	switch {
	case v < 0.1:
		return fmt.Sprintf("%.3f s", v)
	case v < 10:
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

var colTitle = map[string]string{
	colPugfs:    "pugfs",
	colNative:   "native disk",
	colLoopback: "go-fuse loopback (no passthrough)",
	colRclone:   "rclone mount (--vfs-cache-mode off)",
}

// footnotes numbers the distinct reasons and errors of the table.
type footnotes struct {
	list []string
	seen map[string]int
}

func (f *footnotes) ref(s string) string {
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	n, ok := f.seen[s]
	if !ok {
		f.list = append(f.list, s)
		n = len(f.list)
		f.seen[s] = n
	}
	return fmt.Sprintf("[%d]", n)
}

// med is the median of a cell, NaN when it has no numbers.
func (b *bench) med(r *row, col string) float64 {
	res := b.results[r][col]
	if res == nil || res.err != nil || len(res.vals) == 0 {
		return math.NaN()
	}
	return median(append([]float64(nil), res.vals...))
}

// ratio is the cell's median over the reference: the native disk's median,
// or the row's ideal time.
func (b *bench) ratio(r *row, col string) float64 {
	ref := b.med(r, colNative)
	if r.ideal > 0 {
		ref = r.ideal
	}
	return b.med(r, col) / ref
}

// report prints the table, its notes and the goals.
func (b *bench) report(w io.Writer, header []string) {
	c := b.cfg
	var fn footnotes
	for _, h := range header {
		fmt.Fprintln(w, h)
	}
	fmt.Fprintln(w)
	titles := []string{"workload"}
	for _, col := range columns {
		titles = append(titles, colTitle[col])
	}
	fmt.Fprintln(w, "| "+strings.Join(titles, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(titles)))
	for _, r := range b.rows {
		cells := []string{r.name}
		for _, col := range columns {
			cells = append(cells, b.cell(r, col, &fn))
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
	// Peak RSS of the daemons, per group of rows.
	for _, g := range b.groups {
		var cells []string
		any := false
		for _, col := range columns {
			if col == colNative {
				cells = append(cells, "—")
				continue
			}
			peak := b.m.groupPeak(g, col)
			if peak == 0 {
				cells = append(cells, "—")
				continue
			}
			any = true
			cells = append(cells, fmt.Sprintf("%.0f MiB", float64(peak)/(1<<20)))
		}
		if any {
			fmt.Fprintln(w, "| peak RSS (VmHWM), "+groupTitle(g)+" | "+strings.Join(cells, " | ")+" |")
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Medians of %d alternated run(s). Ratios: x native disk (for seconds lower is better, for MiB/s and files/s higher is better); the version rows are against the ideal N x latency / %d (fetch parallelism).\n", c.Runs, fetchParallel)
	for _, n := range b.notes {
		fmt.Fprintln(w, n)
	}
	for _, r := range b.rows {
		if n := b.floorNote(r); n != "" {
			fmt.Fprintln(w, n)
		}
	}
	for i, s := range fn.list {
		fmt.Fprintf(w, "- [%d] %s\n", i+1, s)
	}
	b.goals(w)
}

func groupTitle(g string) string {
	s3 := strings.HasPrefix(g, "s3-")
	g = strings.TrimPrefix(g, "s3-")
	t := map[string]string{"seq": "blob reads", "small": "small files", "sessions": "sessions listing",
		"versions": "version listing", "write": "writes"}[g]
	if t == "" {
		t = g
	}
	if s3 {
		t = "S3: " + t
	}
	return t
}

func (b *bench) cell(r *row, col string, fn *footnotes) string {
	res := b.results[r][col]
	if res == nil {
		reason := r.na[col]
		if col == colNative && r.ideal > 0 {
			return "ideal " + formatValue(unitSeconds, r.ideal)
		}
		return "n/a " + fn.ref(reason)
	}
	if res.err != nil {
		return "error " + fn.ref(colTitle[col]+", "+r.name+": "+res.err.Error())
	}
	m := b.med(r, col)
	if math.IsNaN(m) {
		return "—"
	}
	s := formatValue(r.unit, m)
	if col != colNative || r.ideal > 0 {
		if q := b.ratio(r, col); !math.IsNaN(q) && !math.IsInf(q, 0) {
			s += fmt.Sprintf(" (%.2fx", q)
			if r.ideal > 0 {
				s += " ideal"
			}
			s += ")"
		}
	}
	if col == colPugfs {
		if q := b.floorRatio(r); !math.IsNaN(q) {
			s += fmt.Sprintf(" (%.2fx floor)", q)
		}
	}
	return s
}

func (b *bench) rowByID(id string) *row {
	for _, r := range b.rows {
		if r.id == id {
			return r
		}
	}
	return nil
}

// goals prints where pugfs stands against the goals.
func (b *bench) goals(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Goals (pugfs on the local driver unless noted):")
	status := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	ratioGoal := func(id, what string, limit float64, atLeast bool) {
		r := b.rowByID(id)
		if r == nil {
			fmt.Fprintf(w, "- %s: not measured\n", what)
			return
		}
		q := b.ratio(r, colPugfs)
		if math.IsNaN(q) {
			fmt.Fprintf(w, "- %s: not measured\n", what)
			return
		}
		ok := q <= limit
		if atLeast {
			ok = q >= limit
		}
		fmt.Fprintf(w, "- %s: %.2fx, %s\n", what, q, status(ok))
	}
	floorGoal := func(id, what string, limit float64) {
		r := b.rowByID(id)
		q := math.NaN()
		if r != nil {
			q = b.floorRatio(r)
		}
		if math.IsNaN(q) {
			fmt.Fprintf(w, "- %s: not measured\n", what)
			return
		}
		fmt.Fprintf(w, "- %s: %.2fx, %s\n", what, q, status(q <= limit))
	}
	floorGoal("seq-cold", "blob read, cold, read-only mount, <= 1.25x floor", 1.25)
	floorGoal("seq-cold-rw", "blob read, cold, read-write mount, <= 1.25x floor", 1.25)
	floorGoal("s3-seq-cold-20ms", "blob read on S3 at 20 ms/request, cold, <= 2x floor", 2)
	ratioGoal("seq-warm", "blob read, warm, read-only mount, >= 0.9x native throughput", 0.9, true)
	ratioGoal("seq-warm-rw", "blob read, warm, read-write mount, >= 0.9x native throughput", 0.9, true)
	ratioGoal("grep-cold", "grep -r, cold, read-only mount, <= 1.5x native time", 1.5, false)
	ratioGoal("grep-warm", "grep -r, warm, read-only mount, <= 2x native time", 2, false)
	ratioGoal("lsR-warm-noxattr", "ls -lR, warm, --xattrs=off, <= 3x native time", 3, false)
	ratioGoal("write-large", "large write durable at close, >= 0.4x the throughput of cp + sync (<= 2.5x its time)", 0.4, true)
	ratioGoal("ver-5ms", "first listing of the versions at 5 ms/request, <= 1.5x ideal", 1.5, false)
	if r1, r8 := b.rowByID("commit-1"), b.rowByID("commit-8"); r1 != nil && r8 != nil {
		q := b.med(r8, colPugfs) / b.med(r1, colPugfs)
		if math.IsNaN(q) {
			fmt.Fprintln(w, "- 8 writers commit >= 3x the files/s of 1 writer: not measured")
		} else {
			fmt.Fprintf(w, "- 8 writers commit >= 3x the files/s of 1 writer: %.2fx, %s\n", q, status(q >= 3))
		}
	}
	var peak int64
	var where string
	for key, v := range b.m.peak {
		if strings.Contains(key, "-pugfs") && v > peak {
			peak, where = v, key
		}
	}
	if peak > 0 {
		limit := b.cfg.CacheSize + 64<<20
		fmt.Fprintf(w, "- pugfs peak RSS <= --cache-size %s + 64 MiB = %s: %.0f MiB (%s), %s\n",
			humanBytes(b.cfg.CacheSize), humanBytes(limit), float64(peak)/(1<<20), where, status(peak <= limit))
	}
}
