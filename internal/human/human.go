// Package human renders numbers for people: shares as percentages and
// byte counts with binary units, as .pugmark/stats shows them.
package human

import "fmt"

// Rate is n/of as a percentage with one decimal ("97.5%"), "n/a" when of
// is 0 or less.
func Rate(n, of int64) string {
	if of <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// Bytes renders a byte count with a binary unit: "100 B", "3.0 MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}

// Count renders a byte count exactly, followed by its Bytes form when that
// is shorter than the number: "512", "3145728 (3.0 MiB)".
func Count(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d", n)
	}
	return fmt.Sprintf("%d (%s)", n, Bytes(n))
}
