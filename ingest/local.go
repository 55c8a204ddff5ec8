package ingest

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pugmark/pugfs/internal/beneath"
	"github.com/pugmark/pugfs/layout"
)

// aclXattr is where Linux keeps a file's POSIX access ACL.
const aclXattr = "system.posix_acl_access"

// openLocal opens the file rel below the allowed directory root for c,
// one component at a time. Each directory on the way (root included) must
// be searchable by c and the file readable by c, judged on the fstat of
// the very fd that is then read, so nothing can be swapped in between the
// check and the read. Components are opened with openat2 RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS from the fd of their parent:
// a symbolic link anywhere below root is refused, even one that stays
// inside (following it would need the caller checks on its target's path
// too), and one component at a time keeps that true on kernels without
// openat2, where only O_NOFOLLOW is left. The directories above root are
// not checked: listing root in --ingest-from is the administrator saying
// that what is below it may be shared. A file or directory with a POSIX
// ACL is refused for callers other than root: its mode bits do not say who
// may read it, and pugfs does not evaluate ACLs.
func openLocal(root, rel string, c Caller, shown string) (*os.File, error) {
	var dfd int
	err := beneath.RetryEINTR(func() error {
		var err error
		dfd, err = unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ingest %s: allowed directory %s: %w", shown, root, err)
	}
	parts := strings.Split(rel, "/")
	where := root
	for i, name := range parts {
		if err := check(dfd, c, permSearch, true); err != nil {
			unix.Close(dfd)
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrRefused, shown, where, err)
		}
		last := i == len(parts)-1
		flags := unix.O_RDONLY | unix.O_DIRECTORY
		if last {
			// O_NONBLOCK: a FIFO must not hang the open; it is refused
			// below as not a regular file.
			flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
		}
		fd, err := beneath.Open(dfd, name, flags)
		unix.Close(dfd)
		where = strings.TrimSuffix(where, "/") + "/" + name
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return nil, fmt.Errorf("%w: %s: %s is a symbolic link (not followed below an allowed directory)", ErrRefused, shown, where)
		case err != nil:
			return nil, fmt.Errorf("ingest %s: %w", shown, err)
		}
		if !last {
			dfd = fd
			continue
		}
		if err := check(fd, c, permRead, false); err != nil {
			unix.Close(fd)
			if errors.Is(err, errNotRegular) {
				// Refused (and logged with who asked), as any other
				// ingestion the policy turns down: a FIFO or a directory
				// under the prefix was a plain path's quiet EACCES.
				return nil, fmt.Errorf("%w: %s: %s is not a regular file", ErrRefused, shown, where)
			}
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrRefused, shown, where, err)
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("ingest %s: %w", shown, err)
		}
		return os.NewFile(uintptr(fd), where), nil
	}
	return nil, fmt.Errorf("ingest %s: %w: no file name", shown, layout.ErrInvalid)
}

var errNotRegular = errors.New("not a regular file")

// check decides on the open fd whether c may use it: search for a
// directory (dir), read for a regular file.
func check(fd int, c Caller, want uint32, dir bool) error {
	var st unix.Stat_t
	if err := beneath.RetryEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return err
	}
	switch typ := st.Mode & unix.S_IFMT; {
	case dir && typ != unix.S_IFDIR:
		return errors.New("not a directory")
	case !dir && typ != unix.S_IFREG:
		return errNotRegular
	}
	if c.UID == 0 {
		return nil
	}
	if hasACL(fd) {
		return fmt.Errorf("has a POSIX ACL, which pugfs does not evaluate: refused for uid %d", c.UID)
	}
	if !may(c, st.Mode&0o777, st.Uid, st.Gid, want) {
		what := "read"
		if dir {
			what = "search"
		}
		return fmt.Errorf("uid %d (gid %d, groups %v) may not %s it (mode %03o, owner %d:%d)", c.UID, c.GID, c.Groups, what, st.Mode&0o777, st.Uid, st.Gid)
	}
	return nil
}

// hasACL reports whether fd has an access ACL. A file system without ACL
// support has none; any other failure to tell counts as having one, so
// that doubt refuses.
func hasACL(fd int) bool {
	n, err := unix.Fgetxattr(fd, aclXattr, nil)
	switch {
	case err == nil:
		return n > 0
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
		return false
	}
	return true
}
