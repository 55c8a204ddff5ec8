package fs

import (
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// Descriptor metadata keys for what a filesystem keeps and §7 has no
// field for (decisions.md "POSIX metadata in descriptors").
const (
	metaMode  = "posix-mode"
	metaMtime = "posix-mtime"
)

// defaultFileMode is the mode of a file whose descriptor has no
// posix-mode (tree.md "Reading"); a create with it writes no key.
const defaultFileMode = 0o644

// keptModeBits are the mode bits pugfs stores and shows. Setuid, setgid
// and sticky are neither: a bucket is untrusted input, and a file a
// bucket marks setuid would become a setuid program of the mount's owner
// (often root) once copied out with cp -a or rsync -a. The mount itself
// is nosuid, so on it they would mean nothing anyway.
const keptModeBits = 0o777

// modeOf returns the permission bits a descriptor's metadata gives, or
// def. The value is bucket data: anything but 1 to 4 octal digits within
// 07777 is ignored, never half-used.
func modeOf(meta map[string]string, def uint32) uint32 {
	v, ok := meta[metaMode]
	if !ok || len(v) == 0 || len(v) > 4 {
		return def
	}
	for _, c := range v {
		if c < '0' || c > '7' {
			return def // strconv would take a sign or 0o prefix
		}
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o7777 {
		return def
	}
	return uint32(m) & keptModeBits
}

// mtimeOf returns a descriptor's modification time: its posix-mtime when
// that parses as RFC 3339 (bucket data: anything else is ignored), else
// created, the time the content was written.
func mtimeOf(meta map[string]string, created time.Time) time.Time {
	if v, ok := meta[metaMtime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC()
		}
	}
	return created
}

// formatMode is how posix-mode is written: 4 octal digits.
func formatMode(m uint32) string { return fmt.Sprintf("%04o", m&keptModeBits) }

// formatMtime is how posix-mtime is written: RFC 3339 with nanoseconds,
// UTC.
func formatMtime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// descAttr sets the mode and times a committed descriptor shows. A
// read-only view (history, a --read-only mount) shows no write bits:
// nothing there can be written, and access(2) then says so.
func (f *FS) descAttr(a *fuse.Attr, d *layout.Descriptor, readOnly bool) {
	m := modeOf(d.Metadata, defaultFileMode)
	if readOnly {
		m &^= 0o222
	}
	a.Mode = syscall.S_IFREG | m
	setTimes(a, mtimeOf(d.Metadata, d.CreatedAt))
}

// attrChange is what one setattr asks of a file's POSIX metadata.
type attrChange struct {
	mode    *uint32    // chmod: the new permission bits
	mtime   *time.Time // utimes with a given time
	mtimeTo bool       // utimes to now: posix-mtime is dropped, the commit's created-at is the time
}

// attrChangeOf reads the metadata part of a setattr; ok is false when it
// asks for none (a truncate, chown or atime alone).
func attrChangeOf(in *fuse.SetAttrIn) (c attrChange, ok bool) {
	if m, has := in.GetMode(); has {
		m &= keptModeBits
		c.mode, ok = &m, true
	}
	if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		c.mtimeTo, ok = true, true
	} else if t, has := in.GetMTime(); has {
		c.mtime, ok = &t, true
	}
	return c, ok
}

// apply makes the change in meta, which it may allocate, and returns it.
// keep is the modification time the file shows now: a metadata-only
// change of committed content must not move it (chmod does not change
// mtime), so it is kept as posix-mtime when the new descriptor's
// created-at would otherwise replace it; zero when content changes too.
func (c attrChange) apply(meta map[string]string, keep time.Time) map[string]string {
	if meta == nil {
		meta = map[string]string{}
	}
	if c.mode != nil {
		meta[metaMode] = formatMode(*c.mode)
	}
	switch {
	case c.mtime != nil:
		meta[metaMtime] = formatMtime(*c.mtime)
	case c.mtimeTo:
		delete(meta, metaMtime)
	case !keep.IsZero():
		if _, set := meta[metaMtime]; !set {
			meta[metaMtime] = formatMtime(keep)
		}
	}
	if len(meta) == 0 {
		return nil
	}
	return meta
}

// chownErrno decides a chown: to the mount's own owner and group it
// succeeds and changes nothing (rsync -a and cp -p as that user chown
// every file); any other owner cannot be kept and is EPERM (tree.md).
func (f *FS) chownErrno(in *fuse.SetAttrIn) syscall.Errno {
	if uid, ok := in.GetUID(); ok && uid != f.cfg.UID {
		return syscall.EPERM
	}
	if gid, ok := in.GetGID(); ok && gid != f.cfg.GID {
		return syscall.EPERM
	}
	return 0
}
