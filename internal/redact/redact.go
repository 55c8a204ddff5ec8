// Package redact hides the credentials that bucket and object URLs may
// carry, wherever pugfs shows a URL or an error about one: the mount's
// log, .pugmark/, /proc/mounts, and the log lines of URL ingestion. It is
// shared by the command line and the filesystem so that there is one
// notion of what a secret is.
package redact

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
)

// URL hides credentials a URL may carry: the password of its user info,
// and the values of query parameters whose names say they hold one
// (secret, token, password, key, signature, sas, credential...).
//
// A URL that does not parse is not shown past its scheme: what in it is
// a credential cannot be told (review 12: a target with a newline was
// logged whole, its password in it).
func URL(u string) string {
	p, err := url.Parse(u)
	if err != nil || tornUserinfo(u) {
		if i := strings.Index(u, "://"); i >= 0 && !strings.ContainsAny(u[:i], "/?#@") {
			return u[:i+3] + unparsed
		}
		return unparsed
	}
	if p.Fragment != "" {
		// Never a part of an object's address: only a mistake, or a
		// token, puts one there (review 15).
		p.Fragment, p.RawFragment = "REDACTED", ""
	}
	if p.User != nil && webScheme(p.Scheme) {
		if _, ok := p.User.Password(); !ok && p.User.Username() != "" {
			// A user name alone is as often a token (https://TOKEN@host):
			// hidden, as an inner URL's is (review 17). Not a bucket
			// URL's (s3://data@bucket), which is no token, and whose
			// name in every log line was scrubbed (review 18).
			p.User = url.User("REDACTED")
		}
	}
	if i := innerTail(p.RawQuery); i >= 0 {
		p.RawQuery = rawPairs(p.RawQuery[:i]) + "REDACTED"
		return p.Redacted()
	}
	if _, err := url.ParseQuery(p.RawQuery); err != nil {
		// A pair that does not parse (token=x%zz, a=b;secret=x) is
		// dropped by Query, its secret with it: the query is shown as
		// written, pair by pair, a secret key's value hidden and an
		// inner URL's password too (reviews 13, 14).
		p.RawQuery = rawPairs(p.RawQuery)
		return p.Redacted()
	}
	q := p.Query()
	hidden := false
	for k, vs := range q {
		if secretParam(k) {
			q[k] = []string{"REDACTED"}
			hidden = true
			continue
		}
		for i, v := range vs {
			if r, ok := innerURL(v); ok {
				vs[i] = r
				hidden = true
			}
		}
	}
	if hidden {
		p.RawQuery = q.Encode()
	}
	return p.Redacted()
}

// rawPairs is the raw query q as written, pair by pair, the value of a
// secret key and an inner URL's password hidden.
func rawPairs(q string) string {
	return rawPair.ReplaceAllStringFunc(q, func(pair string) string {
		kv := splitPair(pair)
		if secretParam(kv[0]) {
			return kv[2] + "=REDACTED"
		}
		if r, ok := innerURL(kv[1]); ok {
			return kv[2] + "=" + url.QueryEscape(r)
		}
		return pair
	})
}

// innerTail returns where, in the raw query q, the value of the first
// pair begins that holds a URL whose password cannot be told from the
// rest, or -1. Such a URL (endpoint=http://u:pw@proxy) that does not
// parse by itself, for a / ; & ? or # in its password (AWS-style secrets
// have /), a bad port or escape, was shown whole (review 15); so was one
// split in two by a & or ; of its password, and one whose @ its parse
// puts in the path. Everything from there on is a secret.
func innerTail(q string) int {
	for _, loc := range rawPair.FindAllStringIndex(q, -1) {
		kv := splitPair(q[loc[0]:loc[1]])
		v := kv[1]
		if !strings.Contains(v, "://") && !strings.HasPrefix(v, "//") {
			continue
		}
		at := loc[0]
		if strings.Contains(q[loc[0]:loc[1]], "=") {
			at += len(kv[2]) + 1
		}
		p, err := url.Parse(v)
		switch {
		case err != nil,
			strings.Contains(v, "@") && p.User == nil,
			!strings.Contains(v, "@") && strings.Contains(q[loc[1]:], "@"):
			return at
		}
	}
	return -1
}

// rawPair matches a pair of a raw query as written: what is between its
// separators, & and ; (url.ParseQuery refuses ;).
var rawPair = regexp.MustCompile(`[^&;]+`)

// splitPair splits a raw query pair: its key unescaped where it can be,
// its value likewise, the key as written, and the value as written.
func splitPair(pair string) [4]string {
	k, v, _ := strings.Cut(pair, "=")
	key, val := k, v
	if u, err := url.QueryUnescape(k); err == nil {
		key = u
	}
	if u, err := url.QueryUnescape(v); err == nil {
		val = u
	}
	return [4]string{key, val, k, v}
}

// tornUserinfo reports a URL whose password its parse splits off: one
// with a / ? or # in it ends the authority early, and a password of
// digits then passes for a port (https://u:12/x@host: host u, port 12,
// path /x@host), so the password showed whole (review 16). An @ past
// the authority, which holds a colon, is taken for such a password.
// An http(s) URL's @ past its authority is taken for a torn user name
// too (https://TOK/EN@host): those are the URLs that carry tokens.
func tornUserinfo(u string) bool {
	i := strings.Index(u, "://")
	if i < 0 {
		return false
	}
	rest := u[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 || strings.Contains(rest[:end], "@") || !strings.Contains(rest[end:], "@") {
		return false
	}
	return strings.Contains(rest[:end], ":") || webScheme(u[:i])
}

// webScheme reports http and https, the URLs that carry tokens as user
// names.
func webScheme(scheme string) bool {
	scheme = strings.ToLower(scheme)
	return scheme == "http" || scheme == "https"
}

// tornSecret is what a torn userinfo (tornUserinfo) may hold: all from
// the colon after the scheme's :// to the last @, or all before that @
// when there is no colon (a user name alone).
func tornSecret(u string) string {
	rest := u[strings.Index(u, "://")+3:]
	at := strings.LastIndex(rest, "@")
	if colon := strings.IndexByte(rest, ':'); colon >= 0 && colon < at {
		return rest[colon+1 : at]
	}
	return rest[:max(at, 0)]
}

// unparsed stands for what URL cannot parse.
const unparsed = "(a URL that does not parse, not shown)"

// innerURL returns v, a query parameter's value, redacted when it is a
// URL with a password of its own (endpoint=http://user:pass@proxy:8080,
// for an S3 endpoint behind a proxy with basic authentication).
func innerURL(v string) (string, bool) {
	if pw, ok := innerPassword(v); ok && pw != "" {
		p, _ := url.Parse(v)
		return p.Redacted(), true
	}
	if name := innerUser(v); name != "" {
		// A user name alone is as often a token (https://TOKEN@host).
		p, _ := url.Parse(v)
		p.User = url.User("REDACTED")
		return p.String(), true
	}
	return v, false
}

// innerUser returns the user name of v when v is a URL with one and no
// password.
func innerUser(v string) string {
	if !strings.Contains(v, "://") && !strings.HasPrefix(v, "//") {
		return ""
	}
	p, err := url.Parse(v)
	if err != nil || p.User == nil {
		return ""
	}
	if _, ok := p.User.Password(); ok {
		return ""
	}
	return p.User.Username()
}

// innerPassword returns the password of v when v is a URL with one
// (scheme-relative too: //user:pass@proxy).
func innerPassword(v string) (string, bool) {
	if !strings.Contains(v, "://") && !strings.HasPrefix(v, "//") {
		return "", false
	}
	p, err := url.Parse(v)
	if err != nil || p.User == nil {
		return "", false
	}
	return p.User.Password()
}

// secretParam reports a query parameter name that says it holds a
// credential.
func secretParam(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"secret", "token", "passw", "pwd", "key", "credential", "signature", "sig", "sas", "auth"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// secretEnv are environment variables whose values are credentials of
// the backends pugfs links.
var secretEnv = []string{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_KEY",
	"AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN"}

// Secrets returns the credentials a URL and the environment hold, so
// that text built from errors (which drivers write with the whole URL in
// them) can be scrubbed of them.
func Secrets(u string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 4 {
			out = append(out, s)
		}
	}
	if tornUserinfo(u) {
		sec := tornSecret(u)
		add(sec)
		if un, err := url.PathUnescape(sec); err == nil {
			add(un)
		}
	}
	p, err := url.Parse(u)
	if err != nil {
		// A URL the parser refuses (a password with a stray %) still has
		// its userinfo where a person reads one: before the last @ of
		// its authority (review 31).
		if i := strings.Index(u, "://"); i >= 0 {
			rest := u[i+3:]
			if end := strings.IndexAny(rest, "/?#"); end >= 0 {
				rest = rest[:end]
			}
			if at := strings.LastIndex(rest, "@"); at > 0 {
				info := rest[:at]
				if colon := strings.IndexByte(info, ':'); colon >= 0 {
					info = info[colon+1:]
				}
				add(info)
				if un, err := url.PathUnescape(info); err == nil {
					add(un)
				}
			}
		}
	}
	if err == nil {
		if pw, ok := p.User.Password(); ok {
			add(pw)
			add(url.QueryEscape(pw))
			add(url.PathEscape(pw))
		} else if p.User != nil && webScheme(p.Scheme) {
			add(p.User.Username())
			add(url.PathEscape(p.User.Username()))
		}
		add(p.Fragment)
		add(p.EscapedFragment())
		if i := innerTail(p.RawQuery); i >= 0 {
			// All of it, and each of its pairs, as written and
			// unescaped: a driver's error may show any of them.
			tail := p.RawQuery[i:]
			for _, w := range append(rawPair.FindAllString(tail, -1), tail) {
				add(w)
				if un, err := url.QueryUnescape(w); err == nil {
					add(un)
				}
				_, v, _ := strings.Cut(w, "=")
				add(v)
			}
		}
		for _, pair := range rawPair.FindAllString(p.RawQuery, -1) {
			// As written too: a pair Query drops (reviews 13, 14).
			kv := splitPair(pair)
			switch pw, inner := innerPassword(kv[1]); {
			case secretParam(kv[0]):
				add(kv[1])
				add(kv[3])
			case inner:
				for _, w := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw)} {
					add(w)
					add(url.QueryEscape(w))
				}
			}
		}
		for k, vs := range p.Query() {
			for _, v := range vs {
				if name := innerUser(v); name != "" {
					add(name)
					add(url.QueryEscape(name))
				}
				if secretParam(k) {
					add(v)
					add(url.QueryEscape(v))
				} else if pw, ok := innerPassword(v); ok {
					// As written in the inner URL (escaped), and as that
					// is escaped again in the outer URL's query.
					for _, w := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw)} {
						add(w)
						add(url.QueryEscape(w))
					}
				}
			}
		}
	}
	for _, e := range secretEnv {
		add(os.Getenv(e))
	}
	return out
}

// Scrub replaces every secret in s with REDACTED, the longest first: a
// secret inside another ("abc" of "abc,hunter22") must not break the
// longer one up before it is found.
func Scrub(s string, secrets []string) string {
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "REDACTED")
		}
	}
	return s
}

// scrubbedError is err with its text scrubbed of secrets.
type scrubbedError struct {
	err error
	msg string
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Err returns err with the secrets of URL u removed from its text (nil
// stays nil). errors.Is and errors.As still see the original.
func Err(err error, u string) error {
	if err == nil {
		return nil
	}
	msg := Scrub(err.Error(), Secrets(u))
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{err, msg}
}
