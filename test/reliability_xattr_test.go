package e2e

import (
	"strings"
	"testing"
)

// TestReliabilityXattrBounded: a user of a mount cannot grow a file's
// metadata without bound through setxattr: values up to 64 KiB are kept,
// the fourth of them on one file is ENOSPC, and a value over 64 KiB is
// E2BIG; what was refused is not committed.
//
// Removing the protection (no bound in changeXattr) lets the fourth value
// land, and every later snapshot of the session carry it.
func TestReliabilityXattrBounded(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	mnt := mount(t, bk)
	sd := mnt.Dir + "/sessions/" + id.String()
	sh(t, sd, `echo x > f && v=$(head -c 65536 /dev/zero | tr '\0' a) &&
		for k in a b c; do setfattr -n user.pugmark.meta.$k -v "$v" f; done`)
	if e := shErr(t, sd, `setfattr -n user.pugmark.meta.d -v "$(head -c 65536 /dev/zero | tr '\0' a)" f`); !strings.Contains(e, "No space left") {
		t.Errorf("a fourth 64 KiB value: %q, want ENOSPC", e)
	}
	if e := shErr(t, sd, `setfattr -n user.pugmark.meta.e -v "$(head -c 65537 /dev/zero | tr '\0' a)" f`); !strings.Contains(e, "Argument list too long") {
		t.Errorf("a value over 64 KiB: %q, want E2BIG", e)
	}
	meta := relLiveSlots(t, bk, id)["f"].Metadata
	if len(meta["a"]) != 65536 || len(meta["c"]) != 65536 || meta["d"] != "" || meta["e"] != "" {
		t.Errorf("committed metadata: %d keys (d %d bytes, e %d bytes)", len(meta), len(meta["d"]), len(meta["e"]))
	}
}
