// Package tmath is integer time arithmetic in milliseconds that neither
// wraps around nor rounds toward zero: event times come from phones, and a
// valid timestamp_ms may sit anywhere up to math.MaxInt64.
package tmath

import "math"

// Never is the watermark before any event (-∞).
const Never = math.MinInt64

// Forever is the watermark at the end of input (+∞).
const Forever = math.MaxInt64

// Add returns a+b saturated to [Never, Forever].
func Add(a, b int64) int64 {
	s := a + b
	if b > 0 && s < a {
		return Forever
	}
	if b < 0 && s > a {
		return Never
	}
	return s
}

// FloorDiv returns ⌊a/b⌋ for b > 0.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// GCD returns the greatest common divisor of two positive numbers.
func GCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
