package human

import "testing"

func TestHuman(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Rate(1, 4), "25.0%"},
		{Rate(0, 0), "n/a"},
		{Bytes(100), "100 B"},
		{Bytes(3 << 20), "3.0 MiB"},
		{Bytes(1536), "1.5 KiB"},
		{Count(512), "512"},
		{Count(3 << 20), "3145728 (3.0 MiB)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
