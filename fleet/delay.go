package fleet

import (
	"math"
	"time"
)

// The arrival-delay profile (processing time minus event time) measured on
// the courier phones: median 1.2 s, p95 8 s, p99 45 s, p99.9 4 min. The ends
// are this package's choice: nothing arrives in under 100 ms (MQTT over a
// mobile network) and nothing later than 6 min (the phone app drops older
// buffered positions). Between the knots the inverse CDF is linear in
// log(delay), i.e. the delay is log-uniform inside each quantile band.
var (
	delayU = [...]float64{0, 0.5, 0.95, 0.99, 0.999, 1}
	// log of the delay in seconds at each knot of delayU.
	delayLogS = [...]float64{
		math.Log(0.1), math.Log(1.2), math.Log(8), math.Log(45), math.Log(240), math.Log(360),
	}
)

// Bounds of the delay profile.
const (
	MinDelay = 100 * time.Millisecond
	MaxDelay = 6 * time.Minute
)

// DelayQuantile maps u in [0,1) to a delay following the profile: u = 0
// gives MinDelay, u = 0.5 gives 1.2 s, u → 1 approaches MaxDelay. u outside
// [0,1] (or NaN) is clamped to the nearest end (NaN to 0).
func DelayQuantile(u float64) time.Duration {
	return time.Duration(math.Round(delaySeconds(u) * 1e9))
}

func delaySeconds(u float64) float64 {
	if !(u > 0) {
		return math.Exp(delayLogS[0])
	}
	if u >= 1 {
		return math.Exp(delayLogS[len(delayLogS)-1])
	}
	i := 1
	for u > delayU[i] {
		i++
	}
	f := (u - delayU[i-1]) / (delayU[i] - delayU[i-1])
	return math.Exp(delayLogS[i-1] + f*(delayLogS[i]-delayLogS[i-1]))
}

// delayMs returns a delay of the profile in whole milliseconds, never below
// MinDelay, so that arrival ≥ timestamp + 100 ms always holds (Next relies on
// it to know when an event can no longer be overtaken).
func delayMs(u float64) int64 {
	ms := int64(math.Round(delaySeconds(u) * 1000))
	return max(ms, MinDelay.Milliseconds())
}
