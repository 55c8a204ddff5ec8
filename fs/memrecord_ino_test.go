package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/cache"
	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// TestMemoryRecordBackToOldBytes: a memory record's node is numbered by
// the bytes it was looked up with, and shows what each commit through it
// made. When the record comes back to those first bytes, a lookup must
// not get that node back (go-fuse returns the node it holds under a
// number, here kept by an open descriptor): it read the bytes of the
// node's last commit, which the record no longer holds.
func TestMemoryRecordBackToOldBytes(t *testing.T) {
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	mnt := testMount(t, store, func(c *Config, o *cache.Options) { o.MetadataTTL = 0 })
	sh(t, mnt, "mkdir memories/ns && echo A > memories/ns/x")
	held := filepath.Join(t.TempDir(), "held")
	hold := exec.Command("bash", "-c", "cd '"+mnt+"' && exec 3< memories/ns/x && touch '"+held+"' && exec sleep 60")
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Process.Kill(); hold.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(held); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record was never held open")
		}
	}
	sh(t, mnt, "echo B > memories/ns/x")
	sh(t, mnt, "echo A > memories/ns/x")
	if got := strings.TrimSpace(sh(t, mnt, "cat memories/ns/x")); got != "A" {
		t.Fatalf("memories/ns/x reads %q; the record holds \"A\"", got)
	}
}
