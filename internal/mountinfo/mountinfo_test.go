package mountinfo

import "testing"

// TestUnescape: mountinfo writes spaces and the like in paths as octal
// escapes; a path with a space in its name is found.
func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/mnt/plain`:            "/mnt/plain",
		`/mnt/my\040bucket`:     "/mnt/my bucket",
		`/mnt/a\134b\011c\012d`: "/mnt/a\\b\tc\nd",
		`/mnt/trailing\04`:      `/mnt/trailing\04`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
