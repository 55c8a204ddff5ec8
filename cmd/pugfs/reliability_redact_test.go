package main

import (
	"strings"
	"testing"

	"github.com/pugmark/pugfs/internal/redact"
)

// .pugmark/flags shows the command line without the credentials of the
// URLs on it (internal/redact's test covers the redaction itself).
// Without redact.URL in shownFlags, the query secret shows.
func TestReliabilityRedact(t *testing.T) {
	for _, args := range [][]string{
		{"mount", "--debug", "s3://b?awssecret=hunter22", "/mnt"},
		// --ingest-from's URLs, in every form a command line has them
		// (audit 14: shown verbatim).
		{"mount", "--ingest-from=s3://AKID:hunter22@team/in?sas_token=hunter22,azblob://c/in?account_key=hunter22", "b", "/mnt"},
		{"mount", "--ingest-from", "file:///srv/in,s3://u:hunter22@team/in", "b", "/mnt"},
		{"b", "/mnt", "-o", "rw,ingest_from=s3://u:hunter22@team/in?x-amz-security-token=hunter22,allow_other"},
		// A secret value with a comma in it, and a list with blanks
		// (review 12).
		{"mount", "--allow-other", "s3://b?region=x&awssecret=abc,hunter22", "/mnt"},
		{"mount", "--ingest-from=file:///srv/in, s3://u:hunter22@team/in", "s3://b", "/mnt"},
		{"mount", "--ingest-from", "file:///srv/in, s3://team/in?sas_token=hunter22", "s3://b", "/mnt"},
		// Pairs Go's query parser drops, secret and all (review 13).
		{"mount", "--ingest-from=s3://in/drop/?token=hunter22%zz", "s3://b", "/mnt"},
		{"mount", "--ingest-from=s3://in/drop/?region=us-east-1;secret=hunter22", "s3://b", "/mnt"},
		// A proxy's password that its URL does not parse around (an
		// AWS-style secret with a /; review 15).
		{"mount", "--ingest-from=s3://team/in/?endpoint=http://u:hun/hunter22@proxy:8080", "s3://b", "/mnt"},
	} {
		if got := shownFlags(args, redact.Secrets(args[2])); strings.Contains(got, "hunter22") {
			t.Errorf(".pugmark/flags of %q: %q", args, got)
		} else if !strings.Contains(got, "://") {
			t.Errorf(".pugmark/flags of %q lost the URL: %q", args, got)
		}
	}
}
