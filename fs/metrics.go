package fs

import (
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"unicode"
)

// WriteMetrics writes the mount's counters in the Prometheus text format
// (the same numbers as .pugmark/stats).
func (f *FS) WriteMetrics(w io.Writer) error {
	ws := f.w.Stats()
	kept, _ := f.failedStats()
	m := map[string]float64{
		"pugfs_commits_total":          float64(ws.Commits),
		"pugfs_snapshots_total":        float64(ws.Snapshots),
		"pugfs_descriptors_total":      float64(ws.Descriptors),
		"pugfs_commit_errors_total":    float64(ws.Errors),
		"pugfs_commit_conflicts_total": float64(ws.Conflicts),
		"pugfs_failed_commits_kept":    float64(kept),
	}
	addStruct(m, "pugfs_backend_", f.store.Stats())
	addStruct(m, "pugfs_sessions_", f.cache.Stats())
	addStruct(m, "pugfs_blobs_", f.blobs.Stats())
	addStruct(m, "pugfs_kernel_", f.KernelStats())
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if _, err := fmt.Fprintf(w, "%s %g\n", k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

// addStruct adds every numeric field of a stats struct as a metric.
func addStruct(m map[string]float64, prefix string, s any) {
	v := reflect.ValueOf(s)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		fv := v.Field(i)
		var x float64
		switch fv.Kind() {
		case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32:
			if fv.CanInt() {
				x = float64(fv.Int())
			} else {
				x = float64(fv.Uint())
			}
		case reflect.Bool:
			if fv.Bool() {
				x = 1
			}
		default:
			continue
		}
		m[prefix+snake(t.Field(i).Name)] = x
	}
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 && !unicode.IsUpper(rune(s[i-1])) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
