package fs

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/internal/testbucket"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob"
)

// The consistency contracts (consistency.md) through the mounted tree:
// real FUSE mounts, talked to by shell processes (never by this process,
// which serves them). They live here, not in cache, so that the cache
// tests run without /dev/fuse.

const mountTTL = 100 * time.Millisecond

// mountStore mounts a filesystem over store with a short metadata TTL,
// quiet, unmounted at cleanup.
func mountStore(t *testing.T, store *layout.Store) string {
	return testMount(t, store, func(c *Config, co *cache.Options) {
		co.MetadataTTL, c.Logger, c.BucketURL = mountTTL, slog.New(slog.DiscardHandler), "test://"
	})
}

// consistency.md §4 acceptance: two real mounts of one bucket. A write
// through one is read back through the other, for a session the other had
// already cached and for one it loads for the first time.
//
// Seen failing: with the cache's fresh() ignoring the TTL, mount 2 kept
// showing the old content of the cached session for the whole poll.
func TestMountsSeeEachOthersWrites(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		s1 := layout.New(b, nil)
		s2 := layout.New(testbucket.Reopen(t, b), nil)
		m := s1.NewRootManifest()
		if _, _, err := s1.CreateSession(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		mnt1, mnt2 := mountStore(t, s1), mountStore(t, s2)
		cached := "sessions/" + m.Session.String()
		sh(t, mnt1, "echo one > "+cached+"/f.txt")
		eventually(t, mnt2, "cat "+cached+"/f.txt", "one\n")
		// Mount 2 has the session cached now; mount 1 writes again.
		sh(t, mnt1, "echo two > "+cached+"/f.txt && echo more > "+cached+"/g.txt")
		if got := sh(t, mnt1, "cat "+cached+"/f.txt"); got != "two\n" {
			t.Fatalf("mount 1 reads %q after its own write", got)
		}
		eventually(t, mnt2, "cat "+cached+"/f.txt "+cached+"/g.txt", "two\nmore\n")

		// A session mount 2 has never loaded, created through mount 1.
		fresh := "sessions/" + layout.NewSessionID(time.Now()).String()
		sh(t, mnt1, "mkdir "+fresh+" && echo first > "+fresh+"/h.txt")
		eventually(t, mnt2, "cat "+fresh+"/h.txt", "first\n")
		eventually(t, mnt2, "ls sessions | grep -c .", "2\n")
	})
}

// consistency.md §1 through the tree: a session directory's mtime is its
// last content append. Reading files, re-listing after the TTL, writing a
// ref that names the session and a fork recorded in it leave it alone; a
// write moves it.
//
// Seen failing: with fork records counted as content by Cache.Summary
// (before its fix), the second mount showed the fork's time.
func TestMountedSessionMtime(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		store := layout.New(b, nil)
		m := store.NewRootManifest()
		if _, _, err := store.CreateSession(ctx, m); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		body := []byte("content\n")
		d := layout.Descriptor{Digest: layout.DigestOf(body), Size: int64(len(body)), Name: "a.txt", Data: body, CreatedAt: at}
		if _, err := store.Commit(ctx, m.Session, layout.CommitRequest{Type: layout.Provisional, Descriptors: []layout.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
		mnt := mountStore(t, store)
		dir := "sessions/" + m.Session.String()
		mtime := func(mnt string) int64 {
			t.Helper()
			n, err := strconv.ParseInt(strings.TrimSpace(sh(t, mnt, "stat -c %Y "+dir)), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if got := mtime(mnt); got != at.Unix() {
			t.Fatalf("mtime %d, want %d (the commit's created-at)", got, at.Unix())
		}
		sh(t, mnt, "cat "+dir+"/a.txt > /dev/null && ls -l "+dir+" > /dev/null")
		mkey, err := layout.ManifestKey(m.Session)
		if err != nil {
			t.Fatal(err)
		}
		sh(t, mnt, "mkdir -p refs/sessions && printf %s "+mkey+" > refs/sessions/named && ls names/named/ > /dev/null")
		fork, err := store.PutBlobBytes(ctx, []byte("fork output"), layout.BlobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Fork(ctx, m.Session, layout.ForkRequest{Descriptor: layout.Descriptor{
			Digest: fork.Digest, Size: fork.Size, Name: "out.txt"}}); err != nil {
			t.Fatal(err)
		}
		// Past the TTL the tree has seen the fork (it is listed under
		// forks/), and the mtime is still the content's.
		eventually(t, mnt, "ls "+dir+"/.pugmark/forks | grep -c .", "1\n")
		if got := mtime(mnt); got != at.Unix() {
			t.Fatalf("after reads, a ref and a fork: mtime %d, want %d", got, at.Unix())
		}
		// A mount that never loaded the session: its attributes come
		// from a summary of the latest snapshots, not the full state.
		if got := mtime(mountStore(t, store)); got != at.Unix() {
			t.Fatalf("another mount: mtime %d, want %d", got, at.Unix())
		}
		before := time.Now().Unix()
		sh(t, mnt, "echo new > "+dir+"/b.txt")
		eventually(t, mnt, "cat "+dir+"/b.txt", "new\n")
		if got := mtime(mnt); got < before {
			t.Fatalf("after a write: mtime %d, want >= %d", got, before)
		}
	})
}

// TestMountedOwnWriteSurvivesEviction: a file this mount wrote stays in
// its session's listing when the session's state is pushed out of the
// cache's LRU by reads of other sessions (consistency.md §3, §4): it was
// gone until the metadata TTL ended, as the reload took the version the
// last `ls -l sessions/` saw and the floor that kept the mount's own
// commit went with the evicted state (review 32).
func TestMountedOwnWriteSurvivesEviction(t *testing.T) {
	testbucket.Each(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		store := layout.New(b, nil)
		var ids []layout.SessionID
		for range 3 {
			m := store.NewRootManifest()
			if _, _, err := store.CreateSession(ctx, m); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, m.Session)
		}
		mnt := testMount(t, store, func(c *Config, co *cache.Options) {
			co.MetadataTTL, co.MaxSessions, c.Logger, c.BucketURL = time.Hour, 2, slog.New(slog.DiscardHandler), "test://"
		})
		dir := "sessions/" + ids[0].String()
		sh(t, mnt, "ls -l sessions/ > /dev/null")
		sh(t, mnt, "echo mine > "+dir+"/mine.txt")
		if got := sh(t, mnt, "ls "+dir); got != "mine.txt\n" {
			t.Fatalf("right after the write: ls %q", got)
		}
		sh(t, mnt, "ls sessions/"+ids[1].String()+" sessions/"+ids[2].String()+" > /dev/null")
		if got := sh(t, mnt, "ls "+dir); got != "mine.txt\n" {
			t.Fatalf("after reading two other sessions (MaxSessions 2), ls of the session this mount wrote to: %q, want mine.txt", got)
		}
	})
}
