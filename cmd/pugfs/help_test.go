package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpOverview: pugfs help lists every command, exec included, on one
// line each.
func TestHelpOverview(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"help"}, &out, &errb); code != 0 {
		t.Fatalf("pugfs help: exit %d, %s", code, errb.String())
	}
	var names []string
	var walk func(cs []*command)
	walk = func(cs []*command) {
		for _, c := range cs {
			if len(c.subs) > 0 {
				walk(c.subs)
				continue
			}
			names = append(names, c.name)
		}
	}
	walk(commands())
	for _, n := range names {
		found := 0
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "  "+n+" ") && len(strings.Fields(strings.TrimPrefix(line, "  "+n))) > 0 {
				found++
			}
		}
		if found != 1 {
			t.Errorf("pugfs help has %d lines for %q:\n%s", found, n, out.String())
		}
	}
	if !strings.Contains(out.String(), "\n  exec ") {
		t.Errorf("pugfs help does not list exec:\n%s", out.String())
	}
}

// TestMountFlagsHelp: every mount flag's help says its default, and
// --cache-size is the memory budget the README describes.
func TestMountFlagsHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"mount", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("pugfs mount --help: exit %d, %s", code, errb.String())
	}
	_, flags, ok := strings.Cut(out.String(), "\nFlags:\n")
	if !ok {
		t.Fatalf("no Flags section:\n%s", out.String())
	}
	flags, _, _ = strings.Cut(flags, "\n\n")
	for _, line := range strings.Split(flags, "\n") {
		if !strings.Contains(line, "default") {
			t.Errorf("flag help without its default: %s", line)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "--cache-size") && (!strings.Contains(line, "memory budget") || !strings.Contains(line, "256MiB")) {
			t.Errorf("--cache-size help does not say it is the memory budget (256MiB): %s", line)
		}
	}
}
