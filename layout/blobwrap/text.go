package blobwrap

import (
	"regexp"
	"strconv"
	"strings"
)

// gocloudPrefix is what gocloud's portable type puts before a driver's
// error: "blob (code=NotFound): ", or with the key of a call that has one,
// "blob (key \"k\") (code=NotFound): ". A stack of decorators has one
// portable bucket per layer (the driver's own, and the one above the
// decorators), so a backend's error reached a user with the prefix two to
// four times (audit 25: a PUT refused for missing credentials); the
// caller's own text names the key.
var gocloudPrefix = regexp.MustCompile(`blob (?:\(key ("(?:[^"\\]|\\.)*")\) )?\(code=([A-Za-z]+)\): `)

// codeWords are gocloud's error codes as a person reads them; a code left
// out (Unknown, Internal, ...) says nothing the backend's own text does
// not, and is dropped.
var codeWords = map[string]string{
	"NotFound":           "not found",
	"AlreadyExists":      "already exists",
	"InvalidArgument":    "invalid argument",
	"FailedPrecondition": "precondition failed",
	"PermissionDenied":   "permission denied",
	"ResourceExhausted":  "resource exhausted", // a 429, or a full disk under a local bucket
	"Unimplemented":      "not supported by this backend",
	"DeadlineExceeded":   "timed out",
	"Canceled":           "canceled",
}

// Text is an error's text for people: gocloud's prefixes, however many
// the stack added, become one plain word for the code where the code says
// something ("permission denied: "), or nothing; the key they name is
// kept, once, when the rest of the text does not name it.
func Text(s string) string {
	locs := gocloudPrefix.FindAllStringSubmatchIndex(s, -1)
	if len(locs) == 0 {
		return s
	}
	word, key := "", ""
	for _, l := range locs {
		if w, ok := codeWords[s[l[4]:l[5]]]; ok && word == "" {
			word = w + ": "
		}
		if l[2] >= 0 && key == "" {
			key, _ = strconv.Unquote(s[l[2]:l[3]])
		}
	}
	var b strings.Builder
	last := 0
	for _, l := range locs {
		b.WriteString(s[last:l[0]])
		last = l[1]
	}
	b.WriteString(s[last:])
	rest := b.String()
	if key != "" && !strings.Contains(rest, key) {
		word += key + ": "
	}
	first := locs[0][0]
	return rest[:first] + word + rest[first:]
}
