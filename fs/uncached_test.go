package fs

import (
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// answering is a node tree stand-in that answers every entry and
// attribute request with the timeouts it holds.
type answering struct {
	fuse.RawFileSystem
	entry, attr time.Duration
}

func (a answering) fill(out *fuse.EntryOut) fuse.Status {
	out.SetEntryTimeout(a.entry)
	out.SetAttrTimeout(a.attr)
	return fuse.OK
}

func (a answering) Lookup(_ <-chan struct{}, _ *fuse.InHeader, _ string, out *fuse.EntryOut) fuse.Status {
	return a.fill(out)
}

func (a answering) Symlink(_ <-chan struct{}, _ *fuse.InHeader, _, _ string, out *fuse.EntryOut) fuse.Status {
	return a.fill(out)
}

func (a answering) Create(_ <-chan struct{}, _ *fuse.CreateIn, _ string, out *fuse.CreateOut) fuse.Status {
	return a.fill(&out.EntryOut)
}

func (a answering) GetAttr(_ <-chan struct{}, _ *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.SetTimeout(a.attr)
	return fuse.OK
}

// TestUncachedTimeoutsReachTheKernelAsZero: uncached leaves pugfs as 0
// (the kernel's "ask every time"), any other timeout as it was.
func TestUncachedTimeoutsReachTheKernelAsZero(t *testing.T) {
	for _, tc := range []struct {
		name                string
		entry, attr         time.Duration
		wantEntry, wantAttr time.Duration
	}{
		{"both uncached", uncached, uncached, 0, 0},
		{"entry uncached", uncached, time.Second, 0, time.Second},
		{"attributes uncached", time.Second, uncached, time.Second, 0},
		{"cached", time.Second, 1500 * time.Millisecond, time.Second, 1500 * time.Millisecond},
		{"2 ns is not uncached", 2 * time.Nanosecond, time.Second + time.Nanosecond, 2 * time.Nanosecond, time.Second + time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := uncachedTimeouts{answering{fuse.NewDefaultRawFileSystem(), tc.entry, tc.attr}}
			check := func(op string, out *fuse.EntryOut) {
				t.Helper()
				if out.EntryTimeout() != tc.wantEntry || out.AttrTimeout() != tc.wantAttr {
					t.Errorf("%s: entry %v, attributes %v; want %v, %v", op, out.EntryTimeout(), out.AttrTimeout(), tc.wantEntry, tc.wantAttr)
				}
			}
			var e fuse.EntryOut
			u.Lookup(nil, &fuse.InHeader{}, "x", &e)
			check("lookup", &e)
			e = fuse.EntryOut{}
			u.Symlink(nil, &fuse.InHeader{}, "s3://b/k", "x", &e)
			check("symlink", &e)
			var c fuse.CreateOut
			u.Create(nil, &fuse.CreateIn{}, "x", &c)
			check("create", &c.EntryOut)
			var a fuse.AttrOut
			u.GetAttr(nil, &fuse.GetAttrIn{}, &a)
			if a.Timeout() != tc.wantAttr {
				t.Errorf("getattr: %v, want %v", a.Timeout(), tc.wantAttr)
			}
		})
	}
}
