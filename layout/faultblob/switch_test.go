package faultblob

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// The stall and switch parameters exist so that a test can stall or fail
// the requests of a process it only talks to through a URL (a pugfs mount)
// and then end the faults without sleeping.

func TestParseStallParams(t *testing.T) {
	q, _ := url.ParseQuery("fault_stall_prefix=sessions/a/&fault_stall=3s&fault_active_file=/tmp/x")
	p, err := ParseParams(q)
	if err != nil {
		t.Fatal(err)
	}
	want := Params{StallPrefix: "sessions/a/", Stall: 3 * time.Second, ActiveFile: "/tmp/x"}
	if p != want {
		t.Fatalf("ParseParams = %+v, want %+v", p, want)
	}
	rules := p.Rules()
	if len(rules) != 1 || rules[0].Match.Prefix != "sessions/a/" || rules[0].Latency != 3*time.Second || rules[0].While == nil || rules[0].Ops != 0 {
		t.Fatalf("rules %+v", rules)
	}
	if s := p.String(); !strings.Contains(s, "only while /tmp/x exists") || !strings.Contains(s, "while switched on") {
		t.Errorf("description %q", s)
	}
	q, _ = url.ParseQuery("fault_stall_prefix=x/")
	if p, _ := ParseParams(q); p.Rules()[0].Latency != DefaultStall {
		t.Errorf("default stall %v", p.Rules()[0].Latency)
	}
	for _, bad := range []string{"fault_stall_prefix=", "fault_active_file=", "fault_stall=-1s"} {
		q, _ := url.ParseQuery(bad)
		if _, err := ParseParams(q); err == nil {
			t.Errorf("ParseParams(%s) accepted", bad)
		}
	}
}

// TestActiveFileSwitchesFaults: faults apply only while the file exists.
// Without the While check the third write fails too.
func TestActiveFileSwitchesFaults(t *testing.T) {
	ctx := context.Background()
	sw := filepath.Join(t.TempDir(), "on")
	b, err := blob.OpenBucket(ctx, "fault+mem://?fault_error_rate=1&fault_error_code=PermissionDenied&fault_active_file="+url.QueryEscape(sw))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.WriteAll(ctx, "k", []byte("1"), nil); err != nil {
		t.Fatalf("write with the switch off: %v", err)
	}
	if err := os.WriteFile(sw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(ctx, "k", []byte("2"), nil); gcerrors.Code(err) != gcerrors.PermissionDenied {
		t.Fatalf("write with the switch on: %v, want PermissionDenied", err)
	}
	os.Remove(sw)
	if err := b.WriteAll(ctx, "k", []byte("3"), nil); err != nil {
		t.Fatalf("write with the switch off again: %v", err)
	}
}

// TestStallPrefixOnlyStallsItsPrefix: a stalled prefix hangs its own
// requests, not others', and removing the active file releases them.
func TestStallPrefixOnlyStallsItsPrefix(t *testing.T) {
	ctx := context.Background()
	sw := filepath.Join(t.TempDir(), "on")
	b, err := blob.OpenBucket(ctx, "fault+mem://?fault_stall_prefix=slow/&fault_stall=1m&fault_active_file="+url.QueryEscape(sw))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var inj *Injector
	b.As(&inj)
	for _, k := range []string{"slow/a", "fast/b"} {
		if err := b.WriteAll(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(sw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	errc := make(chan error, 1)
	go func() {
		_, err := b.ReadAll(ctx, "slow/a")
		done.Store(true)
		errc <- err
	}()
	// Wait until the GET is inside its stall.
	for deadline := time.Now().Add(10 * time.Second); inj.Stats().Ops[OpGet].Delayed == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the GET of slow/a never reached the stall")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if got, err := b.ReadAll(ctx, "fast/b"); err != nil || string(got) != "fast/b" {
		t.Fatalf("GET fast/b: %q, %v", got, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("GET outside the stalled prefix took %v", el)
	}
	if done.Load() {
		t.Fatal("GET of slow/a finished while the stall was on")
	}
	start = time.Now()
	os.Remove(sw)
	if err := <-errc; err != nil {
		t.Fatalf("stalled GET: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("stalled GET took %v after the switch went off, want well under fault_stall=1m", el)
	}
}
