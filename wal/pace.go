package wal

import (
	"math"
	"time"
)

// Group commit waits for company only when company is coming. An fsync
// costs the same CPU for one entry as for a thousand, and so, by the
// figures below (inferred, not profiled part by part), does much of what
// follows a batch: the hand-off to the engine, a flush to every shard, the
// acks' write. Under load a batch should gather many: on the city fleet
// (5 000 positions/s), 64 entries and at most 10 ms a batch cost 33 µs of
// CPU a position, 128 and 20 ms 26 µs, 256 and 40 ms 23 µs.
// At a trickle, waiting gathers nobody and only delays the acks. The writer
// keeps an estimate of the recent arrival rate and lets a batch linger just
// long enough to expect targetBatch entries, at most Options.Interval, and
// not at all when even Interval would bring fewer than minCompany.
const (
	rateWindow  = 100 * time.Millisecond // time constant of the rate estimate
	targetBatch = 256                    // entries per fsync worth waiting for
	minCompany  = 16                     // fewer expected within Interval: commit at once
)

// arrivals is an exponentially decaying count of committed entries: level
// is Σ n·e^(−age/rateWindow), which settles at rate×rateWindow for a steady
// rate. It is owned by the writer goroutine.
type arrivals struct {
	level float64
	at    time.Time
}

// add counts n entries taken at now.
func (a *arrivals) add(now time.Time, n int) {
	a.level = a.levelAt(now) + float64(n)
	a.at = now
}

func (a *arrivals) levelAt(now time.Time) float64 {
	age := now.Sub(a.at)
	if a.at.IsZero() || age <= 0 {
		return a.level
	}
	return a.level * math.Exp(-float64(age)/float64(rateWindow))
}

// linger is how long a batch whose first entry is waiting should wait for
// more before its write and fsync, given at most max.
func (a *arrivals) linger(now time.Time, max time.Duration) time.Duration {
	rate := a.levelAt(now) / rateWindow.Seconds() // entries per second
	if rate*max.Seconds() < minCompany {
		return 0
	}
	return min(time.Duration(targetBatch/rate*float64(time.Second)), max)
}
