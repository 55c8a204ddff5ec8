package fs

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
	"golang.org/x/sys/unix"
)

// TestMountSharedViewsPrivate: on a shared mount (--allow-other, where
// the kernel checks modes for other users), a file of mode 0600 was
// refused to them by path, in history and in seq/, and handed to them
// by objects/ (listable), by its snapshot's JSON and by log.jsonl (their
// inline data) (audit 3). Those views are the owner's alone on a shared
// mount, and stay readable by all on one nobody else can enter.
func TestMountSharedViewsPrivate(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	const id = "0123456789abcdef0123456789abcdef"
	rw := testMount(t, store, nil)
	sh(t, rw, "mkdir sessions/"+id+" && printf secret > sessions/"+id+"/s && chmod 600 sessions/"+id+"/s")
	digest := strings.TrimSpace(sh(t, rw, "getfattr --only-values -n user.pugmark.digest sessions/"+id+"/s"))
	views := []string{
		"objects/" + digest,
		"sessions/" + id + "/.pugmark/snapshots/1.json",
		"sessions/" + id + "/.pugmark/log.jsonl",
	}
	for _, shared := range []bool{false, true} {
		mnt := testMount(t, store, func(c *Config, _ *cache.Options) { c.Shared, c.ReadOnly = shared, true })
		for _, v := range views {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(mnt, v), &st); err != nil {
				t.Fatalf("stat %s: %v", v, err)
			}
			want := uint32(0o444)
			if shared {
				want = 0o400
			}
			if got := st.Mode & 0o777; got != want {
				t.Errorf("shared %v: %s has mode %o, want %o", shared, v, got, want)
			}
		}
		if got := sh(t, mnt, "cat "+views[0]); got != "secret" {
			t.Errorf("shared %v: the owner reads %q from objects/", shared, got)
		}
		// History: the first version of s was written 0644, then made
		// 0600 (audit 14); on a shared mount no version is other
		// users', and objects/ answers their lookups no more.
		hist := []string{
			"sessions/" + id + "/.pugmark/at/1/s",
			"sessions/" + id + "/.pugmark/seq/1",
			"sessions/" + id + "/.pugmark/since-checkpoint/s",
		}
		for _, v := range hist {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(mnt, v), &st); err != nil {
				t.Fatalf("stat %s: %v", v, err)
			}
			if other := st.Mode & 0o077; shared && other != 0 {
				t.Errorf("shared: %s has mode %o, want none for others", v, st.Mode&0o777)
			} else if !shared && !strings.Contains(v, "since") && st.Mode&0o444 != 0o444 {
				t.Errorf("not shared: %s has mode %o, want its own (0644)", v, st.Mode&0o777)
			}
		}
		// Their directories too: a listing showed the names and sizes
		// of removed files (review 12).
		for _, d := range []string{"objects", "sessions/" + id + "/.pugmark/at", "sessions/" + id + "/.pugmark/seq", "sessions/" + id + "/.pugmark/since-checkpoint"} {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(mnt, d), &st); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]uint32{false: 0o555, true: 0o500}[shared]; st.Mode&0o777 != want {
				t.Errorf("shared %v: %s/ has mode %o, want %o", shared, d, st.Mode&0o777, want)
			}
		}
	}
}
