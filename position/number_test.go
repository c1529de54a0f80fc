package position

import (
	"math"
	"strconv"
	"testing"
)

// parseFinite's fast path must give bit-for-bit what ParseFloat gives.
func TestParseFinite_MatchesParseFloat(t *testing.T) {
	for _, lit := range []string{
		"0", "-0", "0.0", "-0.0", "1", "-1", "41.9794", "2.8214", "-180", "90.0000001",
		"123456789012345", "123456789012345.6", "9007199254740993", "0.1", "0.3", "1e22", "1e23",
		"1e-22", "1e-23", "4.19794E1", "1.5e+10", "-1.25E-3", "0.000000000000000000001234",
		"1e0001", "0e99999", "1e-400", "1e308", "1.7976931348623157e308", "1.7976931348623159e308",
		"5e-324", "41.97940000000000000000001", "100000000000000000000000",
	} {
		got, gotOK := parseFinite([]byte(lit))
		want, err := strconv.ParseFloat(lit, 64)
		wantOK := err == nil && !math.IsInf(want, 0)
		if gotOK != wantOK || gotOK && math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("parseFinite(%s) = %v, %v; want %v, %v", lit, got, gotOK, want, wantOK)
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		lit  string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"-0", 0, true},
		{"1726308298000", 1726308298000, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775808", math.MinInt64, true},
		{"-9223372036854775809", 0, false},
		{"18446744073709551616", 0, false},
		{"1.0", 0, false},
		{"1e3", 0, false},
		{"1E3", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseInt([]byte(tt.lit))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseInt(%s) = %d, %v; want %d, %v", tt.lit, got, ok, tt.want, tt.ok)
		}
	}
}
