// Package fsck checks a pugmark bucket against storage-layout.txt and
// decisions.md: every rule that can be verified from the bucket alone, by
// listing the four prefixes and reading what they hold.
//
// Check never repairs anything and never writes. It reads every manifest,
// snapshot, memory file and ref once and, unless Options.NoBlobs is set,
// every blob body once (streamed and hashed, never held whole). Findings
// carry the rule they break (a § number of storage-layout.txt, or
// "decisions/<topic>" for a decisions.md choice), the key, a message
// saying what is wrong, and a severity:
//
//   - Error: the bucket breaks a MUST (or a decisions.md table that fills
//     in a MUST); a reader may fail or show wrong data.
//   - Warning: a SHOULD, a legacy or copied-bucket shape (objects without
//     metadata), or something a reader tolerates but a writer should not
//     produce (missing inline data, a name that cannot be a path).
//   - Info: a valid state worth knowing (pending forks, orphan blobs).
//
// A bucket pugfs itself wrote has no Error findings; that is tested.
package fsck

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/blobwrap"
	"github.com/pugmark/pugfs/layout/localblob"
)

// Severity grades a finding.
type Severity int

// The severities, in increasing order.
const (
	Info Severity = iota
	Warning
	Error
)

var severityNames = [...]string{"info", "warning", "error"}

// String returns "info", "warning" or "error".
func (s Severity) String() string {
	if s < 0 || int(s) >= len(severityNames) {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalText makes severities readable in the JSON report.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText is the inverse of MarshalText, so JSON reports round-trip.
func (s *Severity) UnmarshalText(b []byte) error {
	for i, n := range severityNames {
		if string(b) == n {
			*s = Severity(i)
			return nil
		}
	}
	return fmt.Errorf("fsck: unknown severity %q", b)
}

// Finding is one thing wrong (or worth knowing) about the bucket.
type Finding struct {
	// Rule is the section of storage-layout.txt ("§6.1") or decisions.md
	// ("decisions/names") the finding is about; "read" for objects that
	// could not be read at all.
	Rule string `json:"rule"`
	// Key is the object the finding is about, if any.
	Key      string   `json:"key,omitempty"`
	Message  string   `json:"message"`
	Severity Severity `json:"severity"`
}

// String formats a finding as one line: severity, rule, key, message.
func (f Finding) String() string {
	if f.Key == "" {
		return fmt.Sprintf("%-7s %-9s %s", f.Severity, f.Rule, f.Message)
	}
	return fmt.Sprintf("%-7s %-9s %s: %s", f.Severity, f.Rule, f.Key, f.Message)
}

// Options tune Check. The zero value checks everything.
type Options struct {
	// NoBlobs skips every per-blob request: blob bodies are not read
	// (so digests are not verified) and blob headers are not fetched.
	// Blob existence and size are still checked, from the listing.
	NoBlobs bool
	// Parallel bounds concurrent reads (default 8).
	Parallel int
	// MaxPerRule caps the findings listed per rule and severity (default
	// 100; negative means no cap), so that a bucket copied without
	// metadata does not produce a million identical lines. The rest are
	// counted in Report.Suppressed.
	MaxPerRule int
	// Progress, if set, is called every ProgressInterval while Check runs
	// (from another goroutine), for progress output on big buckets.
	Progress func(Progress)
	// ProgressInterval defaults to one second.
	ProgressInterval time.Duration
}

// Progress is a snapshot of Check's counters.
type Progress struct {
	Phase   string
	Listed  int64 // objects listed so far
	Checked int64 // objects read and checked so far
	Bytes   int64 // bytes read so far
	Elapsed time.Duration
}

// Stats counts what Check looked at.
type Stats struct {
	Objects     int64 `json:"objects"`
	Blobs       int64 `json:"blobs"`
	BlobsRead   int64 `json:"blobs_read"`
	Sessions    int64 `json:"sessions"`
	Snapshots   int64 `json:"snapshots"`
	Descriptors int64 `json:"descriptors"`
	Namespaces  int64 `json:"namespaces"`
	MemoryFiles int64 `json:"memory_files"`
	Refs        int64 `json:"refs"`
	BytesRead   int64 `json:"bytes_read"`
}

// Report is the result of Check.
type Report struct {
	// Findings sorted by severity (errors first), then key, then rule.
	Findings []Finding `json:"findings"`
	// Suppressed counts findings left out by Options.MaxPerRule, by
	// "<severity> <rule>".
	Suppressed map[string]int `json:"suppressed,omitempty"`
	Stats      Stats          `json:"stats"`
	Errors     int            `json:"errors"`
	Warnings   int            `json:"warnings"`
	Infos      int            `json:"infos"`
}

// OK reports whether the bucket has no error-level findings.
func (r *Report) OK() bool { return r.Errors == 0 }

// Check validates the bucket behind s. It returns an error only when the
// bucket cannot be checked at all (a listing fails, ctx ends); everything
// wrong with the bucket's content is a finding.
func Check(ctx context.Context, s *layout.Store, opts Options) (*Report, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	if opts.MaxPerRule == 0 {
		opts.MaxPerRule = 100
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	c := &checker{
		s:          s,
		b:          s.Bucket(),
		opts:       opts,
		rep:        &Report{Suppressed: map[string]int{}},
		listed:     map[string]int{},
		blobs:      map[layout.Digest]*blobEntry{},
		sessions:   map[layout.SessionID]*sessionEntry{},
		namespaces: map[string]*nsEntry{},
		start:      time.Now(),
	}
	c.setPhase("listing")
	if opts.Progress != nil {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(opts.ProgressInterval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					opts.Progress(c.progress())
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return c.finish(), nil
}

type checker struct {
	s    *layout.Store
	b    *blob.Bucket
	opts Options

	mu     sync.Mutex
	rep    *Report
	listed map[string]int // findings kept, by "<severity> <rule>"

	// Inventory from the listing; written only by the listing phase,
	// read-only afterwards except for the fields noted.
	blobs      map[layout.Digest]*blobEntry
	sessions   map[layout.SessionID]*sessionEntry
	namespaces map[string]*nsEntry
	refs       []refEntry

	phase                    atomic.Value // string
	nListed, nChecked, nByte atomic.Int64
	start                    time.Time
	stats                    struct {
		blobsRead, snapshots, descriptors, memoryFiles atomic.Int64
	}
}

func (c *checker) setPhase(p string) { c.phase.Store(p) }

func (c *checker) progress() Progress {
	p, _ := c.phase.Load().(string)
	return Progress{Phase: p, Listed: c.nListed.Load(), Checked: c.nChecked.Load(),
		Bytes: c.nByte.Load(), Elapsed: time.Since(c.start)}
}

// add records a finding, subject to the per-rule cap.
func (c *checker) add(sev Severity, rule, key, format string, args ...any) {
	f := Finding{Rule: rule, Key: key, Message: fmt.Sprintf(format, args...), Severity: sev}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch sev {
	case Error:
		c.rep.Errors++
	case Warning:
		c.rep.Warnings++
	default:
		c.rep.Infos++
	}
	k := sev.String() + " " + rule
	if c.opts.MaxPerRule > 0 && c.listed[k] >= c.opts.MaxPerRule {
		c.rep.Suppressed[k]++
		return
	}
	c.listed[k]++
	c.rep.Findings = append(c.rep.Findings, f)
}

func (c *checker) errorf(rule, key, format string, args ...any) {
	c.add(Error, rule, key, format, args...)
}
func (c *checker) warnf(rule, key, format string, args ...any) {
	c.add(Warning, rule, key, format, args...)
}
func (c *checker) infof(rule, key, format string, args ...any) {
	c.add(Info, rule, key, format, args...)
}

func (c *checker) run(ctx context.Context) error {
	if err := c.list(ctx); err != nil {
		return err
	}
	c.setPhase("blobs")
	if err := c.checkBlobs(ctx); err != nil {
		return err
	}
	c.setPhase("manifests")
	if err := c.checkManifests(ctx); err != nil {
		return err
	}
	c.checkParents()
	c.setPhase("snapshots")
	if err := c.checkSnapshots(ctx); err != nil {
		return err
	}
	c.checkForksAndDeliveries()
	c.setPhase("memories")
	if err := c.checkMemories(ctx); err != nil {
		return err
	}
	c.setPhase("refs")
	if err := c.checkRefs(ctx); err != nil {
		return err
	}
	c.checkOrphanBlobs()
	return ctx.Err()
}

func (c *checker) finish() *Report {
	r := c.rep
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Message < b.Message
	})
	if len(r.Suppressed) == 0 {
		r.Suppressed = nil
	}
	r.Stats = Stats{
		Objects:     c.nListed.Load(),
		Blobs:       int64(len(c.blobs)),
		BlobsRead:   c.stats.blobsRead.Load(),
		Sessions:    int64(len(c.sessions)),
		Snapshots:   c.stats.snapshots.Load(),
		Descriptors: c.stats.descriptors.Load(),
		Namespaces:  int64(len(c.namespaces)),
		MemoryFiles: c.stats.memoryFiles.Load(),
		Refs:        int64(len(c.refs)),
		BytesRead:   c.nByte.Load(),
	}
	return r
}

// parallel runs fn(i) for i in [0, n) on at most opts.Parallel goroutines.
func (c *checker) parallel(ctx context.Context, n int, fn func(i int)) error {
	var g errgroup.Group
	g.SetLimit(c.opts.Parallel)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		g.Go(func() error { fn(i); return nil })
	}
	_ = g.Wait()
	return ctx.Err()
}

// retry runs fn up to three times on errors a retry could fix. fsck reads
// the bucket directly (not through layout.Store) because it must see raw
// bodies and headers, so it needs its own small retry loop.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = fn(); err == nil {
			return nil
		}
		switch gcerrors.Code(err) {
		case gcerrors.NotFound, gcerrors.InvalidArgument, gcerrors.PermissionDenied,
			gcerrors.FailedPrecondition, gcerrors.Unimplemented, gcerrors.Canceled:
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
	return err
}

// object is one object read whole.
type object struct {
	key   string
	attrs *blob.Attributes
	body  []byte
}

// read fetches key's attributes and body (at most max bytes). A failure is
// reported as a "read" finding and returns nil.
func (c *checker) read(ctx context.Context, key string, max int64) *object {
	o := &object{key: key}
	err := retry(ctx, func() error {
		var err error
		o.attrs, err = c.b.Attributes(ctx, key)
		return err
	})
	if err == nil && o.attrs.Size > max {
		c.errorf("read", key, "object is %d bytes, more than the %d this kind of object may have", o.attrs.Size, max)
		return nil
	}
	if err == nil {
		err = retry(ctx, func() error {
			var err error
			o.body, err = c.b.ReadAll(ctx, key)
			return err
		})
	}
	if err != nil {
		c.readFailed(ctx, key, err)
		return nil
	}
	c.nChecked.Add(1)
	c.nByte.Add(int64(len(o.body)))
	return o
}

// hasMetadata reports whether the object carries any stored metadata at
// all. A local-directory bucket copied with cp -r has none; such objects
// get one warning each instead of a cascade of header errors.
func hasMetadata(a *blob.Attributes) bool {
	var info localblob.ObjectInfo
	if a.As(&info) {
		return info.HasMetadata
	}
	return a.CacheControl != "" || a.ContentEncoding != "" || len(a.Metadata) > 0
}

// checkHeaders checks the §2.3/§16 headers of a pugmark-written object
// (manifest, snapshot, memory file, ref): Cache-Control and Content-Type,
// and Content-Encoding when want is not "-". It returns false when the
// object has no metadata at all (already reported).
func (c *checker) checkHeaders(o *object, kind, wantCC, wantCT, wantEnc string) bool {
	a := o.attrs
	if !hasMetadata(a) {
		c.warnf("§2.3", o.key, "%s has no stored metadata (a bucket copied without it?); its headers cannot be checked", kind)
		return false
	}
	switch {
	case a.CacheControl == "":
		c.warnf("§16", o.key, "%s has no Cache-Control; want %q", kind, wantCC)
	case normCC(a.CacheControl) != normCC(wantCC):
		c.errorf("§16", o.key, "%s has Cache-Control %q; want %q", kind, a.CacheControl, wantCC)
	}
	if wantCT != "" && !sameMediaType(a.ContentType, wantCT) {
		c.warnf("§16", o.key, "%s has Content-Type %q; want %q", kind, a.ContentType, wantCT)
	}
	if wantEnc != "-" && a.ContentEncoding != wantEnc {
		c.errorf("§15", o.key, "%s has Content-Encoding %q; want %q", kind, a.ContentEncoding, wantEnc)
	}
	return true
}

// normCC normalises a Cache-Control value for comparison: directives
// lowercased, spaces dropped, order kept.
func normCC(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.ToLower(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// sameMediaType compares MIME types ignoring parameters' spacing and case.
func sameMediaType(got, want string) bool {
	norm := func(s string) string {
		parts := strings.Split(s, ";")
		for i, p := range parts {
			parts[i] = strings.ToLower(strings.TrimSpace(p))
		}
		return strings.Join(parts, ";")
	}
	g, w := norm(got), norm(want)
	if g == w {
		return true
	}
	// A want without parameters accepts any parameters.
	if !strings.Contains(w, ";") {
		g, _, _ = strings.Cut(g, ";")
		return g == w
	}
	return false
}

func oneLine(err error) string {
	return strings.ReplaceAll(blobwrap.Text(err.Error()), "\n", "; ")
}
