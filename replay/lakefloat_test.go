package replay

import (
	"math"
	"math/rand"
	"strconv"
	"testing"
)

// appendFloat's output parses back to the same float64, for values of
// six decimals or fewer (its fast path) and any other.
func TestAppendFloat_RoundTrips(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	vals := []float64{0, -0.5, 41.9794, 2.8214, -179.999999, 90, -90, 1e-7, 123456789.123456, 5e15, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1, 7.5}
	for range 200000 {
		vals = append(vals, math.Round((r.Float64()*360-180)*1e6)/1e6, r.NormFloat64()*100, float64(r.Intn(100000))/10)
	}
	for _, v := range vals {
		s := string(appendFloat(nil, v))
		got, err := strconv.ParseFloat(s, 64)
		if err != nil || got != v {
			t.Fatalf("%v written as %q reads back as %v (%v)", v, s, got, err)
		}
	}
	if s := string(appendFloat(nil, -41.5)); s != "-41.5" {
		t.Errorf("-41.5 written as %q", s)
	}
}
