//go:build !linux

package deadlineblob

import "syscall"

// unacked cannot tell on this system: an upload's progress is then only
// the HTTP client's reads of its body.
func unacked(syscall.RawConn) (int, bool) { return 0, false }
