package blobwrap

import (
	"regexp"
	"strings"
)

// gocloudPrefix is what gocloud's portable type puts before a driver's
// error: "blob (code=NotFound): ". A stack of decorators has one portable
// bucket per layer (the driver's own, and the one above the decorators),
// so a backend's error reaches a user with the prefix two or three times.
var gocloudPrefix = regexp.MustCompile(`blob \(code=([A-Za-z]+)\): `)

// codeWords are gocloud's error codes as a person reads them; a code left
// out (Unknown, Internal, ...) says nothing the backend's own text does
// not, and is dropped.
var codeWords = map[string]string{
	"NotFound":           "not found",
	"AlreadyExists":      "already exists",
	"InvalidArgument":    "invalid argument",
	"FailedPrecondition": "precondition failed",
	"PermissionDenied":   "permission denied",
	"ResourceExhausted":  "too many requests",
	"Unimplemented":      "not supported by this backend",
	"DeadlineExceeded":   "timed out",
	"Canceled":           "canceled",
}

// Text is an error's text for people: gocloud's prefixes, however many
// the stack added, become one plain word for the code where the code says
// something ("permission denied: "), or nothing.
func Text(s string) string {
	locs := gocloudPrefix.FindAllStringSubmatchIndex(s, -1)
	if len(locs) == 0 {
		return s
	}
	word := ""
	for _, l := range locs {
		if w, ok := codeWords[s[l[2]:l[3]]]; ok {
			word = w + ": "
			break
		}
	}
	var b strings.Builder
	last := 0
	for i, l := range locs {
		b.WriteString(s[last:l[0]])
		if i == 0 {
			b.WriteString(word)
		}
		last = l[1]
	}
	b.WriteString(s[last:])
	return b.String()
}
