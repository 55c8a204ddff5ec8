package faultblob

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/memblob" // the mem scheme behind fault+mem
	"gocloud.dev/gcerrors"
)

func TestParseParams(t *testing.T) {
	tests := []struct {
		query   string
		want    Params
		wantErr string
	}{
		{"", Params{}, ""},
		{"region=us-east-1&nomd5", Params{}, ""},
		{
			"fault_seed=1&fault_ops=get,list&fault_prefix=sessions/&fault_latency=5ms&fault_jitter=1ms" +
				"&fault_error_rate=0.01&fault_error_code=resource_exhausted&fault_lost_put_rate=0.1&fault_stale=200ms",
			Params{
				Seed: 1, Ops: OpGet | OpList, Prefix: "sessions/", Latency: 5 * time.Millisecond,
				Jitter: time.Millisecond, ErrorRate: 0.01, ErrorCode: gcerrors.ResourceExhausted,
				LostPutRate: 0.1, Stale: 200 * time.Millisecond,
			},
			"",
		},
		{"fault_error_code=DeadlineExceeded", Params{ErrorCode: gcerrors.DeadlineExceeded}, ""},
		{"fault_count_prefix=objects/", Params{CountPrefix: "objects/"}, ""},
		{"fault_bogus=1", Params{}, "unknown URL parameter fault_bogus"},
		{"fault_latency=fast", Params{}, "fault_latency"},
		{"fault_latency=-1s", Params{}, "negative"},
		{"fault_error_rate=1.5", Params{}, "[0, 1]"},
		{"fault_lost_put_rate=NaN", Params{}, "[0, 1]"},
		{"fault_ops=get,frob", Params{}, "unknown op"},
		{"fault_seed=-3", Params{}, "fault_seed"},
		{"fault_error_code=OK", Params{}, "unknown error code"},
		{"fault_latency=1ms&fault_latency=2ms", Params{}, "2 times"},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseParams(q)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseParams(%q) error = %v, want one mentioning %q", tt.query, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseParams(%q) = %+v, %v; want %+v", tt.query, got, err, tt.want)
		}
	}
}

func TestParamsRulesAndString(t *testing.T) {
	if s := (Params{Seed: 5}).String(); s != "no faults" {
		t.Errorf("empty params describe as %q", s)
	}
	if (Params{Seed: 5, Ops: OpGet}).Active() {
		t.Error("seed and ops alone are active")
	}
	p := Params{Seed: 1, Ops: OpGet | OpList, Latency: 5 * time.Millisecond, ErrorRate: 0.01, LostPutRate: 0.1, Stale: 200 * time.Millisecond}
	rules := p.Rules()
	if len(rules) != 3 {
		t.Fatalf("rules %v", rules)
	}
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			t.Errorf("rule %v: %v", r, err)
		}
	}
	if r := rules[0]; r.Ops != OpGet|OpList || r.Latency != p.Latency || r.FailProb != 0.01 {
		t.Errorf("latency/error rule %+v", r)
	} else if fe := r.makeErr(OpGet, "k").(*Error); fe.Code != gcerrors.Internal || !fe.Transient {
		t.Errorf("default URL fault %+v, want transient Internal", fe)
	}
	if r := rules[1]; r.Ops != OpPut || !r.LoseResponse || r.FailProb != 0.1 {
		t.Errorf("lost-put rule %+v", r)
	}
	if r := rules[2]; r.Ops != OpList || r.StaleFor != p.Stale {
		t.Errorf("stale rule %+v", r)
	}
	s := p.String()
	for _, want := range []string{"get,list", "latency 5ms", "p=0.01", "transient Internal", "put", "lose response p=0.1", "stale listing 200ms", "seed 1"} {
		if !strings.Contains(s, want) {
			t.Errorf("description %q lacks %q", s, want)
		}
	}
}

func TestSplitURL(t *testing.T) {
	tests := []struct {
		in, inner string
		wantErr   bool
	}{
		{"fault+s3://bkt/some/path?region=us-east-1&fault_latency=5ms&endpoint=http://127.0.0.1:9000", "s3://bkt/some/path?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1", false},
		{"fault+file:///tmp/bucket?fault_stale=1s", "file:///tmp/bucket", false},
		{"fault+mem://", "mem:", false},
		{"fault+gs://b?fault_seed=2&access_id=x", "gs://b?access_id=x", false},
		{"s3://bkt", "", true},
		{"fault+://bkt", "", true},
		{"fault+mem://?fault_nope=1", "", true},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		before := u.String()
		inner, _, err := SplitURL(u)
		if tt.wantErr {
			if err == nil {
				t.Errorf("SplitURL(%s) = %v, want an error", tt.in, inner)
			}
			continue
		}
		if err != nil || inner.String() != tt.inner {
			t.Errorf("SplitURL(%s) = %v, %v; want %s", tt.in, inner, err, tt.inner)
		}
		if u.String() != before {
			t.Errorf("SplitURL modified its argument: %s", u)
		}
	}
}

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, "fault+mem://?fault_seed=1&fault_ops=get&fault_latency=20ms&fault_lost_put_rate=1&fault_error_code=DeadlineExceeded")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var inj *Injector
	if !b.As(&inj) {
		t.Fatal("As(**Injector) failed on a URL-opened bucket")
	}
	if n := len(inj.Rules()); n != 2 {
		t.Fatalf("%d rules, want latency and lost-put", n)
	}
	err = b.WriteAll(ctx, "k", []byte("body"), nil)
	if fe, ok := IsInjected(err); !ok || !fe.Lost || gcerrors.Code(err) != gcerrors.DeadlineExceeded {
		t.Fatalf("PUT with fault_lost_put_rate=1: %v", err)
	}
	start := time.Now()
	got, err := b.ReadAll(ctx, "k")
	if err != nil || string(got) != "body" {
		t.Fatalf("read after lost PUT: %q, %v", got, err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("GET took %v, want >= 20ms", el)
	}
	if _, err := b.Attributes(ctx, "k"); err != nil {
		t.Errorf("HEAD (not in fault_ops): %v", err)
	}
	s := inj.Stats()
	if s.Ops[OpGet].Delayed != 1 || s.Ops[OpHead].Delayed != 0 || s.Ops[OpPut].Lost != 1 {
		t.Errorf("stats %+v", s.Ops)
	}

	// The mux's prefix parameter applies outside the wrapper: rules see
	// full keys. Inner parameters (memblob's nomd5) pass through.
	b2, err := blob.OpenBucket(ctx, "fault+mem://?nomd5&prefix=p/&fault_prefix=p/x&fault_error_rate=1")
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.WriteAll(ctx, "y", []byte("ok"), nil); err != nil {
		t.Errorf("write outside fault_prefix: %v", err)
	}
	if err := b2.WriteAll(ctx, "x1", []byte("no"), nil); gcerrors.Code(err) != gcerrors.Internal {
		t.Errorf("write inside fault_prefix: %v", err)
	}

	for _, bad := range []string{"fault+mem://?fault_latency=soon", "fault+mem://?bogus=1"} {
		if b, err := blob.OpenBucket(ctx, bad); err == nil {
			b.Close()
			t.Errorf("OpenBucket(%s) succeeded", bad)
		}
	}
	for _, s := range Schemes {
		if !blob.DefaultURLMux().ValidBucketScheme(s) {
			t.Errorf("scheme %s not registered", s)
		}
	}
}
