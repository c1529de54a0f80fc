// Package watermark holds a market's event-time watermark and processing
// clock (contract §3): bounded out-of-orderness, the idle-source rule, and
// the future-timestamp check.
//
// The watermark is wm = max_ts - tolerated_delay (Flink's bounded
// out-of-orderness watermark + 1 ms), max_ts being the largest effective
// timestamp: min(timestamp_ms, arrival) once there is a processing clock,
// so that wm <= clock - tolerated_delay always holds however fast a phone's
// clock runs. When no message has arrived for
// idle_timeout of processing time, event time is taken to advance with the
// processing clock from the newest event seen, so a fleet that goes silent
// still gets its no-signal warnings.
//
// It depends only on valid positions' timestamps and on arrival times, not
// on per-courier state, which is why one sequencer can compute it for all
// shards.
package watermark

import "github.com/km0/edgeproc/internal/tmath"

// Watermark is one market's watermark. It is not safe for concurrent use.
type Watermark struct {
	delay, idle, skew int64

	wm    int64
	maxTS int64

	clock      int64 // the processing clock, when known
	hasClock   bool
	maxArrival int64 // arrival of the first position that reached maxTS
	hasMaxArr  bool
	last       int64 // arrival of the last message, valid or not
	hasLast    bool
}

// New returns the watermark of a market, all in ms: tolerated delay, idle
// timeout (0 = never advance on idleness) and maximum future skew.
func New(delay, idleTimeout, maxFutureSkew int64) *Watermark {
	return &Watermark{delay: delay, idle: idleTimeout, skew: maxFutureSkew, wm: tmath.Never, maxTS: tmath.Never}
}

// Current returns the watermark (tmath.Never before any position,
// tmath.Forever after End).
func (w *Watermark) Current() int64 { return w.wm }

// MaxTS returns the largest timestamp observed (tmath.Never before any).
func (w *Watermark) MaxTS() int64 { return w.maxTS }

// Clock returns the processing clock and whether there is one yet.
func (w *Watermark) Clock() (int64, bool) { return w.clock, w.hasClock }

// Idle applies the idle-source rule at processing time now and moves the
// clock there. It reports whether the watermark advanced.
func (w *Watermark) Idle(now int64) bool {
	w.clock, w.hasClock = now, true
	v, ok := w.IdleAt(now)
	return ok && w.raise(v)
}

// Listen records that the source started (or restarted) listening at
// processing time now and moves the clock there: the silence before it is
// not evidence (contract §3, deaf is not silent), so the idle rule counts
// from now as if a message had arrived.
func (w *Watermark) Listen(now int64) {
	w.clock, w.hasClock = now, true
	if !w.hasLast || now > w.last {
		w.last, w.hasLast = now, true
	}
}

// IdleAt returns the watermark the idle rule would give at processing time
// now, and false when the rule would not apply then.
func (w *Watermark) IdleAt(now int64) (int64, bool) {
	if w.idle <= 0 || !w.hasLast || !w.hasMaxArr || w.maxTS == tmath.Never || now < tmath.Add(w.last, w.idle) {
		return 0, false
	}
	return tmath.Add(w.maxTS, tmath.Add(now-w.maxArrival, -w.delay)), true
}

// Future reports whether ts is more than the maximum skew ahead of the
// processing clock. Without a clock nothing is in the future.
func (w *Watermark) Future(ts int64) bool {
	return w.hasClock && ts > tmath.Add(w.clock, w.skew)
}

// Received records that a message (valid or not) arrived at the clock.
func (w *Watermark) Received() {
	if w.hasClock {
		w.last, w.hasLast = w.clock, true
	}
}

// Observe applies a valid, non-duplicate position's timestamp, arrived at
// the clock, and reports whether the watermark advanced. The position
// counts at its effective timestamp, min(ts, clock) when there is a clock
// (contract §3): nothing arrives before it happens.
func (w *Watermark) Observe(ts int64) bool {
	if w.hasClock {
		ts = min(ts, w.clock)
	}
	if ts <= w.maxTS {
		return false
	}
	w.maxTS = ts
	w.maxArrival, w.hasMaxArr = w.clock, w.hasClock
	return w.raise(tmath.Add(ts, -w.delay))
}

// End moves the watermark to +∞: the input has ended.
func (w *Watermark) End() { w.wm = tmath.Forever }

func (w *Watermark) raise(v int64) bool {
	if v <= w.wm {
		return false
	}
	w.wm = v
	return true
}

// State is a Watermark's state, for checkpoints.
type State struct {
	WM, MaxTS, Clock, MaxArrival, Last int64
	HasClock, HasMaxArrival, HasLast   bool
}

// State returns w's state.
func (w *Watermark) State() State {
	return State{
		WM: w.wm, MaxTS: w.maxTS, Clock: w.clock, MaxArrival: w.maxArrival, Last: w.last,
		HasClock: w.hasClock, HasMaxArrival: w.hasMaxArr, HasLast: w.hasLast,
	}
}

// Restore sets w's state; the configuration stays w's own.
func (w *Watermark) Restore(s State) {
	w.wm, w.maxTS, w.clock, w.maxArrival, w.last = s.WM, s.MaxTS, s.Clock, s.MaxArrival, s.Last
	w.hasClock, w.hasMaxArr, w.hasLast = s.HasClock, s.HasMaxArrival, s.HasLast
}
