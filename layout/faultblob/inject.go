package faultblob

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/gcerrors"
)

// Op is a kind of backend request. Ops are bit flags: a Rule may name
// several with |, and the zero Op in a Rule means every kind.
type Op uint8

// The request kinds a Rule can target.
const (
	// OpGet is the opening of a reader (NewReader, NewRangeReader,
	// ReadAll, Download). A reader that is re-opened after Seek is a new
	// request. Reads from an open reader are never delayed or failed.
	OpGet Op = 1 << iota
	// OpHead is Attributes (and Exists).
	OpHead
	// OpPut is the upload of an object: the Close of a writer, which is
	// where the inner write commits.
	OpPut
	// OpList is one page of a listing (one driver ListPaged call).
	OpList
	// OpDelete is Delete / DeleteWithOptions.
	OpDelete
	// OpCopy is Copy; rules are matched against the destination key.
	OpCopy

	// OpAll is every kind of request.
	OpAll = OpGet | OpHead | OpPut | OpList | OpDelete | OpCopy
)

// numOps is the number of distinct single-bit Ops.
const numOps = 6

var opNames = [numOps]string{"get", "head", "put", "list", "delete", "copy"}

// singleOps lists each single-bit Op in bit order.
var singleOps = [numOps]Op{OpGet, OpHead, OpPut, OpList, OpDelete, OpCopy}

// String returns the comma-separated names of the kinds in o, e.g.
// "get,list", or "none" for the zero Op.
func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	var parts []string
	for i, op := range singleOps {
		if o&op != 0 {
			parts = append(parts, opNames[i])
		}
	}
	if rest := o &^ OpAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("Op(%#x)", uint8(rest)))
	}
	return strings.Join(parts, ",")
}

// index returns the position of a single-bit Op in singleOps.
func (o Op) index() int { return bits.TrailingZeros8(uint8(o)) }

// ParseOps parses a comma-separated list of op names ("get", "head",
// "put", "list", "delete", "copy", or "all"), as used by the fault_ops URL
// parameter. Names are case-insensitive and surrounding spaces are
// ignored. The empty string yields the zero Op, which a Rule treats as
// every kind.
func ParseOps(s string) (Op, error) {
	var o Op
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if f == "all" {
			o |= OpAll
			continue
		}
		i := slices.Index(opNames[:], f)
		if i < 0 {
			return 0, fmt.Errorf("faultblob: unknown op %q (want get, head, put, list, delete, copy or all)", f)
		}
		o |= singleOps[i]
	}
	return o, nil
}

// Match selects keys. Every condition that is set must hold; the zero
// Match selects every key.
//
// For OpList requests the "key" is the listing's prefix (so a Match with
// Prefix "sessions/" applies to a LIST of "sessions/abc/" but not to a LIST
// of the whole bucket). Staleness (Rule.StaleFor) is the exception: it is
// decided per listed key, see Rule.StaleFor. For OpCopy it is the
// destination key.
type Match struct {
	// Prefix, if set, requires the key to start with it.
	Prefix string
	// Glob, if set, is a path.Match pattern the whole key must match. As in
	// path.Match, '*' and '?' do not match '/'.
	Glob string
	// Regexp, if set, must match somewhere in the key (use ^...$ to anchor).
	Regexp *regexp.Regexp
}

// Matches reports whether key satisfies every condition of m.
func (m Match) Matches(key string) bool {
	if !strings.HasPrefix(key, m.Prefix) {
		return false
	}
	if m.Glob != "" {
		if ok, err := path.Match(m.Glob, key); err != nil || !ok {
			return false
		}
	}
	if m.Regexp != nil && !m.Regexp.MatchString(key) {
		return false
	}
	return true
}

// String describes m, e.g. `prefix="a/" glob="a/*"`, or "any key".
func (m Match) String() string {
	var parts []string
	if m.Prefix != "" {
		parts = append(parts, fmt.Sprintf("prefix=%q", m.Prefix))
	}
	if m.Glob != "" {
		parts = append(parts, fmt.Sprintf("glob=%q", m.Glob))
	}
	if m.Regexp != nil {
		parts = append(parts, fmt.Sprintf("regexp=%q", m.Regexp.String()))
	}
	if len(parts) == 0 {
		return "any key"
	}
	return strings.Join(parts, " ")
}

// Rule describes faults for the requests it matches: requests whose kind
// is in Ops and whose key satisfies Match. Every matching rule applies, in
// the order the rules were added: latencies add up, every stall gate must
// be passed, and the first rule that decides to fail the request supplies
// the error (a failure before the request, from any rule, takes precedence
// over a lost response).
//
// A request is failed when any of FailNth, FailFirst or FailProb says so.
// Call numbers count the requests this rule matched since it was added.
type Rule struct {
	// Ops are the request kinds the rule applies to; zero means all.
	Ops Op
	// Match selects the keys the rule applies to.
	Match Match

	// Latency delays each matching request by this much before it reaches
	// the inner bucket. For OpGet the delay is paid once when the reader
	// is opened, not per Read.
	Latency time.Duration
	// Jitter adds a uniformly distributed extra delay in [0, Jitter],
	// drawn from the Injector's seeded RNG.
	Jitter time.Duration

	// FailProb fails each matching request with this probability (0..1),
	// drawn from the Injector's seeded RNG.
	FailProb float64
	// FailNth fails the Nth matching request (1-based) only.
	FailNth int
	// FailFirst fails the first N matching requests.
	FailFirst int
	// Err is the error a failed request returns. If nil, a transient
	// *Error with code gcerrors.Internal is used. A *Error (see
	// TransientError, PermanentError) is copied per request and gets the
	// request's Op, key and Lost flag filled in; any other error is
	// returned as is and keeps whatever gcerrors code it carries.
	Err error
	// LoseResponse makes a failed request fail after the inner bucket
	// carried it out: a PUT, DELETE or COPY takes effect and the caller
	// still gets the error (a response lost in transit, storage-layout
	// §13.2). For GET, HEAD and LIST the result is simply discarded.
	// Without LoseResponse a failed request never reaches the inner
	// bucket.
	LoseResponse bool

	// Stall, if set, blocks each matching request before it reaches the
	// inner bucket until the gate is released or the request's context is
	// done (the request then fails with the context's error).
	Stall *Gate

	// While, if set, switches the rule on and off: the rule applies only
	// to requests that start while While reports true, and the delay it
	// gave a request (Latency, Jitter) ends early once While reports
	// false (checked every few milliseconds). A test in another process
	// toggles faults this way, e.g. with a file that exists only while
	// the faults should apply (fault_active_file). It does not affect
	// StaleFor. While may be called with the Injector's lock held: it must
	// be cheap, safe for concurrent use, and must not call the Injector.
	While func() bool

	// StaleFor makes listings eventually consistent (storage-layout §2.5,
	// §14.3) for the keys the rule's Match selects. The model is
	// deterministic and per key, driven by the Injector's clock and by the
	// requests that go through this wrapper:
	//
	//   - a key PUT (or copied to) less than StaleFor ago is left out of
	//     listings, whether or not it existed before;
	//   - a key DELETEd less than StaleFor ago is still listed, with the
	//     size, modification time and MD5 it had when it was deleted
	//     (captured with one extra Attributes call before the delete),
	//     unless it had itself been PUT less than StaleFor before its
	//     deletion, in which case it stays unlisted.
	//
	// GET and HEAD stay strongly consistent. With delimiters, a
	// "directory" is listed iff some listed key lies under it. When
	// several rules select a key the longest StaleFor applies. Writes are
	// only tracked while some rule has StaleFor > 0, so install the rule
	// before the writes it should hide. StaleFor requires Ops to include
	// OpList (or be zero); the rule's Match is applied to each listed key,
	// not to the listing's prefix.
	StaleFor time.Duration
}

// Validate reports whether r is well formed: no negative durations or
// counts, FailProb within [0, 1], a valid Glob, and StaleFor only on a
// rule that applies to OpList.
func (r Rule) Validate() error {
	switch {
	case r.Ops&^OpAll != 0:
		return fmt.Errorf("faultblob: rule has unknown op bits %#x", uint8(r.Ops&^OpAll))
	case r.Latency < 0 || r.Jitter < 0 || r.StaleFor < 0:
		return errors.New("faultblob: rule has a negative duration")
	case r.FailNth < 0 || r.FailFirst < 0:
		return errors.New("faultblob: rule has a negative call count")
	case !(r.FailProb >= 0 && r.FailProb <= 1):
		return fmt.Errorf("faultblob: rule FailProb %v is outside [0, 1]", r.FailProb)
	case r.StaleFor > 0 && r.Ops != 0 && r.Ops&OpList == 0:
		return errors.New("faultblob: rule sets StaleFor but does not apply to OpList")
	}
	if r.Match.Glob != "" {
		if _, err := path.Match(r.Match.Glob, ""); err != nil {
			return fmt.Errorf("faultblob: rule glob %q: %w", r.Match.Glob, err)
		}
	}
	return nil
}

// String describes r in one line, e.g.
// "get,list any key: latency 5ms, fail p=0.01".
func (r Rule) String() string {
	ops := r.Ops
	if ops == 0 {
		ops = OpAll
	}
	var parts []string
	if r.Latency > 0 || r.Jitter > 0 {
		s := "latency " + r.Latency.String()
		if r.Jitter > 0 {
			s += "+[0," + r.Jitter.String() + "]"
		}
		parts = append(parts, s)
	}
	var fail []string
	if r.FailProb > 0 {
		fail = append(fail, fmt.Sprintf("p=%g", r.FailProb))
	}
	if r.FailNth > 0 {
		fail = append(fail, fmt.Sprintf("call #%d", r.FailNth))
	}
	if r.FailFirst > 0 {
		fail = append(fail, fmt.Sprintf("first %d calls", r.FailFirst))
	}
	if len(fail) > 0 {
		s := "fail " + strings.Join(fail, ", ")
		if r.LoseResponse {
			s = "lose response " + strings.Join(fail, ", ")
		}
		switch e := r.Err.(type) {
		case nil:
		case *Error:
			kind := "permanent"
			if e.Transient {
				kind = "transient"
			}
			s += fmt.Sprintf(" (%s %v)", kind, e.Code)
		default:
			s += " (" + e.Error() + ")"
		}
		parts = append(parts, s)
	}
	if r.Stall != nil {
		parts = append(parts, "stall")
	}
	if r.While != nil {
		parts = append(parts, "while switched on")
	}
	if r.StaleFor > 0 {
		parts = append(parts, "stale listing "+r.StaleFor.String())
	}
	if len(parts) == 0 {
		parts = append(parts, "no faults")
	}
	return ops.String() + " " + r.Match.String() + ": " + strings.Join(parts, ", ")
}

// Error is an injected fault. Its Code is what gcerrors.Code reports for
// the error the portable *blob.Bucket returns, and errors.As finds the
// *Error in it.
type Error struct {
	// Code is the gcerrors code of the fault.
	Code gcerrors.ErrorCode
	// Transient reports that retrying the request may succeed.
	Transient bool
	// Lost reports that the request was carried out by the inner bucket
	// before the error was returned (Rule.LoseResponse).
	Lost bool
	// Op and Key identify the failed request (Key is the prefix for
	// OpList and the destination for OpCopy).
	Op  Op
	Key string
	// Msg is an optional description.
	Msg string
}

// Error implements error.
func (e *Error) Error() string {
	kind := "permanent"
	if e.Transient {
		kind = "transient"
	}
	s := fmt.Sprintf("faultblob: injected %s %v fault", kind, e.Code)
	if e.Op != 0 {
		s += fmt.Sprintf(" on %v %q", e.Op, e.Key)
	}
	if e.Lost {
		s += " (response lost after the request took effect)"
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// TransientError returns an error template for Rule.Err: a fault with the
// given code that a retry may get past.
func TransientError(code gcerrors.ErrorCode) *Error {
	return &Error{Code: code, Transient: true}
}

// PermanentError returns an error template for Rule.Err: a fault with
// the given code that retrying will not cure.
func PermanentError(code gcerrors.ErrorCode) *Error {
	return &Error{Code: code}
}

// IsInjected reports whether err is (or wraps) a fault injected by this
// package, and returns it.
func IsInjected(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

func (r *Rule) makeErr(op Op, key string) error {
	switch e := r.Err.(type) {
	case nil:
		return &Error{Code: gcerrors.Internal, Transient: true, Lost: r.LoseResponse, Op: op, Key: key}
	case *Error:
		c := *e
		c.Op, c.Key, c.Lost = op, key, r.LoseResponse
		return &c
	default:
		return r.Err
	}
}

// Gate blocks the requests of the rules that name it in Rule.Stall until
// it is released. The zero Gate is ready to use; a Gate must not be copied
// after first use.
type Gate struct {
	init    sync.Once
	ch      chan struct{}
	release sync.Once
	waiting atomic.Int64
	blocked atomic.Int64
}

// NewGate returns a closed (blocking) gate.
func NewGate() *Gate { return new(Gate) }

func (g *Gate) c() chan struct{} {
	g.init.Do(func() { g.ch = make(chan struct{}) })
	return g.ch
}

// Release opens the gate for good: blocked requests proceed and later
// ones pass straight through. It is safe to call more than once.
func (g *Gate) Release() { g.release.Do(func() { close(g.c()) }) }

// Released reports whether Release has been called.
func (g *Gate) Released() bool {
	select {
	case <-g.c():
		return true
	default:
		return false
	}
}

// Waiting returns the number of requests blocked on the gate right now.
// Tests poll it to know that a request has reached the stall.
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }

// Blocked returns the number of requests that have blocked on the gate
// so far (including those still waiting).
func (g *Gate) Blocked() int { return int(g.blocked.Load()) }

// wait blocks until the gate is released or ctx is done. blocked reports
// whether the caller had to wait at all.
func (g *Gate) wait(ctx context.Context) (blocked bool, err error) {
	ch := g.c()
	select {
	case <-ch:
		return false, nil
	default:
	}
	g.blocked.Add(1)
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-ch:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// OpStats counts the requests of one kind.
type OpStats struct {
	// Requests is the number of requests seen.
	Requests int64
	// Delayed is the number of requests given injected latency.
	Delayed int64
	// Stalled is the number of requests that blocked on a Gate.
	Stalled int64
	// Errors is the number of requests failed before reaching the inner
	// bucket.
	Errors int64
	// Lost is the number of requests carried out by the inner bucket whose
	// response was then replaced by an error (Rule.LoseResponse).
	Lost int64
	// Counted is the number of requests on a key (or listing prefix)
	// starting with Options.CountPrefix, faulted or not: how a test tells
	// the requests of one kind of object (blobs under objects/, say) from
	// the rest.
	Counted int64
}

// Faults returns the number of injected faults of every kind.
func (s OpStats) Faults() int64 { return s.Delayed + s.Stalled + s.Errors + s.Lost }

// Stats is a snapshot of an Injector's counters. It is a copy: changing it
// does not affect the Injector, and later requests do not change it.
type Stats struct {
	// Ops has one entry for each single request kind (OpGet ... OpCopy).
	Ops map[Op]OpStats
	// HiddenKeys counts keys left out of LIST responses by staleness.
	HiddenKeys int64
	// GhostKeys counts deleted keys still reported by LIST responses.
	GhostKeys int64
}

// Requests returns the total number of requests of every kind.
func (s Stats) Requests() int64 {
	var n int64
	for _, o := range s.Ops {
		n += o.Requests
	}
	return n
}

// Faults returns the total number of injected faults, listing staleness
// included.
func (s Stats) Faults() int64 {
	n := s.HiddenKeys + s.GhostKeys
	for _, o := range s.Ops {
		n += o.Faults()
	}
	return n
}

type opCounters struct {
	requests, delayed, stalled, errors, lost, counted atomic.Int64
}

// Options configures a new Injector.
type Options struct {
	// Seed seeds the RNG used for FailProb and Jitter; equal seeds and
	// equal request sequences give equal faults.
	Seed uint64
	// Now is the clock used for listing staleness (Rule.StaleFor); nil
	// means time.Now. Tests can pass a fake clock and advance it instead
	// of sleeping. Latency and stalls always use real time.
	Now func() time.Time
	// CountPrefix, if set, makes OpStats.Counted count the requests on
	// keys starting with it. It injects nothing.
	CountPrefix string
}

// RuleID identifies a rule added to an Injector.
type RuleID uint64

type ruleState struct {
	id    RuleID
	r     Rule
	calls int64
}

// record is what the stale-listing model remembers about a key.
type record struct {
	at      time.Time
	deleted bool
	obj     ghost // for deleted keys: what the listing keeps showing
}

type ghost struct {
	size    int64
	modTime time.Time
	md5     []byte
}

// Injector decides which faults to inject into the requests of the
// buckets wrapped with it. It is safe for concurrent use, and its rules can
// be changed at any time; a change affects requests that start after it.
// One Injector may serve several wrapped buckets (they then share rules,
// call counts, stale-listing records and stats).
type Injector struct {
	now         func() time.Time
	countPrefix string
	stats       [numOps]opCounters

	hidden, ghosts atomic.Int64

	mu       sync.Mutex
	rng      *rand.Rand
	rules    []*ruleState
	nextID   RuleID
	maxStale time.Duration
	records  map[string]record
	pruneAt  int
}

// NewInjector returns an Injector with no rules: buckets wrapped with it
// behave exactly like the inner bucket until rules are added.
func NewInjector(opts Options) *Injector {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Injector{
		now:         now,
		countPrefix: opts.CountPrefix,
		rng:         rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		records:     make(map[string]record),
		pruneAt:     minPrune,
	}
}

const minPrune = 1024

// Add installs r after the existing rules and returns its ID. It panics if
// r is invalid (see Rule.Validate): rules are written by tests and
// benchmarks, where a malformed one is a bug.
func (in *Injector) Add(r Rule) RuleID {
	if err := r.Validate(); err != nil {
		panic(err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.nextID++
	in.rules = append(in.rules, &ruleState{id: in.nextID, r: r})
	in.updateStaleLocked()
	return in.nextID
}

// Remove uninstalls the rule with the given ID and reports whether it was
// installed. Requests already delayed or stalled by it are not affected.
func (in *Injector) Remove(id RuleID) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	i := slices.IndexFunc(in.rules, func(rs *ruleState) bool { return rs.id == id })
	if i < 0 {
		return false
	}
	in.rules = slices.Delete(in.rules, i, i+1)
	in.updateStaleLocked()
	return true
}

// SetRules replaces all rules with rules (call counts start afresh) and
// returns their IDs. It panics if any rule is invalid, leaving the old
// rules in place.
func (in *Injector) SetRules(rules ...Rule) []RuleID {
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			panic(err)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rules = in.rules[:0:0]
	ids := make([]RuleID, len(rules))
	for i, r := range rules {
		in.nextID++
		ids[i] = in.nextID
		in.rules = append(in.rules, &ruleState{id: in.nextID, r: r})
	}
	in.updateStaleLocked()
	return ids
}

// Reset removes every rule and forgets every stale-listing record. Stats
// are kept; see ResetStats.
func (in *Injector) Reset() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rules = nil
	in.updateStaleLocked()
	clear(in.records)
}

// Rules returns a copy of the installed rules, in order.
func (in *Injector) Rules() []Rule {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]Rule, len(in.rules))
	for i, rs := range in.rules {
		out[i] = rs.r
	}
	return out
}

// Stall installs a rule that blocks every request of the given kinds on
// keys matching m. It returns the gate, whose Waiting method tells how
// many requests are blocked, and a release function that removes the rule
// and lets the blocked requests proceed. Blocked requests also give up when
// their context is done.
func (in *Injector) Stall(ops Op, m Match) (g *Gate, release func()) {
	g = NewGate()
	id := in.Add(Rule{Ops: ops, Match: m, Stall: g})
	return g, func() {
		in.Remove(id)
		g.Release()
	}
}

// Stats returns a snapshot of the counters.
func (in *Injector) Stats() Stats {
	s := Stats{
		Ops:        make(map[Op]OpStats, numOps),
		HiddenKeys: in.hidden.Load(),
		GhostKeys:  in.ghosts.Load(),
	}
	for i, op := range singleOps {
		c := &in.stats[i]
		s.Ops[op] = OpStats{
			Requests: c.requests.Load(),
			Delayed:  c.delayed.Load(),
			Stalled:  c.stalled.Load(),
			Errors:   c.errors.Load(),
			Lost:     c.lost.Load(),
			Counted:  c.counted.Load(),
		}
	}
	return s
}

// ResetStats sets every counter to zero.
func (in *Injector) ResetStats() {
	for i := range in.stats {
		c := &in.stats[i]
		c.requests.Store(0)
		c.delayed.Store(0)
		c.stalled.Store(0)
		c.errors.Store(0)
		c.lost.Store(0)
		c.counted.Store(0)
	}
	in.hidden.Store(0)
	in.ghosts.Store(0)
}

// CountPrefix is Options.CountPrefix: the prefix of the keys whose
// requests OpStats.Counted counts ("" when none).
func (in *Injector) CountPrefix() string { return in.countPrefix }

func (in *Injector) counters(op Op) *opCounters { return &in.stats[op.index()] }

// plan is the set of faults decided for one request.
type plan struct {
	c     *opCounters
	delay time.Duration
	// cut, when every rule that added delay has a While, holds those
	// conditions: the delay ends once all of them report false. It is
	// nil when some delay cannot be cut short.
	cut        []func() bool
	uncuttable bool
	gates      []*Gate
	err        error // returned instead of doing the request
	lost       error // returned after doing the request
}

// decide counts a request of kind op on key and decides its faults.
func (in *Injector) decide(op Op, key string) plan {
	p := plan{c: in.counters(op)}
	p.c.requests.Add(1)
	if in.countPrefix != "" && strings.HasPrefix(key, in.countPrefix) {
		p.c.counted.Add(1)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, rs := range in.rules {
		r := &rs.r
		if (r.Ops != 0 && r.Ops&op == 0) || !r.Match.Matches(key) {
			continue
		}
		if r.While != nil && !r.While() {
			continue
		}
		rs.calls++
		if r.Latency > 0 || r.Jitter > 0 {
			p.delay += r.Latency
			if r.Jitter > 0 {
				p.delay += time.Duration(in.rng.Int64N(int64(r.Jitter) + 1))
			}
			if r.While != nil {
				p.cut = append(p.cut, r.While)
			} else {
				p.uncuttable = true
			}
		}
		if r.Stall != nil {
			p.gates = append(p.gates, r.Stall)
		}
		fail := (r.FailNth > 0 && rs.calls == int64(r.FailNth)) || rs.calls <= int64(r.FailFirst)
		if r.FailProb > 0 && in.rng.Float64() < r.FailProb {
			fail = true
		}
		if !fail {
			continue
		}
		if r.LoseResponse {
			if p.lost == nil {
				p.lost = r.makeErr(op, key)
			}
		} else if p.err == nil {
			p.err = r.makeErr(op, key)
		}
	}
	return p
}

// before applies the faults that come before the request reaches the
// inner bucket: latency, stalls, then a pre-request error.
func (p *plan) before(ctx context.Context) error {
	if p.delay > 0 {
		p.c.delayed.Add(1)
		if err := p.sleep(ctx); err != nil {
			return err
		}
	}
	stalled := false
	for _, g := range p.gates {
		blocked, err := g.wait(ctx)
		if blocked && !stalled {
			stalled = true
			p.c.stalled.Add(1)
		}
		if err != nil {
			return err
		}
	}
	if p.err != nil {
		p.c.errors.Add(1)
		return p.err
	}
	return nil
}

// sleep waits out the delay, or less when every rule that added to it
// has been switched off (Rule.While).
func (p *plan) sleep(ctx context.Context) error {
	t := time.NewTimer(p.delay)
	defer t.Stop()
	var tick <-chan time.Time
	if len(p.cut) > 0 && !p.uncuttable {
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if !slices.ContainsFunc(p.cut, func(f func() bool) bool { return f() }) {
				return nil
			}
		}
	}
}

// after returns the lost-response error, if any, once the inner bucket
// has carried out the request successfully.
func (p *plan) after() error {
	if p.lost != nil {
		p.c.lost.Add(1)
		return p.lost
	}
	return nil
}
