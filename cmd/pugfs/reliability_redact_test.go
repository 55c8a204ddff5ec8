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
	if got := shownFlags([]string{"mount", "--debug", "s3://b?awssecret=hunter22", "/mnt"}, redact.Secrets("s3://b?awssecret=hunter22")); strings.Contains(got, "hunter22") {
		t.Errorf(".pugmark/flags: %q", got)
	}
}
