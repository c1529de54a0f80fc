package reference

import (
	"math"
	"math/big"
)

// Event times are compared as big integers so that sums such as
// window start + size or last_ts + gap can never wrap around. The watermark's
// ±infinity are ±2^100: every real value here is a sum of at most four int64
// values, well inside ±2^66.

func negInfinity() *big.Int { return new(big.Int).Neg(posInfinity()) }

func posInfinity() *big.Int { return new(big.Int).Lsh(big.NewInt(1), 100) }

// plus returns a+b without overflow.
func plus(a, b int64) *big.Int {
	return new(big.Int).Add(big.NewInt(a), big.NewInt(b))
}

// minus returns a-b without overflow.
func minus(a, b int64) *big.Int {
	return new(big.Int).Sub(big.NewInt(a), big.NewInt(b))
}

func cmp(a, b *big.Int) int { return a.Cmp(b) }

// saturate converts v to int64 for a record field, clamping values that do
// not fit (only reachable with absurd arrival_ms or timestamps near 2^63).
func saturate(v *big.Int) int64 {
	switch {
	case v.IsInt64():
		return v.Int64()
	case v.Sign() > 0:
		return math.MaxInt64
	default:
		return math.MinInt64
	}
}
