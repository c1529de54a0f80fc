package metrics

import (
	"sync/atomic"
	"time"
)

// fsyncBuckets are the upper bounds, in seconds, of every latency
// histogram: 100 µs to 10 s, which covers an fsync (sub-millisecond to a
// slow disk's second) and a result's close-to-ack time (milliseconds, to
// seconds while NATS is slow).
var fsyncBuckets = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Histogram is a latency histogram with fixed buckets (100 µs to 10 s)
// that is cheap to feed from a hot goroutine: Observe is a few atomic
// adds and never allocates. The zero value is ready to use; Observe is
// safe for concurrent use.
type Histogram struct {
	counts [len(fsyncBuckets) + 1]atomic.Uint64 // the last one is +Inf
	sumNs  atomic.Int64
}

// HistogramSnapshot is a Histogram's state in Prometheus' terms: Buckets
// maps each upper bound in seconds to the cumulative count at or below it.
type HistogramSnapshot struct {
	Count   uint64
	Sum     float64 // seconds
	Buckets map[float64]uint64
}

// Observe records one latency.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	i := len(fsyncBuckets)
	for j, b := range fsyncBuckets {
		if s <= b {
			i = j
			break
		}
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Snapshot returns the histogram's current state. Concurrent Observes may
// be partly included; each is counted once the next time.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Buckets: make(map[float64]uint64, len(fsyncBuckets))}
	var cum uint64
	for i, b := range fsyncBuckets {
		cum += h.counts[i].Load()
		s.Buckets[b] = cum
	}
	s.Count = cum + h.counts[len(fsyncBuckets)].Load()
	s.Sum = float64(h.sumNs.Load()) / float64(time.Second)
	return s
}
