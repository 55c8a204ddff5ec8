package blobcache

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// keptPath is where the disk tier keeps key.
func keptPath(dir, key string) string {
	h := layout.DigestOf([]byte(key)).Hex()
	return filepath.Join(dir, diskSubdir, diskKept, h[:2], h)
}

// TestKeptObjects: the disk tier keeps snapshot and manifest bodies for
// layout.Store: held in memory, then written (at the latest by Close),
// given back under the stamp they were kept with and no other, across
// instances sharing the directory; a damaged or foreign file is removed,
// never believed; a body past keptMax and a cache without a disk tier
// keep nothing.
func TestKeptObjects(t *testing.T) {
	dir := t.TempDir()
	src := newFakeBlobSource()
	c1 := newTestBlobCache(t, src, diskOpts(dir))
	const key, other = "sessions/x/snapshots/FFFFFFFE.json", "sessions/x/manifest.json"
	st := layout.Stamp{Size: 9, Mod: 1700000000}
	body := []byte(`{"a": 1}` + "\n")
	c1.Keep(key, st, body)
	for _, tc := range []struct {
		what string
		key  string
		st   layout.Stamp
		ok   bool
	}{
		{"the stamp kept", key, st, true},
		{"another modification time", key, layout.Stamp{Size: 9, Mod: st.Mod + 1}, false},
		{"another size", key, layout.Stamp{Size: 10, Mod: st.Mod}, false},
		{"another key", other, st, false},
	} {
		got, ok := c1.Kept(tc.key, tc.st)
		if ok != tc.ok || (ok && !bytes.Equal(got, body)) {
			t.Errorf("%s: Kept = %q, %v; want %v", tc.what, got, ok, tc.ok)
		}
	}
	if !c1.Has(key) || c1.Has(other) {
		t.Errorf("Has(kept) = %v, Has(not kept) = %v", c1.Has(key), c1.Has(other))
	}
	// Held in memory for a moment, then written: the same answers from
	// the disk.
	if _, err := os.Lstat(keptPath(dir, key)); !os.IsNotExist(err) {
		t.Errorf("a copy was written at once (%v): the command that read it would wait for it", err)
	}
	c1.flushKept()
	if got, ok := c1.Kept(key, st); !ok || !bytes.Equal(got, body) {
		t.Errorf("after the flush: Kept = %q, %v", got, ok)
	}
	if _, ok := c1.Kept(key, layout.Stamp{Size: 9, Mod: st.Mod + 1}); ok {
		t.Error("after the flush: another stamp was given the copy")
	}
	if s := c1.Stats(); s.KeptWrites != 1 || s.KeptHits != 2 || s.DiskBytes == 0 {
		t.Errorf("stats: kept %d, read back %d, disk bytes %d; want 1, 2, > 0", s.KeptWrites, s.KeptHits, s.DiskBytes)
	}
	c1.Keep(other, st, body) // written by Close
	c1.Close()

	// Another instance on the directory (a remount) has it.
	c2 := newTestBlobCache(t, src, diskOpts(dir))
	for _, k := range []string{key, other} {
		if got, ok := c2.Kept(k, st); !ok || !bytes.Equal(got, body) || !c2.Has(k) {
			t.Fatalf("after a restart: Kept(%s) = %q, %v; Has %v", k, got, ok, c2.Has(k))
		}
	}
	if c2.Has("sessions/z/manifest.json") {
		t.Error("after a restart: Has of a key never kept")
	}

	// A flipped byte of the body, or a record of another key under this
	// key's name: removed, not believed.
	p := keptPath(dir, key)
	for _, damage := range []func(data []byte) []byte{
		func(data []byte) []byte { data[len(data)-2] ^= 1; return data },
		func([]byte) []byte { return keptEncode(other, st, body) },
		func(data []byte) []byte { return data[:len(data)/2] },
	} {
		c2.Keep(key, st, body)
		c2.flushKept()
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, damage(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, ok := c2.Kept(key, st); ok {
			t.Errorf("a damaged file was believed: %q", got)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("a damaged file was left in place: %v", err)
		}
	}

	// Too large to keep.
	big := bytes.Repeat([]byte("x"), keptMax+1)
	c2.Keep("sessions/y/manifest.json", st, big)
	c2.flushKept()
	if _, ok := c2.Kept("sessions/y/manifest.json", st); ok {
		t.Error("a body past keptMax was kept")
	}

	// No disk tier: nothing kept, nothing found.
	o := diskOpts("")
	c3 := newTestBlobCache(t, src, o)
	c3.Keep(key, st, body)
	if _, ok := c3.Kept(key, st); ok {
		t.Error("a cache without a disk tier gave a body back")
	}
}

// TestKeptDecode: the record format round-trips and refuses what is not
// one of its records.
func TestKeptDecode(t *testing.T) {
	st := layout.Stamp{Size: 3, Mod: -5}
	rec := keptEncode("k", st, []byte("a\nb"))
	if k, got, body, ok := keptDecode(rec); !ok || k != "k" || got != st || string(body) != "a\nb" {
		t.Fatalf("round trip: %q %+v %q %v", k, got, body, ok)
	}
	for _, bad := range []string{"", "pugfs-kept 1\nk\n", strings.Replace(string(rec), "pugfs-kept 1", "pugfs-kept 2", 1),
		strings.Replace(string(rec), "3 -5", "3-5", 1), strings.Replace(string(rec), "3 -5", "x -5", 1)} {
		if _, _, _, ok := keptDecode([]byte(bad)); ok {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestKeptWrittenWhileMounted: each batch of kept copies goes to disk
// once the cache has been idle a moment, not only the first: the idle
// timer was armed once per process, so every copy after the first
// flush waited for 16 MiB more of them or the unmount (a crash lost
// them, and another mount sharing the directory never saw them).
func TestKeptWrittenWhileMounted(t *testing.T) {
	dir := t.TempDir()
	c := newTestBlobCache(t, newFakeBlobSource(), diskOpts(dir))
	st := layout.Stamp{Size: 3, Mod: 1700000000}
	for _, key := range []string{"sessions/a/manifest.json", "sessions/b/manifest.json", "sessions/c/manifest.json"} {
		c.Keep(key, st, []byte("abc"))
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Lstat(keptPath(dir, key)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not on disk 10 s after it was kept, with the cache idle", key)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
