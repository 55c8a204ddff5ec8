// Package mountinfo reads the paths of /proc/self/mountinfo, shared by
// pugfs (is a mountpoint already mounted?) and its benchmark harness.
package mountinfo

import (
	"strconv"
	"strings"
)

// Unescape undoes the octal escapes the kernel writes in mountinfo's
// paths (\040 for a space, \011, \012, \134), so that a mountpoint with
// a space in its name is found.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
