package layout

import (
	"errors"
	"strings"
	"testing"
)

// TestGuardDecode: a panic while one object is decoded is that object's
// ErrCorrupt, naming what was decoded and why; a decode that returns
// passes its value and error through.
func TestGuardDecode(t *testing.T) {
	var nilMap map[string]int
	_, err := guardDecode("descriptor array", func() (int, error) {
		nilMap["x"] = 1 // a decoder's bug
		return 1, nil
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "descriptor array") || !strings.Contains(err.Error(), "nil map") {
		t.Errorf("a decoder's panic: %v, want ErrCorrupt naming the object and the panic", err)
	}
	v, err := guardDecode("manifest", func() (int, error) { return 7, ErrTooLarge })
	if v != 7 || !errors.Is(err, ErrTooLarge) {
		t.Errorf("a decode that returns: %d, %v; want 7, ErrTooLarge", v, err)
	}
}
