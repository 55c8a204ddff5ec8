package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"path"
	"slices"
	"strings"
)

// bucketID names what a mount keeps on disk for bucket URL u (its state
// directory, its kept objects): a hash of the bucket's identity
// (bucketIdentity), so one bucket spelled two ways keeps one directory.
// A mount through the fault injector (fault+..., fault_* parameters),
// or with its parameters in another order, kept its crash leftovers
// where the plain URL's mount did not look (audit 27 F3).
func bucketID(u string) string {
	sum := sha256.Sum256([]byte(bucketIdentity(u)))
	return hex.EncodeToString(sum[:8])
}

// legacyBucketID is what pugfs before bucketID named u's directories by:
// a hash of the URL as given.
func legacyBucketID(u string) string {
	sum := sha256.Sum256([]byte(u))
	return hex.EncodeToString(sum[:8])
}

// bucketIdentity is u without what does not change which bucket it is:
// the fault injector's scheme prefix and parameters, the order of the
// other parameters, and an unclean or escaped local path. A URL with none of those
// is itself, so its directories keep their names across the upgrade.
// Parameters that may pick another bucket or another part of one
// (endpoint, prefix, region, credentials) stay as given.
func bucketIdentity(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	scheme = strings.TrimPrefix(scheme, "fault+")
	where, query, _ := strings.Cut(rest, "?")
	if scheme == "file" {
		// The path the driver opens: unescaped, then cleaned (a %2F
		// cleaned while escaped named another bucket: review 33).
		if p, err := url.Parse("file://" + where); err == nil && strings.HasPrefix(p.Path, "/") {
			where = p.Host + path.Clean(p.Path)
		}
	}
	var kept []string
	for _, kv := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if name, err := url.QueryUnescape(k); kv == "" || err == nil && strings.HasPrefix(name, "fault_") {
			continue
		}
		kept = append(kept, kv)
	}
	slices.SortStableFunc(kept, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	id := scheme + "://" + where
	if len(kept) > 0 {
		id += "?" + strings.Join(kept, "&")
	}
	return id
}
