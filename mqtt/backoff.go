package mqtt

import (
	"math/rand/v2"
	"time"
)

// backoff returns the delay before connection attempt n of one
// reconnect cycle: none before the first (n == 0), then min, doubling up to
// max, each with ±20 % jitter so that the edge nodes of a fleet do not
// reconnect to a restarted broker in lockstep. The result never exceeds max.
func backoff(minD, maxD time.Duration) func(int) time.Duration {
	return func(n int) time.Duration {
		if n <= 0 {
			return 0
		}
		d := minD
		for i := 1; i < n && d < maxD; i++ {
			d *= 2
		}
		d = min(d, maxD)
		// Jitter in [0.8, 1.2).
		d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
		return min(d, maxD)
	}
}
