package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// The read side of tree.md, checked with the tools people use, on a bucket
// that has every feature (read_fixture_test.go), local and S3.

func TestRead(t *testing.T) {
	eachBucket(t, func(t *testing.T, bk *Bucket) {
		t.Parallel()
		fx := buildReadFixture(t, bk)
		// The fixture's enc/lost.json is a lost encoding (§15): this mount
		// sniffs, the read-only one below shows it as stored.
		m := mount(t, bk, "--sniff-encoding")
		r := &rdCtx{t: t, bk: bk, fx: fx, m: m, dir: m.Dir}
		r.sessionsListing()
		r.hiddenMeta()
		r.metaFiles()
		r.logJSONL()
		r.snapshotsJSON()
		r.history()
		r.seq()
		r.links()
		r.names()
		r.memories()
		r.refs()
		r.objects()
		r.rootMeta()
		r.content()
		r.demoTrees()
		r.hostileNames()
		r.xattrs()
		r.mtimes()
		r.modes(false)
		r.readOnlyPaths()
		r.corruption()
		r.keepCache()
		r.inodes()
		r.generatedOnce(true)

		// A second, read-only mount with metadata TTL 0: the same inode
		// numbers, read-only modes everywhere, history served from the
		// kernel's cache, readdirplus answered from the listing.
		ro := mount(t, bk, "--read-only", "--metadata-ttl=0")
		r2 := &rdCtx{t: t, bk: bk, fx: fx, m: ro, dir: ro.Dir}
		r2.modes(true)
		r2.readOnlyMount()
		r2.sameInodes(r)
		r2.historyTimeouts()
		r2.readdirplus()
		r2.statCost()
		r2.inline()
		r2.generatedOnce(false)
	})
}

type rdCtx struct {
	t   *testing.T
	bk  *Bucket
	fx  *readFixture
	m   *Mount
	dir string
}

// run runs fn as a subtest with r's helpers failing the subtest.
func (r *rdCtx) run(name string, fn func(r *rdCtx, t *testing.T)) {
	r.t.Run(name, func(t *testing.T) {
		c := *r
		c.t = t
		fn(&c, t)
	})
}

func (r *rdCtx) sh(script string) string { r.t.Helper(); return sh(r.t, r.dir, script) }

// fails runs script, which must fail with one of the messages in want
// (strerror texts) on stderr.
func (r *rdCtx) fails(script string, want ...string) {
	r.t.Helper()
	errOut := shErr(r.t, r.dir, script)
	for _, w := range want {
		if strings.Contains(errOut, w) {
			return
		}
	}
	r.t.Errorf("%s: stderr %q, want one of %q", script, errOut, want)
}

func (r *rdCtx) eq(what, got, want string) {
	r.t.Helper()
	if got != want {
		r.t.Errorf("%s = %q, want %q", what, trunc([]byte(got)), trunc([]byte(want)))
	}
}

func sess(id layout.SessionID) string { return "sessions/" + id.String() }
func meta(id layout.SessionID) string { return "sessions/" + id.String() + "/.pugmark" }

func (r *rdCtx) odd() string { return sess(r.fx.odd) }

func lineSet(s string) []string {
	out := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(out) == 1 && out[0] == "" {
		return nil
	}
	return out
}

func sorted(s []string) []string { s = append([]string(nil), s...); sort.Strings(s); return s }

func (r *rdCtx) sessionsListing() {
	fx := r.fx
	r.run("sessions", func(r *rdCtx, t *testing.T) {
		got := lineSet(r.sh("ls sessions"))
		var want []string
		for _, id := range []layout.SessionID{fx.demo.Main.ID, fx.demo.Fork.ID, fx.demo.Inbox.ID, fx.grand, fx.odd, fx.oddChild, fx.empty, fx.prov} {
			want = append(want, id.String())
		}
		r.eq("ls sessions", strings.Join(got, " "), strings.Join(sorted(want), " "))
		// Not created yet: the pending fork's child (§11.1).
		r.fails("ls "+sess(fx.demo.PendingFork.ID), "No such file")
		r.fails("stat sessions/00000000000000000000000000000001", "No such file")
		r.fails("stat sessions/not-an-id", "No such file")
		r.fails("stat sessions/ffffffff000000000000000000000001", "No such file") // an hour past year 9999
		// Any case on input (§4.1).
		up := "sessions/" + strings.ToUpper(fx.odd.String())
		r.eq("ls UPPER", r.sh("ls "+up), r.sh("ls "+r.odd()))
		r.eq("cat UPPER/plain.txt", r.sh("cat "+up+"/plain.txt"), "plain inline text\n")
		// ls -t: newest content append first. odd's last append is
		// fixT2 (its snapshot 3 is empty), its legacy child's fixTF; every
		// demo session is newer.
		order := lineSet(r.sh("ls -t sessions"))
		pos := map[string]int{}
		for i, n := range order {
			pos[n] = i
		}
		if !(pos[fx.oddChild.String()] > pos[fx.odd.String()] && pos[fx.odd.String()] > pos[fx.demo.Main.ID.String()]) {
			t.Errorf("ls -t sessions = %v; want main before odd before odd's child", order)
		}
	})
}

func (r *rdCtx) hiddenMeta() {
	r.run("hidden .pugmark", func(r *rdCtx, t *testing.T) {
		if strings.Contains(r.sh("ls -a "+r.odd()), ".pugmark") {
			t.Errorf("ls -a of a session lists .pugmark")
		}
		if strings.Contains(r.sh("ls -a ."), ".pugmark") {
			t.Errorf("ls -a of the root lists .pugmark")
		}
		r.eq("ls .pugmark (root)", r.sh("ls .pugmark"), "bucket\nfailed\nflags\nstats\n")
		r.eq("ls odd/.pugmark", r.sh("ls "+meta(r.fx.odd)), "at\ncheckpoint\nforks\nlog.jsonl\nmanifest.json\nseq\nsince-checkpoint\nsnapshots\nversion\n")
		r.eq("ls fork/.pugmark", r.sh("ls "+meta(r.fx.demo.Fork.ID)), "at\ncheckpoint\nforks\nlog.jsonl\nmanifest.json\nparent\nseq\nsince-checkpoint\nsnapshots\nversion\n")
		// Deeper directories have no .pugmark of their own.
		r.fails("ls "+r.odd()+"/big/.pugmark", "No such file")
		// A slot under .pugmark/ is shadowed in the live tree, shown in
		// history.
		r.fails("cat "+meta(r.fx.odd)+"/evil.txt", "No such file")
		r.eq("history shows it", r.sh("cat "+meta(r.fx.odd)+"/at/1/.pugmark/evil.txt"), "hidden \".pugmark/evil.txt\"\n")
	})
}

func (r *rdCtx) metaFiles() {
	fx := r.fx
	r.run("version checkpoint manifest", func(r *rdCtx, t *testing.T) {
		for _, c := range []struct {
			id                  layout.SessionID
			version, checkpoint string
		}{
			{fx.odd, "3", "3"},
			{fx.demo.Main.ID, "7", "7"},
			{fx.demo.Inbox.ID, "2", "1"}, // the delivery is provisional
			{fx.empty, "0", "none"},
			{fx.prov, "1", "none"},
			{fx.oddChild, "1", "1"},
		} {
			r.eq(c.id.String()+" version", r.sh("cat "+meta(c.id)+"/version"), c.version+"\n")
			r.eq(c.id.String()+" checkpoint", r.sh("cat "+meta(c.id)+"/checkpoint"), c.checkpoint+"\n")
		}
		for _, id := range []layout.SessionID{fx.odd, fx.oddChild, fx.grand} {
			var got layout.Manifest
			if err := json.Unmarshal([]byte(r.sh("cat "+meta(id)+"/manifest.json")), &got); err != nil {
				t.Fatalf("manifest.json of %s: %v", id, err)
			}
			want, err := r.bk.Store.LoadManifest(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			r.eq("manifest.json of "+id.String(), string(a), string(b))
		}
		if !strings.Contains(r.sh("cat "+meta(fx.odd)+"/manifest.json"), "\n  \"session\"") {
			t.Errorf("manifest.json is not pretty-printed")
		}
	})
}

// rdLogLine is one line of log.jsonl, as a map and as a descriptor.
type rdLogLine struct {
	raw map[string]json.RawMessage
	d   layout.Descriptor
	// session and version are where the descriptor was found.
	session string
	version uint32
}

func (r *rdCtx) readLog(id layout.SessionID) []rdLogLine {
	r.t.Helper()
	var out []rdLogLine
	for _, l := range lineSet(r.sh("cat " + meta(id) + "/log.jsonl")) {
		var ll rdLogLine
		if err := json.Unmarshal([]byte(l), &ll.raw); err != nil {
			r.t.Fatalf("log.jsonl line %q: %v", l, err)
		}
		if err := json.Unmarshal([]byte(l), &ll.d); err != nil {
			r.t.Fatalf("log.jsonl line %q: %v", l, err)
		}
		json.Unmarshal(ll.raw["session"], &ll.session)
		json.Unmarshal(ll.raw["version"], &ll.version)
		out = append(out, ll)
	}
	return out
}

func (r *rdCtx) logJSONL() {
	fx := r.fx
	r.run("log.jsonl", func(r *rdCtx, t *testing.T) {
		log := r.readLog(fx.odd)
		if len(log) != fx.oddLogLines {
			t.Errorf("odd's log.jsonl has %d lines, want %d", len(log), fx.oddLogLines)
		}
		names := map[string]bool{}
		var tomb, fork, cross bool
		for i, l := range log {
			if _, ok := l.raw["data"]; ok {
				t.Errorf("log.jsonl line %d has data", i)
			}
			if l.d.SequenceNumber != int64(i+1) {
				t.Errorf("log.jsonl line %d has sequence number %d", i, l.d.SequenceNumber)
			}
			names[l.d.Name] = true
			tomb = tomb || (l.d.Deleted && l.d.Name == "doomed.txt")
			fork = fork || (l.d.Fork && l.d.TargetSession == fx.oddChild)
			cross = cross || (!l.d.Fork && l.d.TargetSession == fx.demo.Inbox.ID)
		}
		if !tomb || !fork || !cross {
			t.Errorf("odd's log.jsonl: tombstone %v, legacy fork record %v, cross-session record %v; want all", tomb, fork, cross)
		}
		for _, n := range fx.hidden {
			if !names[n] {
				t.Errorf("log.jsonl lacks the name %q that has no path", n)
			}
		}
		if want := `"target-session":"` + fx.oddChild.String() + `"`; !strings.Contains(r.sh("cat "+meta(fx.odd)+"/log.jsonl"), want) {
			t.Errorf("the legacy fork record is not shown as %s (lowercase)", want)
		}

		// Parents first, each ancestor up to the version its child sees,
		// the ancestors' fork records of sessions off the chain dropped
		// (§11.3): the ones that made the chain stay (§6.5).
		glog := r.readLog(fx.grand)
		want, err := r.bk.Store.FullLog(context.Background(), fx.grand, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(glog) != len(want) {
			t.Fatalf("grandchild's log.jsonl has %d lines, want %d", len(glog), len(want))
		}
		chain := []string{fx.demo.Main.ID.String(), fx.demo.Fork.ID.String(), fx.grand.String()}
		at := 0
		for i, l := range glog {
			for at < len(chain) && l.session != chain[at] {
				at++
			}
			if at == len(chain) {
				t.Fatalf("grandchild's log.jsonl line %d is from %s, out of parent-first order", i, l.session)
			}
			if l.d.Fork && l.session != fx.grand.String() && !slices.Contains(chain, l.d.TargetSession.String()) {
				t.Errorf("grandchild's log.jsonl line %d is an ancestor's fork record of a session off the chain (%s)", i, l.d.TargetSession)
			}
			if l.session != want[i].Session.String() || l.version != want[i].Version || l.d.SequenceNumber != want[i].SequenceNumber {
				t.Errorf("grandchild's log.jsonl line %d: %s@%d #%d, want %s@%d #%d", i, l.session, l.version, l.d.SequenceNumber,
					want[i].Session, want[i].Version, want[i].SequenceNumber)
			}
			if l.session == chain[0] && l.version > 5 {
				t.Errorf("grandchild's log.jsonl shows main's version %d; the fork was made at 5", l.version)
			}
		}
		// The inbox's delivered copy names its source (§12.2).
		var delivered bool
		for _, l := range r.readLog(fx.demo.Inbox.ID) {
			delivered = delivered || (l.d.SourceSession == fx.demo.Main.ID && l.d.Name == "messages/from-demo.md")
		}
		if !delivered {
			t.Errorf("inbox's log.jsonl has no descriptor with source-session %s", fx.demo.Main.ID)
		}
	})
}

func (r *rdCtx) snapshotsJSON() {
	fx := r.fx
	r.run("snapshots", func(r *rdCtx, t *testing.T) {
		r.eq("ls odd snapshots", r.sh("ls "+meta(fx.odd)+"/snapshots"), "1.json\n2.json\n3.json\n")
		r.eq("ls empty snapshots", r.sh("ls "+meta(fx.empty)+"/snapshots"), "")
		var s2 struct {
			Session       string              `json:"session"`
			Version       uint32              `json:"version"`
			Type          string              `json:"type"`
			TransactionID string              `json:"transaction-id"`
			Descriptors   []layout.Descriptor `json:"descriptors"`
		}
		if err := json.Unmarshal([]byte(r.sh("cat "+meta(fx.odd)+"/snapshots/2.json")), &s2); err != nil {
			t.Fatal(err)
		}
		if s2.Session != fx.odd.String() || s2.Version != 2 || s2.Type != "provisional" || s2.TransactionID != strconv.FormatUint(fx.oddV2Txn, 10) {
			t.Errorf("snapshots/2.json header: %+v", s2)
		}
		var legacy bool
		for _, d := range s2.Descriptors {
			legacy = legacy || (d.Fork && d.TargetSession == fx.oddChild && d.Name == "forked.md")
		}
		if len(s2.Descriptors) != fx.oddV2Len || !legacy {
			t.Errorf("snapshots/2.json has %d descriptors (want %d), legacy fork decoded %v", len(s2.Descriptors), fx.oddV2Len, legacy)
		}
		for v, typ := range map[int]string{1: "checkpoint", 2: "provisional", 3: "checkpoint", 4: "queueing"} {
			out := r.sh(fmt.Sprintf("cat %s/snapshots/%d.json", meta(fx.demo.Main.ID), v))
			if !strings.Contains(out, `"type": "`+typ+`"`) {
				t.Errorf("main's snapshots/%d.json: want type %s:\n%s", v, typ, trunc([]byte(out)))
			}
		}
		r.eq("empty delta", r.sh("grep -c descriptor "+meta(fx.odd)+"/snapshots/3.json"), "1\n")
		r.fails("cat "+meta(fx.odd)+"/snapshots/4.json", "No such file")
		r.fails("cat "+meta(fx.odd)+"/snapshots/0.json", "No such file")
		r.fails("cat "+meta(fx.odd)+"/snapshots/01.json", "No such file")
	})
}

func (r *rdCtx) history() {
	fx := r.fx
	main := meta(fx.demo.Main.ID)
	r.run("at", func(r *rdCtx, t *testing.T) {
		r.eq("ls at", r.sh("ls "+meta(fx.odd)+"/at"), "0\n1\n2\n3\n")
		r.eq("ls at/0", r.sh("ls -A "+meta(fx.odd)+"/at/0"), "")
		r.eq("ls empty at", r.sh("ls "+meta(fx.empty)+"/at"), "0\n")
		r.fails("ls "+meta(fx.odd)+"/at/4", "No such file")
		r.fails("ls "+meta(fx.odd)+"/at/01", "No such file")
		r.eq("doomed at 1", r.sh("cat "+meta(fx.odd)+"/at/1/doomed.txt"), "to be deleted\n")
		r.fails("cat "+meta(fx.odd)+"/at/2/doomed.txt", "No such file")
		r.fails("cat "+r.odd()+"/doomed.txt", "No such file")
		// The latest version is the live tree; history has no .pugmark.
		r.sh("diff -r " + sess(fx.demo.Main.ID) + " " + main + "/at/7")
		r.sh("diff -r " + main + "/at/6 " + main + "/at/7") // 7 only records a fork
		r.fails("ls "+main+"/at/7/.pugmark", "No such file")
		out, _, err := run(r.dir, "diff "+main+"/at/1/src/main.go "+main+"/at/3/src/main.go")
		if err == nil || !strings.Contains(out, "> import (") {
			t.Errorf("diff of main.go between versions 1 and 3: err %v\n%s", err, out)
		}
		r.eq("at/1 of main", r.sh("ls "+main+"/at/1"), "README.md\nconfig.json\nnotes\nscratch.txt\nsrc\n")
		r.eq("at/3 notes", r.sh("ls "+main+"/at/3/notes"), "plan.md\ntoday.md\n")
		// A fork's history starts with its parent's state.
		r.eq("fork at/0", r.sh("ls "+meta(fx.demo.Fork.ID)+"/at/0"), r.sh("ls "+main+"/at/5"))
	})
}

func (r *rdCtx) seq() {
	fx := r.fx
	r.run("seq", func(r *rdCtx, t *testing.T) {
		main := fx.demo.Main.ID
		r.eq("seq/1", r.sh("cat "+meta(main)+"/seq/1"), r.sh("cat "+meta(main)+"/at/1/README.md"))
		// A fork's seq/ covers its parent chain.
		r.eq("grand's seq/1", r.sh("cat "+meta(fx.grand)+"/seq/1"), r.sh("cat "+meta(main)+"/at/1/README.md"))
		glog, err := r.bk.Store.FullLog(context.Background(), fx.grand, 1)
		if err != nil {
			t.Fatal(err)
		}
		last := glog[len(glog)-1]
		r.eq("grand's own", r.sh(fmt.Sprintf("cat %s/seq/%d", meta(fx.grand), last.SequenceNumber)), "three levels down\n")
		log, err := r.bk.Store.FullLog(context.Background(), fx.odd, 3)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range log {
			if !e.Digest.IsZero() {
				want = append(want, strconv.FormatInt(e.SequenceNumber, 10))
			}
			if e.Name == "big/gz.txt" {
				r.eq("seq of big/gz.txt", r.sh(fmt.Sprintf("sha256sum < %s/seq/%d", meta(fx.odd), e.SequenceNumber)),
					hex.EncodeToString(sha(fx.files["big/gz.txt"]))+"  -\n")
			}
			if e.Deleted {
				r.fails(fmt.Sprintf("cat %s/seq/%d", meta(fx.odd), e.SequenceNumber), "No such file")
			}
		}
		sort.Strings(want)
		r.eq("ls seq", strings.Join(lineSet(r.sh("ls "+meta(fx.odd)+"/seq")), " "), strings.Join(want, " "))
		r.fails("cat "+meta(fx.odd)+"/seq/0", "No such file")
		r.fails("cat "+meta(fx.odd)+"/seq/01", "No such file")
	})
}

func (r *rdCtx) links() {
	fx := r.fx
	r.run("parent and forks", func(r *rdCtx, t *testing.T) {
		r.eq("parent of fork", r.sh("readlink "+meta(fx.demo.Fork.ID)+"/parent"), "../../"+fx.demo.Main.ID.String()+"/.pugmark/at/5\n")
		r.eq("parent of grand", r.sh("readlink "+meta(fx.grand)+"/parent"), "../../"+fx.demo.Fork.ID.String()+"/.pugmark/at/3\n")
		r.eq("parent of odd child", r.sh("readlink "+meta(fx.oddChild)+"/parent"), "../../"+fx.odd.String()+"/.pugmark/at/2\n")
		r.fails("readlink "+meta(fx.odd)+"/parent", "No such file", "") // roots have none
		r.eq("through parent", r.sh("cat "+meta(fx.demo.Fork.ID)+"/parent/README.md"), r.sh("cat "+meta(fx.demo.Main.ID)+"/at/5/README.md"))
		// forks/, pending ones included (§17).
		forks := meta(fx.demo.Main.ID) + "/forks"
		r.eq("ls forks", r.sh("ls "+forks), strings.Join(sorted([]string{fx.demo.Fork.ID.String(), fx.demo.PendingFork.ID.String()}), "\n")+"\n")
		r.eq("fork link", r.sh("readlink "+forks+"/"+fx.demo.Fork.ID.String()), "../../../"+fx.demo.Fork.ID.String()+"\n")
		r.eq("find -type l", r.sh("find "+forks+" -type l | wc -l"), "2\n")
		r.sh("test -d " + forks + "/" + fx.demo.Fork.ID.String())
		// The pending child does not exist yet: its link dangles.
		r.sh("test -L " + forks + "/" + fx.demo.PendingFork.ID.String() + " && ! test -e " + forks + "/" + fx.demo.PendingFork.ID.String())
		r.eq("legacy fork", r.sh("ls "+meta(fx.odd)+"/forks"), fx.oddChild.String()+"\n")
		r.eq("fork child content", r.sh("cat "+meta(fx.odd)+"/forks/"+fx.oddChild.String()+"/forked.md"), "legacy fork body\n")
		r.eq("no forks", r.sh("ls "+meta(fx.grand)+"/forks"), "")
	})
}

func (r *rdCtx) names() {
	fx := r.fx
	r.run("names", func(r *rdCtx, t *testing.T) {
		r.eq("ls names", r.sh("ls names"), "demo\ninbox\nodd\n")
		r.eq("readlink", r.sh("readlink names/demo"), "../sessions/"+fx.demo.Main.ID.String()+"\n")
		r.eq("readlink odd", r.sh("readlink names/odd"), "../sessions/"+fx.odd.String()+"\n")
		r.eq("through names", r.sh("cat names/odd/plain.txt"), "plain inline text\n")
		r.eq("find -type l", r.sh("find names -type l | wc -l"), "3\n")
		r.fails("readlink names/nobody", "No such file", "")
	})
}

func (r *rdCtx) memories() {
	r.run("memories", func(r *rdCtx, t *testing.T) {
		ctx := context.Background()
		r.eq("ls memories", r.sh("ls memories"), "project\nteam\nuser\n")
		// team is a namespace and a prefix of team/notes (§8.5).
		r.eq("ls team", r.sh("ls memories/team"), "notes\nroster.md\n")
		r.eq("ls team/notes", r.sh("ls memories/team/notes"), "archive\nconventions.md\nstandup.md\n")
		r.eq("archive", r.sh("cat memories/team/notes/archive/2025.md"), "old notes\n")
		r.eq("roster", r.sh("cat memories/team/roster.md"), "alice, bob\n")
		r.eq("ls user/alice", r.sh("ls memories/user/alice"), "preferences.json\n") // todo.md removed
		for _, ns := range []string{"team/notes", "user/alice", "project"} {
			v, err := r.bk.Store.LatestMemoryVersion(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := r.bk.Store.ReadMemory(ctx, ns, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range recs {
				b, err := r.bk.Store.ReadBlob(ctx, d.Digest, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				r.eq("memories/"+ns+"/"+d.Name, r.sh("cat 'memories/"+ns+"/"+d.Name+"'"), string(b))
			}
		}
		r.fails("cat memories/team/nothing.md", "No such file")
	})
}

func (r *rdCtx) refs() {
	fx := r.fx
	r.run("refs", func(r *rdCtx, t *testing.T) {
		r.eq("ls refs", r.sh("ls refs"), "latest-fork\nsessions\n")
		r.eq("ls refs/sessions", r.sh("ls refs/sessions"), "demo\ninbox\nodd\n")
		key, _ := layout.ManifestKey(fx.demo.Fork.ID)
		r.eq("latest-fork", r.sh("cat refs/latest-fork"), key+"\n")
		key, _ = layout.ManifestKey(fx.odd)
		r.eq("sessions/odd", r.sh("cat refs/sessions/odd"), key+"\n")
		r.eq("one line", r.sh("wc -l < refs/sessions/demo"), "1\n")
	})
}

func sha(b []byte) []byte { h := sha256.Sum256(b); return h[:] }

func (r *rdCtx) objects() {
	fx := r.fx
	r.run("objects", func(r *rdCtx, t *testing.T) {
		n := 0
		if err := r.bk.Store.ListBlobs(context.Background(), func(layout.Digest, int64) bool { n++; return true }, nil); err != nil {
			t.Fatal(err)
		}
		r.eq("ls objects | wc -l", r.sh("ls objects | wc -l"), strconv.Itoa(n)+"\n")
		// The stored bytes, not decoded.
		want := filepath.Join(t.TempDir(), "gz")
		if err := os.WriteFile(want, fx.gz, 0o644); err != nil {
			t.Fatal(err)
		}
		r.sh("cmp objects/" + fx.gzDigest.String() + " " + want)
		r.eq("gzip magic", r.sh("head -c 2 objects/"+fx.gzDigest.String()+" | od -An -tx1"), " 1f 8b\n")
		r.eq("size", r.sh("stat -c %s objects/"+fx.gzDigest.String()), strconv.Itoa(len(fx.gz))+"\n")
		// Every good object hashes to its name.
		bad := fx.bad.String()
		out := r.sh(`for f in objects/*; do [ "$f" = objects/` + bad + ` ] && continue; h=$(sha256sum < "$f"); [ "sha256:${h%% *}" = "${f#objects/}" ] || echo "$f"; done`)
		if out != "" {
			t.Errorf("objects whose bytes do not hash to their name:\n%s", out)
		}
		r.fails("cat objects/"+bad, "Input/output error")
		r.eq("xattr", r.sh("getfattr --only-values -n user.pugmark.digest objects/"+fx.gzDigest.String()), fx.gzDigest.String())
		r.fails("cat objects/sha256:"+strings.Repeat("0", 64), "No such file")
		r.fails("cat objects/nonsense", "No such file")
	})
}

// shQuoteBytes quotes b for bash's printf %s as $'...'.
func shQuoteBytes(b []byte) string {
	var s strings.Builder
	s.WriteString("$'")
	for _, c := range b {
		fmt.Fprintf(&s, "\\x%02x", c)
	}
	s.WriteString("'")
	return s.String()
}

func (r *rdCtx) rootMeta() {
	r.run("root .pugmark", func(r *rdCtx, t *testing.T) {
		bucket := r.sh("cat .pugmark/bucket")
		scheme, _, _ := strings.Cut(r.bk.URL, "://")
		if !strings.HasPrefix(bucket, scheme+"://") || strings.Count(bucket, "\n") != 1 {
			t.Errorf(".pugmark/bucket = %q, want the %s URL", bucket, scheme)
		}
		if !strings.Contains(r.sh("cat .pugmark/flags"), "mount") {
			t.Errorf(".pugmark/flags = %q", r.sh("cat .pugmark/flags"))
		}
		for _, w := range []string{"backend requests", "blob cache chunks: hits ", "sessions cached"} {
			if !strings.Contains(r.sh("cat .pugmark/stats"), w) {
				t.Errorf(".pugmark/stats lacks %q", w)
			}
		}
	})
}

func (r *rdCtx) content() {
	fx := r.fx
	r.run("content", func(r *rdCtx, t *testing.T) {
		// One script for every file: content hash, bytes read, size shown.
		var script, want strings.Builder
		for _, name := range sorted(keys(fx.files)) {
			q := shQuote(r.odd() + "/" + name)
			fmt.Fprintf(&script, "sha256sum < %s | cut -c1-64; wc -c < %s; stat -c %%s %s\n", q, q, q)
			b := fx.files[name]
			fmt.Fprintf(&want, "%s\n%d\n%d\n", hex.EncodeToString(sha(b)), len(b), len(b))
		}
		r.eq("hash, wc -c and stat size of every file", r.sh(script.String()), want.String())
		gz := fx.files["big/gz.txt"]
		r.eq("head", r.sh("head -c 1000 "+r.odd()+"/big/gz.txt"), string(gz[:1000]))
		r.eq("tail", r.sh("tail -c 1000 "+r.odd()+"/big/gz.txt"), string(gz[len(gz)-1000:]))
		zs := fx.files["big/zs.json"]
		r.eq("tail -n1", r.sh("tail -n 1 "+r.odd()+"/big/zs.json"), string(zs[strings.LastIndexByte(string(zs[:len(zs)-1]), '\n')+1:]))
		r.eq("dd middle", r.sh("dd if="+r.odd()+"/big/gz.txt bs=1000 skip=77 count=3 status=none"), string(gz[77000:80000]))
		r.eq("grep -rl", r.sh("grep -rl 'quick brown fox' "+r.odd()+"/big "+r.odd()+"/enc | sort"),
			r.odd()+"/big/gz.txt\n"+r.odd()+"/big/zs.json\n"+r.odd()+"/enc/lost.json\n")
		r.eq("lost encoding is decoded", r.sh("head -c 9 "+r.odd()+"/enc/lost.json"), `{"lost": `)
		r.eq("an archive stays as stored", r.sh("head -c 2 "+r.odd()+"/enc/archive.gz | od -An -tx1"), " 1f 8b\n")
		r.eq("corrupt inline", r.sh("cat "+r.odd()+"/corrupt-inline.txt"), "the real bytes of corrupt-inline.txt\n")
		// Cross-session writes: delivered to the inbox, not a slot of the
		// sender.
		r.eq("inbox message", r.sh("ls "+sess(fx.demo.Inbox.ID)+"/messages"), "from-demo.md\n")
		r.fails("ls "+sess(fx.demo.Main.ID)+"/messages", "No such file")
		r.fails("ls "+r.odd()+"/outbox", "No such file")
		// A fork's tree includes its parent chain.
		r.eq("grandchild", r.sh("cat "+sess(fx.grand)+"/notes/grandchild.md"), "three levels down\n")
		r.eq("grandchild README", r.sh("cat "+sess(fx.grand)+"/README.md"), r.sh("cat "+sess(fx.demo.Main.ID)+"/README.md"))
		r.eqn("tree", strings.Count(r.sh("tree -a --noreport "+sess(fx.demo.Main.ID)), "build.log"), 1)
	})
}

func (r *rdCtx) eqn(what string, got, want int) {
	r.t.Helper()
	if got != want {
		r.t.Errorf("%s = %d, want %d", what, got, want)
	}
}

func shQuote(s string) string {
	if !strings.ContainsAny(s, "\n\t'") {
		return "'" + s + "'"
	}
	return shQuoteBytes([]byte(s))
}

// demoTrees compares every file of the demo sessions with the bucket:
// paths (find) and decoded content (sha256sum).
func (r *rdCtx) demoTrees() {
	fx := r.fx
	r.run("trees", func(r *rdCtx, t *testing.T) {
		ctx := context.Background()
		for _, id := range []layout.SessionID{fx.demo.Main.ID, fx.demo.Fork.ID, fx.demo.Inbox.ID, fx.grand} {
			v, err := r.bk.Store.LatestVersion(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			log, err := r.bk.Store.FullLog(ctx, id, v)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for name, e := range layout.Slots(log) {
				stored, err := r.bk.Store.ReadBlob(ctx, e.Digest, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				dec, err := layout.DecodeBody(stored, e.ContentEncoding, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, hex.EncodeToString(sha(dec))+"  ./"+name)
			}
			got := r.sh("cd " + sess(id) + " && find . -type f | sort | xargs -d '\\n' sha256sum")
			r.eq("files of "+id.String(), got, strings.Join(sortedBy(want, func(s string) string { return s[66:] }), "\n")+"\n")
			r.eq("find count", r.sh("find "+sess(id)+" -type f | wc -l"), strconv.Itoa(len(want))+"\n")
		}
	})
}

func sortedBy(s []string, key func(string) string) []string {
	s = append([]string(nil), s...)
	sort.Slice(s, func(i, j int) bool { return key(s[i]) < key(s[j]) })
	return s
}

func (r *rdCtx) hostileNames() {
	fx := r.fx
	r.run("names as paths", func(r *rdCtx, t *testing.T) {
		got := strings.Split(strings.TrimSuffix(r.sh("cd "+r.odd()+" && find . -mindepth 1 -printf '%P\\0'"), "\x00"), "\x00")
		want := map[string]bool{"bad/mismatch.bin": true, "bad/mismatch.txt": true}
		for name := range fx.files {
			want[name] = true
		}
		for name := range want {
			parts := strings.Split(name, "/")
			for i := 1; i < len(parts); i++ {
				want[strings.Join(parts[:i], "/")] = true
			}
		}
		r.eq("find odd", strings.Join(sorted(got), "|"), strings.Join(sorted(keys(want)), "|"))
		r.eq("space", r.sh("cat '"+r.odd()+"/with space.txt'"), "name \"with space.txt\"\n")
		r.eq("newline", r.sh("cat "+shQuote(r.odd()+"/new\nline.txt")), "name \"new\\nline.txt\"\n")
		r.eq("unicode", r.sh("cat '"+r.odd()+"/ünïcødé/日本語.txt'"), "name \"ünïcødé/日本語.txt\"\n")
		r.eq("255 bytes", r.sh("cat "+r.odd()+"/"+strings.Repeat("n", 255)), "name \""+strings.Repeat("n", 255)+"\"\n")
		// "a" is a file, so "a/b" has no path; ".." climbs the tree, not
		// the bucket.
		r.fails("cat "+r.odd()+"/a/b", "Not a directory", "No such file")
		r.eq("a", r.sh("cat "+r.odd()+"/a"), "name \"a\"\n")
		r.eq("..", r.sh("cd "+r.odd()+"/big/.. && ls plain.txt"), "plain.txt\n")
		r.fails("cat "+r.odd()+"/escape", "No such file")
		r.fails("stat "+r.odd()+"/"+strings.Repeat("x", 300), "File name too long")
		r.fails("stat "+r.odd()+"/long", "No such file")
		// statvfs says so, wherever it is asked.
		r.eq("NAME_MAX", r.sh("stat -f -c %l . sessions "+r.odd()+" "+r.odd()+"/plain.txt "+meta(fx.odd)+"/at/1/plain.txt names/odd memories/team/roster.md | sort -u"), "255\n")
	})
}

func (r *rdCtx) xattrs() {
	fx := r.fx
	r.run("xattrs", func(r *rdCtx, t *testing.T) {
		log, err := r.bk.Store.FullLog(context.Background(), fx.odd, 1)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := layout.Lookup(log, "meta.txt")
		want := strings.Join([]string{
			"# file: " + r.odd() + "/meta.txt",
			`user.pugmark.content-type="text/plain"`,
			`user.pugmark.created-at="2025-01-02T03:04:05.123456789Z"`,
			`user.pugmark.digest="` + m.Digest.String() + `"`,
			`user.pugmark.meta.Mixed.Case-key="v a l"`,
			`user.pugmark.meta.owner="bob"`,
			`user.pugmark.schema-url="https://example.com/schema/meta.json"`,
			`user.pugmark.sequence-number="` + strconv.FormatInt(m.SequenceNumber, 10) + `"`,
			`user.pugmark.session="` + fx.odd.String() + `"`,
			`user.pugmark.version="1"`,
			"", ""}, "\n")
		r.eq("getfattr -d meta.txt", r.sh("getfattr -d "+r.odd()+"/meta.txt"), want)
		r.eq("content-encoding", r.sh("getfattr --only-values -n user.pugmark.content-encoding "+r.odd()+"/big/gz.txt"), "gzip")
		r.eq("zstd", r.sh("getfattr --only-values -n user.pugmark.content-encoding "+r.odd()+"/big/zs.json"), "zstd")
		r.eq("version of a v2 file", r.sh("getfattr --only-values -n user.pugmark.version "+r.odd()+"/bad/fine.txt"), "2")
		r.fails("getfattr -n user.pugmark.content-encoding "+r.odd()+"/plain.txt", "No such attribute")
		// History files carry them too.
		r.eq("history xattr", r.sh("getfattr --only-values -n user.pugmark.digest "+meta(fx.odd)+"/at/1/meta.txt"), m.Digest.String())
		// A fork child's inherited file names the session it came from.
		r.eq("inherited", r.sh("getfattr --only-values -n user.pugmark.session "+sess(fx.grand)+"/README.md"), fx.demo.Main.ID.String())
	})
}

func (r *rdCtx) mtimes() {
	fx := r.fx
	r.run("mtimes", func(r *rdCtx, t *testing.T) {
		r.eq("file mtime", r.sh("TZ=UTC stat -c %y "+r.odd()+"/plain.txt"), "2025-01-02 03:04:05.123456789 +0000\n")
		r.eq("v2 file", r.sh("stat -c %Y "+r.odd()+"/bad/fine.txt"), strconv.FormatInt(fixT2.Unix(), 10)+"\n")
		// A session's mtime is its last content append: the empty
		// snapshot 3 does not count.
		r.eq("session mtime", r.sh("stat -c %Y "+r.odd()), strconv.FormatInt(fixT2.Unix(), 10)+"\n")
		r.eq("child mtime", r.sh("stat -c %Y "+sess(fx.oddChild)), strconv.FormatInt(fixTF.Unix(), 10)+"\n")
		r.eq("history file", r.sh("stat -c %Y "+meta(fx.odd)+"/at/1/plain.txt"), strconv.FormatInt(fixT1.Unix(), 10)+"\n")
		// History directories show the last append at or before their
		// version.
		r.eq("at/0", r.sh("stat -c %Y "+meta(fx.odd)+"/at/0"), strconv.FormatInt(fx.odd.Time().Unix(), 10)+"\n")
		r.eq("at/1", r.sh("stat -c %Y "+meta(fx.odd)+"/at/1 "+meta(fx.odd)+"/at/1/big"), strings.Repeat(strconv.FormatInt(fixT1.Unix(), 10)+"\n", 2))
		r.eq("at/3", r.sh("stat -c %Y "+meta(fx.odd)+"/at/3"), strconv.FormatInt(fixT2.Unix(), 10)+"\n")
		// A version that only records a fork adds no content.
		main := meta(fx.demo.Main.ID)
		r.eq("at/7 of main", r.sh("stat -c %Y "+main+"/at/7"), r.sh("stat -c %Y "+main+"/at/6"))
		r.eq("main", r.sh("stat -c %Y "+sess(fx.demo.Main.ID)), r.sh("stat -c %Y "+main+"/at/6"))
		// A session with no snapshot shows the hour of its ID.
		r.eq("empty session", r.sh("stat -c %Y "+sess(fx.empty)), strconv.FormatInt(fx.empty.Time().Unix(), 10)+"\n")
	})
}

// modes checks the permission bits: writable only where a write can
// succeed.
func (r *rdCtx) modes(readOnly bool) {
	fx := r.fx
	r.run("modes", func(r *rdCtx, t *testing.T) {
		live, liveDir := "644", "755"
		if readOnly {
			live, liveDir = "444", "555"
		}
		for p, want := range map[string]string{
			r.odd() + "/plain.txt":                      live,
			r.odd():                                     liveDir,
			r.odd() + "/big":                            liveDir,
			meta(fx.odd):                                "555",
			meta(fx.odd) + "/version":                   "444",
			meta(fx.odd) + "/log.jsonl":                 "444",
			meta(fx.odd) + "/at":                        "555",
			meta(fx.odd) + "/at/1":                      "555",
			meta(fx.odd) + "/at/1/big":                  "555",
			meta(fx.odd) + "/at/1/plain.txt":            "444",
			meta(fx.odd) + "/snapshots/1.json":          "444",
			meta(fx.odd) + "/seq/1":                     "444",
			"objects":                                   "555",
			"objects/" + fx.gzDigest.String():           "444",
			"names":                                     "555",
			".pugmark":                                  "555",
			".pugmark/stats":                            "444",
			meta(fx.demo.Fork.ID) + "/parent/README.md": "444",
		} {
			r.eq("mode of "+p, r.sh("stat -L -c %a "+shQuote(p)), want+"\n")
		}
	})
}

// readOnlyPaths: history, objects/, names/ and .pugmark/ refuse writes.
func (r *rdCtx) readOnlyPaths() {
	fx := r.fx
	r.run("read-only paths", func(r *rdCtx, t *testing.T) {
		at := meta(fx.odd) + "/at/1"
		erofs := []string{"Read-only file system", "Operation not permitted"}
		for _, s := range []string{
			"echo x > " + at + "/new",
			"echo x >> " + at + "/plain.txt",
			"echo x > " + at + "/plain.txt",
			"truncate -s 0 " + at + "/plain.txt",
			"rm " + at + "/plain.txt",
			"rm -r " + at + "/big",
			"mkdir " + at + "/d",
			"mv " + at + "/plain.txt " + at + "/moved.txt",
			"mv " + at + "/plain.txt " + r.odd() + "/moved.txt",
			"ln -s x " + at + "/link",
			"touch " + at + "/plain.txt",
			"chmod 600 " + at + "/plain.txt",
			"setfattr -n user.pugmark.meta.x -v y " + at + "/plain.txt",
			"echo x > " + meta(fx.odd) + "/version",
			"echo x > " + meta(fx.odd) + "/new",
			"rm " + meta(fx.odd) + "/log.jsonl",
			"mkdir " + meta(fx.odd) + "/at/9",
			"rmdir " + meta(fx.odd) + "/at/0",
			"touch " + meta(fx.odd) + "/snapshots/9.json",
			"rm " + meta(fx.odd) + "/snapshots/1.json",
			"echo x > " + meta(fx.odd) + "/seq/1",
			"rm " + meta(fx.demo.Main.ID) + "/forks/" + fx.demo.Fork.ID.String(),
			"echo x > objects/new",
			"echo x >> objects/" + fx.gzDigest.String(),
			"rm objects/" + fx.gzDigest.String(),
			"ln -s ../sessions/x names/new",
			"rm names/demo",
			"mv names/demo names/demo2",
			"echo x > .pugmark/stats",
			"touch .pugmark/new",
			"rm .pugmark/bucket",
			"mkdir .pugmark/d",
		} {
			r.fails(s, erofs...)
		}
		r.eq("odd unchanged", r.sh("cat "+meta(fx.odd)+"/version"), "3\n")
		r.eq("at/1 unchanged", r.sh("cat "+at+"/plain.txt"), "plain inline text\n")
		v, err := r.bk.Store.LatestVersion(context.Background(), fx.odd)
		if err != nil || v != 3 {
			t.Errorf("odd's latest version in the bucket: %d, %v; want 3", v, err)
		}
	})
}

// readOnlyMount: with --read-only, the live tree refuses writes too.
func (r *rdCtx) readOnlyMount() {
	fx := r.fx
	r.run("read-only mount", func(r *rdCtx, t *testing.T) {
		for _, s := range []string{
			"echo x > " + r.odd() + "/new.txt",
			"echo x >> " + r.odd() + "/plain.txt",
			"rm " + r.odd() + "/plain.txt",
			"mkdir " + r.odd() + "/d",
			"mkdir sessions/" + layout.NewSessionID(time.Now()).String(),
			"echo x > refs/new",
			"echo x > memories/team/new.md",
			"setfattr -n user.pugmark.meta.x -v y " + r.odd() + "/plain.txt",
		} {
			r.fails(s, "Read-only file system")
		}
		r.eq("still readable", r.sh("cat "+r.odd()+"/plain.txt"), "plain inline text\n")
		// A memory record's version is its namespace's; it has no
		// sequence number.
		v, err := r.bk.Store.LatestMemoryVersion(context.Background(), "team")
		if err != nil {
			t.Fatal(err)
		}
		r.eq("memory record version", r.sh("getfattr --only-values -n user.pugmark.version memories/team/roster.md"), strconv.FormatUint(uint64(v), 10))
		r.fails("getfattr -n user.pugmark.sequence-number memories/team/roster.md", "No such attribute")
		if v, _ := r.bk.Store.LatestVersion(context.Background(), fx.odd); v != 3 {
			t.Errorf("odd has version %d after refused writes", v)
		}
	})
}

// rdBlobStats are the blob cache counters stats reads, by name, from the
// "blob cache ..." lines of .pugmark/stats.
var rdBlobStats = map[string]*regexp.Regexp{
	"Hits":         regexp.MustCompile(`^blob cache chunks: hits (\d+),`),
	"Misses":       regexp.MustCompile(`^blob cache chunks: .*\bmisses (\d+)`),
	"InlineReads":  regexp.MustCompile(`^blob cache chunks: .*\binline reads (\d+)`),
	"BackendReads": regexp.MustCompile(`^blob cache backend: reads (\d+),`),
	"BytesFetched": regexp.MustCompile(`^blob cache backend: .*\bbytes (\d+)`),
}

// rdStats parses .pugmark/stats into counters: "blobs.Hits",
// "sessions.checks", ...
func (r *rdCtx) stats() map[string]int64 {
	r.t.Helper()
	out := map[string]int64{}
	text := r.sh("cat .pugmark/stats")
	for _, line := range strings.Split(text, "\n") {
		for name, re := range rdBlobStats {
			if m := re.FindStringSubmatch(line); m != nil {
				out["blobs."+name], _ = strconv.ParseInt(m[1], 10, 64)
			}
		}
		if m := regexp.MustCompile(`freshness checks (\d+)`).FindStringSubmatch(line); m != nil {
			out["sessions.checks"], _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := regexp.MustCompile(`\bhits (\d+), freshness`).FindStringSubmatch(line); m != nil {
			out["sessions.hits"], _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := regexp.MustCompile(`backend requests: get (\d+), head (\d+), put (\d+), list (\d+)`).FindStringSubmatch(line); m != nil {
			for i, k := range []string{"get", "head", "put", "list"} {
				out["backend."+k], _ = strconv.ParseInt(m[i+1], 10, 64)
			}
		}
	}
	if _, ok := out["blobs.Hits"]; !ok {
		r.t.Fatalf(".pugmark/stats has no blob counters:\n%s", text)
	}
	return out
}

// keepCache: a second read of an immutable file is served by the page
// cache: no backend request, not even a chunk lookup in the blob cache.
// Something else on the machine may drop the page cache in between
// (benchmarks write to /proc/sys/vm/drop_caches), so a pair that saw a
// request is tried again; a file without KEEP_CACHE fails every time.
func (r *rdCtx) keepCache() {
	fx := r.fx
	r.run("KEEP_CACHE", func(r *rdCtx, t *testing.T) {
		for _, p := range []string{r.odd() + "/big/gz.txt", meta(fx.odd) + "/at/1/big/zs.json", "objects/" + fx.gzDigest.String(),
			sess(fx.demo.Main.ID) + "/logs/build.log"} {
			var changed []string
			for try := 0; try < 3; try++ {
				r.sh("cat " + p + " > /dev/null")
				before := r.stats()
				r.sh("cat " + p + " > /dev/null")
				after := r.stats()
				changed = nil
				for _, k := range []string{"blobs.BackendReads", "blobs.Hits", "blobs.Misses", "backend.get"} {
					if after[k] != before[k] {
						changed = append(changed, fmt.Sprintf("%s went from %d to %d", k, before[k], after[k]))
					}
				}
				if changed == nil {
					break
				}
			}
			if changed != nil {
				t.Errorf("second cat of %s, three times: %s", p, strings.Join(changed, ", "))
			}
		}
	})
}

// rdInodePaths are paths whose inode numbers must be stable.
func (r *rdCtx) inodePaths() []string {
	fx := r.fx
	return []string{"sessions", "names", "objects", "memories", "refs", r.odd(), r.odd() + "/plain.txt", r.odd() + "/big", r.odd() + "/big/gz.txt",
		meta(fx.odd), meta(fx.odd) + "/log.jsonl", meta(fx.odd) + "/at/1", meta(fx.odd) + "/at/1/plain.txt", meta(fx.odd) + "/seq/1",
		meta(fx.odd) + "/snapshots/2.json", "names/odd", "refs/sessions/odd", "memories/team/roster.md", "objects/" + fx.gzDigest.String(),
		meta(fx.demo.Fork.ID) + "/parent", meta(fx.demo.Main.ID) + "/forks/" + fx.demo.Fork.ID.String()}
}

func (r *rdCtx) inos() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	ps := r.inodePaths()
	var q []string
	for _, p := range ps {
		q = append(q, shQuote(p))
	}
	got := lineSet(r.sh("stat -c %i " + strings.Join(q, " ")))
	for i, p := range ps {
		out[p] = got[i]
	}
	return out
}

func (r *rdCtx) inodes() {
	r.run("inodes", func(r *rdCtx, t *testing.T) {
		a, b := r.inos(), r.inos()
		seen := map[string]string{}
		for p, ino := range a {
			if b[p] != ino {
				t.Errorf("inode of %s changed: %s then %s", p, ino, b[p])
			}
			if q, dup := seen[ino]; dup {
				t.Errorf("%s and %s share inode %s", p, q, ino)
			}
			seen[ino] = p
		}
		// readdir's d_ino is the inode stat shows.
		for _, d := range []string{"sessions", "names", r.odd(), r.odd() + "/big", meta(r.fx.odd), meta(r.fx.odd) + "/at",
			meta(r.fx.odd) + "/seq", meta(r.fx.demo.Main.ID) + "/forks", "refs", "refs/sessions", "memories/team", "objects", ".pugmark"} {
			ents, err := readDirInos(filepath.Join(r.dir, d))
			if err != nil {
				t.Fatal(err)
			}
			for name, ino := range ents {
				var st syscall.Stat_t
				err := syscall.Lstat(filepath.Join(r.dir, d, name), &st)
				if err == syscall.EIO && r.isBad(d, name) {
					continue // its size needs the corrupt body
				}
				if err != nil {
					t.Errorf("lstat %s/%q: %v", d, name, err)
				} else if st.Ino != ino {
					t.Errorf("%s/%q: readdir says inode %d, stat %d", d, name, ino, st.Ino)
				}
			}
		}
	})
}

// isBad reports whether dir/name shows the corrupt blob.
func (r *rdCtx) isBad(dir, name string) bool {
	if strings.HasSuffix(dir, "/seq") {
		log, err := r.bk.Store.FullLog(context.Background(), r.fx.odd, 3)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, e := range log {
			if e.Digest == r.fx.bad && strconv.FormatInt(e.SequenceNumber, 10) == name {
				return true
			}
		}
		return false
	}
	return strings.HasPrefix(name, "mismatch.")
}

// readDirInos returns the names and d_ino of a directory's entries, read
// with getdents64 (no stat).
func readDirInos(dir string) (map[string]uint64, error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 1<<16)
	for {
		n, err := syscall.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			ino := binary.LittleEndian.Uint64(b[0:8])
			reclen := int(binary.LittleEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				out[s] = ino
			}
			b = b[reclen:]
		}
	}
}

func (r *rdCtx) sameInodes(first *rdCtx) {
	r.run("inodes across mounts", func(r *rdCtx, t *testing.T) {
		a, b := first.inos(), r.inos()
		for p, ino := range a {
			if b[p] != ino {
				t.Errorf("inode of %s: %s on the first mount, %s on the second", p, ino, b[p])
			}
		}
	})
}

// historyTimeouts: with --metadata-ttl=0 every lookup in the live tree
// re-checks the bucket; history entries are cached by the kernel, so a
// second stat from inside at/1 does not reach pugfs.
func (r *rdCtx) historyTimeouts() {
	fx := r.fx
	r.run("history timeouts", func(r *rdCtx, t *testing.T) {
		at := r.dir + "/" + meta(fx.odd) + "/at/1"
		live := r.dir + "/" + r.odd()
		script := func(dir, file string) string {
			return "cd " + dir + " && stat " + file + " >/dev/null && cat " + r.dir + "/.pugmark/stats && stat " + file + " >/dev/null && stat " + file + " >/dev/null && cat " + r.dir + "/.pugmark/stats"
		}
		checks := func(out string) []int64 {
			var n []int64
			for _, m := range regexp.MustCompile(`freshness checks (\d+)`).FindAllStringSubmatch(out, -1) {
				v, _ := strconv.ParseInt(m[1], 10, 64)
				n = append(n, v)
			}
			return n
		}
		// Kernel caches can be dropped by anything on the machine
		// (drop_caches in benchmarks): a check that saw a request is
		// tried again; without long timeouts every try sees one.
		unchanged := func(script string) []int64 {
			var n []int64
			for try := 0; try < 3; try++ {
				if n = checks(r.sh(script)); len(n) == 2 && n[1] == n[0] {
					return nil
				}
			}
			return n
		}
		if h := unchanged(script(at, "plain.txt")); h != nil {
			t.Errorf("stat of a history file re-checked the bucket: freshness checks %v", h)
		}
		// The listing of a history directory is cached by the kernel
		// too (FOPEN_CACHE_DIR): a second ls -f reads no directory.
		ls := "cd " + at + " && ls -f big >/dev/null && cat " + r.dir + "/.pugmark/stats && ls -f big >/dev/null && ls -f big >/dev/null && cat " + r.dir + "/.pugmark/stats"
		if d := unchanged(ls); d != nil {
			t.Errorf("listing a history directory again re-checked the bucket: freshness checks %v", d)
		}
		l := checks(r.sh(script(live, "plain.txt")))
		if len(l) != 2 || l[1] <= l[0] {
			t.Errorf("with --metadata-ttl=0, stat of a live file did not re-check: freshness checks %v", l)
		}
	})
}

// readdirplus: a listing (the first READDIRPLUS of a directory) is
// answered from the listing, not by one lookup per entry, each with its
// own bucket check under --metadata-ttl=0.
func (r *rdCtx) readdirplus() {
	r.run("readdirplus", func(r *rdCtx, t *testing.T) {
		dir := r.odd() + "/many"
		before := r.stats()["sessions.checks"]
		names := lineSet(r.sh("ls -f " + dir)) // -f: unsorted, . and .. too
		d := r.stats()["sessions.checks"] - before
		n := len(names) - 2
		if !slices.Contains(names, ".") || !slices.Contains(names, "..") || n != 40 || d >= int64(n)/2 {
			t.Errorf("listing %d entries besides . and .. (%q) made %d session checks; want 40, the dots, and a handful of checks", n, names[:min(3, len(names))], d)
		}
	})
	// Directories list "." and ".." first, as local file systems do (ls
	// -a), with the inode numbers stat gives, and a position telldir
	// gave comes back to the same entries.
	r.run("dot entries", func(r *rdCtx, t *testing.T) {
		dir := r.odd()
		r.eq("ls -a", r.sh("ls -a "+dir+" | head -2"), ".\n..\n")
		r.eq("inodes of . and ..", r.sh("ls -aif "+dir+" | awk '$2==\".\"||$2==\"..\"{print $1}' | sort"),
			r.sh("stat -c %i "+dir+" "+dir+"/.. | sort"))
		r.eq("seekdir", r.sh(`perl -e 'opendir(D, $ARGV[0]) or die; readdir D for 1..3; my $p = telldir D;
			my @a = readdir D; seekdir D, $p; my @b = readdir D; rewinddir D; my $first = readdir D;
			rewinddir D; my @all = readdir D;
			print scalar(@a) + 3 == scalar(@all) ? "all" : "lost", " ", ("@a" eq "@b" ? "same" : "differ"), " $first\n"' `+dir),
			"all same .\n")
	})
}

// corruption: a blob whose bytes do not match its digest is EIO with a log
// line naming its key; everything else keeps working.
func (r *rdCtx) corruption() {
	fx := r.fx
	r.run("digest mismatch", func(r *rdCtx, t *testing.T) {
		bad := r.odd() + "/bad"
		r.eq("ls bad", r.sh("ls "+bad), "fine.txt\nmismatch.bin\nmismatch.txt\n")
		// Its size is the descriptor's: stat works, reading does not.
		r.eq("stat", r.sh("stat -c %s "+bad+"/mismatch.bin"), "38\n")
		r.eq("stat text", r.sh("stat -c %s "+bad+"/mismatch.txt"), "38\n")
		r.fails("cat "+bad+"/mismatch.bin", "Input/output error")
		r.fails("cat "+bad+"/mismatch.txt", "Input/output error")
		r.fails("cat "+bad+"/mismatch.bin", "Input/output error") // remembered, still refused
		key := layout.BlobKey(fx.bad)
		waitFor(t, "a log line naming "+key, func() bool { return strings.Contains(r.m.Log(), key) })
		r.eq("neighbour", r.sh("cat "+bad+"/fine.txt"), "my neighbour is corrupt\n")
		r.eq("elsewhere", r.sh("cat "+r.odd()+"/plain.txt"), "plain inline text\n")
		r.eq("history", r.sh("cat "+meta(fx.odd)+"/at/1/plain.txt"), "plain inline text\n")
	})
}

// statCost: the size of a large text file without content-encoding (which
// might have lost it, §15) is its descriptor's without --sniff-encoding,
// and known from its first bytes with it; stat must not download the body.
func (r *rdCtx) statCost() {
	fx := r.fx
	r.run("stat reads only the head", func(r *rdCtx, t *testing.T) {
		p := sess(fx.demo.Main.ID) + "/logs/build.log"
		before := r.stats()
		r.eq("size", r.sh("stat -c %s "+p), "204800\n")
		after := r.stats()
		if d := after["blobs.BytesFetched"] - before["blobs.BytesFetched"]; d > 1024 {
			t.Errorf("stat of a 200 KiB text file fetched %d bytes", d)
		}
		r.eq("then cat", r.sh("wc -c < "+p), "204800\n")
	})
}

// inline: a file with inline data (§7.1) is served without a fetch.
func (r *rdCtx) inline() {
	r.run("inline data", func(r *rdCtx, t *testing.T) {
		before := r.stats()
		r.eq("meta.txt", r.sh("cat "+r.odd()+"/meta.txt"), "with metadata\n")
		after := r.stats()
		if after["blobs.BackendReads"] != before["blobs.BackendReads"] || after["backend.get"] != before["backend.get"] ||
			after["blobs.InlineReads"] <= before["blobs.InlineReads"] {
			t.Errorf("reading an inline file: backend reads %d -> %d, gets %d -> %d, inline reads %d -> %d",
				before["blobs.BackendReads"], after["blobs.BackendReads"], before["backend.get"], after["backend.get"],
				before["blobs.InlineReads"], after["blobs.InlineReads"])
		}
	})
}

// generatedOnce: a generated file (log.jsonl) is made once per open, not
// once per read(2): small reads of it do not each rebuild the log, and
// together they give exactly what one read gives. perOpen is false on a
// read-only mount, which has no opens (fs/noopen.go): there the kernel
// asks for the attributes before each read once they expired (at once
// with --metadata-ttl=0), each such request takes a snapshot, and only
// the content is checked.
func (r *rdCtx) generatedOnce(perOpen bool) {
	fx := r.fx
	r.run("log.jsonl once per open", func(r *rdCtx, t *testing.T) {
		p := meta(fx.odd) + "/log.jsonl"
		whole := r.sh("cat " + p)
		before := r.stats()
		small := r.sh("dd if=" + p + " bs=512 status=none")
		after := r.stats()
		reads := int64(len(whole)/512 + 1)
		calls := after["sessions.hits"] + after["sessions.checks"] - before["sessions.hits"] - before["sessions.checks"]
		if perOpen && calls >= reads/2 {
			t.Errorf("%d reads of 512 bytes made %d session state calls", reads, calls)
		}
		r.eq("512-byte reads", small, whole)
	})
}
