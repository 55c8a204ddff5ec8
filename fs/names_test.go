package fs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
	"gocloud.dev/blob/memblob"
)

// TestMountNamesUnreachable: a session name no path can reach (a
// component over 255 bytes, which S3, GCS and Azure keys allow) is left
// out of names/ and refs/sessions/, as the README says of such names:
// listed, it made ls -l, tar, cp -r and rsync of those directories fail
// (audit 3).
func TestMountNamesUnreachable(t *testing.T) {
	ctx := context.Background()
	store := layout.New(memblob.OpenBucket(nil), &layout.Options{Now: time.Now})
	m := store.NewRootManifest()
	if _, _, err := store.CreateSession(ctx, m); err != nil {
		t.Fatal(err)
	}
	key, err := layout.ManifestKey(m.Session)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 300)
	for _, name := range []string{"ok", long} {
		if err := store.Link(ctx, layout.SessionRefName(name), key); err != nil {
			t.Fatal(err)
		}
	}
	mnt := testMount(t, store, nil)
	for _, dir := range []string{"names", "refs/sessions"} {
		if got := sh(t, mnt, "ls "+dir); got != "ok\n" {
			t.Errorf("ls %s = %q, want only the name a path reaches", dir, got)
		}
		sh(t, mnt, "ls -l "+dir+" >/dev/null && tar cf /dev/null "+dir)
	}
}
