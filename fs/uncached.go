package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// uncachedTimeouts turns the timeout uncached into the 0 the kernel
// reads as "ask again every time". go-fuse's node tree replaces a
// timeout of 0 with the mount's default, so nodes say uncached (1 ns)
// instead; but the kernel rounds any timeout that is not 0 up to a whole
// tick and trusts the entry until that tick ends. A program acting
// within those few milliseconds saw the stale reply: `ln -s URL f && cat
// f` followed the ingest's symlink reply and got ENOENT instead of the
// ingested file (TestIngestThenRead). Below the node tree nothing
// changes a 0 any more.
type uncachedTimeouts struct{ fuse.RawFileSystem }

// exactEntry clears the timeouts of out that are uncached.
func exactEntry(out *fuse.EntryOut) {
	if out.EntryValid == 0 && out.EntryValidNsec == uint32(uncached) {
		out.EntryValidNsec = 0
	}
	exactAttr(&out.AttrValid, &out.AttrValidNsec)
}

// exactAttr clears an attribute timeout that is uncached.
func exactAttr(sec *uint64, nsec *uint32) {
	if *sec == 0 && *nsec == uint32(uncached) {
		*nsec = 0
	}
}

func (u uncachedTimeouts) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := u.RawFileSystem.Lookup(cancel, header, name, out)
	exactEntry(out)
	return st
}

func (u uncachedTimeouts) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	st := u.RawFileSystem.Mknod(cancel, input, name, out)
	exactEntry(out)
	return st
}

func (u uncachedTimeouts) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	st := u.RawFileSystem.Mkdir(cancel, input, name, out)
	exactEntry(out)
	return st
}

func (u uncachedTimeouts) Link(cancel <-chan struct{}, input *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	st := u.RawFileSystem.Link(cancel, input, name, out)
	exactEntry(out)
	return st
}

func (u uncachedTimeouts) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target string, name string, out *fuse.EntryOut) fuse.Status {
	st := u.RawFileSystem.Symlink(cancel, header, target, name, out)
	exactEntry(out)
	return st
}

func (u uncachedTimeouts) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := u.RawFileSystem.Create(cancel, input, name, out)
	exactEntry(&out.EntryOut)
	return st
}

func (u uncachedTimeouts) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := u.RawFileSystem.GetAttr(cancel, input, out)
	exactAttr(&out.AttrValid, &out.AttrValidNsec)
	return st
}

func (u uncachedTimeouts) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := u.RawFileSystem.SetAttr(cancel, input, out)
	exactAttr(&out.AttrValid, &out.AttrValidNsec)
	return st
}
