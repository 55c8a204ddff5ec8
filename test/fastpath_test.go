package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// kernelStats reads the kernel request counters of .pugmark/stats
// (fs/kernelstats.go): lookup, getattr, open, release, flush, read,
// getxattr, listxattr.
func kernelStats(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	text := sh(t, dir, "cat .pugmark/stats")
	m := regexp.MustCompile(`kernel requests: (.*)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf(".pugmark/stats has no kernel request counters:\n%s", text)
	}
	out := map[string]int64{}
	for _, kv := range strings.Split(m[1], ", ") {
		k, v, _ := strings.Cut(kv, " ")
		out[k], _ = strconv.ParseInt(v, 10, 64)
	}
	return out
}

// delta returns what changed between two counter sets, for the keys given.
func delta(before, after map[string]int64, keys ...string) map[string]int64 {
	out := map[string]int64{}
	for _, k := range keys {
		out[k] = after[k] - before[k]
	}
	return out
}

// kernelCost returns the kernel requests script sends the mount on dir,
// without the requests of reading the counters themselves.
func kernelCost(t *testing.T, dir, script string, keys ...string) (string, map[string]int64) {
	t.Helper()
	a := kernelStats(t, dir)
	b := kernelStats(t, dir)
	out := sh(t, dir, script)
	c := kernelStats(t, dir)
	self := delta(a, b, keys...)
	cost := delta(b, c, keys...)
	for k := range cost {
		cost[k] -= self[k]
	}
	return out, cost
}

// fastpathSession makes a session of n files of 2 KiB (above the inline
// limit, so reading one fetches its blob) and returns its ID and the
// shell glob of its files.
func fastpathSession(t *testing.T, bk *Bucket, n int) (layout.SessionID, string) {
	t.Helper()
	id := newSession(t, bk)
	var ds []layout.Descriptor
	for i := 0; i < n; i++ {
		body := []byte(strings.Repeat(fmt.Sprintf("file %02d ", i), 256))
		func() {
			defer rdCatch(t)
			ds = append(ds, rdPutDesc(t, bk.Store, fmt.Sprintf("f%02d.txt", i), "text/plain", "", body, fixT1))
		}()
	}
	if _, err := bk.Store.Commit(context.Background(), id, layout.CommitRequest{Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
	return id, "sessions/" + id.String() + "/f*.txt"
}

// TestNoOpenReadOnly: a read-only mount answers OPEN with ENOSYS
// (fs/noopen.go), so that reading files again sends the daemon nothing:
// no OPEN, RELEASE, FLUSH or READ. The same mount with --fast-path=off
// sends an OPEN per file, which shows that the counters count and that
// no-open is what removes them. Content that changes under one name
// (version, a ref, .pugmark/stats) still shows the change at once with
// --metadata-ttl=0, also when the new content has the old length.
func TestNoOpenReadOnly(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		ctx := context.Background()
		const n = 20
		id, glob := fastpathSession(t, bk, n)
		a, b := newSession(t, bk), newSession(t, bk)
		ka, _ := layout.ManifestKey(a)
		kb, _ := layout.ManifestKey(b)
		if len(ka) != len(kb) {
			t.Fatalf("manifest keys of equal length expected: %q %q", ka, kb)
		}
		if err := bk.Store.Link(ctx, "pointer", ka); err != nil {
			t.Fatal(err)
		}
		noOpen := mount(t, bk, "--read-only", "--metadata-ttl=0")
		off := mount(t, bk, "--read-only", "--metadata-ttl=0", "--fast-path=off")
		keys := []string{"open", "release", "flush", "read"}
		for _, c := range []struct {
			m    *Mount
			want map[string]int64
		}{
			{noOpen, map[string]int64{"open": 0, "release": 0, "flush": 0, "read": 0}},
			{off, map[string]int64{"open": n, "release": n, "flush": 0, "read": 0}},
		} {
			first := sh(t, c.m.Dir, "cat "+glob+" | cksum")
			var got map[string]int64
			// Something else on the machine may drop the page cache
			// between the two reads (as in TestRead's KEEP_CACHE check).
			for try := 0; try < 3; try++ {
				var again string
				if again, got = kernelCost(t, c.m.Dir, "cat "+glob+" | cksum", keys...); again != first {
					t.Fatalf("second read differs: %q then %q", first, again)
				}
				if got["read"] == 0 {
					break
				}
			}
			for _, k := range keys {
				if got[k] != c.want[k] {
					t.Errorf("second cat of %d files: %s requests %v, want %v (mount flags of %s: %s)",
						n, k, got, c.want, c.m.Dir, sh(t, c.m.Dir, "cat .pugmark/flags"))
					break
				}
			}
		}

		// Changing content under one name, same length.
		dir := noOpen.Dir
		version := "sessions/" + id.String() + "/.pugmark/version"
		if got := sh(t, dir, "cat "+version); got != "1\n" {
			t.Fatalf("version: %q", got)
		}
		func() {
			defer rdCatch(t)
			d := rdPutDesc(t, bk.Store, "g.txt", "text/plain", "", []byte("g\n"), fixT1)
			if _, err := bk.Store.Commit(ctx, id, layout.CommitRequest{Descriptors: []layout.Descriptor{d}}); err != nil {
				t.Fatal(err)
			}
		}()
		if got := sh(t, dir, "cat "+version); got != "2\n" {
			t.Errorf("version after a commit elsewhere: %q, want 2", got)
		}
		if got := sh(t, dir, "cat refs/pointer"); got != ka+"\n" {
			t.Fatalf("refs/pointer: %q, want %q", got, ka)
		}
		if err := bk.Store.Link(ctx, "pointer", kb); err != nil {
			t.Fatal(err)
		}
		if got := sh(t, dir, "cat refs/pointer"); got != kb+"\n" {
			t.Errorf("refs/pointer after it moved: %q, want %q", got, kb)
		}
		// Each cat of stats shows the lookup or getattr the one before it
		// caused, also on a mount with the default TTL: its entry and
		// attributes are never kept (go-fuse would make a timeout of 0
		// the TTL, fs/node.go).
		dflt := mount(t, bk, "--read-only")
		asked := func(d string) int64 { k := kernelStats(t, d); return k["lookup"] + k["getattr"] }
		for _, d := range []string{dir, dflt.Dir} {
			if s1, s2 := asked(d), asked(d); s2 <= s1 {
				t.Errorf(".pugmark/stats of %s read twice shows %d then %d lookups and getattrs: a stale snapshot", d, s1, s2)
			}
		}
	})
}

// TestXattrs: what extended attribute requests cost and answer.
//
// By default, ls -l asks every entry for its security label and POSIX
// ACLs; pugfs has neither, and says so (EOPNOTSUPP, fs/xattrspaces.go)
// rather than "this file has none" (ENODATA), which GNU ls remembers for
// the whole device: ls -l of a directory costs a couple of getxattr round
// trips, not three or four an entry (81,212 for four ls -lR of 10,000
// files before), and user.pugmark.* stay readable.
//
// With --xattrs=off the first request is answered ENOSYS and the kernel
// asks no more (fs/xattroff.go); user.pugmark.* are then neither shown
// nor settable.
func TestXattrs(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		const n = 20
		id, _ := fastpathSession(t, bk, n)
		dir := "sessions/" + id.String()

		on := mount(t, bk)
		_, got := kernelCost(t, on.Dir, "ls -l "+dir+" > /dev/null; ls -lR "+dir+" > /dev/null", "getxattr")
		if got["getxattr"] > 8 {
			t.Errorf("ls -l and ls -lR of %d files sent %d getxattr, want a few per ls", n, got["getxattr"])
		}
		if got := sh(t, on.Dir, "getfattr --only-values -n user.pugmark.sequence-number "+dir+"/f00.txt"); got != "1" {
			t.Errorf("sequence-number %q", got)
		}
		for name, want := range map[string]string{
			"security.selinux":        "Operation not supported",
			"system.posix_acl_access": "Operation not supported",
			"user.pugmark.nonesuch":   "No such attribute",
			"user.other":              "No such attribute",
		} {
			for _, p := range []string{dir, dir + "/f00.txt"} {
				if e := shErr(t, on.Dir, "getfattr -n "+name+" "+p); !strings.Contains(e, want) {
					t.Errorf("getfattr -n %s %s: %q, want %s", name, p, e, want)
				}
			}
		}

		off := mount(t, bk, "--xattrs=off")
		_, got = kernelCost(t, off.Dir, "ls -l "+dir+" > /dev/null; ls -l "+dir+" > /dev/null; getfattr -d "+dir+"/f00.txt || true", "getxattr", "listxattr")
		if got["getxattr"] > 1 || got["listxattr"] > 1 {
			t.Errorf("ls -l of %d files twice, and getfattr -d, with --xattrs=off: %v, want at most one of each", n, got)
		}
		for _, script := range []string{
			"getfattr -n user.pugmark.digest " + dir + "/f00.txt",
			"setfattr -n user.pugmark.meta.k -v v " + dir + "/f00.txt",
		} {
			if e := shErr(t, off.Dir, script); !strings.Contains(e, "Operation not supported") {
				t.Errorf("--xattrs=off: %s: %q, want Operation not supported", script, e)
			}
		}
	})
}

// TestReadAheadIntoPageCache: the bodies read-ahead fetches in front of a
// traversal go to the kernel's page cache (fs/pagestore.go), so that the
// program's reads of them send pugfs no READ. Bodies fetched before the
// kernel knew their files (looked up one by one, their directory not
// listed) wait for the directory's listing and go then. Every byte read
// is the file's, and most reads after the listing cost no request.
func TestReadAheadIntoPageCache(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		const n = 40
		id := newSession(t, bk)
		var ds []layout.Descriptor
		bodies := map[string]string{}
		for i := range n {
			name := fmt.Sprintf("d/f%02d.txt", i)
			bodies[name] = strings.Repeat(name+" ", 200) // above the inline limit
			func() {
				defer rdCatch(t)
				ds = append(ds, rdPutDesc(t, bk.Store, name, "text/plain", "", []byte(bodies[name]), fixT1))
			}()
		}
		if _, err := bk.Store.Commit(context.Background(), id, layout.CommitRequest{Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
		m := mount(t, bk, "--read-only")
		sess := "sessions/" + id.String()
		number := func(re string) int64 {
			t.Helper()
			got := regexp.MustCompile(re).FindStringSubmatch(sh(t, m.Dir, "cat .pugmark/stats"))
			if got == nil {
				t.Fatalf(".pugmark/stats has no %q", re)
			}
			v, _ := strconv.ParseInt(got[1], 10, 64)
			return v
		}
		fetched := func() int64 { return number(`bodies fetched (\d+)`) }
		stored := func() int64 { return number(`kernel's page cache (\d+)`) }
		cat := func(from, to int) string {
			var paths []string
			for i := from; i < to; i++ {
				paths = append(paths, fmt.Sprintf("%s/d/f%02d.txt", sess, i))
			}
			return sh(t, m.Dir, "for f in "+strings.Join(paths, " ")+"; do cat $f; echo; done")
		}
		want := func(from, to int) string {
			var b strings.Builder
			for i := from; i < to; i++ {
				b.WriteString(bodies[fmt.Sprintf("d/f%02d.txt", i)] + "\n")
			}
			return b.String()
		}

		// Four files by path: a stream in order, whose read-ahead
		// fetches the next files before the kernel knows them.
		if got := cat(0, 4); got != want(0, 4) {
			t.Fatalf("first files: %q", got)
		}
		waitFor(t, "bodies fetched ahead", func() bool { return fetched() >= 4 })
		// A body of f01-f03 may arrive after cat has looked its file up
		// (the next cat's lookup can win the race with the fetch): the
		// kernel knows those. The files after them must wait.
		if s := stored(); s > 3 {
			t.Fatalf("%d bodies stored before the kernel knew their files (at most f01-f03 may be)", s)
		}
		sh(t, m.Dir, "ls "+sess+"/d >/dev/null") // the kernel learns every file
		waitFor(t, "bodies handed to the kernel after the listing", func() bool { return stored() > 0 })
		var script strings.Builder
		script.WriteString("cat")
		for i := 4; i < n; i++ {
			fmt.Fprintf(&script, " %s/d/f%02d.txt", sess, i)
		}
		got, cost := kernelCost(t, m.Dir, script.String(), "read")
		if w := strings.ReplaceAll(want(4, n), "\n", ""); got != w {
			t.Fatalf("reading the files handed over: wrong bytes (%d of %d)", len(got), len(w))
		}
		if cost["read"] >= n-4 {
			t.Errorf("reading %d files, some handed to the kernel, sent %d READs (stats:\n%s)", n-4, cost["read"], sh(t, m.Dir, "cat .pugmark/stats"))
		}
		if got := cat(0, n); got != want(0, n) {
			t.Fatalf("reading every file again: wrong bytes")
		}
	})
}
