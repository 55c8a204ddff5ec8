package redact

import (
	"errors"
	"strings"
	"testing"
)

// Credentials in URLs are hidden wherever pugfs shows a URL or an error
// about one. Without the query part of URL, the first two cases show
// their secrets; without Err, a driver's error (which quotes the whole
// URL) does.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, leak string }{
		{"s3://b?region=x&awssecret=hunter22", "hunter22"},
		{"azblob://c?sas_token=sv%3D2020%26sig%3Dabcd", "sig%3Dabcd"},
		{"file://me:pa55word@/srv/b", "pa55word"},
		{"gs://b?access_token=ya29.xyz&private_key_path=/k", "ya29.xyz"},
		// An endpoint behind a proxy with basic authentication (audit 3:
		// /proc/mounts, .pugmark/bucket and the log showed it).
		{"s3://b?endpoint=http://user:pr0xy-pass@proxy:8080&region=x", "pr0xy-pass"},
		{"s3://b?endpoint=http%3A%2F%2Fuser%3Apr0xy%252Fpass%40proxy%3A8080", "pr0xy"},
	} {
		got := URL(tc.in)
		if strings.Contains(got, tc.leak) {
			t.Errorf("URL(%q) = %q: shows %q", tc.in, got, tc.leak)
		}
		err := Err(errors.New("open bucket "+tc.in+": invalid query parameter"), tc.in)
		if strings.Contains(err.Error(), tc.leak) {
			t.Errorf("Err for %q: %v", tc.in, err)
		}
	}
	// Harmless parameters stay readable.
	if got := URL("s3://b?region=eu-west-1&endpoint=http://h:9000"); !strings.Contains(got, "eu-west-1") || !strings.Contains(got, "h:9000") {
		t.Errorf("URL hid harmless parameters: %q", got)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
	if err := Err(errors.New("signing with env-secret-value failed"), "s3://b"); strings.Contains(err.Error(), "env-secret-value") {
		t.Errorf("the environment's secret survives: %v", err)
	}
	base := errors.New("base")
	if err := Err(base, "s3://b?awssecret=hunter22"); !errors.Is(err, base) {
		t.Errorf("Err lost the wrapped error: %v", err)
	}
}

// TestURLUnparsed: a string that does not parse as a URL (a control
// character, a leading space) is not shown past its scheme: Secrets
// cannot find its credentials, and they came out whole (review 12).
func TestURLUnparsed(t *testing.T) {
	for _, u := range []string{
		"s3://u:hunter22@b/in/x\n",
		" s3://u:hunter22@team/in",
		"s3://b/in?sas_token=hunter22\x7f",
		"s3://b/in?x=%zz&awssecret=hunter22",
	} {
		if got := URL(u); strings.Contains(got, "hunter22") {
			t.Errorf("URL(%q) = %q", u, got)
		}
	}
	if got := URL("s3://b/in/x\n"); !strings.HasPrefix(got, "s3://") {
		t.Errorf("URL of an unparsed s3 URL = %q, want its scheme kept", got)
	}
	// Secrets of a URL the parser refuses: its userinfo's password
	// still scrubs an error quoting it (review 31).
	for _, u := range []string{"s3://AKIA:hunter22%zz@bucket", "s3://AKIA:hunter22%zz@bucket/in?x=1"} {
		if got := Scrub("BUCKET-URL "+u+" is neither a path nor a URL", Secrets(u)); strings.Contains(got, "hunter22") {
			t.Errorf("Scrub with Secrets(%q) = %q", u, got)
		}
	}
}

// TestURLMalformedQuery: a query Go's parser refuses is shown as written
// (its separators and empty pairs kept), but for a secret key's value
// and an inner URL's password, which Secrets finds too (reviews 13, 14).
func TestURLMalformedQuery(t *testing.T) {
	for _, u := range []string{
		"s3://b/k?token=hunter22%zz",
		"s3://b/k?region=x;secret=hunter22",
		"s3://b/k?x=%zz&endpoint=http://u:hunter22@proxy:8080",
		"s3://b/k?endpoint=http://u:hunter22@proxy:8080;region=x",
		"s3://b/k?x=%zz&endpoint=http%3A%2F%2Fu%3Ahunter22%40proxy",
	} {
		if got := URL(u); strings.Contains(got, "hunter22") {
			t.Errorf("URL(%q) = %q", u, got)
		}
		if got := Scrub(u, Secrets(u)); strings.Contains(got, "hunter22") {
			t.Errorf("Scrub(%q, Secrets) = %q", u, got)
		}
	}
	for _, u := range []string{"s3://b/k?a=1;b=2", "s3://b/k?a=1&&b=%zz"} {
		if got := URL(u); got != u {
			t.Errorf("URL(%q) = %q, want it as written (nothing secret in it)", u, got)
		}
	}
}

// TestURLInnerUnparsed: a URL in a query value whose password cannot be
// told from the rest by parsing it (a / ; & in the password, as
// AWS-style secrets have, a bad port or escape, a scheme-relative form,
// an @ its parse puts in the path) was shown whole, and Secrets found
// nothing to scrub (review 15); so was a fragment. The query is hidden
// from that value on; what comes before stays readable.
func TestURLInnerUnparsed(t *testing.T) {
	for _, u := range []string{
		"s3://b/k?endpoint=http://u:hunter22@proxy:80x",
		"s3://b/k?region=x&endpoint=http://u:hun/ter22@proxy:8080",
		"s3://b/k?endpoint=http://u:hunter22@proxy/%zz",
		"s3://b/k?endpoint=http://u:hun;ter22@proxy:8080",
		"s3://b/k?endpoint=http://u:12&ter22@proxy:8080",
		"s3://b/k?x=%zz&endpoint=http://u:hunter22@proxy:80x",
		"s3://b/k?endpoint=//u:hunter22@proxy",
		"s3://b/k?endpoint=http://u:8080/ter22@proxy",
		"s3://b/k#token=hunter22",
	} {
		got := URL(u)
		if strings.Contains(got, "ter22") {
			t.Errorf("URL(%q) = %q", u, got)
		}
		if strings.Contains(u, "region=x") && !strings.Contains(got, "region=x") {
			t.Errorf("URL(%q) = %q: hid the pairs before the inner URL", u, got)
		}
		if got := Scrub("open "+u+": failed", Secrets(u)); strings.Contains(got, "ter22") {
			t.Errorf("Scrub(%q, Secrets) = %q", u, got)
		}
	}
	// An inner URL with nothing to hide is still shown.
	if u := "s3://b/k?endpoint=http://proxy:8080&region=x"; URL(u) != u {
		t.Errorf("URL(%q) = %q, want it as written", u, URL(u))
	}
}

// TestURLTornUserinfo: URL forms whose secret was still shown by URL, or
// not scrubbed by Scrub(Secrets) (reviews 16, 17): the outer URL's own
// password, which a / or ? and leading digits tear from its user name
// (host u, port 12, the rest a path), a user name alone (a token) torn
// so, and a token as a URL's user name alone. (An http URL with an @ in
// its path is hidden with them: a token cannot be told from a key.)
func TestURLTornUserinfo(t *testing.T) {
	for _, u := range []string{
		"https://u:12/ter22@host/file",
		"s3://u:12/ter22@bucket/k",
		"https://u:12?ter22@host/file",
		"s3://b/k?endpoint=http://u:12%23ter22@proxy",
		"s3://b/k?endpoint=http://u:12%252Fter22@proxy",
		"s3://b/k?endpoint=http://ter22ter22@proxy",
		"s3://b/k?a=http://u:pwpwpw@p&endpoint=http://u:hun/ter22@proxy",
		// A user name alone, a token: with a / in it (review 17), and
		// whole.
		"https://TOK/ter22@host/b",
		"https://us/er:ter22@host/b",
		"https://ter22ter22@host/b",
	} {
		got := URL(u)
		sc := Scrub("open "+u+": failed", Secrets(u))
		if strings.Contains(got, "ter22") || strings.Contains(sc, "ter22") {
			t.Errorf("%q\n  URL   = %q\n  Scrub = %q", u, got, sc)
		}
	}
	// What has no user info is shown as written.
	for _, u := range []string{"s3://bucket/k@v?region=x", "file:///srv/b@c", "s3://b?endpoint=http://h:9000"} {
		if got := URL(u); got != u {
			t.Errorf("URL(%q) = %q, want it as written", u, got)
		}
	}
}

// TestURLBucketUserName: a bucket URL's user name alone is no token, and
// is shown; it was hidden, and scrubbed from every log line that named
// it ("data" of s3://data@bucket, review 18).
func TestURLBucketUserName(t *testing.T) {
	u := "s3://data@bucket"
	if got := URL(u); got != u {
		t.Errorf("URL(%q) = %q, want it as written", u, got)
	}
	if got := Scrub("read data of "+u, Secrets(u)); got != "read data of "+u {
		t.Errorf("Scrub = %q", got)
	}
}
