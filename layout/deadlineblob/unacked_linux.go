package deadlineblob

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// unacked returns how many bytes of the connection's send queue the peer
// has not acknowledged yet (SIOCOUTQ), and false if it cannot tell.
func unacked(c syscall.RawConn) (int, bool) {
	var n int
	var err error
	if cerr := c.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}
