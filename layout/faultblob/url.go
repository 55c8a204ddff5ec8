package faultblob

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// SchemePrefix starts every URL scheme this package opens: "fault+" and
// then the inner bucket's scheme.
const SchemePrefix = "fault+"

// ParamPrefix starts every URL query parameter this package consumes.
const ParamPrefix = "fault_"

// Schemes are the URL schemes registered on blob.DefaultURLMux by this
// package. The inner schemes ("file", "mem", "s3", "gs", "azblob") must be
// registered by their own driver packages.
var Schemes = []string{"fault+file", "fault+mem", "fault+s3", "fault+gs", "fault+azblob"}

func init() {
	for _, s := range Schemes {
		blob.DefaultURLMux().RegisterBucket(s, &URLOpener{})
	}
}

// URLOpener opens "fault+<scheme>://..." URLs: it strips the fault_
// parameters, opens the inner URL with Mux, and wraps the result with an
// Injector built from the parameters (see the package documentation).
type URLOpener struct {
	// Mux opens the inner URL; nil means blob.DefaultURLMux().
	Mux *blob.URLMux
}

// OpenBucketURL implements blob.BucketURLOpener.
func (o *URLOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	inner, p, err := SplitURL(u)
	if err != nil {
		return nil, err
	}
	mux := o.Mux
	if mux == nil {
		mux = blob.DefaultURLMux()
	}
	b, err := mux.OpenBucketURL(ctx, inner)
	if err != nil {
		return nil, fmt.Errorf("faultblob: open inner bucket %s: %w", inner.Redacted(), err)
	}
	return Wrap(b, p.NewInjector()), nil
}

// Params are the faults a URL's fault_ query parameters ask for. The zero
// Params asks for none.
type Params struct {
	// Seed seeds the RNG (fault_seed).
	Seed uint64
	// Ops are the request kinds Latency, Jitter and ErrorRate apply to
	// (fault_ops); zero means all.
	Ops Op
	// Prefix restricts every fault to keys (and listing prefixes, and
	// listed keys for staleness) starting with it (fault_prefix).
	Prefix string
	// Latency is added to each request (fault_latency).
	Latency time.Duration
	// Jitter adds a random [0, Jitter] to each request (fault_jitter).
	Jitter time.Duration
	// ErrorRate is the probability a request fails without reaching the
	// inner bucket (fault_error_rate).
	ErrorRate float64
	// ErrorCode is the gcerrors code of injected errors (fault_error_code);
	// zero (OK) means gcerrors.Internal.
	ErrorCode gcerrors.ErrorCode
	// LostPutRate is the probability a PUT commits but reports an error
	// (fault_lost_put_rate).
	LostPutRate float64
	// Stale is the listing staleness window (fault_stale).
	Stale time.Duration
	// StallPrefix, if set, makes every request (any op) on a key, or a
	// listing prefix, starting with it hang for Stall
	// (fault_stall_prefix). It is independent of Prefix and Ops.
	StallPrefix string
	// Stall is how long each stalled request hangs (fault_stall); zero
	// with a StallPrefix means DefaultStall. With ActiveFile, a stall
	// also ends once the file is removed.
	Stall time.Duration
	// ActiveFile, if set, switches every fault of the URL on and off from
	// outside the process: faults apply only to requests that start while
	// this path exists, and delays and stalls end early when it is
	// removed (fault_active_file). Listing staleness is not switched.
	ActiveFile string
	// CountPrefix makes the injector count the requests on keys starting
	// with it (fault_count_prefix, OpStats.Counted); it injects nothing.
	CountPrefix string
}

// DefaultStall is how long a fault_stall_prefix request hangs when
// fault_stall is not given.
const DefaultStall = time.Minute

// SplitURL splits a "fault+<scheme>://..." URL into the inner bucket's URL
// (scheme without "fault+", fault_ parameters removed, everything else
// kept) and the faults its parameters ask for.
func SplitURL(u *url.URL) (inner *url.URL, p Params, err error) {
	scheme, ok := strings.CutPrefix(u.Scheme, SchemePrefix)
	if !ok || scheme == "" {
		return nil, Params{}, fmt.Errorf("faultblob: URL scheme %q does not start with %q and an inner scheme", u.Scheme, SchemePrefix)
	}
	q := u.Query()
	if p, err = ParseParams(q); err != nil {
		return nil, Params{}, err
	}
	for k := range q {
		if strings.HasPrefix(k, ParamPrefix) {
			q.Del(k)
		}
	}
	c := *u
	c.Scheme = scheme
	c.RawQuery = q.Encode()
	return &c, p, nil
}

// ParseParams reads the fault_ parameters of q (others are ignored). An
// unknown fault_ parameter, a repeated one or a malformed value is an
// error.
func ParseParams(q url.Values) (Params, error) {
	var p Params
	for k, vs := range q {
		if !strings.HasPrefix(k, ParamPrefix) {
			continue
		}
		if len(vs) != 1 {
			return Params{}, fmt.Errorf("faultblob: URL parameter %s given %d times", k, len(vs))
		}
		v := vs[0]
		var err error
		switch strings.TrimPrefix(k, ParamPrefix) {
		case "seed":
			p.Seed, err = strconv.ParseUint(v, 10, 64)
		case "ops":
			p.Ops, err = ParseOps(v)
		case "prefix":
			p.Prefix = v
		case "latency":
			p.Latency, err = parseDuration(v)
		case "jitter":
			p.Jitter, err = parseDuration(v)
		case "error_rate":
			p.ErrorRate, err = parseRate(v)
		case "error_code":
			p.ErrorCode, err = ParseErrorCode(v)
		case "lost_put_rate":
			p.LostPutRate, err = parseRate(v)
		case "stale":
			p.Stale, err = parseDuration(v)
		case "stall_prefix":
			p.StallPrefix = v
			if v == "" {
				err = fmt.Errorf("empty prefix (it would stall every request)")
			}
		case "stall":
			p.Stall, err = parseDuration(v)
		case "count_prefix":
			p.CountPrefix = v
		case "active_file":
			p.ActiveFile = v
			if v == "" {
				err = fmt.Errorf("empty path")
			}
		default:
			return Params{}, fmt.Errorf("faultblob: unknown URL parameter %s", k)
		}
		if err != nil {
			return Params{}, fmt.Errorf("faultblob: URL parameter %s=%q: %w", k, v, err)
		}
	}
	return p, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = fmt.Errorf("negative duration")
	}
	return d, err
}

func parseRate(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && !(f >= 0 && f <= 1) {
		err = fmt.Errorf("not within [0, 1]")
	}
	return f, err
}

// ParseErrorCode parses a gcerrors code name such as "Internal" or
// "resourceexhausted" (case-insensitive, '_' ignored). OK is rejected.
func ParseErrorCode(s string) (gcerrors.ErrorCode, error) {
	want := strings.ToLower(strings.ReplaceAll(s, "_", ""))
	for c := gcerrors.Unknown; c <= gcerrors.DeadlineExceeded; c++ {
		if strings.ToLower(c.String()) == want {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown error code %q", s)
}

// Active reports whether p asks for any fault.
func (p Params) Active() bool { return len(p.Rules()) > 0 }

// Rules returns the rules p stands for, in this order: latency and errors
// on Ops; lost PUT responses; listing staleness; the stall. With an
// ActiveFile every rule but the staleness one is switched by it.
func (p Params) Rules() []Rule {
	m := Match{Prefix: p.Prefix}
	code := p.ErrorCode
	if code == gcerrors.OK {
		code = gcerrors.Internal
	}
	var while func() bool
	if p.ActiveFile != "" {
		path := p.ActiveFile
		while = func() bool {
			_, err := os.Stat(path)
			return err == nil
		}
	}
	var rules []Rule
	if p.Latency > 0 || p.Jitter > 0 || p.ErrorRate > 0 {
		rules = append(rules, Rule{
			Ops: p.Ops, Match: m,
			Latency: p.Latency, Jitter: p.Jitter,
			FailProb: p.ErrorRate, Err: TransientError(code),
			While: while,
		})
	}
	if p.LostPutRate > 0 {
		rules = append(rules, Rule{
			Ops: OpPut, Match: m,
			FailProb: p.LostPutRate, LoseResponse: true, Err: TransientError(code),
			While: while,
		})
	}
	if p.Stale > 0 {
		rules = append(rules, Rule{Ops: OpList, Match: m, StaleFor: p.Stale})
	}
	if p.StallPrefix != "" {
		d := p.Stall
		if d == 0 {
			d = DefaultStall
		}
		rules = append(rules, Rule{Match: Match{Prefix: p.StallPrefix}, Latency: d, While: while})
	}
	return rules
}

// NewInjector returns an Injector seeded with p.Seed and holding p.Rules.
func (p Params) NewInjector() *Injector {
	in := NewInjector(Options{Seed: p.Seed, CountPrefix: p.CountPrefix})
	in.SetRules(p.Rules()...)
	return in
}

// String describes the faults in one line, for logs and the CLI, e.g.
// "get,list any key: latency 5ms, fail p=0.01 (...); seed 1", or
// "no faults".
func (p Params) String() string {
	rules := p.Rules()
	if len(rules) == 0 {
		return "no faults"
	}
	parts := make([]string, 0, len(rules)+1)
	for _, r := range rules {
		parts = append(parts, r.String())
	}
	if p.ActiveFile != "" {
		parts = append(parts, fmt.Sprintf("only while %s exists", p.ActiveFile))
	}
	parts = append(parts, fmt.Sprintf("seed %d", p.Seed))
	return strings.Join(parts, "; ")
}
