// Package backoff is edgeproc's one retry delay: doubling from a minimum
// to a maximum, each delay with ±20 % jitter so that many edge nodes (or
// many retries of one) do not come back in lockstep, never above the
// maximum. Every loop that waits for a server to come back uses it with a
// maximum of about a second, so edgeproc is back about a second after the
// server is, however long it was away.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Reconnect is the default maximum: a refused connection or a failed
// request costs the server little, and a second is how long edgeproc may
// lag behind a server's return.
const Reconnect = time.Second

// Delay returns the delay before attempt n of one cycle of attempts: none
// before the first (n == 0), then minD, doubling up to maxD, with ±20 %
// jitter, never above maxD.
func Delay(n int, minD, maxD time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	d := minD
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64())) // jitter in [0.8, 1.2)
	return min(d, maxD)
}
