package layout

import "testing"

// TestZeroWithAnyExponent: zero is zero however large its
// exponent is written, as 0e999999999999 already reads: one past int's
// range (0e99999999999999999999) was refused, the exponent failing to
// parse before the mantissa was seen to be zero.
func TestZeroWithAnyExponent(t *testing.T) {
	for _, in := range []string{"0e99999999999999999999", "-0.0E+99999999999999999999", "0.000e-99999999999999999999"} {
		if got, ok := IntegralNumber(in); got != 0 || !ok {
			t.Errorf("IntegralNumber(%q) = %d, %v; want 0, true", in, got, ok)
		}
	}
	// Anything else with such an exponent is out of range, or a fraction.
	for _, in := range []string{"1e99999999999999999999", "5e-99999999999999999999"} {
		if _, ok := IntegralNumber(in); ok {
			t.Errorf("IntegralNumber(%q) read", in)
		}
	}
}
