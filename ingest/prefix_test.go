package ingest

import (
	"errors"
	"strings"
	"testing"
)

// Each --ingest-from entry is parsed once; a prefix that is ambiguous or
// would hand out more than it says is refused at mount time.
func TestParsePrefix(t *testing.T) {
	for _, tc := range []struct {
		in      string
		path    string // want, "" = an error
		wantErr string
	}{
		{in: "s3://team-inputs/", path: "/"},
		{in: "s3://team-inputs", path: "/"},
		{in: "s3://team-inputs/in", path: "/in/"},
		{in: "s3://b/in/?region=eu-west-1&endpoint=http://h:9000", path: "/in/"},
		{in: "file:///srv/shared/", path: "/srv/shared/"},
		{in: "file:///srv/shared", path: "/srv/shared/"},
		{in: "file:///", wantErr: "whole file system"},
		{in: "file://host/srv/", wantErr: "without host"},
		{in: "file:///srv/?x=1", wantErr: "without host"},
		{in: "fault+file:///srv/", wantErr: "plain file://"},
		{in: "file:///srv/../etc/", wantErr: "clean"},
		{in: "file:///srv//x/", wantErr: "clean"},
		{in: "s3://b/a/./c/", wantErr: "clean"},
		{in: "s3:///key/", wantErr: "no bucket"},
		{in: "s3://b/#frag", wantErr: "fragment"},
		{in: "/srv/shared", wantErr: "want scheme"},
		{in: "s3:opaque", wantErr: "want scheme"},
		{in: "http://example.com/in/", wantErr: "is no bucket"},
		{in: "https://example.com/", wantErr: "is no bucket"},
	} {
		p, err := ParsePrefix(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParsePrefix(%q) = %+v, %v; want error with %q", tc.in, p, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParsePrefix(%q): %v", tc.in, err)
		case tc.wantErr == "" && p.path != tc.path:
			t.Errorf("ParsePrefix(%q).path = %q, want %q", tc.in, p.path, tc.path)
		}
	}
	ps, err := ParsePrefixes([]string{"s3://a/, file:///srv/x/", "", "gs://c"})
	if err != nil || len(ps) != 3 {
		t.Fatalf("ParsePrefixes: %v %v", ps, err)
	}
	if p, _ := ParsePrefix("s3://b?awssecret=hunter22"); strings.Contains(p.String(), "hunter22") {
		t.Errorf("a prefix shows its secret: %s", p)
	}
}

// The matcher compares parsed URLs: scheme and host exactly, the path by
// whole components below the prefix, and no query other than the
// prefix's. Each refused case is an attack that a string prefix test
// (strings.HasPrefix on the raw URL) lets through, or a query that would
// move an allowed bucket to another endpoint.
func TestMatch(t *testing.T) {
	ps, err := ParsePrefixes([]string{
		"s3://team-inputs/",
		"s3://q/in/?region=eu-west-1&endpoint=http://h:9000",
		"file:///srv/shared/",
		"gs://g/in",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uri     string
		rel     string // want, "" = refused
		invalid bool   // not a URL: ErrInvalid, not ErrRefused
	}{
		{uri: "s3://team-inputs/a/b.txt", rel: "a/b.txt"},
		{uri: "s3://team-inputs-evil/a", rel: ""},
		{uri: "s3://team-input/a", rel: ""},
		{uri: "s3://TEAM-INPUTS/a", rel: ""},
		{uri: "S3://team-inputs/a", rel: "a"}, // url.Parse lowercases the scheme
		{uri: "gs://team-inputs/a", rel: ""},
		{uri: "s3://team-inputs:9000/a", rel: ""},
		{uri: "s3://user@team-inputs/a", rel: ""},
		{uri: "s3://team-inputs/", rel: ""},
		{uri: "s3://team-inputs", rel: ""},
		{uri: "s3://team-inputs/a/../b", rel: ""},
		{uri: "s3://team-inputs/a/%2e%2e/b", rel: ""},
		{uri: "s3://team-inputs/a//b", rel: ""},
		{uri: "s3://team-inputs/a/./b", rel: ""},
		{uri: "s3://team-inputs/a%00b", rel: ""},
		{uri: "s3://team-inputs/a#b", rel: ""},
		{uri: "s3://team-inputs/a?endpoint=http://evil:9000", rel: ""},
		{uri: "s3://team-inputs/a?", rel: "a"},
		{uri: "s3://q/in/k", rel: "k"},
		{uri: "s3://q/in/k?endpoint=http://h:9000&region=eu-west-1", rel: "k"},
		{uri: "s3://q/in/k?region=eu-west-1", rel: ""},
		{uri: "s3://q/in/k?region=eu-west-1&endpoint=http://evil", rel: ""},
		{uri: "s3://q/in/k?region=eu-west-1&endpoint=http://h:9000&awssecret=x", rel: ""},
		{uri: "s3://q/inner/k", rel: ""},
		{uri: "s3://q/k", rel: ""},
		{uri: "gs://g/in/x", rel: "x"},
		{uri: "gs://g/input/x", rel: ""},
		{uri: "file:///srv/shared/a/b.csv", rel: "a/b.csv"},
		{uri: "file:///srv/shared/../../etc/shadow", rel: ""},
		{uri: "file:///srv/shared/%2e%2e/x", rel: ""},
		{uri: "file:///srv/sharedx/a", rel: ""},
		{uri: "file:///srv/shared", rel: ""},
		{uri: "file://localhost/srv/shared/a", rel: ""},
		{uri: "file:///etc/shadow", rel: ""},
		{uri: "fault+file:///srv/shared/a", rel: ""},
		{uri: "/srv/shared/a", invalid: true},
		{uri: "x", invalid: true},
		{uri: "a/b:c", invalid: true},
		{uri: "a:b", invalid: true},
		{uri: "notes:2024.txt", invalid: true},
		{uri: "notes:/2024.txt", invalid: true},
		{uri: "C:/x", invalid: true},
		{uri: "s3:/team-inputs/a", rel: ""},
		{uri: "fault+s3:/fb/in/a", rel: ""},
		{uri: "mem:/m/in/a", rel: ""},
		{uri: "S3:team-inputs/a", rel: ""},
		{uri: "http://h/a\nb", rel: ""},
		// Started as URLs, but none pugfs takes: refused (and so
		// logged with who asked), not a plain path (audit 14).
		{uri: "s3:team-inputs/a", rel: ""},
		{uri: "file:srv/shared/a", rel: ""},
		{uri: "s3://team-inputs/a\nb", rel: ""},
	} {
		tg, err := match(ps, tc.uri)
		var nu *errNotURL
		switch {
		case tc.invalid:
			if !errors.As(err, &nu) {
				t.Errorf("match(%q): %v, want not-a-URL", tc.uri, err)
			}
		case tc.rel == "":
			if !errors.Is(err, ErrRefused) {
				t.Errorf("match(%q) = %+v, %v; want refused", tc.uri, tg, err)
			}
		case err != nil:
			t.Errorf("match(%q): %v", tc.uri, err)
		case tg.rel != tc.rel:
			t.Errorf("match(%q).rel = %q, want %q", tc.uri, tg.rel, tc.rel)
		}
	}
	// One bucket name on two endpoints: each prefix is tried, so the
	// second admits what the first refuses for its query (review 4).
	two, err := ParsePrefixes([]string{"s3://data/?endpoint=http://a:9000", "s3://data/?endpoint=http://b:9000"})
	if err != nil {
		t.Fatal(err)
	}
	if tg, err := match(two, "s3://data/in/x?endpoint=http://b:9000"); err != nil || tg.prefix.rawQuery != "endpoint=http://b:9000" {
		t.Errorf("the second endpoint's object: %+v, %v; want its prefix", tg.prefix, err)
	}
	if _, err := match(two, "s3://data/in/x?endpoint=http://c:9000"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "query differs") {
		t.Errorf("a third endpoint: %v, want refused for its query", err)
	}
	// With no prefixes at all, every URL is refused.
	if _, err := match(nil, "s3://team-inputs/a"); !errors.Is(err, ErrRefused) {
		t.Errorf("no prefixes: %v", err)
	}
}

// The source bucket is opened with the prefix's URL: the target's host
// part and key never reach the opener's query.
func TestBucketURL(t *testing.T) {
	ps, _ := ParsePrefixes([]string{"s3://q/in/?region=eu-west-1&endpoint=http://h:9000"})
	tg, err := match(ps, "s3://q/in/k/x.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tg.bucketURL(), "s3://q?region=eu-west-1&endpoint=http://h:9000"; got != want {
		t.Errorf("bucketURL = %q, want %q", got, want)
	}
	if tg.key != "in/k/x.txt" {
		t.Errorf("key = %q", tg.key)
	}
}
