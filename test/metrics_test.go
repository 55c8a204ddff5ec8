package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMetricsEndpoint: --metrics-addr serves Prometheus text whose
// counters move with the work the mount does.
func TestMetricsEndpoint(t *testing.T) {
	bk := openBucket(t, "local")
	m0, _, err := bk.Store.CreateSession(context.Background(), bk.Store.NewRootManifest())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	mnt := mount(t, bk, "--metrics-addr", addr)
	get := func() string {
		var body string
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics endpoint: %v\n%s", err, mnt.Log())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return body
	}
	before := get()
	if !strings.Contains(before, "pugfs_commits_total 0") {
		t.Fatalf("metrics before any write:\n%s", before)
	}
	sh(t, mnt.Dir, "echo x > sessions/"+m0.Session.String()+"/f")
	after := get()
	if !strings.Contains(after, "pugfs_commits_total 1") || !strings.Contains(after, "pugfs_backend_puts ") {
		t.Fatalf("metrics after a write:\n%s", after)
	}
}
