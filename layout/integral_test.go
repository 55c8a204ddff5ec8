package layout

import (
	"math"
	"testing"
)

// TestIntegralNumber: a whole number reads however JSON writes it; a
// fraction, an out-of-range value or a huge exponent does not (and costs
// nothing).
func TestIntegralNumber(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"8", 8, true}, {"8.0", 8, true}, {"0.8e1", 8, true}, {"800e-2", 8, true}, {"8E+0", 8, true},
		{"1e3", 1000, true}, {"-0", 0, true}, {"-0.0e5", 0, true}, {"0e999999999999", 0, true},
		{"-12.50e1", -125, true}, {"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true}, {"9.223372036854775807e18", math.MaxInt64, true},
		{"9223372036854775808", 0, false}, {"1e19", 0, false}, {"1e999999999999999999999", 0, false},
		{"1.5", 0, false}, {"8.01", 0, false}, {"1e-1", 0, false}, {`"8"`, 0, false}, {"", 0, false},
		{"null", 0, false}, {"true", 0, false},
	} {
		got, ok := IntegralNumber(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("IntegralNumber(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestDecodeManifestFloatIntegers: a manifest's integers written as floats
// read as the integers they are; a fraction is still corrupt.
func TestDecodeManifestFloatIntegers(t *testing.T) {
	id, p := "00077a10269e0d37f2a74de452e6b438", "00077a10c66516e379a0b6319022f514"
	m, err := DecodeManifest([]byte(`{"session":"` + id + `","parent":{"session":"` + p + `","version":2.0},"first-sequence-number":1e2}`))
	if err != nil || m.FirstSequenceNumber != 100 || m.Parent == nil || m.Parent.Version != 2 {
		t.Fatalf("DecodeManifest: %+v, %v", m, err)
	}
	for _, bad := range []string{`"first-sequence-number":1.5`, `"parent":{"session":"` + p + `","version":-1}`, `"parent":{"session":"` + p + `","version":4294967296}`} {
		if _, err := DecodeManifest([]byte(`{"session":"` + id + `",` + bad + `}`)); err == nil {
			t.Errorf("DecodeManifest with %s: no error", bad)
		}
	}
}

// TestMemoryCommitFloatIntegers: a memory record's envelope written by a
// merge whose numbers are doubles reads; a fraction does not.
func TestMemoryCommitFloatIntegers(t *testing.T) {
	var c MemoryCommit
	err := c.UnmarshalJSON([]byte(`{"session":"00077a10269e0d37f2a74de452e6b438","version":2.0,"transaction":1.2345678901234567e+19,"x":1}`))
	if err != nil || c.Version != 2 || c.Transaction != 12345678901234567000 || string(c.Extra["x"]) != "1" {
		t.Fatalf("%+v, %v", c, err)
	}
	for _, bad := range []string{`{"version":1.5}`, `{"version":-1}`, `{"transaction":-1}`, `{"transaction":"7"}`, `{"version":4294967296}`} {
		if err := c.UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if err := c.UnmarshalJSON([]byte(`{"version":null,"transaction":18446744073709551615}`)); err != nil || c.Transaction != math.MaxUint64 {
		t.Errorf("max transaction: %+v, %v", c, err)
	}
}
