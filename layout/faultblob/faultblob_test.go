package faultblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// fixture is a wrapped memblob bucket plus direct access to the inner
// bucket, for setting up and checking state without going through faults.
type fixture struct {
	b     *blob.Bucket // wrapped
	inner *blob.Bucket
	inj   *Injector
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	inner := memblob.OpenBucket(nil)
	inj := NewInjector(opts)
	// The inner bucket is closed by closing the wrapper.
	f := &fixture{b: Wrap(inner, inj), inner: inner, inj: inj}
	t.Cleanup(func() {
		if err := f.b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func (f *fixture) put(t *testing.T, key, body string) {
	t.Helper()
	if err := f.inner.WriteAll(context.Background(), key, []byte(body), nil); err != nil {
		t.Fatalf("inner write %s: %v", key, err)
	}
}

func (f *fixture) exists(t *testing.T, key string) bool {
	t.Helper()
	ok, err := f.inner.Exists(context.Background(), key)
	if err != nil {
		t.Fatalf("inner exists %s: %v", key, err)
	}
	return ok
}

// do issues one request of kind op on key through the wrapper. For list,
// key is the prefix. For copy, key is the destination and "src" the
// source. delete needs the key to exist.
func (f *fixture) do(ctx context.Context, op Op, key string) error {
	switch op {
	case OpGet:
		_, err := f.b.ReadAll(ctx, key)
		return err
	case OpHead:
		_, err := f.b.Attributes(ctx, key)
		return err
	case OpPut:
		return f.b.WriteAll(ctx, key, []byte("body of "+key), nil)
	case OpList:
		_, _, err := f.b.ListPage(ctx, blob.FirstPageToken, 10, &blob.ListOptions{Prefix: key})
		return err
	case OpDelete:
		return f.b.Delete(ctx, key)
	case OpCopy:
		return f.b.Copy(ctx, key, "src", nil)
	}
	panic("bad op")
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// result waits for a request started in a goroutine, failing after 10s.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("request did not finish")
		return nil
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestOpStringAndParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Op
		str     string
		wantErr bool
	}{
		{"get", OpGet, "get", false},
		{"get,list", OpGet | OpList, "get,list", false},
		{" PUT , delete,", OpPut | OpDelete, "put,delete", false},
		{"all", OpAll, "get,head,put,list,delete,copy", false},
		{"", 0, "none", false},
		{"get,frob", 0, "", true},
	}
	for _, tt := range tests {
		got, err := ParseOps(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseOps(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if got != tt.want || got.String() != tt.str {
			t.Errorf("ParseOps(%q) = %v (%q), want %v (%q)", tt.in, uint8(got), got, uint8(tt.want), tt.str)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		m    Match
		key  string
		want bool
	}{
		{Match{}, "anything", true},
		{Match{Prefix: "sessions/"}, "sessions/ab/manifest.json", true},
		{Match{Prefix: "sessions/"}, "objects/sha256:00", false},
		{Match{Glob: "refs/*"}, "refs/main", true},
		{Match{Glob: "refs/*"}, "refs/sessions/main", false}, // * stops at /
		{Match{Regexp: regexp.MustCompile(`/snapshots/`)}, "sessions/ab/snapshots/ff", true},
		{Match{Prefix: "sessions/", Glob: "*/*/manifest.json"}, "sessions/ab/manifest.json", true},
		{Match{Prefix: "sessions/", Glob: "*/*/manifest.json"}, "sessions/ab/snapshots/ff", false},
	}
	for _, tt := range tests {
		if got := tt.m.Matches(tt.key); got != tt.want {
			t.Errorf("%v.Matches(%q) = %v, want %v", tt.m, tt.key, got, tt.want)
		}
	}
}

func TestRuleValidate(t *testing.T) {
	bad := []Rule{
		{Latency: -1},
		{Jitter: -1},
		{FailProb: 1.5},
		{FailProb: -0.1},
		{FailNth: -1},
		{FailFirst: -2},
		{Ops: OpGet, StaleFor: time.Second},
		{Ops: 0x80},
		{Match: Match{Glob: "[unclosed"}},
	}
	for _, r := range bad {
		if r.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", r)
		}
	}
	good := []Rule{{}, {Ops: OpList | OpGet, StaleFor: time.Second}, {StaleFor: time.Second}, {FailProb: 1}}
	for _, r := range good {
		if err := r.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", r, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Add of an invalid rule did not panic")
		}
	}()
	NewInjector(Options{}).Add(Rule{FailProb: 2})
}

// TestFailNth checks, for every op, that exactly the Nth matching request
// fails, with the configured gcerrors code, without reaching the inner
// bucket, and that non-matching keys are left alone.
func TestFailNth(t *testing.T) {
	ctx := context.Background()
	for _, op := range singleOps {
		t.Run(op.String(), func(t *testing.T) {
			f := newFixture(t, Options{})
			f.put(t, "src", "source")
			for i := 1; i <= 5; i++ {
				f.put(t, fmt.Sprintf("k/%d", i), "x")
			}
			f.put(t, "other", "x")
			f.inj.Add(Rule{Ops: op, Match: Match{Prefix: "k/"}, FailNth: 3, Err: PermanentError(gcerrors.PermissionDenied)})
			for i := 1; i <= 5; i++ {
				key := fmt.Sprintf("k/%d", i)
				if op == OpPut || op == OpCopy {
					key = fmt.Sprintf("k/new%d", i) // must not exist before
				}
				err := f.do(ctx, op, key)
				if i != 3 {
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					continue
				}
				if gcerrors.Code(err) != gcerrors.PermissionDenied {
					t.Fatalf("call 3: code %v (%v), want PermissionDenied", gcerrors.Code(err), err)
				}
				fe, ok := IsInjected(err)
				if !ok || fe.Op != op || fe.Key != key || fe.Transient || fe.Lost {
					t.Fatalf("call 3: injected error = %+v, %v", fe, ok)
				}
				// A pre-request fault never reaches the inner bucket.
				switch op {
				case OpPut, OpCopy:
					if f.exists(t, key) {
						t.Errorf("failed %v stored %s anyway", op, key)
					}
				case OpDelete:
					if !f.exists(t, key) {
						t.Errorf("failed delete removed %s anyway", key)
					}
				}
			}
			// A key the rule does not match is never failed.
			if op != OpList {
				if err := f.do(ctx, op, "other"); err != nil && op != OpCopy {
					t.Errorf("unmatched key: %v", err)
				}
			}
			s := f.inj.Stats().Ops[op]
			if s.Errors != 1 || s.Requests < 5 {
				t.Errorf("stats %+v, want 1 error over >= 5 requests", s)
			}
		})
	}
}

func TestFailFirstAndProb(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		rule Rule
		want string // per call: F = fails, . = succeeds
		code gcerrors.ErrorCode
	}{
		{"first2", Rule{Ops: OpHead, FailFirst: 2, Err: TransientError(gcerrors.ResourceExhausted)}, "FF...", gcerrors.ResourceExhausted},
		{"always", Rule{Ops: OpHead, FailProb: 1}, "FFFFF", gcerrors.Internal},
		{"never", Rule{Ops: OpHead, FailProb: 0, Latency: time.Microsecond}, ".....", gcerrors.OK},
		{"other op", Rule{Ops: OpGet, FailFirst: 5}, ".....", gcerrors.OK},
		{"foreign error", Rule{Ops: OpHead, FailNth: 1, Err: io.ErrUnexpectedEOF}, "F....", gcerrors.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Options{})
			f.put(t, "k", "x")
			f.inj.Add(tt.rule)
			var got strings.Builder
			for range len(tt.want) {
				err := f.do(ctx, OpHead, "k")
				if err == nil {
					got.WriteByte('.')
					continue
				}
				got.WriteByte('F')
				if c := gcerrors.Code(err); c != tt.code {
					t.Errorf("code %v (%v), want %v", c, err, tt.code)
				}
				if tt.rule.Err == io.ErrUnexpectedEOF && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("foreign error not preserved: %v", err)
				}
			}
			if got.String() != tt.want {
				t.Errorf("pattern %s, want %s", got.String(), tt.want)
			}
		})
	}
}

// TestSeedDeterminism: equal seeds give equal fault sequences.
func TestSeedDeterminism(t *testing.T) {
	ctx := context.Background()
	pattern := func(seed uint64) string {
		f := newFixture(t, Options{Seed: seed})
		f.put(t, "k", "x")
		f.inj.Add(Rule{Ops: OpHead, FailProb: 0.5, Jitter: time.Microsecond})
		var b strings.Builder
		for range 64 {
			if f.do(ctx, OpHead, "k") != nil {
				b.WriteByte('F')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b, c := pattern(7), pattern(7), pattern(8)
	if a != b {
		t.Errorf("seed 7 gave %s then %s", a, b)
	}
	if !strings.Contains(a, "F") || !strings.Contains(a, ".") {
		t.Errorf("p=0.5 over 64 calls gave %s", a)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave the same 64 draws %s", a)
	}
}

// TestLatency: latency is a lower bound on each request, paid once per
// reader open and not per Read, and honours context cancellation.
func TestLatency(t *testing.T) {
	ctx := context.Background()
	const lat = 30 * time.Millisecond
	f := newFixture(t, Options{})
	f.put(t, "k", "0123456789")
	f.inj.Add(Rule{Ops: OpGet | OpList, Latency: lat, Jitter: 5 * time.Millisecond})

	start := time.Now()
	r, err := f.b.NewReader(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < lat {
		t.Errorf("reader opened after %v, want >= %v", el, lat)
	}
	buf := make([]byte, 1)
	for {
		if _, err := r.Read(buf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := f.do(ctx, OpList, ""); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < lat {
		t.Errorf("list took %v, want >= %v", el, lat)
	}
	if err := f.do(ctx, OpHead, "k"); err != nil {
		t.Fatal(err)
	}
	s := f.inj.Stats()
	if g := s.Ops[OpGet]; g.Requests != 1 || g.Delayed != 1 {
		t.Errorf("get stats %+v after one open and 11 reads, want 1 request, 1 delayed", g)
	}
	if h := s.Ops[OpHead]; h.Requests != 1 || h.Delayed != 0 {
		t.Errorf("head stats %+v, want 1 request, not delayed", h)
	}

	// A delay gives way to the context.
	f.inj.Add(Rule{Ops: OpHead, Latency: time.Hour})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := f.do(cctx, OpHead, "k"); gcerrors.Code(err) != gcerrors.DeadlineExceeded {
		t.Errorf("head under 1h latency with 20ms deadline: %v", err)
	}
}

func TestStall(t *testing.T) {
	ctx := context.Background()
	for _, op := range []Op{OpGet, OpHead, OpPut, OpList, OpDelete, OpCopy} {
		t.Run(op.String()+"/release", func(t *testing.T) {
			f := newFixture(t, Options{})
			f.put(t, "src", "source")
			f.put(t, "s/k", "stalled")
			f.put(t, "other", "x")
			key := "s/k"
			if op == OpPut || op == OpCopy {
				key = "s/new"
			}
			g, release := f.inj.Stall(op, Match{Prefix: "s/"})
			done := make(chan error, 1)
			go func() { done <- f.do(ctx, op, key) }()
			waitFor(t, "request to stall", func() bool { return g.Waiting() == 1 })

			// Other keys flow while one request hangs.
			if op != OpList && op != OpCopy {
				if err := f.do(ctx, op, "other"); err != nil {
					t.Fatalf("unstalled key: %v", err)
				}
			}
			select {
			case err := <-done:
				t.Fatalf("stalled request finished early: %v", err)
			default:
			}
			switch op {
			case OpPut, OpCopy:
				if f.exists(t, key) {
					t.Fatal("stalled write already visible")
				}
			case OpDelete:
				if !f.exists(t, key) {
					t.Fatal("stalled delete already done")
				}
			}
			release()
			if err := result(t, done); err != nil {
				t.Fatalf("released request: %v", err)
			}
			if got := f.exists(t, key); got != (op != OpDelete) {
				t.Errorf("after release: exists(%s) = %v", key, got)
			}
			if s := f.inj.Stats().Ops[op]; s.Stalled != 1 {
				t.Errorf("stats %+v, want 1 stalled", s)
			}
			if len(f.inj.Rules()) != 0 {
				t.Errorf("release left rules %v", f.inj.Rules())
			}
		})
	}

	for _, op := range []Op{OpGet, OpPut} {
		t.Run(op.String()+"/cancel", func(t *testing.T) {
			f := newFixture(t, Options{})
			f.put(t, "k", "x")
			g := NewGate()
			f.inj.Add(Rule{Ops: op, Stall: g})
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			key := "k"
			if op == OpPut {
				key = "new"
			}
			go func() { done <- f.do(cctx, op, key) }()
			waitFor(t, "request to stall", func() bool { return g.Waiting() == 1 })
			cancel()
			if err := result(t, done); gcerrors.Code(err) != gcerrors.Canceled {
				t.Fatalf("cancelled stalled request: code %v (%v), want Canceled", gcerrors.Code(err), err)
			}
			if g.Waiting() != 0 || g.Released() {
				t.Errorf("gate waiting=%d released=%v", g.Waiting(), g.Released())
			}
			if op == OpPut && f.exists(t, key) {
				t.Error("cancelled stalled PUT was stored")
			}
		})
	}
}

// TestLostResponse covers storage-layout §13.2: the PUT commits, the
// caller sees an error, the retry's If-None-Match fails, and the stored
// transaction ID tells the writer the commit was its own.
func TestLostResponse(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	f.inj.Add(Rule{Ops: OpPut, FailNth: 1, LoseResponse: true})
	const key = "sessions/ab/snapshots/fffffffe"
	opts := &blob.WriterOptions{
		IfNotExist:  true,
		ContentType: "application/json",
		Metadata:    map[string]string{"pugmark-transaction-id": "42"},
	}
	err := f.b.WriteAll(ctx, key, []byte(`{"v":1}`), opts)
	fe, ok := IsInjected(err)
	if !ok || !fe.Lost || !fe.Transient || gcerrors.Code(err) != gcerrors.Internal {
		t.Fatalf("lost PUT returned %v (injected %+v)", err, fe)
	}
	got, err := f.b.ReadAll(ctx, key)
	if err != nil || string(got) != `{"v":1}` {
		t.Fatalf("after lost PUT: read %q, %v; want the body", got, err)
	}
	err = f.b.WriteAll(ctx, key, []byte(`{"v":1}`), opts)
	if gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("retry: code %v (%v), want FailedPrecondition", gcerrors.Code(err), err)
	}
	if _, ok := IsInjected(err); ok {
		t.Fatalf("retry's precondition failure claims to be injected: %v", err)
	}
	a, err := f.b.Attributes(ctx, key)
	if err != nil || a.Metadata["pugmark-transaction-id"] != "42" {
		t.Fatalf("attributes %+v, %v", a, err)
	}
	if s := f.inj.Stats().Ops[OpPut]; s.Requests != 2 || s.Lost != 1 || s.Errors != 0 {
		t.Errorf("put stats %+v", s)
	}

	// The same for DELETE: gone, yet an error.
	f.put(t, "d", "x")
	f.inj.Add(Rule{Ops: OpDelete, FailNth: 1, LoseResponse: true})
	if err := f.b.Delete(ctx, "d"); err == nil {
		t.Fatal("lost DELETE returned nil")
	}
	if f.exists(t, "d") {
		t.Fatal("lost DELETE did not delete")
	}
	// A lost GET response: the read happened, the caller gets an error.
	f.inj.Add(Rule{Ops: OpGet, FailNth: 1, LoseResponse: true, Err: TransientError(gcerrors.DeadlineExceeded)})
	if _, err := f.b.ReadAll(ctx, key); gcerrors.Code(err) != gcerrors.DeadlineExceeded {
		t.Fatalf("lost GET: %v", err)
	}
	if s := f.inj.Stats().Ops[OpGet]; s.Lost != 1 {
		t.Errorf("get stats %+v", s)
	}
	// And a lost response to a PUT that fails anyway reports the real error.
	f.inj.Add(Rule{Ops: OpPut, FailProb: 1, LoseResponse: true})
	if err := f.b.WriteAll(ctx, key, []byte("x"), opts); gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("doomed PUT under lost-response rule: %v", err)
	}
}

// TestIfNotExist: the precondition is evaluated by the inner bucket and
// its failure keeps its code, whatever the content-type path.
func TestIfNotExist(t *testing.T) {
	ctx := context.Background()
	for _, ct := range []string{"", "application/octet-stream"} {
		t.Run("ct="+ct, func(t *testing.T) {
			f := newFixture(t, Options{})
			f.inj.Add(Rule{Latency: time.Microsecond}) // a matching rule, no failures
			opts := &blob.WriterOptions{IfNotExist: true, ContentType: ct}
			if err := f.b.WriteAll(ctx, "k", []byte("first"), opts); err != nil {
				t.Fatal(err)
			}
			err := f.b.WriteAll(ctx, "k", []byte("second"), opts)
			if gcerrors.Code(err) != gcerrors.FailedPrecondition {
				t.Fatalf("second create: code %v (%v), want FailedPrecondition", gcerrors.Code(err), err)
			}
			if got, _ := f.inner.ReadAll(ctx, "k"); string(got) != "first" {
				t.Fatalf("body %q after failed create", got)
			}
		})
	}

	// Concurrent creators: exactly one wins.
	f := newFixture(t, Options{})
	f.inj.Add(Rule{Ops: OpPut, Jitter: time.Millisecond})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- f.b.WriteAll(ctx, "race", []byte{byte(i)}, &blob.WriterOptions{IfNotExist: true})
		}()
	}
	wins := 0
	for range n {
		err := <-errs
		switch gcerrors.Code(err) {
		case gcerrors.OK:
			wins++
		case gcerrors.FailedPrecondition:
		default:
			t.Errorf("racing create: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d racing creates won, want 1", wins)
	}
}

func listAll(t *testing.T, b *blob.Bucket, prefix, delim string, pageSize int) []string {
	t.Helper()
	var keys []string
	tok := blob.FirstPageToken
	for len(tok) > 0 {
		objs, next, err := b.ListPage(context.Background(), tok, pageSize, &blob.ListOptions{Prefix: prefix, Delimiter: delim})
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		if pageSize > 0 && len(objs) > pageSize {
			t.Fatalf("page of %d > page size %d", len(objs), pageSize)
		}
		for _, o := range objs {
			k := o.Key
			if o.IsDir {
				k += "(dir)"
			}
			keys = append(keys, k)
		}
		tok = next
	}
	return keys
}

func TestStaleList(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	f := newFixture(t, Options{Now: clk.Now})
	const window = time.Second
	f.inj.Add(Rule{Ops: OpList, Match: Match{Prefix: "a/"}, StaleFor: window})
	f.put(t, "a/old", "old body") // written behind the wrapper's back: never stale

	if err := f.b.WriteAll(ctx, "a/new", []byte("new"), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.b.WriteAll(ctx, "b/new", []byte("new"), nil); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, f.b, "", "", 10); !slices.Equal(got, []string{"a/old", "b/new"}) {
		t.Fatalf("fresh listing %v: a/new should be hidden, b/new (unmatched) not", got)
	}
	// GET and HEAD are strongly consistent (§2.5).
	if _, err := f.b.Attributes(ctx, "a/new"); err != nil {
		t.Fatalf("HEAD of a hidden key: %v", err)
	}
	clk.Advance(window - time.Nanosecond)
	if got := listAll(t, f.b, "a/", "", 10); !slices.Equal(got, []string{"a/old"}) {
		t.Fatalf("listing just inside the window: %v", got)
	}
	clk.Advance(time.Nanosecond)
	if got := listAll(t, f.b, "a/", "", 10); !slices.Equal(got, []string{"a/new", "a/old"}) {
		t.Fatalf("listing after the window: %v", got)
	}

	// Deleted keys linger, with their old attributes.
	if err := f.b.Delete(ctx, "a/old"); err != nil {
		t.Fatal(err)
	}
	objs, _, err := f.b.ListPage(ctx, blob.FirstPageToken, 10, &blob.ListOptions{Prefix: "a/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[1].Key != "a/old" || objs[1].Size != int64(len("old body")) {
		t.Fatalf("listing after delete: %+v", objs)
	}
	if _, err := f.b.ReadAll(ctx, "a/old"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("GET of a ghost: %v", err)
	}
	clk.Advance(window)
	if got := listAll(t, f.b, "a/", "", 10); !slices.Equal(got, []string{"a/new"}) {
		t.Fatalf("listing after the ghost expired: %v", got)
	}

	// A key created and deleted within the window never shows.
	if err := f.b.WriteAll(ctx, "a/brief", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.b.Delete(ctx, "a/brief"); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, f.b, "a/", "", 10); !slices.Equal(got, []string{"a/new"}) {
		t.Fatalf("listing after brief key: %v", got)
	}

	// Directories appear only once something under them is visible.
	if err := f.b.WriteAll(ctx, "a/d1/x", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	f.put(t, "a/d2/x", "x")
	if got := listAll(t, f.b, "a/", "/", 10); !slices.Equal(got, []string{"a/d2/(dir)", "a/new"}) {
		t.Fatalf("delimited listing: %v", got)
	}
	clk.Advance(window)
	if got := listAll(t, f.b, "a/", "/", 10); !slices.Equal(got, []string{"a/d1/(dir)", "a/d2/(dir)", "a/new"}) {
		t.Fatalf("delimited listing after the window: %v", got)
	}

	s := f.inj.Stats()
	if s.HiddenKeys == 0 || s.GhostKeys == 0 {
		t.Errorf("stats hidden=%d ghosts=%d", s.HiddenKeys, s.GhostKeys)
	}
}

// TestStaleLatestSnapshot: the max-keys=1 discovery of §6.3 returns an
// older version while the newest snapshot is hidden; the doomed write at
// the stale version then fails its precondition (§14.3).
func TestStaleLatestSnapshot(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	f := newFixture(t, Options{Now: clk.Now})
	f.inj.Add(Rule{Ops: OpList, StaleFor: 200 * time.Millisecond})
	const dir = "sessions/ab/snapshots/"
	v1, v2 := dir+"fffffffe", dir+"fffffffd" // reverse hex: newer sorts first
	f.put(t, v1, "one")
	ifNew := &blob.WriterOptions{IfNotExist: true}
	if err := f.b.WriteAll(ctx, v2, []byte("two"), ifNew); err != nil {
		t.Fatal(err)
	}
	latest := func() string {
		objs, _, err := f.b.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: dir})
		if err != nil || len(objs) != 1 {
			t.Fatalf("list: %v %v", objs, err)
		}
		return objs[0].Key
	}
	if got := latest(); got != v1 {
		t.Fatalf("latest during window = %s, want stale %s", got, v1)
	}
	if err := f.b.WriteAll(ctx, v2, []byte("mine"), ifNew); gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Fatalf("doomed write: %v", err)
	}
	clk.Advance(200 * time.Millisecond)
	if got := latest(); got != v2 {
		t.Fatalf("latest after window = %s, want %s", got, v2)
	}
}

// TestStaleListingPaths compares the stale path's listing (pagination,
// delimiters, page-token hand-over from the pass-through path) against
// memblob's own over keys the stale view leaves visible.
func TestStaleListingPaths(t *testing.T) {
	ctx := context.Background()
	keys := []string{
		"a", "a-b", "a/", "a/b", "a/b/c", "a/bc", "a/b-c/d", "ab", "b/x/y", "b/x/z", "bab", "c",
		"d/1", "d/2", "d/3", "d/4", "d/abc/5", "dabcd", "e\\f", "e\\g\\h",
	}
	ref := memblob.OpenBucket(nil)
	defer ref.Close()
	for _, k := range keys {
		if err := ref.WriteAll(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, delim := range []string{"", "/", "-", "\\", "abc"} {
		for _, prefix := range []string{"", "a", "a/", "d/"} {
			for _, pageSize := range []int{1, 2, 3, 100} {
				name := fmt.Sprintf("delim=%q/prefix=%q/page=%d", delim, prefix, pageSize)
				t.Run(name, func(t *testing.T) {
					clk := newFakeClock()
					f := newFixture(t, Options{Now: clk.Now})
					for _, k := range keys {
						f.put(t, k, k)
					}
					f.inj.Add(Rule{Ops: OpList, StaleFor: time.Second})
					want := listAll(t, ref, prefix, delim, pageSize)

					// Stale path throughout: a young key and a ghost under
					// the prefix, both invisible in the reference.
					f.put(t, prefix+"zzghost", "x")
					if err := f.b.Delete(ctx, prefix+"zzghost"); err != nil {
						t.Fatal(err)
					}
					if err := f.b.WriteAll(ctx, prefix+"zzhidden/q", []byte("x"), nil); err != nil {
						t.Fatal(err)
					}
					ghostWant := append(slices.Clone(want), prefix+"zzghost")
					if got := listAll(t, f.b, prefix, delim, pageSize); !slices.Equal(got, ghostWant) {
						t.Fatalf("stale path:\n got %q\nwant %q", got, ghostWant)
					}
					clk.Advance(2 * time.Second)
					// Records expired: pass-through path.
					withHidden := listAll(t, f.b, prefix, delim, pageSize)
					if !slices.Equal(withHidden, listAll(t, f.inner, prefix, delim, pageSize)) {
						t.Fatalf("pass-through path differs from inner: %q", withHidden)
					}
					if err := f.b.Delete(ctx, prefix+"zzhidden/q"); err != nil {
						t.Fatal(err)
					}
					clk.Advance(2 * time.Second)

					// Hand-over: first page passes through, then a fresh
					// write switches the rest of the walk to the stale path.
					lopts := &blob.ListOptions{Prefix: prefix, Delimiter: delim}
					objs, tok, err := f.b.ListPage(ctx, blob.FirstPageToken, pageSize, lopts)
					if err != nil {
						t.Fatal(err)
					}
					if err := f.b.WriteAll(ctx, prefix+"zzlate", []byte("x"), nil); err != nil {
						t.Fatal(err)
					}
					var got []string
					for {
						for _, o := range objs {
							k := o.Key
							if o.IsDir {
								k += "(dir)"
							}
							got = append(got, k)
						}
						if len(tok) == 0 {
							break
						}
						if objs, tok, err = f.b.ListPage(ctx, tok, pageSize, lopts); err != nil {
							t.Fatal(err)
						}
					}
					if !slices.Equal(got, want) {
						t.Fatalf("hand-over walk:\n got %q\nwant %q", got, want)
					}
				})
			}
		}
	}

	f := newFixture(t, Options{})
	if _, _, err := f.b.ListPage(ctx, []byte("bogus"), 1, nil); gcerrors.Code(err) != gcerrors.InvalidArgument {
		t.Errorf("bogus page token: %v", err)
	}
}

func TestStats(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	f.put(t, "k", "x")
	f.inj.Add(Rule{Ops: OpHead, FailNth: 2})
	for range 3 {
		_ = f.do(ctx, OpHead, "k")
	}
	s := f.inj.Stats()
	if s.Ops[OpHead] != (OpStats{Requests: 3, Errors: 1}) || s.Requests() != 3 || s.Faults() != 1 {
		t.Fatalf("stats %+v", s)
	}
	s.Ops[OpHead] = OpStats{}
	if f.inj.Stats().Ops[OpHead].Requests != 3 {
		t.Fatal("changing a snapshot changed the Injector")
	}
	if len(f.inj.Stats().Ops) != numOps {
		t.Fatalf("stats have %d ops", len(s.Ops))
	}
	f.inj.ResetStats()
	if n := f.inj.Stats().Requests(); n != 0 {
		t.Fatalf("after reset: %d requests", n)
	}
}

// TestCountPrefix: requests on keys under the count prefix are counted
// per kind, faulted or not, the others only in Requests.
func TestCountPrefix(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{CountPrefix: "objects/"})
	f.put(t, "objects/a", "x")
	f.put(t, "sessions/b", "y")
	f.inj.Add(Rule{Ops: OpGet, FailNth: 1})
	for _, k := range []string{"objects/a", "objects/a", "sessions/b", "objects/a"} {
		_ = f.do(ctx, OpGet, k)
	}
	_ = f.do(ctx, OpList, "objects/")
	_ = f.do(ctx, OpHead, "sessions/b")
	s := f.inj.Stats()
	tests := []struct {
		op            Op
		want, request int64
	}{
		{OpGet, 3, 4},
		{OpList, 1, 1},
		{OpHead, 0, 1},
		{OpPut, 0, 0},
	}
	for _, tt := range tests {
		if o := s.Ops[tt.op]; o.Counted != tt.want || o.Requests != tt.request {
			t.Errorf("%v: counted %d of %d requests, want %d of %d", tt.op, o.Counted, o.Requests, tt.want, tt.request)
		}
	}
	f.inj.ResetStats()
	if n := f.inj.Stats().Ops[OpGet].Counted; n != 0 {
		t.Fatalf("after reset: counted %d", n)
	}
}

// TestConcurrentReconfigure runs traffic against rules that change under
// it; -race checks the locking, the counts check nothing was lost.
func TestConcurrentReconfigure(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{Seed: 3})
	f.put(t, "src", "x")
	const workers, perWorker = 4, 100
	stop := make(chan struct{})
	var cfg sync.WaitGroup
	cfg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := f.inj.Add(Rule{FailProb: 0.2, Jitter: time.Microsecond})
			f.inj.Add(Rule{Ops: OpList, StaleFor: time.Millisecond})
			_ = f.inj.Stats()
			f.inj.Remove(id)
			if i%10 == 0 {
				f.inj.SetRules(Rule{Ops: OpPut, FailProb: 0.5, LoseResponse: true})
			}
			if i%25 == 0 {
				f.inj.Reset()
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("w%d/%d", w, i%5)
				op := singleOps[i%numOps]
				if op == OpDelete {
					f.put(t, key, "x")
				}
				_ = f.do(ctx, op, key)
			}
		})
	}
	wg.Wait()
	close(stop)
	cfg.Wait()
	if n := f.inj.Stats().Requests(); n != workers*perWorker {
		t.Errorf("counted %d requests, want %d", n, workers*perWorker)
	}
}

// hookTarget stands in for a driver-specific request type (such as S3's
// upload input) that callers reach through a Before* hook's As.
type hookTarget struct{ IfMatch string }

// hookErr is a driver-specific error type.
type hookErr struct{}

func (*hookErr) Error() string { return "hook driver says no" }

// TestHooksReachInnerDriver: hooks given to the wrapper run against the
// inner driver's own request objects, so driver-specific options (an S3
// If-Match through BeforeWrite, say) take effect, and the inner driver's
// error types stay reachable through ErrorAs.
func TestHooksReachInnerDriver(t *testing.T) {
	ctx := context.Background()
	hd := &hookDriver{Bucket: newDriver(memblob.OpenBucket(nil), nil), seen: map[string]string{}}
	inj := NewInjector(Options{})
	inj.Add(Rule{Latency: time.Microsecond})
	b := Wrap(blob.NewBucket(hd), inj)
	defer b.Close()

	hook := func(tag string) func(func(any) bool) error {
		return func(as func(any) bool) error {
			var ht *hookTarget
			if !as(&ht) {
				return fmt.Errorf("%s hook: As(**hookTarget) failed", tag)
			}
			ht.IfMatch = "etag-" + tag
			return nil
		}
	}
	if err := b.WriteAll(ctx, "k", []byte("x"), &blob.WriterOptions{BeforeWrite: hook("write")}); err != nil {
		t.Fatal(err)
	}
	r, err := b.NewReader(ctx, "k", &blob.ReaderOptions{BeforeRead: hook("read")})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, _, err := b.ListPage(ctx, blob.FirstPageToken, 5, &blob.ListOptions{BeforeList: hook("list")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Copy(ctx, "k2", "k", &blob.CopyOptions{BeforeCopy: hook("copy")}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteWithOptions(ctx, "k2", &blob.DeleteOptions{BeforeDelete: hook("delete")}); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"write", "read", "list", "copy", "delete"} {
		if got := hd.get(tag); got != "etag-"+tag {
			t.Errorf("inner driver saw %s option %q, want %q", tag, got, "etag-"+tag)
		}
	}

	var ht *hookTarget
	if !b.As(&ht) {
		t.Error("Bucket.As did not reach the inner driver")
	}
	_, err = b.Attributes(ctx, "teapot")
	if gcerrors.Code(err) != gcerrors.FailedPrecondition {
		t.Errorf("inner driver error code %v (%v), want FailedPrecondition", gcerrors.Code(err), err)
	}
	var he *hookErr
	if !b.ErrorAs(err, &he) {
		t.Errorf("ErrorAs did not reach the inner driver's error type: %v", err)
	}
}

func TestGateZeroValue(t *testing.T) {
	var g Gate
	if g.Released() || g.Waiting() != 0 {
		t.Fatal("zero gate not closed and idle")
	}
	g.Release()
	g.Release()
	if blocked, err := g.wait(context.Background()); blocked || err != nil || !g.Released() {
		t.Fatalf("released gate: blocked=%v err=%v", blocked, err)
	}
	if !bytes.Contains([]byte(Rule{Stall: &g, Ops: OpGet}.String()), []byte("stall")) {
		t.Error("rule string does not mention the stall")
	}
}

// hookDriver is a complete driver (the wrapper over memblob) that, like a
// real cloud driver, hands its own request objects to the Before* hooks
// and records what the hooks set.
type hookDriver struct {
	driver.Bucket
	mu   sync.Mutex
	seen map[string]string
}

func (d *hookDriver) run(tag string, hook func(func(any) bool) error) error {
	if hook == nil {
		return nil
	}
	ht := &hookTarget{}
	err := hook(func(i any) bool {
		p, ok := i.(**hookTarget)
		if ok {
			*p = ht
		}
		return ok
	})
	d.mu.Lock()
	d.seen[tag] = ht.IfMatch
	d.mu.Unlock()
	return err
}

func (d *hookDriver) get(tag string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[tag]
}

func (d *hookDriver) NewTypedWriter(ctx context.Context, key, ct string, opts *driver.WriterOptions) (driver.Writer, error) {
	if err := d.run("write", opts.BeforeWrite); err != nil {
		return nil, err
	}
	o := *opts
	o.BeforeWrite = nil
	return d.Bucket.NewTypedWriter(ctx, key, ct, &o)
}

func (d *hookDriver) NewRangeReader(ctx context.Context, key string, off, n int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	if err := d.run("read", opts.BeforeRead); err != nil {
		return nil, err
	}
	return d.Bucket.NewRangeReader(ctx, key, off, n, &driver.ReaderOptions{})
}

func (d *hookDriver) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	if err := d.run("list", opts.BeforeList); err != nil {
		return nil, err
	}
	o := *opts
	o.BeforeList = nil
	return d.Bucket.ListPaged(ctx, &o)
}

func (d *hookDriver) Copy(ctx context.Context, dst, src string, opts *driver.CopyOptions) error {
	if err := d.run("copy", opts.BeforeCopy); err != nil {
		return err
	}
	return d.Bucket.Copy(ctx, dst, src, &driver.CopyOptions{})
}

func (d *hookDriver) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	if err := d.run("delete", opts.BeforeDelete); err != nil {
		return err
	}
	return d.Bucket.Delete(ctx, key, &driver.DeleteOptions{})
}

func (d *hookDriver) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	if key == "teapot" {
		return nil, &hookErr{}
	}
	return d.Bucket.Attributes(ctx, key)
}

func (d *hookDriver) ErrorCode(err error) gcerrors.ErrorCode {
	var he *hookErr
	if errors.As(err, &he) {
		return gcerrors.FailedPrecondition
	}
	return d.Bucket.ErrorCode(err)
}

func (d *hookDriver) ErrorAs(err error, i any) bool {
	if p, ok := i.(**hookErr); ok {
		return errors.As(err, p)
	}
	return d.Bucket.ErrorAs(err, i)
}

func (d *hookDriver) As(i any) bool {
	if p, ok := i.(**hookTarget); ok {
		*p = &hookTarget{}
		return true
	}
	return d.Bucket.As(i)
}

// TestStaleRecordsPruned: records of writes older than every window are
// dropped, and removing the stale rule forgets everything.
func TestStaleRecordsPruned(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	f := newFixture(t, Options{Now: clk.Now})
	id := f.inj.Add(Rule{Ops: OpList, StaleFor: time.Second})
	n := func() int {
		f.inj.mu.Lock()
		defer f.inj.mu.Unlock()
		return len(f.inj.records)
	}
	for i := range minPrune - 1 {
		if err := f.b.WriteAll(ctx, fmt.Sprintf("k%d", i), nil, &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := n(); got != minPrune-1 {
		t.Fatalf("%d records, want %d", got, minPrune-1)
	}
	clk.Advance(time.Second)
	if err := f.b.WriteAll(ctx, "last", nil, &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	if got := n(); got != 1 {
		t.Fatalf("%d records after pruning, want 1", got)
	}
	f.inj.Remove(id)
	if got := n(); got != 0 {
		t.Fatalf("%d records without a stale rule", got)
	}
	// Untracked while no rule asks for staleness.
	f.inj.Add(Rule{Ops: OpGet, Latency: time.Microsecond})
	if err := f.b.WriteAll(ctx, "untracked", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := n(); got != 0 {
		t.Fatalf("%d records without a stale rule", got)
	}
}
