package ingest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Caller is who asked for an ingestion, as the kernel told the mount: the
// user and group of the process that made the symlink(2) call, its
// supplementary groups, and its process ID (for the log). It is a plain
// value so that the policy needs nothing of FUSE.
type Caller struct {
	UID, GID uint32
	// Groups are the supplementary groups. nil means "not known yet":
	// they are read from /proc/<PID>/status when a permission check needs
	// them (FUSE requests carry only the uid and the fsgid).
	Groups []uint32
	PID    uint32
}

// String names the caller in messages.
func (c Caller) String() string { return fmt.Sprintf("uid %d (pid %d)", c.UID, c.PID) }

// withGroups returns c with its supplementary groups filled in from
// /proc when they are not known. A process that is gone, or a /proc that
// does not show it, leaves the list empty: the caller is then judged by
// its uid and gid alone, which can only refuse more.
func (c Caller) withGroups(procDir string) Caller {
	if c.Groups != nil || c.PID == 0 {
		return c
	}
	c.Groups = []uint32{}
	b, err := os.ReadFile(procDir + "/" + strconv.FormatUint(uint64(c.PID), 10) + "/status")
	if err != nil {
		return c
	}
	c.Groups = parseGroups(string(b))
	return c
}

// parseGroups reads the "Groups:" line of a /proc/<pid>/status file.
func parseGroups(status string) []uint32 {
	out := []uint32{}
	for _, l := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(l, "Groups:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if g, err := strconv.ParseUint(f, 10, 32); err == nil {
				out = append(out, uint32(g))
			}
		}
	}
	return out
}

// Permission bits asked of may.
const (
	permRead   = 4
	permSearch = 1
)

// may reports whether c may access a file of the given mode, owner and
// group for want (permRead, permSearch), by the classic owner/group/other
// rule the kernel applies (without ACLs: see openLocal). uid 0 may read
// and search anything, as the kernel's CAP_DAC_OVERRIDE lets it.
func may(c Caller, mode, uid, gid uint32, want uint32) bool {
	if c.UID == 0 {
		return true
	}
	var bits uint32
	switch {
	case c.UID == uid:
		bits = mode >> 6
	case c.GID == gid || inGroups(c.Groups, gid):
		bits = mode >> 3
	default:
		bits = mode
	}
	return bits&want == want
}

func inGroups(gs []uint32, g uint32) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}
