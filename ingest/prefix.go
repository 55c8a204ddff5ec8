package ingest

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/pugmark/pugfs/internal/redact"
)

// Prefix is one trusted source of ingestion (one --ingest-from entry),
// parsed and normalised: a bucket, or a key prefix ending at a "/" within
// one, or a local directory.
type Prefix struct {
	scheme string
	host   string
	user   string
	// path is the decoded, clean path, ending in "/": "/" is a whole
	// bucket; for file:// it is the directory.
	path string
	// rawQuery is the prefix's query as given: the parameters (endpoint,
	// region, credentials) the source bucket is opened with. A target
	// cannot change them.
	rawQuery string
	query    url.Values
	shown    string
}

// String is the prefix with credentials removed.
func (p Prefix) String() string { return p.shown }

// isLocal reports a file:// prefix.
func (p Prefix) isLocal() bool { return p.scheme == "file" }

// ParsePrefix parses one --ingest-from entry. A prefix is scheme://bucket,
// scheme://bucket/key/prefix/ or file:///abs/dir/; its path is taken as
// ending at a "/" (s3://b/in matches s3://b/in/x, never s3://b/input/x).
// It must be clean: no "." or ".." components, no empty ones, no
// fragment. file:// prefixes take no host and no query, and the wrapped
// local schemes (fault+file://) are refused: a local source must be read
// through the caller checks of a plain file:// prefix.
func ParsePrefix(s string) (Prefix, error) {
	shown := redact.URL(s)
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return Prefix{}, fmt.Errorf("ingest prefix %q: want scheme://bucket/[prefix/] or file:///dir/", shown)
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return Prefix{}, fmt.Errorf("ingest prefix %q: a fragment (#) is not allowed", shown)
	}
	p := Prefix{scheme: u.Scheme, host: u.Host, rawQuery: u.RawQuery, query: u.Query(), shown: shown}
	if u.User != nil {
		p.user = u.User.String()
	}
	switch {
	case !bucketScheme(strings.TrimPrefix(u.Scheme, "fault+")):
		return Prefix{}, fmt.Errorf("ingest prefix %q: %s:// is no bucket (want s3://, gs://, azblob:// or file://)", shown, u.Scheme)
	case strings.HasSuffix(u.Scheme, "+file"):
		return Prefix{}, fmt.Errorf("ingest prefix %q: list local directories as plain file:// URLs", shown)
	case p.isLocal():
		if u.Host != "" || u.User != nil || u.RawQuery != "" {
			return Prefix{}, fmt.Errorf("ingest prefix %q: a file:// prefix is file:///abs/dir/, without host, user or query", shown)
		}
		if u.Path == "" || u.Path == "/" {
			return Prefix{}, fmt.Errorf("ingest prefix %q: refusing the whole file system; name a directory", shown)
		}
	case u.Host == "":
		return Prefix{}, fmt.Errorf("ingest prefix %q: no bucket name", shown)
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	if !strings.HasSuffix(path, "/") {
		path += "/"
	}
	if !cleanPath(strings.TrimSuffix(path, "/")) && path != "/" {
		return Prefix{}, fmt.Errorf("ingest prefix %q: the path must be clean (no ., .., // or NUL)", shown)
	}
	p.path = path
	return p, nil
}

// bucketScheme reports whether scheme names a kind of bucket a source
// can be opened from: an http:// prefix was taken and every ingestion
// under it then failed to open (audit 3).
func bucketScheme(scheme string) bool {
	switch scheme {
	case "s3", "gs", "azblob", "file", "mem":
		return true
	}
	return false
}

// ParsePrefixes parses a list of --ingest-from entries; each entry may
// itself be a comma-separated list. Empty entries are ignored.
func ParsePrefixes(list []string) ([]Prefix, error) {
	var out []Prefix
	for _, l := range list {
		for _, s := range strings.Split(l, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := ParsePrefix(s)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// cleanPath reports an absolute path whose components are all real
// names: no empty ones (//), no "." or "..", no NUL. The path given to
// the backend is the decoded one, so "%2e%2e" counts as "..".
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// target is a symlink target that a prefix admits.
type target struct {
	prefix Prefix
	// rel is the part of the path below the prefix: the object key below
	// the prefix's key prefix, or the file path below its directory.
	rel string
	// key is the whole object key (not for file://).
	key string
}

// errNotURL: the target is not a URL at all (ln -s of a plain path), which
// is not a request to ingest anything.
type errNotURL struct{ shown string }

func (e *errNotURL) Error() string {
	return fmt.Sprintf("ingest %q: not a URL (want scheme://bucket/key or file:///path)", e.shown)
}

// schemeLike matches what starts as a URL pugfs could ingest does: a
// scheme it knows and its colon, or any scheme (RFC 3986 §3.1) and "//".
// A plain path with a colon in it (ln -s a:b) is none (review 12).
var schemeLike = regexp.MustCompile(`(?i)^((s3|gs|azblob|file|mem|fault\+[a-z0-9]+):|[a-z][a-z0-9+.-]*://)`)

// match finds the prefix that admits uri. Comparison is on the parsed
// URL: scheme, host and user info exactly, the path component-wise below
// the prefix's, and the query either absent (the prefix's is used) or the
// same as the prefix's, so a target cannot point an allowed bucket at
// another endpoint or other credentials. Anything else is ErrRefused.
func match(prefixes []Prefix, uri string) (target, error) {
	shown := redact.URL(uri)
	u, err := url.Parse(uri)
	if !schemeLike.MatchString(uri) {
		// No URL pugfs could take, even when it parses as one (a:/b,
		// C:/x): a plain path, a quiet EACCES (review 13).
		return target{}, &errNotURL{shown}
	}
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		// scheme:... that is no URL pugfs takes (s3:bucket/key, a
		// newline in it): an ingestion refused, which is logged with
		// who asked, not a plain path (audit 14).
		return target{}, fmt.Errorf("%w: %s: not a URL of the form scheme://bucket/key or file:///path", ErrRefused, shown)
	}
	if u.Fragment != "" || strings.Contains(uri, "#") {
		return target{}, fmt.Errorf("%w: %s: a fragment (#) is not allowed", ErrRefused, shown)
	}
	if !cleanPath(u.Path) || strings.HasSuffix(u.Path, "/") {
		return target{}, fmt.Errorf("%w: %s: the path must name an object with clean components (no ., .., // or NUL)", ErrRefused, shown)
	}
	user := ""
	if u.User != nil {
		user = u.User.String()
	}
	q, qerr := url.ParseQuery(u.RawQuery)
	var otherQuery *Prefix // a prefix the target is under but for its query
	for _, p := range prefixes {
		if u.Scheme != p.scheme || u.Host != p.host || user != p.user || !strings.HasPrefix(u.Path, p.path) {
			continue
		}
		if u.RawQuery != "" && (qerr != nil || !sameQuery(q, p.query)) {
			// Another prefix may admit it: one bucket name listed on
			// two endpoints was refused for the first (review 4).
			if otherQuery == nil {
				otherQuery = &p
			}
			continue
		}
		return target{prefix: p, rel: strings.TrimPrefix(u.Path, p.path), key: strings.TrimPrefix(u.Path, "/")}, nil
	}
	if otherQuery != nil {
		return target{}, fmt.Errorf("%w: %s: its query differs from that of the allowed prefix %s (leave it out to use the prefix's)", ErrRefused, shown, *otherQuery)
	}
	return target{}, fmt.Errorf("%w: %s is not under any --ingest-from prefix", ErrRefused, shown)
}

// sameQuery compares two parsed queries, parameter by parameter.
func sameQuery(a, b url.Values) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if av[i] != bv[i] {
				return false
			}
		}
	}
	return true
}

// bucketURL is the URL the target's bucket is opened with: the prefix's
// scheme, user, host and query, never the target's.
func (t target) bucketURL() string {
	u := url.URL{Scheme: t.prefix.scheme, Host: t.prefix.host, RawQuery: t.prefix.rawQuery}
	if t.prefix.user != "" {
		if pu, err := url.Parse(t.prefix.scheme + "://" + t.prefix.user + "@" + t.prefix.host); err == nil {
			u.User = pu.User
		}
	}
	return u.String()
}
